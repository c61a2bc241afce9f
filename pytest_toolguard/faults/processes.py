"""A process dying under a call: ``process_killed``.

In the directory world the first process the target's handler starts
(``git``, a compiler, a server it talks to) is killed with ``SIGKILL``
right after it started, while the handler waits on it
(``harness.child_processes.on_start``). A handler that starts no process
runs in a process of its own instead (process isolation), killed with
``SIGKILL`` as it starts. Either way the call must answer with an error
code of the contract, its audit row finished (never left ``RUNNING``),
and no process it started left running. A handler that hides its
process's death behind ``OK`` (a return code it never looked at) fails
the cell.

The fake world runs no process: there the cell is skipped, with that
reason (``cannot_run_in``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any, cast

from ..contract import CallState, ErrorCode
from ..errors import ToolguardError
from ..harness.child_processes import ChildProcess, on_start, processes_of
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..registry import WorldKind
from .cell import Cell
from .fault import AfterSuccess
from .target import Target


class ProcessKilledHere(ToolguardError):
    """What the ``process_killed`` handler raises where it cannot kill its
    own process (it would be the test's)."""


class ProcessKilledFault(AfterSuccess):
    name = "process_killed"
    applies_to = "calls that succeeded when recorded, in the directory world (skipped in the fake)"
    injection = (
        "SIGKILL to the first process the handler starts, right after it starts; "
        "a handler that starts none runs in a process of its own, killed as it starts"
    )
    expected = (
        "an error code, not OK (EXECUTION_ERROR when the handler's own process died), "
        "state finished; its audit row finished, none RUNNING; no process left running"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and target.world == "directory"

    def cannot_run_in(self, world: WorldKind) -> str | None:
        return "the fake world starts no process" if world == "fake" else None

    def inject(self, cell: Cell) -> None:
        processes = processes_of(cell.world)
        if processes is None:  # cannot_run_in keeps it from the fake world
            cell.check(False, "process_killed ran in a world without processes")
            return
        killed: list[ChildProcess] = []

        def kill_first(child: ChildProcess) -> None:
            if not killed:
                killed.append(child)
                processes.kill(child)

        saved = cell.world.save_workspace()
        # The plan's progress as it was, for a second try: the first moves it on.
        hooks = [hook.copy() if isinstance(hook, PlanProgress) else hook for hook in cell.hooks]
        with on_start(cell.world, kill_first):
            result = cell.execute(cell.call(), judge_effects=False)
        if killed:
            cell.check(
                not result.ok,
                f"{result.call_id}: answered {result.code.value} though the process it "
                f"started ({' '.join(killed[0].argv)}) was killed",
            )
            self._check_finished(cell, result.call_id, result.state)
            return
        # No process: the handler's own process dies instead.
        cell.world.restore_workspace(saved)
        self._kill_the_handlers_process(cell, hooks)

    def _kill_the_handlers_process(self, cell: Cell, hooks: list[PreToolUse | PostToolUse]) -> None:
        test_process = os.getpid()

        def dying(handler: Callable[..., Any]) -> Callable[..., Any]:
            def die(ctx: Any, **arguments: Any) -> Any:
                if os.getpid() == test_process:
                    raise ProcessKilledHere("the handler runs in the test's own process")
                os.kill(os.getpid(), signal.SIGKILL)
                return handler(ctx, **arguments)  # never reached

            return die

        previous = cell.replace_handler(dying)
        try:
            # Process isolation: the handler runs in a child forked for the call.
            runtime = cell.make_runtime(isolation=cast(Any, "process"), hooks=hooks)
            result = cell.execute(cell.call(), runtime, judge_effects=False)
        finally:
            cell.restore_handler(previous)
        cell.expect(result, ErrorCode.EXECUTION_ERROR, state=CallState.FAILED)
        self._check_finished(cell, result.call_id, result.state)
        cell.settle(runtime)

    @staticmethod
    def _check_finished(cell: Cell, call_id: str, state: CallState) -> None:
        cell.check(state.finished, f"{call_id}: answered in state {state.value}")
        rows = [row for row in cell.audit_rows() if row.call_id == call_id]
        cell.check(
            all(row.state.finished for row in rows),
            f"{call_id}: its audit row is left {', '.join(str(row.state) for row in rows)}",
        )
