"""A process dying under a call: ``process_killed``.

In the directory world the first process the target's handler starts
(``git``, a compiler, a server it talks to) is killed with ``SIGKILL``
right after it started (``harness.child_processes.on_start``). Then the
call runs again from the same workspace, and its first process is killed
mid-call instead: once the thread that started it has slept waiting on
it for a few polls in a row (the request sent, the answer awaited), so a
handler that saw the death only through a write to a dead pipe is tried
where it must notice the death in its wait. A handler that starts no
process runs in a process of its own instead (process isolation), killed
with ``SIGKILL`` as it starts. Each time the call must answer with an
error code of the contract before its deadline (``TIMEOUT`` means it
waited on a process that was gone), its audit row finished (never left
``RUNNING``), its handler ended, and no process it started left running.
A handler that hides its process's death behind ``OK`` (a return code it
never looked at) fails the cell.

The fake world runs no process: there the cell is skipped, with that
reason (``cannot_run_in``).
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
from collections.abc import Callable
from typing import Any, cast

from ..contract import CallState, ErrorCode, ToolResult
from ..errors import ToolguardError
from ..harness.child_processes import ChildProcess, on_start, processes_of
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..registry import WorldKind
from .cell import Cell
from .fault import AfterSuccess
from .target import Target

POLL_SECONDS = 0.002
"""How often the mid-call killer looks at the thread that started the process."""
QUIET_POLLS = 2
"""Polls in a row that thread must be found sleeping before its process is
killed mid-call: it is waiting on it, not between two steps of its own."""


class ProcessKilledHere(ToolguardError):
    """What the ``process_killed`` handler raises where it cannot kill its
    own process (it would be the test's)."""


class ProcessKilledFault(AfterSuccess):
    name = "process_killed"
    applies_to = "calls that succeeded when recorded, in the directory world (skipped in the fake)"
    injection = (
        "SIGKILL to the first process the handler starts, right after it starts; then, the "
        "call run again, once the handler waits on it (its thread asleep in the kernel); a "
        "handler that starts none runs in a process of its own, killed as it starts"
    )
    expected = (
        "an error code, neither OK nor TIMEOUT (EXECUTION_ERROR when the handler's own "
        "process died), state finished; its audit row finished, none RUNNING; handler ended; "
        "no process left running"
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
        cell.world.restore_workspace(saved)
        if killed:
            self._check_noticed(cell, result, killed[0], "right after it started")
            self._kill_while_waited_on(cell, hooks)
            return
        # No process: the handler's own process dies instead.
        self._kill_the_handlers_process(cell, hooks)

    def _kill_while_waited_on(self, cell: Cell, hooks: list[PreToolUse | PostToolUse]) -> None:
        """The call again, its first process killed once the thread that
        started it sleeps waiting on it, while the handler still runs. A
        process that ends first, or outlives its handler, is not killed,
        and nothing is judged of that try."""
        processes = processes_of(cell.world)
        assert processes is not None
        first: list[tuple[int, ChildProcess]] = []
        killed: list[ChildProcess] = []
        done, ended, lock = threading.Event(), threading.Event(), threading.Lock()

        def note_first(child: ChildProcess) -> None:
            if not first:
                first.append((threading.get_native_id(), child))

        def kill_when_waited_on() -> None:
            quiet = 0
            while not done.is_set():
                if first:
                    thread, child = first[0]
                    if child.exited():
                        return
                    quiet = quiet + 1 if _sleeping(thread) else 0
                    if quiet >= QUIET_POLLS:
                        with lock:  # never once the handler has answered
                            if not ended.is_set():
                                killed.append(child)
                                processes.kill(child)
                        return
                done.wait(POLL_SECONDS)

        previous = cell.replace_handler(_ending(ended, lock))
        killer = threading.Thread(target=kill_when_waited_on, name="toolguard-process-killed")
        killer.start()
        try:
            with on_start(cell.world, note_first):
                runtime = cell.make_runtime(hooks=hooks)
                result = cell.execute(cell.call(), runtime, judge_effects=False)
        finally:
            done.set()
            killer.join()
            cell.restore_handler(previous)
        if killed:
            self._check_noticed(cell, result, killed[0], "mid-call, while waited on")

    def _check_noticed(
        self, cell: Cell, result: ToolResult, child: ChildProcess, when: str
    ) -> None:
        """The call answered an error of its own, not OK and not TIMEOUT
        (a death waited on until the deadline), and finished its row."""
        command = " ".join(child.argv)
        cell.check(
            not result.ok,
            f"{result.call_id}: answered {result.code.value} though the process it "
            f"started ({command}) was killed {when}",
        )
        cell.check(
            result.code is not ErrorCode.TIMEOUT,
            f"{result.call_id}: answered TIMEOUT: it waited until its deadline on the "
            f"process it started ({command}), killed {when}",
        )
        self._check_finished(cell, result.call_id, result.state)

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


def _ending(
    ended: threading.Event, lock: threading.Lock
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A handler wrapper that sets ``ended`` (under ``lock``) as the
    handler's body ends, whatever it answers."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(handler):

            async def run_async(ctx: Any, **arguments: Any) -> Any:
                try:
                    return await handler(ctx, **arguments)
                finally:
                    with lock:
                        ended.set()

            return run_async

        def run(ctx: Any, **arguments: Any) -> Any:
            try:
                return handler(ctx, **arguments)
            finally:
                with lock:
                    ended.set()

        return run

    return wrap


def _sleeping(thread: int) -> bool:
    """Whether this process's thread ``thread`` (a native id) sleeps in the
    kernel (``S``: waiting on a pipe, a process, a lock); False when it is
    gone or cannot be read."""
    try:
        with open(f"/proc/self/task/{thread}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    fields = stat.rpartition(b")")[2].split()
    return bool(fields) and fields[0] == b"S"
