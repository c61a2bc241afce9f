"""Faults in what is stored: the audit store failing (``audit_unavailable``),
a secret that must never reach the audit database or a cassette
(``secret_in_payload``), a secret known only by its argument's name that
must reach nothing at all (``secret_by_name``)."""

from __future__ import annotations

import base64
import inspect
import json
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from ..capabilities import Risk
from ..contract import ErrorCode, ToolResult
from ..jsondata import strings_of
from ..redaction import Redactor
from ..replay.cassette import dumps
from ..replay.recorder import Recorder
from .cell import Cell
from .fault import AfterSuccess, Fault
from .target import Target

FAKE_SECRET = "ghp_" + "T00lGuardFakeSecretTok3n0123456789ab"
"""A GitHub-token-shaped fake secret (40 characters): the redactor knows
its shape, so it must never be stored."""


LEAK_LENGTH = 8
"""Strings of a handler's output at least this long must not reappear in
a withheld result's message (shorter ones match by chance)."""


class AuditUnavailableFault(AfterSuccess):
    name = "audit_unavailable"
    injection = (
        "the audit store fails when the call's first row is written (a READ call's one "
        "row: its outcome); then, in a fresh try, when a RUNNING row is finished"
    )
    expected = (
        "at start: AUDIT_UNAVAILABLE, retryable, nothing changed in the workspace; a READ "
        "tool's handler may have run, but no data of it is in the result, any other tool's "
        "handler never runs; at finish: the handler's outcome, its row written by "
        "flush_audit() once the store is back"
    )

    def inject(self, cell: Cell) -> None:
        store = cell.failing_store()
        spec = cell.spec
        # A READ call's one row is written with its outcome (``record``): the
        # handler may run first, and its result is withheld when the row
        # cannot be committed. Every other call commits its RUNNING row
        # (``start``) before its handler runs.
        reads = spec is not None and spec.risk is Risk.READ
        before = cell.tree()
        call = cell.call()
        cell.unaudited(call.call_id)
        with store.failing(*(("start", "record") if reads else ("start",))), _quiet():
            result = cell.execute(call)
        cell.expect(result, ErrorCode.AUDIT_UNAVAILABLE, retryable=True)
        if reads:
            cell.check_unchanged(before, "the call could not be audited")
            self._check_withheld(cell, result, cell.handler_outputs())
        else:
            cell.check_refused(before, "the start could not be audited")

        runs = cell.handler_calls
        with store.failing("finish"), _quiet():
            result = cell.execute(cell.call())
        cell.check(
            cell.handler_calls == runs + 1, "the handler did not run once the start was stored"
        )
        cell.check(
            result.code is not ErrorCode.AUDIT_UNAVAILABLE or not result.ok,
            "a failed finish turned a success into AUDIT_UNAVAILABLE",
        )
        pending = cell.runtime.flush_audit()
        cell.check(pending == 0, f"{pending} audit writes still pending after the store came back")

    @staticmethod
    def _check_withheld(cell: Cell, result: ToolResult, outputs: list[Any]) -> None:
        """A call answered AUDIT_UNAVAILABLE carries nothing its handler returned."""
        cell.check(result.data is None, f"{result.call_id}: AUDIT_UNAVAILABLE with data")
        leaked = [
            text
            for output in outputs
            for text in strings_of(output)
            if len(text) >= LEAK_LENGTH and text in result.message
        ]
        cell.check(
            not leaked,
            f"{result.call_id}: AUDIT_UNAVAILABLE's message holds the handler's output",
        )


