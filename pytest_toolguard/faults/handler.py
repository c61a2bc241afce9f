"""Faults in what a handler meets while it runs: its deadline passing
(``timeout``), it raising (``handler_exception``), its output over the
result limit (``oversized_output``). The disk's faults are in ``disk``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from ..contract import CallState, ErrorCode
from ..errors import ToolguardError
from ..runtime.limits import PREVIEW_LIMIT
from .cell import JOIN_SECONDS, Cell
from .fault import AfterSuccess

TIMEOUT_SECONDS = 0.005
"""The deadline the ``timeout`` fault gives the call. Deterministic however
short: the handler is held until the runtime has answered."""

RESULT_LIMIT = 64
"""The result limit the ``oversized_output`` fault sets."""


class InjectedFault(ToolguardError):
    """What the ``handler_exception`` fault raises."""


class TimeoutFault(AfterSuccess):
    name = "timeout"
    injection = (
        f"deadline {TIMEOUT_SECONDS * 1000:g} ms; the handler is held until the runtime "
        "has answered, then runs on"
    )
    expected = (
        "TIMEOUT, retryable, state TIMED_OUT; the late handler changes no file; "
        "no handler alive at teardown"
    )

    def inject(self, cell: Cell) -> None:
        released = threading.Event()

        def held(handler: Callable[..., Any]) -> Callable[..., Any]:
            def late(ctx: Any, **arguments: Any) -> Any:
                released.wait(JOIN_SECONDS)
                return handler(ctx, **arguments)

            return late

        cell.replace_handler(held)
        # Thread mode: the handler held past its deadline runs on once released,
        # and what it does then is judged (inline mode would stop it instead).
        runtime = cell.make_runtime(
            timeouts={cell.target.call.tool_name: TIMEOUT_SECONDS}, isolation="thread"
        )
        before = cell.tree()
        result = cell.execute(cell.call(), runtime)
        released.set()
        cell.expect(result, ErrorCode.TIMEOUT, state=CallState.TIMED_OUT, retryable=True)
        cell.settle(runtime)
        cell.check_unchanged(before, "the call timed out")


class HandlerExceptionFault(AfterSuccess):
    name = "handler_exception"
    injection = "the handler raises InjectedFault"
    expected = "EXECUTION_ERROR naming InjectedFault, state FAILED; no file changed"

    def inject(self, cell: Cell) -> None:
        def raising(handler: Callable[..., Any]) -> Callable[..., Any]:
            def fail(ctx: Any, **arguments: Any) -> Any:
                raise InjectedFault("injected by pytest-toolguard")

            return fail

        cell.replace_handler(raising)
        before = cell.tree()
        result = cell.execute(cell.call())
        if cell.expect(result, ErrorCode.EXECUTION_ERROR, state=CallState.FAILED):
            cell.check(
                "InjectedFault" in result.message,
                f"the message does not name the exception: {result.message!r}",
            )
        cell.check_unchanged(before, "the handler raised before doing anything")


class OversizedOutputFault(AfterSuccess):
    name = "oversized_output"
    injection = f"the tool's result limit lowered to {RESULT_LIMIT} characters"
    expected = "ok, truncated, total_size kept, data cut to the limit; the audit preview bounded"

    def inject(self, cell: Cell) -> None:
        cell.replace_spec(result_limit=RESULT_LIMIT)
        result = cell.execute(cell.call())
        if not cell.expect(result, ErrorCode.OK):
            return
        if result.total_size is None:
            cell.check(not result.truncated, "truncated without a total size")
            return
        cell.check(result.truncated, "cut but not flagged truncated")
        cell.check(result.total_size > RESULT_LIMIT, "total_size is not the full size")
        shown = result.data if isinstance(result.data, str) else json.dumps(result.data)
        cell.check(len(shown) <= RESULT_LIMIT, f"data of {len(shown)} characters passed the limit")
        for row in cell.store_of(cell.runtime).rows():
            cell.check(
                len(row.result_preview or "") <= PREVIEW_LIMIT,
                f"audit preview of {len(row.result_preview or '')} characters",
            )
