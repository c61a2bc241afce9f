"""Invocation: running a call's handler under its deadline, and judging what
it returned.

The handler gets a ``ToolContext`` whose workspace is journaled for
rollback, reaches the locations the policy judged (one resolution per
path), and refuses changes once the call is cancelled. It runs inline on
the main thread under a SIGALRM deadline (``inline.py``, the opt-in mode),
through the runtime's isolation (a worker thread or a killable child
process), or, for ``aexecute`` with an ``async def`` handler, as a task on
the caller's loop.
What it returns must be JSON data matching the output schema
(OUTPUT_INVALID otherwise) and is cut to the tool's result limit; what it
raises is EXECUTION_ERROR (a sandbox refusal keeps its own code); a
handler that overruns its deadline is answered TIMEOUT. A handler's
``prepare(ctx)`` (a server it talks to, started) runs before the deadline
starts, under its own bound (``Invocation.prepared``), skipped when its
``prepare.needed(ctx)`` says there is nothing to prepare.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..context import ToolContext, workspace_of_call
from ..contract import CallState, ErrorCode, ToolResult
from ..errors import ToolguardError
from ..isolation import ChildLog, CoroutineRunner, HandlerTimeout, Isolation, ThreadIsolation
from ..policy import PolicyDecision
from ..registry import ToolSpec
from ..rollback import ChangeJournal
from ..sandbox import CallCancelled, Leaves, Previous, SandboxError, show_path
from ..storable import storable_data
from .attempt import Attempt, Running
from .inline import Cancellation, TimerBusy, run_inline, usable
from .messages import describe, first_line
from .observers import Observers
from .results import failure, truncate
from .settings import RuntimeSettings

Outcome = tuple[bool, Any, list[str] | None]
"""A handler run's ``(finished, value or exception, paths it asked the
workspace about)`` (the last None without file watchers). Journal entries
of a process child come back through its ``ChildLog``."""

PREPARE_SECONDS = 300.0
"""The bound on a handler's ``prepare`` when it gives none of its own
(``prepare.timeout_seconds``)."""

_PLAIN_DATA = frozenset({dict, list, str, int, float, bool, type(None)})
"""Result types that cannot be awaitable: the check is skipped for them."""


class PrepareOverran(ToolguardError):
    """A handler's ``prepare`` ran past its own bound."""


def _flat_with_text_keys(value: Any) -> bool:
    """Whether ``value`` is a dict of ``str`` keys whose values hold no
    container: then its JSON text (keys sorted) is also that of the data
    parsed back from it. (Keys of other types are written as text and may
    sort otherwise once parsed back: ``{10: .., 9: ..}``.)"""
    return (
        type(value) is dict
        and all(type(key) is str for key in value)
        and not any(isinstance(item, _CONTAINERS) for item in value.values())
    )


_CONTAINERS = (dict, list, tuple, Mapping)


def _awaitable(value: Any) -> bool:
    return type(value) not in _PLAIN_DATA and inspect.isawaitable(value)


