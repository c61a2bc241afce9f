"""``ToolRuntime.execute``: every call through the whole pipeline, in order.

The runtime orchestrates and owns no policy: each step asks the module that
knows (schema, policy, hooks, idempotency, audit, isolation) and turns its
answer into a ``ToolResult``. This module keeps the order of the steps; the
steps themselves live beside it, one job each: ``admission`` (parse,
lookup, schema, policy, hooks), ``audit_log`` (the claim, the rows, the
retry queue), ``invocation`` (the handler under its deadline, its output
judged), ``observers`` (PostToolUse hooks, listeners, file watchers);
``attempt`` is the per-call record they fill in, ``settings`` what the
runtime was configured with, ``results`` and ``messages`` the answers and
their text. ``execute`` never raises for anything a call
can contain, and every call leaves exactly one audit row.

Order: parse -> lookup -> input schema -> policy -> PreToolUse hooks (and
approval) -> idempotency claim + RUNNING row (one transaction) -> handler
under its deadline -> output schema -> truncation -> PostToolUse hooks ->
row finished.

``await ToolRuntime.aexecute(call)`` is the same pipeline for async agent
loops: every step is shared, only running the handler differs. An ``async
def`` handler (thread isolation) runs as a task on the caller's loop under
its deadline, and is cancelled at the deadline; a sync handler, or any
handler in process isolation, runs through the isolation in a thread of the
loop's executor, so the loop is never blocked by a handler. The steps around
the handler still run on the loop, synchronously: parsing, schema, policy
(path checks on the workspace), PreToolUse/PostToolUse hooks, listeners, and
the audit store's two writes (the RUNNING row and its finishing update: with
``SQLiteAuditStore`` on local disk, tens of microseconds each). A hook that
blocks (an approval that waits for a person) blocks the loop.

When the store cannot take the RUNNING row the handler never runs
(AUDIT_UNAVAILABLE). A READ tool's call run in this process without an
idempotency key commits one row instead: no RUNNING row, the
handler runs, and its row is written with the outcome, committed before the
result is returned; when that commit fails the result is withheld
(AUDIT_UNAVAILABLE, no data): nothing read leaves unrecorded. Its handler
gets a RUNNING row committed before a first change it makes anyway (and the
change refused when that fails). A process that dies mid-read leaves no row.
When the store cannot take a refused call's row, or the finishing update
after a handler ran, the result is still returned as it is (the refusal
or the side effect is real, and answering AUDIT_UNAVAILABLE would invite a
second side effect) and the write is queued:
``flush_audit()`` retries it, every later ``execute`` tries first, and
``close()`` reports what could still not be written. A RUNNING row left by a
crash is marked INTERRUPTED by ``ToolRuntime.recover`` (the store's
``recover``, plus the crashed writes' temporary files), once its lease ended:
each RUNNING row's lease lasts the tool's deadline plus the store's grace.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Generic, Literal, TypeVar, overload

from ..audit.protocol import AuditStore
from ..audit.recovery import Recovery, recover_calls
from ..audit.row import AuditRecord
from ..audit.sqlite import SQLiteAuditStore
from ..audit.stores import open_audit_store
from ..capabilities import Capabilities, Risk, under_root
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..hooks import Approval, PostToolUse, PreToolUse
from ..isolation import IsolationMode, make_isolation
from ..redaction import Redactor
from ..registry import ToolRegistry
from ..rollback import ChangeJournal
from ..sandbox import RollbackConflict, SandboxError, Workspace
from .admission import Admission
from .attempt import Attempt, Refusal, Running, bad_request
from .audit_log import AuditLog
from .invocation import Invocation
from .limits import (
    CANCELLED_MESSAGE,
    TIMEOUT_MAX,
    valid_timeout,
)
from .messages import describe, warn
from .observers import FileWatcher, Listener, Observers, post_tool_use
from .results import failure, stored_data
from .settings import RuntimeSettings, utc_now

_T = TypeVar("_T")


class _Setting(Generic[_T]):
    """A ``ToolRuntime`` attribute that is the field of the same name of its
    ``RuntimeSettings``: every step of the pipeline shares it, and assigning
    one between calls changes what later calls get."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, runtime: None, owner: type) -> _Setting[_T]: ...
    @overload
    def __get__(self, runtime: ToolRuntime, owner: type) -> _T: ...
    def __get__(self, runtime: ToolRuntime | None, owner: type) -> _T | _Setting[_T]:
        if runtime is None:
            return self
        value: _T = getattr(runtime._settings, self.name)
        return value

    def __set__(self, runtime: ToolRuntime, value: _T) -> None:
        setattr(runtime._settings, self.name, value)