@contextmanager
def _quiet() -> Iterator[None]:
    """Queued audit writes warn (RuntimeWarning): expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


class SecretInPayloadFault(Fault):
    name = "secret_in_payload"
    applies_to = "successful calls with a text argument"
    injection = "a fake token appended to the longest text argument and to the handler's output"
    expected = (
        "the token (raw, base64, hex or URL-encoded) in neither the audit database's bytes "
        "nor the recorded cassette"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and bool(strings_of(target.arguments))

    def inject(self, cell: Cell) -> None:
        arguments = _plant(cell.target.arguments, FAKE_SECRET)

        def leaking(handler: Callable[..., Any]) -> Callable[..., Any]:
            if inspect.iscoroutinefunction(handler):  # plant in the awaited output

                async def leak_async(ctx: Any, **kwargs: Any) -> Any:
                    return _plant(await handler(ctx, **kwargs), FAKE_SECRET)

                return leak_async

            def leak(ctx: Any, **kwargs: Any) -> Any:
                return _plant(handler(ctx, **kwargs), FAKE_SECRET)

            return leak

        cell.replace_handler(leaking)
        runtime = cell.make_runtime()
        # The cell already serves the HTTP of external tools: record none.
        recorder = Recorder(runtime, name="secret_in_payload", record_http=False)
        recorder.start()
        cell.execute(cell.call(arguments), runtime)
        recorder.stop()
        stored = {
            "the audit database": cell.store_of(runtime).serialize(),
            "the recorded cassette": dumps(recorder.cassette()).encode(),
        }
        for where, data in stored.items():
            for form, needle in secret_forms(FAKE_SECRET):
                cell.check(needle not in data, f"the fake secret ({form}) is in {where}")


def _plant(value: Any, secret: str) -> Any:
    """``value`` with `` <secret>`` appended to its longest string (a copy)."""
    texts = strings_of(value)
    if not texts:
        return value
    longest = max(texts, key=len)
    done = False

    def walk(item: Any) -> Any:
        nonlocal done
        if isinstance(item, str) and item == longest and not done:
            done = True
            return f"{item} {secret}"
        if isinstance(item, Mapping):
            return {key: walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def secret_forms(secret: str) -> list[tuple[str, bytes]]:
    """The byte strings that give ``secret`` away: raw, hex, URL-encoded,
    and base64 at each of the three alignments (the part of the encoding
    that does not depend on neighbouring bytes)."""
    raw = secret.encode()
    forms = [("raw", raw), ("hex", raw.hex().encode()), ("URL-encoded", quote(secret).encode())]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw + b"\0\0")
        start = -(-pad * 4 // 3) + 1
        forms.append((f"base64/{pad}", encoded[start : start + (len(raw) * 4 // 3) - 4]))
    return forms


SHAPELESS_SECRET = "plain-Hunter2-toolguard-7c1e"
"""A secret no pattern knows: secret only by the name of its argument."""

_NAMES = Redactor()


def secret_arguments(arguments: Mapping[str, Any] | None) -> list[str]:
    """Top-level string arguments whose name says they are secret (as the
    redactor reads keys: ``password``, ``secret_key``, ``api_key``, ...)."""
    return [
        name
        for name, value in (arguments or {}).items()
        if isinstance(value, str) and _NAMES.sensitive_keyword(name) is not None
    ]


class SecretByNameFault(Fault):
    name = "secret_by_name"
    applies_to = "successful calls with an argument named like a secret (password, api_key, ...)"
    injection = (
        "each such argument set to a value of no recognisable shape; the call recorded "
        "into a cassette"
    )
    expected = (
        "the value (raw, base64, hex or URL-encoded) in no result, message, audit row or cassette"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and bool(secret_arguments(target.arguments))

    def inject(self, cell: Cell) -> None:
        arguments = dict(cell.target.arguments or {})
        for name in secret_arguments(arguments):
            arguments[name] = SHAPELESS_SECRET
        runtime = cell.make_runtime()
        recorder = Recorder(runtime, name="secret_by_name", record_http=False)
        recorder.start()
        result = cell.execute(cell.call(arguments), runtime)
        recorder.stop()
        shown = json.dumps([result.data, result.message], ensure_ascii=False, default=str)
        stored = {
            "the result": shown.encode(),
            "the audit database": cell.store_of(runtime).serialize(),
            "the recorded cassette": dumps(recorder.cassette()).encode(),
        }
        for where, data in stored.items():
            for form, needle in secret_forms(SHAPELESS_SECRET):
                cell.check(
                    needle not in data, f"the secret argument's value ({form}) is in {where}"
                )