class HandlerRun:
    """One call of a handler, wherever it runs: ``run`` in a worker thread
    or the process child (an awaitable it returns is run on a loop of its
    own there), ``arun`` as a task on the caller's loop, ``call_inline`` on
    the main thread (an awaitable it returns is left for ``settle``, on a
    worker thread). ``cancel`` is the deadline: the workspace refuses later
    writes, a coroutine is cancelled."""

    __slots__ = (
        "handler",
        "awaiting",
        "ctx",
        "arguments",
        "accessed",
        "child_log",
        "_runner",
        "_cancelled",
        "_policy",
        "_handoff",
        "_ended",
        "_overran",
    )

    def __init__(
        self,
        handler: Callable[..., Any],
        ctx: ToolContext,
        arguments: dict[str, Any],
        accessed: list[str] | None,
        child_log: ChildLog | None,
        policy: PolicyDecision | None,
        cancelled: Cancellation,
    ) -> None:
        self.handler = handler
        self.ctx = ctx
        self.arguments = arguments
        self.accessed = accessed
        self.child_log = child_log
        self._runner: CoroutineRunner | None = None
        self._cancelled = cancelled
        # Whoever is last, the handler or the deadline, closes the policy's
        # locations: never while an operation may still use one.
        self._policy = policy
        self._handoff = threading.Lock()
        self._ended = False
        self._overran = False
        self.awaiting: Any = None
        """Inline: the awaitable the handler returned, until ``settle``."""

    def run(self) -> Outcome:
        try:
            with workspace_of_call(self.ctx.workspace):
                value = self.handler(self.ctx, **self.arguments)
                if _awaitable(value):
                    value = self._await(value)
            return True, value, self.accessed
        except BaseException as exc:  # SystemExit from a handler is its failure too
            return False, exc, self.accessed
        finally:
            self._end()

    def call_inline(self) -> Outcome | None:
        """``run`` on the main thread under the alarm (this frame is the
        boundary below which it may raise), but an awaitable the handler
        returns is kept in ``awaiting`` (None returned) for ``settle``."""
        kept = False
        try:
            with workspace_of_call(self.ctx.workspace):
                value = self.handler(self.ctx, **self.arguments)
            if _awaitable(value):
                self.awaiting, kept = value, True
                return None
            return True, value, self.accessed
        except BaseException as exc:  # KeyboardInterrupt and SystemExit too: the call's failure
            return False, exc, self.accessed
        finally:
            if not kept:
                self._end()

    def settle(self) -> Outcome:
        """The awaitable ``call_inline`` kept, run to its end on a loop of
        its own (closed unstarted once the call is cancelled)."""
        try:
            with workspace_of_call(self.ctx.workspace):
                value = self._await(self.awaiting)
            return True, value, self.accessed
        except BaseException as exc:
            return False, exc, self.accessed
        finally:
            self.awaiting = None
            self._end()

    @property
    def cancellation(self) -> Cancellation:
        """The call's cancellation (``ctx.cancelled``)."""
        return self._cancelled

    def discard(self) -> None:
        """The awaitable ``call_inline`` kept, closed unstarted: the deadline
        passed before it could run (no "never awaited" warning)."""
        awaitable, self.awaiting = self.awaiting, None
        try:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()
        except Exception:  # noqa: BLE001,S110 - an awaitable's close is its own business
            pass
        finally:
            self._end()

    def _await(self, awaitable: Any) -> Any:
        self._runner = runner = CoroutineRunner()
        if self.ctx.cancelled.is_set():  # the deadline passed before the runner existed
            runner.cancel()
        return runner.run(awaitable)

    async def arun(self) -> Outcome:
        try:
            with workspace_of_call(self.ctx.workspace):
                value = self.handler(self.ctx, **self.arguments)
                if inspect.isawaitable(value):
                    value = await value
            return True, value, self.accessed
        except BaseException as exc:  # CancelledError too: aexecute's caller was not cancelled
            return False, exc, self.accessed
        finally:
            self._end()

    def _end(self) -> None:
        with self._handoff:
            self._ended = True
        if self._overran and self._policy is not None:
            self._policy.close()

    def overrun(self, attempt: Attempt) -> None:
        """The deadline passed (thread mode): a handler still running keeps
        the locations it may be using, and closes them when it ends."""
        with self._handoff:
            if not self._ended:
                self._overran = True
                attempt.policy = None

    def collect_journal(self, journal: ChangeJournal, call_id: str) -> None:
        """Record what a process child sent before each change, however it
        ended (killed at its deadline included)."""
        if self.child_log is not None:
            for kind, path, state in self.child_log.receive():
                if kind == "previous":
                    journal.record(call_id, path, state)
                else:
                    journal.leave(call_id, path, state)
            self.child_log.close()

    def deadline_passed(self) -> None:
        """Inline mode, from the signal handler at the deadline: the call is
        cancelled from now on (no lock taken: the interrupted code may hold
        any)."""
        self._cancelled.mark()

    def cancel(self) -> None:
        # cancelled first: run() reads it after publishing its runner.
        self.ctx.cancelled.set()
        runner = self._runner
        if runner is not None:
            runner.cancel()