class ToolRuntime:
    """The execution boundary. Safe to call from several threads at once.

    ``workspace`` may be a ``Workspace`` or a directory path; ``audit``
    defaults to an in-memory store, and may be a store, or a URL or path that
    names one (``postgresql://...`` for ``PostgresAuditStore``, a file path
    for ``SQLiteAuditStore``: see ``open_audit_store``). ``close()`` closes what the runtime made
    itself (never a workspace or store it was given), ends its workers and
    reports what it could not finish.

    ``isolation`` is where handlers run: ``"thread"`` (the default) on a
    worker thread (a late handler runs on as a tracked orphan, its writes
    refused); ``"inline"`` (opt-in, faster) calls a
    sync handler on the calling thread when that is the main thread, its
    deadline kept by SIGALRM (``runtime/inline.py``: no thread handoff, and
    a late handler is stopped), else on a worker thread; ``"process"`` in a
    forked child killed at the deadline.

    ``registry``, ``workspace``, ``capabilities``, ``audit``, ``hooks``,
    ``redactor``, ``variables``, ``idempotency_scope`` and ``timeouts`` are
    the settings every call is judged by; assigning one between calls
    changes what later calls get.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        workspace: Workspace | str | os.PathLike[str],
        capabilities: Capabilities | None = None,
        audit: AuditStore | str | os.PathLike[str] | None = None,
        *,
        hooks: Sequence[PreToolUse | PostToolUse] = (),
        redactor: Redactor | None = None,
        isolation: IsolationMode | Literal["inline"] = "thread",
        variables: Mapping[str, str] | None = None,
        idempotency_scope: str | None = None,
        timeouts: Mapping[str, float] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._owned: list[Workspace | AuditStore] = []
        if not isinstance(workspace, Workspace):
            workspace = Workspace(workspace)
            self._owned.append(workspace)
        if audit is None:
            audit = SQLiteAuditStore(":memory:")
            self._owned.append(audit)
        elif isinstance(audit, (str, os.PathLike)):
            audit = open_audit_store(audit)
            self._owned.append(audit)
        deadlines: Mapping[str, float] = dict(timeouts or {})
        if not all(valid_timeout(seconds) for seconds in deadlines.values()):
            raise ValueError(f"timeouts must be positive finite seconds, at most {TIMEOUT_MAX:g}")
        self._settings = settings = RuntimeSettings(
            registry=registry,
            workspace=workspace,
            capabilities=capabilities or Capabilities(),
            audit=audit,
            hooks=tuple(hooks),
            redactor=redactor or Redactor(),
            variables=dict(variables or {}),
            idempotency_scope=idempotency_scope,
            timeouts=deadlines,
            clock=clock or utc_now,
        )
        inline = isolation == "inline"
        self._isolation = make_isolation("thread" if isolation == "inline" else isolation)
        self._observers = Observers()
        self._admission = Admission(settings)
        self._log = AuditLog(settings)
        self._invocation = Invocation(
            settings,
            self._isolation,
            in_process=isolation != "process",
            journal=ChangeJournal(),
            observers=self._observers,
            inline=inline,
        )

    # -- the pipeline -------------------------------------------------------

    def execute(self, call: ToolCall) -> ToolResult:
        """Run one call through every layer and answer a ``ToolResult``.
        Never raises for anything the call contains. An ``async def``
        handler is run on an event loop of the worker thread (or of the
        process child) and cancelled at its deadline."""
        attempt = self._arrive(call)
        try:
            result = self._until_handler(call, attempt, defer_reads=True)
            if isinstance(result, Running):
                try:
                    outcome: ToolResult | Exception = self._invocation.invoke(result)
                except Exception as exc:  # a bug of ours after the handler may have run
                    outcome = exc
                result = self._complete(result, outcome)
        finally:
            attempt.release()
        self._tell_listeners(call, result, attempt)
        return result

    def admit(self, call: ToolCall) -> ToolResult | None:
        """Every step of ``execute`` before the handler, for a tool another
        program runs (an agent framework's own tool, a Claude Code hook):
        None when the call is admitted, its RUNNING audit row committed
        (``pytest_toolguard.bridges.guards.gate.finish_admitted`` finishes it with
        the other program's outcome); otherwise the refusal, recorded and
        returned as ``execute`` would. Never raises for anything the call
        contains."""
        attempt = self._arrive(call)
        try:
            result = self._until_handler(call, attempt)
        finally:
            attempt.release()  # another program runs the tool, not through our workspace
        if isinstance(result, Running):
            return None
        self._tell_listeners(call, result, attempt)
        return result

    async def aexecute(self, call: ToolCall) -> ToolResult:
        """``execute`` for async agent loops: the same pipeline, audit rows,
        listeners and result (see the module docstring for what runs on
        the loop). An ``async def`` handler runs on the caller's loop and is
        cancelled at its deadline (TIMEOUT once it stopped, or after
        ``ThreadIsolation.cancel_grace`` s); a sync handler runs through the
        isolation without blocking the loop.

        Never raises for anything the call contains. When the caller's own
        task is cancelled while the handler runs, the call is cancelled: an
        async handler's task is cancelled, a sync handler (or a process
        child) runs on until it returns or its deadline, its later writes
        refused in thread mode; the row is finished INTERRUPTED with
        EXECUTION_ERROR (an idempotency key keeps that outcome), no
        PostToolUse hook or listener sees the call (nobody got a result),
        and ``CancelledError`` propagates."""
        import asyncio

        attempt = self._arrive(call)
        try:
            result = self._until_handler(call, attempt, defer_reads=True)
            if isinstance(result, Running):
                try:
                    outcome: ToolResult | Exception = await self._invocation.ainvoke(result)
                except asyncio.CancelledError:
                    interrupted = failure(
                        self._settings,
                        attempt,
                        ErrorCode.EXECUTION_ERROR,
                        CANCELLED_MESSAGE,
                        CallState.INTERRUPTED,
                    )
                    self._log.settle(result, interrupted)
                    raise
                except Exception as exc:  # a bug of ours after the handler may have run
                    outcome = exc
                result = self._complete(result, outcome)
        finally:
            attempt.release()
        self._tell_listeners(call, result, attempt)
        return result

    def _arrive(self, call: object) -> Attempt:
        """Retry queued audit writes, then open the call's attempt."""
        if self._log.has_pending:
            self._log.flush()
        try:
            return self._admission.receive(call)
        except Exception:  # an object whose attributes raise: a call of nothing
            return self._admission.receive(None)

    def _until_handler(
        self, call: ToolCall, attempt: Attempt, *, defer_reads: bool = False
    ) -> ToolResult | Running:
        """Every step up to the handler, in order: a refusal's result, or
        the call with its RUNNING row committed. ``defer_reads``: a READ
        tool's handler run in this process gets one row, written with its
        outcome (``AuditLog.start``'s ``defer``)."""
        admission = self._admission
        try:
            if not isinstance(call, ToolCall):
                raise bad_request(f"expected a ToolCall, got {type(call).__name__}", "request.type")
            admission.check_fields(call)
            attempt.arguments = admission.parse(call.arguments)
            attempt.spec = spec = admission.lookup(attempt.tool_name)
            admission.admit(call, spec, attempt)
            defer = defer_reads and spec.risk is Risk.READ and self._invocation.in_process
            return self._log.start(call, spec, attempt, defer=defer)
        except Refusal as refusal:
            return self._log.refuse(attempt, refusal)
        except Exception as exc:  # a bug of ours must still answer, and be recorded
            return self._log.refuse(
                attempt,
                Refusal(
                    ErrorCode.EXECUTION_ERROR,
                    f"internal error in the executor: {type(exc).__name__}",
                    "runtime.internal",
                    CallState.FAILED,
                ),
            )

    def _complete(self, running: Running, outcome: ToolResult | Exception) -> ToolResult:
        """After the handler: the row finished, then the PostToolUse hooks."""
        result = self._log.settle(running, outcome)
        post_tool_use(self._settings.hooks, running.call, running.spec, running.arguments, result)
        return result

    def _tell_listeners(self, call: ToolCall, result: ToolResult, attempt: Attempt) -> None:
        if self._observers.listeners:
            stored = stored_data(self._settings, attempt, result)
            self._observers.tell_listeners(call, result, stored, attempt.approval)

    # -- observers ----------------------------------------------------------

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(call, result, stored_data, approval)`` after every
        ``execute`` or ``aexecute``; ``stored_data`` is the result's data as it may be stored:
        redacted from the whole output, then cut like the result (what a
        recorder must keep); ``approval`` is the ``Approval`` of the hook
        that let the call through (None when no hook answered ``allow``, or
        the call was refused before the hooks). Returns the function that
        removes it. A listener that raises is reported as a RuntimeWarning."""
        return self._observers.add_listener(listener)

    def tell_listeners(
        self,
        call: ToolCall,
        result: ToolResult,
        stored_data: object = None,
        approval: Approval | None = None,
    ) -> None:
        """Tell every listener (``add_listener``) the outcome of a call
        ``admit`` let through and another program ran: what ``execute``
        does after a call, for a call it never ran
        (``pytest_toolguard.bridges.guards.gate`` does once the call's row is
        finished, so that a recorder hears of every call a guard saw).
        ``stored_data`` must already be redacted and cut."""
        self._observers.tell_listeners(call, result, stored_data, approval)

    def finish_reported(
        self,
        row: AuditRecord,
        result: ToolResult,
        data: object = None,
        claim_key: str | None = None,
    ) -> bool:
        """Finish ``row``, the RUNNING row ``admit`` left for a call another
        program ran, with the ``result`` it reported (a preview of ``data``,
        redacted here; the outcome kept under ``claim_key`` when given).
        Through the audit log's retry queue like every write of the
        runtime: a store that is down gets the write again at the next
        ``flush_audit``. False when the row is no longer RUNNING (another
        process finished it, or recovery marked it INTERRUPTED)."""
        return self._log.finish_reported(row, result, data, claim_key)

    def watch_files(self, watcher: FileWatcher) -> Callable[[], None]:
        """Call ``watcher(call_id, paths)`` once a handler has run, with every
        workspace path it asked ``ctx.workspace`` about (read, listed, checked,
        written or deleted; as the handler spelt them, in order, refused ones
        included). This is how a recorder knows which files a call needs,
        declared or not. Returns the function that removes it. A watcher
        that raises is reported as a RuntimeWarning."""
        return self._observers.watch_files(watcher)

    # -- after the fact ------------------------------------------------------

    def flush_audit(self) -> int:
        """Retry queued audit writes; returns how many are still pending."""
        return self._log.flush()

    def rollback(self, call_id: str, *, actor: str = "toolguard") -> ToolResult:
        """Restore every file the call changed to what it held before the
        call, and record the rollback as its own audit row (tool
        ``toolguard.rollback``, ``replay_of`` = the call).

        It acts only on the paths the call changed, inside the session's
        write roots, without following a symbolic link, and only where each
        is still what the call left (checked for every path before any is
        restored; a path already back to what it held before is left alone).
        Answers INVALID_REQUEST when the runtime kept no changes for that
        call; PERMISSION_DENIED when one is outside the write roots;
        FORBIDDEN_PATH when a symbolic link was planted on one;
        ROLLBACK_CONFLICT when one is no longer what the call left (a later
        call, session or process changed it: ``data["conflicts"]`` names
        them, ``data["restored"]`` what was restored before a change met
        while the rollback ran, usually nothing); LIMIT_EXCEEDED for a file
        too large to have been kept. A refused rollback restores nothing
        else, and the call's changes stay in the journal (those restored
        excepted), so it can be asked again."""
        settings = self._settings
        attempt = self._admission.receive(
            ToolCall(call_id=f"rollback-{call_id}", tool_name="toolguard.rollback", actor=actor)
        )
        attempt.replay_of = call_id
        roots = settings.capabilities.write_roots
        outside = [
            change.path
            for change in self.journal.changes(call_id)
            if not any(under_root(change.path, root) for root in roots)
        ]
        try:
            if outside:
                return self._refuse_rollback(
                    attempt,
                    ErrorCode.PERMISSION_DENIED,
                    f"{outside[0]!r} is outside the write roots ({', '.join(roots) or 'none'}): "
                    "nothing was restored",
                )
            changes = self.journal.rollback(call_id, settings.workspace)
        except KeyError:
            return self._refuse_rollback(
                attempt, ErrorCode.INVALID_REQUEST, f"no changes recorded for call {call_id}"
            )
        except (SandboxError, OSError) as exc:
            detail = settings.scrub(describe(exc, settings.redactor.redact_text))
            if not isinstance(exc, SandboxError):
                return self._refuse_rollback(attempt, ErrorCode.EXECUTION_ERROR, detail)
            data = None
            if isinstance(exc, RollbackConflict):
                data = {"conflicts": list(exc.conflicts), "restored": list(exc.restored)}
            return self._refuse_rollback(attempt, exc.code, detail, data)
        attempt.decision, attempt.rule = "allow", "runtime.rollback"
        attempt.reason = f"restored {len(changes)} path(s) changed by {call_id}"
        result = ToolResult(
            call_id=attempt.call_id,
            tool_name=attempt.tool_name,
            ok=True,
            code=ErrorCode.OK,
            message=attempt.reason,
            data={
                "restored": [c.path for c in changes],
                "removed": [c.path for c in changes if c.previous is None],
            },
            duration_ms=attempt.elapsed_ms(),
            state=CallState.SUCCEEDED,
        )
        self._log.write_row(attempt, result)
        return result

    def _refuse_rollback(
        self, attempt: Attempt, code: ErrorCode, detail: str, data: object = None
    ) -> ToolResult:
        """The failed answer of a rollback, its row written; ``data`` (the
        paths of a conflict) rides on the result."""
        result = failure(
            self._settings, attempt, code, f"rollback refused: {detail}", CallState.FAILED
        )
        if data is not None:
            result = replace(result, data=data)
        attempt.rule, attempt.reason = "runtime.rollback", result.message
        self._log.write_row(attempt, result)
        return result

    def recover(self, now: str | None = None) -> Recovery:
        """Take over the calls whose process died: the audit store's
        ``interrupt_expired`` marks every RUNNING row whose lease ended
        INTERRUPTED (their keys replay that failure, never run again), then
        the temporary files those calls' killed writes left in this
        runtime's workspace are removed. Safe while other processes work on
        the same store: their leases have not ended. ``now`` (default: the
        runtime's clock) is what the rows' ``finished_at`` says.
        ``AuditUnavailable`` when the store cannot do it."""
        return recover_calls(self.audit, self.workspace, now or self._settings.now())

    def orphaned_handlers(self) -> list[str]:
        """Call ids whose handler overran its deadline and is still running
        (thread mode)."""
        orphans = getattr(self._isolation, "orphans", None)
        return list(orphans()) if orphans else []

    def close(self, join_timeout: float = 5.0) -> list[str]:
        """Wait up to ``join_timeout`` s in all for handlers still running
        (those that overran their deadline, and those other threads are
        still waiting for), retry queued audit writes, and return what is
        still wrong (call ids of handlers still alive, audit writes still
        pending). Warns with RuntimeWarning when that list is not empty.
        Closes what the runtime opened itself; of a ``SQLiteAuditStore`` it
        was given, the connections of threads that ended."""
        problems = [
            f"handler still running: {name}" for name in self._isolation.close(join_timeout)
        ]
        pending = self.flush_audit()
        if pending:
            problems.append(f"{pending} audit write(s) could not be stored")
        if problems:
            warn("; ".join(problems))
        audit = self.audit
        if audit not in self._owned and isinstance(audit, SQLiteAuditStore):
            audit.close_ended_threads()  # a given store stays open: only its dead threads' part
        for owned in self._owned:
            owned.close()
        self._owned.clear()
        return problems

    def __enter__(self) -> ToolRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- settings -----------------------------------------------------------

    @property
    def journal(self) -> ChangeJournal:
        """What each call's handler changed, kept for ``rollback``."""
        return self._invocation.journal

    @journal.setter
    def journal(self, value: ChangeJournal) -> None:
        self._invocation.journal = value

    registry = _Setting[ToolRegistry]()
    """The tools calls are looked up in."""

    workspace = _Setting[Workspace]()
    """The sandbox every handler reaches files through."""

    capabilities = _Setting[Capabilities]()
    """What the session may do."""

    audit = _Setting[AuditStore]()
    """The store of every call's row."""

    @property
    def hooks(self) -> tuple[PreToolUse | PostToolUse, ...]:
        """The PreToolUse and PostToolUse hooks, in order."""
        return self._settings.hooks

    @hooks.setter
    def hooks(self, value: Sequence[PreToolUse | PostToolUse]) -> None:
        self._settings.hooks = tuple(value)

    redactor = _Setting[Redactor]()
    """What is redacted before anything is stored (a tool's own redactor
    replaces it for that tool)."""

    variables = _Setting[Mapping[str, str]]()
    """Values path templates take before the call's arguments."""

    idempotency_scope = _Setting[str | None]()
    """The scope of client idempotency keys (None: the session)."""

    timeouts = _Setting[Mapping[str, float]]()
    """Per-tool deadlines for this runtime, replacing ``timeout_seconds``."""