class Invocation:
    """Runs handlers for one runtime: its settings, isolation and journal."""

    def __init__(
        self,
        settings: RuntimeSettings,
        isolation: Isolation,
        *,
        in_process: bool,
        journal: ChangeJournal,
        observers: Observers,
        inline: bool = False,
    ) -> None:
        self.settings = settings
        self.isolation = isolation
        self.in_process = in_process
        """False in process isolation: a child's journal entries travel back."""
        self.inline = inline
        """Run sync handlers on the calling thread when it is the main thread
        (``inline.usable()``), else through ``isolation`` (a thread pool)."""
        self.journal = journal
        self.observers = observers

    def handler_run(self, running: Running) -> HandlerRun:
        """The handler's context: a journaled workspace that refuses changes
        once the call is cancelled."""
        settings, spec, attempt = self.settings, running.spec, running.attempt
        call_id = attempt.call_id
        journal = self.journal
        # In process mode the handler's journal entries are made in the child:
        # each is sent before its change, so a child killed at its deadline
        # still leaves what it changed to roll back.
        child_log = None if self.in_process else ChildLog()

        cancelled = Cancellation()
        begin = running.begin  # a deferred row: committed as RUNNING before a change

        def on_change(path: str, previous: Previous) -> None:
            if cancelled.is_set():
                raise CallCancelled(
                    f"call {call_id} timed out: its handler may not change {show_path(path)}",
                    path,
                )
            if begin is not None:
                begin()
            if child_log is not None:
                child_log.send(("previous", path, previous))
            else:
                journal.record(call_id, path, previous)

        def on_leave(path: str, leaves: Leaves) -> None:
            # What rollback checks is still there, so it never undoes later work.
            if child_log is not None:
                child_log.send(("leaves", path, leaves))
            else:
                journal.leave(call_id, path, leaves)

        # Paths the handler asks about, for watch_files (travelling back from
        # a child process like the journal entries).
        accessed: list[str] | None = [] if self.observers.file_watchers else None

        ctx = ToolContext(
            call_id=call_id,
            session_id=attempt.session_id,
            actor=attempt.actor,
            workspace=settings.workspace.with_journal(
                on_change,
                allow_hardlinks=spec.allow_hardlinks or None,
                cancelled=cancelled,
                keep_at_most=journal.keep_at_most,
                # The handler reaches what the policy judged: one resolution.
                locations=attempt.policy.locations if attempt.policy is not None else (),
                on_access=None if accessed is None else accessed.append,
                temp_tag=running.temp_tag,
                on_leave=on_leave,
            ),
            capabilities=settings.capabilities,
            variables=settings.variables,
            metadata=attempt.metadata,
            cancelled=cancelled,
        )
        return HandlerRun(
            spec.handler,
            ctx,
            dict(running.arguments),
            accessed,
            child_log,
            attempt.policy,
            cancelled,
        )

    def prepared(
        self, handler: HandlerRun, call_id: str, prepare: Callable[[Any], Any] | None
    ) -> Outcome | None:
        """Run the handler's ``prepare(ctx)`` (a server it talks to, started
        in the call's world; ``to_prepare``'s answer, asked on the calling
        thread, None when there is nothing to run) before the deadline's clock
        starts: a slow start is never the call's timeout. It runs on a
        worker as a handler run of its own (what it starts belongs to the
        call's world) under its own bound, ``prepare.timeout_seconds``.
        None when it succeeded or there is none; otherwise the call's
        failed outcome (its error, or that it overran its bound). Not in
        process isolation: a forked child keeps nothing it started."""
        if prepare is None:
            return None
        bound = getattr(prepare, "timeout_seconds", PREPARE_SECONDS)
        run = HandlerRun(prepare, handler.ctx, {}, None, None, None, handler.cancellation)
        try:
            finished, value, _ = self.isolation.run(run.run, bound, call_id)
        except HandlerTimeout:
            return False, PrepareOverran(f"preparing the call took over {bound:g} s"), None
        return None if finished else (False, value, handler.accessed)

    def to_prepare(self, handler: HandlerRun) -> Callable[[Any], Any] | None:
        """The handler's ``prepare`` when this call must run it: None
        without one, in process isolation, or when its ``needed(ctx)``
        (an optional cheap check run on the calling thread, such as "my
        world's server runs already") says False, which saves the hand-off
        to a worker. When ``needed`` raises, ``prepare`` runs: its own run
        reports what is wrong."""
        prepare: Callable[[Any], Any] | None = getattr(handler.handler, "prepare", None)
        if not callable(prepare) or not isinstance(self.isolation, ThreadIsolation):
            return None
        needed = getattr(prepare, "needed", None)
        if callable(needed):
            try:
                if not needed(handler.ctx):
                    return None
            except Exception:  # noqa: BLE001 - prepare's run says what is wrong
                pass
        return prepare

    def invoke(self, running: Running) -> ToolResult:
        """Run the handler through the isolation, blocking until it ends or
        its deadline passes."""
        handler = self.handler_run(running)
        timeout = self.settings.deadline(running.spec)
        try:
            prepare = self.to_prepare(handler)
            outcome: Outcome | None = self.prepared(handler, running.attempt.call_id, prepare)
            if outcome is None:
                outcome = self._run(handler, timeout, running)
        except HandlerTimeout as exc:
            handler.cancel()
            return self._timed_out(running, handler, exc)
        except Exception as exc:  # the process died, or its outcome could not travel back
            outcome = (False, exc, handler.accessed)
        finally:
            handler.collect_journal(self.journal, running.attempt.call_id)
        return self._outcome(running, outcome)

    def _run(self, handler: HandlerRun, timeout: float, running: Running) -> Outcome:
        if self.inline and not running.spec.is_async and usable():
            try:
                return self._run_inline(handler, timeout, running.attempt.call_id)
            except TimerBusy:  # someone else's alarm, or a nested call: a worker thread
                pass
        outcome: Outcome = self.isolation.run(handler.run, timeout, running.attempt.call_id)
        return outcome

    def _run_inline(self, handler: HandlerRun, timeout: float, call_id: str) -> Outcome:
        started = time.monotonic()
        try:
            outcome: Outcome | None = run_inline(
                handler.call_inline, timeout, handler.deadline_passed
            )
        except HandlerTimeout:
            if handler.awaiting is not None:
                handler.discard()
            raise
        if outcome is not None:
            return outcome
        # An awaitable the handler returned runs as in thread mode, on a
        # worker's loop for what is left of the deadline (cancelled there at
        # the deadline): an event loop on this thread cannot be interrupted.
        left = max(0.0, timeout - (time.monotonic() - started))
        try:
            settled: Outcome = self.isolation.run(handler.settle, left, call_id)
        except HandlerTimeout:
            raise HandlerTimeout(timeout) from None
        return settled

    async def ainvoke(self, running: Running) -> ToolResult:
        """``invoke`` without blocking the loop: an async handler as a task
        on it, anything else through the isolation in an executor thread."""
        import asyncio

        handler = self.handler_run(running)
        timeout, call_id = self.settings.deadline(running.spec), running.attempt.call_id
        try:
            failed = None
            prepare = self.to_prepare(handler)
            if prepare is not None:
                failed = await asyncio.to_thread(self.prepared, handler, call_id, prepare)
            outcome: Outcome
            if failed is not None:
                outcome = failed
            elif running.spec.is_async and isinstance(self.isolation, ThreadIsolation):
                outcome = await self.isolation.run_async(
                    handler.arun, timeout, call_id, handler.cancel
                )
            else:
                outcome = await asyncio.to_thread(self.isolation.run, handler.run, timeout, call_id)
        except HandlerTimeout as exc:
            handler.cancel()
            return self._timed_out(running, handler, exc)
        except asyncio.CancelledError:  # the caller's task: later writes are refused
            handler.cancel()
            if self.in_process:  # the handler runs on: it closes them
                handler.overrun(running.attempt)
            raise
        except Exception as exc:  # the process died, or its outcome could not travel back
            outcome = (False, exc, handler.accessed)
        finally:
            handler.collect_journal(self.journal, running.attempt.call_id)
        return self._outcome(running, outcome)

    def _timed_out(self, running: Running, handler: HandlerRun, exc: HandlerTimeout) -> ToolResult:
        if handler.accessed is not None:  # a copy: the late handler may still add to it
            self.observers.tell_watchers(running.attempt.call_id, list(handler.accessed))
        if self.in_process:  # a killed child uses no location any more
            handler.overrun(running.attempt)
        return failure(
            self.settings, running.attempt, ErrorCode.TIMEOUT, str(exc), CallState.TIMED_OUT
        )

    def _outcome(self, running: Running, outcome: Outcome) -> ToolResult:
        """The result of a handler run that ended."""
        settings, spec, attempt = self.settings, running.spec, running.attempt
        finished, value, paths = outcome
        if paths is not None:
            self.observers.tell_watchers(attempt.call_id, paths)
        if finished:
            return self._check_output(spec, value, attempt)
        redact = settings.redactor_for(spec).redact_text
        if isinstance(value, SandboxError):
            return failure(
                settings,
                attempt,
                value.code,
                settings.scrub(describe(value, redact)),
                CallState.FAILED,
            )
        detail = settings.scrub(describe(value, redact))
        message = f"{type(value).__name__}: {detail}" if detail else type(value).__name__
        return failure(
            settings,
            attempt,
            ErrorCode.EXECUTION_ERROR,
            f"handler raised {message}",
            CallState.FAILED,
        )

    def _check_output(self, spec: ToolSpec, data: Any, attempt: Attempt) -> ToolResult:
        settings = self.settings
        given = data
        try:
            text = json.dumps(data, ensure_ascii=False, sort_keys=True, allow_nan=False)
            data = json.loads(text)
            if not text.isascii():
                # A name that is not UTF-8 (report-\xff.txt) comes back with a
                # lone surrogate, which neither the audit store nor a model's
                # JSON can take: it is escaped (\udcff) before anything sees it.
                escaped = storable_data(data)
                if escaped is not data:
                    data = escaped
                    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError, RecursionError) as exc:
            return failure(
                settings,
                attempt,
                ErrorCode.OUTPUT_INVALID,
                f"output is not JSON data: {first_line(exc)}",
                CallState.FAILED,
            )
        if spec.output_validator is not None:
            errors = spec.output_validator.errors(
                data, show_key=settings.redactor_for(spec).redact_text
            )
            if errors:
                return failure(
                    settings,
                    attempt,
                    ErrorCode.OUTPUT_INVALID,
                    "; ".join(errors),
                    CallState.FAILED,
                    redacted=True,
                )
        attempt.output = data
        if _flat_with_text_keys(given):
            attempt.output_text = text
        shown, total = truncate(data, text, spec.result_limit)
        return ToolResult(
            call_id=attempt.call_id,
            tool_name=attempt.tool_name,
            ok=True,
            code=ErrorCode.OK,
            message="ok"
            if total is None
            else f"ok; output truncated to {spec.result_limit} of {total} characters",
            data=shown,
            duration_ms=attempt.elapsed_ms(),
            state=CallState.SUCCEEDED,
            truncated=total is not None,
            total_size=total,
        )
