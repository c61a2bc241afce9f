"""``ToolRuntime.execute``: every call through the whole pipeline, in order.

The runtime orchestrates and owns no policy: each step asks the module that
knows (schema, policy, hooks, idempotency, audit, isolation) and turns its
answer into a ``ToolResult``. ``execute`` never raises for anything a call
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
(AUDIT_UNAVAILABLE). When it cannot take a refused call's row, or the
finishing update after a handler ran, the result is still returned as it is
(the refusal or the side effect is real, and answering AUDIT_UNAVAILABLE
would invite a second side effect) and the write is queued:
``flush_audit()`` retries it, every later ``execute`` tries first, and
``close()`` reports what could still not be written. A RUNNING row left by a
crash is marked INTERRUPTED by ``SQLiteAuditStore.recover``.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from .audit import AuditRecord, AuditStore, AuditUnavailable, storable_data
from .audit import Decision as AuditDecision
from .audit import storable_text as _storable
from .capabilities import Capabilities
from .context import ToolContext
from .contract import CallState, ErrorCode, ToolCall, ToolResult
from .errors import ToolguardError
from .hooks import (
    Approval,
    HookDecision,
    PostToolUse,
    PostToolUseEvent,
    PreToolUse,
    PreToolUseEvent,
)
from .idempotency import Claim, ClaimOutcome, scope_client_key
from .isolation import (
    ChildLog,
    CoroutineRunner,
    HandlerTimeout,
    IsolationMode,
    ThreadIsolation,
    make_isolation,
)
from .jsondata import canonical_json, copy_json, json_hash, plain, plain_json_problem
from .policy import PolicyDecision, authorize
from .redaction import Redactor, strings_in
from .registry import ToolRegistry, ToolSpec
from .rollback import ChangeJournal
from .sandbox import (
    CallCancelled,
    LimitExceeded,
    Previous,
    SandboxError,
    Workspace,
    show_path,
)

MAX_ID_LENGTH = 256
PREVIEW_LIMIT = 500
"""Characters of redacted output kept in the audit row."""
ARGUMENTS_LIMIT = 16_000
"""Characters of redacted arguments kept in the audit row (the hash covers all)."""
MESSAGE_LIMIT = 2_000
PENDING_LIMIT = 10_000
CANCELLED_MESSAGE = "interrupted: the caller's task was cancelled while the handler ran"


Listener = Callable[[ToolCall, ToolResult, Any, Approval | None], None]
"""``listener(call, result, stored_data, approval)``: see ``ToolRuntime.add_listener``."""

FileWatcher = Callable[[str, Sequence[str]], None]
"""``watcher(call_id, paths)``: see ``ToolRuntime.watch_files``."""


class _Refusal(ToolguardError):
    """Internal: the pipeline stops here with this outcome (no handler ran)."""

    def __init__(
        self, code: ErrorCode, message: str, rule: str, state: CallState, *, redacted: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.rule = rule
        self.state = state
        self.redacted = redacted
        """True when the message is already safe to show and store (schema
        errors: value-free, keys redacted); free text is redacted otherwise."""


def _bad_request(message: str, rule: str) -> _Refusal:
    return _Refusal(ErrorCode.INVALID_REQUEST, message, rule, CallState.FAILED)


@dataclass
class _Attempt:
    """The per-call facts the pipeline gathers as it goes."""

    call_id: str
    tool_name: str
    actor: str
    session_id: str
    idempotency_key: str | None
    metadata: Mapping[str, Any]
    started_at: str
    t0: float
    spec: ToolSpec | None = None
    arguments: Mapping[str, Any] | None = None
    decision: AuditDecision = "none"
    rule: str = ""
    reason: str = ""
    idempotency_outcome: str | None = None
    replay_of: str | None = None
    approval: Approval | None = None
    """The hook decision that let the call through, once admitted."""
    raw_session_id: str = ""
    raw_idempotency_key: str | None = None
    """The call's own values, which scope the idempotency claim."""
    policy: PolicyDecision | None = None
    """The allowing decision, holding open the locations it judged (closed
    when the call ends; left to the handler if it overran)."""
    output: Any = None
    """The handler's whole output, before truncation: previews and stored
    outcomes are redacted from it, never from a cut (a cut token would no
    longer match its pattern)."""
    redacted_output: Any = None


@dataclass(slots=True)
class _Running:
    """A call whose RUNNING row is committed: what running its handler and
    finishing its row need. Running the handler is the one step ``execute``
    and ``aexecute`` do differently."""

    call: ToolCall
    spec: ToolSpec
    arguments: Mapping[str, Any]
    attempt: _Attempt
    audit_id: int
    claim_key: str | None


_Outcome = tuple[bool, Any, list[str] | None]
"""A handler run's ``(finished, value or exception, paths it asked the
workspace about)`` (the last None without file watchers). Journal entries
of a process child come back through its ``ChildLog``."""

_PLAIN_DATA = frozenset({dict, list, str, int, float, bool, type(None)})
"""Result types that cannot be awaitable: the check is skipped for them."""


class _HandlerRun:
    """One call of a handler, wherever it runs: ``run`` in a worker thread
    or the process child (an awaitable it returns is run on a loop of its
    own there), ``arun`` as a task on the caller's loop. ``cancel`` is the
    deadline: the workspace refuses later writes, a coroutine is cancelled."""

    __slots__ = (
        "handler",
        "ctx",
        "arguments",
        "accessed",
        "child_log",
        "_runner",
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
    ) -> None:
        self.handler = handler
        self.ctx = ctx
        self.arguments = arguments
        self.accessed = accessed
        self.child_log = child_log
        self._runner: CoroutineRunner | None = None
        # Whoever is last, the handler or the deadline, closes the policy's
        # locations: never while an operation may still use one.
        self._policy = policy
        self._handoff = threading.Lock()
        self._ended = False
        self._overran = False

    def run(self) -> _Outcome:
        try:
            value = self.handler(self.ctx, **self.arguments)
            if type(value) not in _PLAIN_DATA and inspect.isawaitable(value):
                self._runner = runner = CoroutineRunner()
                if self.ctx.cancelled.is_set():  # the deadline passed before the runner existed
                    runner.cancel()
                value = runner.run(value)
            return True, value, self.accessed
        except BaseException as exc:  # SystemExit from a handler is its failure too
            return False, exc, self.accessed
        finally:
            self._end()

    async def arun(self) -> _Outcome:
        try:
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

    def overrun(self, attempt: _Attempt) -> None:
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
            for path, previous in self.child_log.receive():
                journal.record(call_id, path, previous)
            self.child_log.close()

    def cancel(self) -> None:
        # cancelled first: run() reads it after publishing its runner.
        self.ctx.cancelled.set()
        runner = self._runner
        if runner is not None:
            runner.cancel()


class ToolRuntime:
    """The execution boundary. Safe to call from several threads at once.

    ``workspace`` may be a ``Workspace`` or a directory path; ``audit``
    defaults to an in-memory store. ``close()`` closes what the runtime made
    itself (never a workspace or store it was given), ends its workers and
    reports what it could not finish.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        workspace: Workspace | str | os.PathLike[str],
        capabilities: Capabilities | None = None,
        audit: AuditStore | None = None,
        *,
        hooks: Sequence[PreToolUse | PostToolUse] = (),
        redactor: Redactor | None = None,
        isolation: IsolationMode = "thread",
        variables: Mapping[str, str] | None = None,
        idempotency_scope: str | None = None,
        timeouts: Mapping[str, float] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        from .audit import SQLiteAuditStore

        self.registry = registry
        self._owned: list[Workspace | AuditStore] = []
        if not isinstance(workspace, Workspace):
            workspace = Workspace(workspace)
            self._owned.append(workspace)
        if audit is None:
            audit = SQLiteAuditStore(":memory:")
            self._owned.append(audit)
        self.workspace = workspace
        self.audit: AuditStore = audit
        self.capabilities = capabilities or Capabilities()
        self.hooks = tuple(hooks)
        self.redactor = redactor or Redactor()
        self.variables: Mapping[str, str] = dict(variables or {})
        self.idempotency_scope = idempotency_scope
        self.timeouts: Mapping[str, float] = dict(timeouts or {})
        """Per-tool deadlines for this runtime, replacing ``timeout_seconds``."""
        if not all(_valid_timeout(seconds) for seconds in self.timeouts.values()):
            raise ValueError(f"timeouts must be positive finite seconds, at most {TIMEOUT_MAX:g}")
        self.journal = ChangeJournal()
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._isolation_mode = isolation
        self._isolation = make_isolation(isolation)
        self._pending: list[Callable[[], object]] = []
        self._listeners: list[Listener] = []
        self._file_watchers: list[FileWatcher] = []
        self._pending_lock = threading.Lock()

    # -- the pipeline -------------------------------------------------------

    def execute(self, call: ToolCall) -> ToolResult:
        """Run one call through every layer and answer a ``ToolResult``.
        Never raises for anything the call contains. An ``async def``
        handler is run on an event loop of the worker thread (or of the
        process child) and cancelled at its deadline."""
        attempt = self._arrive(call)
        try:
            result = self._pipeline(call, attempt)
            if isinstance(result, _Running):
                try:
                    outcome: ToolResult | Exception = self._invoke(result)
                except Exception as exc:  # a bug of ours after the handler may have run
                    outcome = exc
                result = self._complete(result, outcome)
        finally:
            _release(attempt)
        if self._listeners:
            self._notify(call, result, attempt)
        return result

    def admit(self, call: ToolCall) -> ToolResult | None:
        """Every step of ``execute`` before the handler, for a tool another
        program runs (an agent framework's own tool, a Claude Code hook):
        None when the call is admitted, its RUNNING audit row committed
        (``pytest_toolguard.bridges.gate.finish_admitted`` finishes it with
        the other program's outcome); otherwise the refusal, recorded and
        returned as ``execute`` would. Never raises for anything the call
        contains."""
        attempt = self._arrive(call)
        try:
            result = self._pipeline(call, attempt)
        finally:
            _release(attempt)  # another program runs the tool, not through our workspace
        if isinstance(result, _Running):
            return None
        if self._listeners:
            self._notify(call, result, attempt)
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
            result = self._pipeline(call, attempt)
            if isinstance(result, _Running):
                try:
                    outcome: ToolResult | Exception = await self._ainvoke(result)
                except asyncio.CancelledError:
                    interrupted = self._failure(
                        attempt,
                        ErrorCode.EXECUTION_ERROR,
                        CANCELLED_MESSAGE,
                        CallState.INTERRUPTED,
                    )
                    self._settle(result, interrupted)
                    raise
                except Exception as exc:  # a bug of ours after the handler may have run
                    outcome = exc
                result = self._complete(result, outcome)
        finally:
            _release(attempt)
        if self._listeners:
            self._notify(call, result, attempt)
        return result

    def _arrive(self, call: object) -> _Attempt:
        if self._pending:
            self.flush_audit()
        try:
            return self._receive(call)
        except Exception:  # an object whose attributes raise: a call of nothing
            return self._receive(None)

    def _pipeline(self, call: ToolCall, attempt: _Attempt) -> ToolResult | _Running:
        """Every step up to the handler: a refusal's result, or the call
        with its RUNNING row committed."""
        try:
            if not isinstance(call, ToolCall):
                raise _bad_request(
                    f"expected a ToolCall, got {type(call).__name__}", "request.type"
                )
            self._check_fields(call, attempt)
            arguments = self._parse(call.arguments)
            attempt.arguments = arguments
            spec = self._lookup(attempt.tool_name)
            attempt.spec = spec
            self._admit(call, spec, attempt)
            return self._start(call, spec, attempt)
        except _Refusal as refusal:
            return self._refuse(attempt, refusal)
        except Exception as exc:  # a bug of ours must still answer, and be recorded
            return self._refuse(
                attempt,
                _Refusal(
                    ErrorCode.EXECUTION_ERROR,
                    f"internal error in the executor: {type(exc).__name__}",
                    "runtime.internal",
                    CallState.FAILED,
                ),
            )

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(call, result, stored_data, approval)`` after every
        ``execute`` or ``aexecute``; ``stored_data`` is the result's data as it may be stored:
        redacted from the whole output, then cut like the result (what a
        recorder must keep); ``approval`` is the ``Approval`` of the hook
        that let the call through (None when no hook answered ``allow``, or
        the call was refused before the hooks). Returns the function that
        removes it. A listener that raises is reported as a RuntimeWarning."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def watch_files(self, watcher: FileWatcher) -> Callable[[], None]:
        """Call ``watcher(call_id, paths)`` once a handler has run, with every
        workspace path it asked ``ctx.workspace`` about (read, listed, checked,
        written or deleted; as the handler spelt them, in order, refused ones
        included). This is how a recorder knows which files a call needs,
        declared or not. Returns the function that removes it. A watcher
        that raises is reported as a RuntimeWarning."""
        self._file_watchers.append(watcher)
        return lambda: self._file_watchers.remove(watcher)

    def _tell_watchers(self, call_id: str, paths: Sequence[str]) -> None:
        for watcher in list(self._file_watchers):
            try:
                watcher(call_id, paths)
            except Exception as exc:
                _warn(f"file watcher raised {type(exc).__name__}: {_text(exc)}")

    def _notify(self, call: ToolCall, result: ToolResult, attempt: _Attempt) -> None:
        spec = attempt.spec
        if attempt.output is not None and spec is not None and result.ok:
            stored, _ = _truncate(
                self._redacted_output(attempt),
                json.dumps(self._redacted_output(attempt), ensure_ascii=False, sort_keys=True),
                spec.result_limit,
            )
        else:  # failures carry no data; replays carry the stored, redacted data
            stored = self._redactor(spec).redact(result.data)
        for listener in list(self._listeners):
            try:
                listener(call, result, stored, attempt.approval)
            except Exception as exc:
                _warn(f"execute listener raised {type(exc).__name__}: {_text(exc)}")

    def _receive(self, call: object) -> _Attempt:
        def text(name: str, fallback: str) -> str:
            value = plain(getattr(call, name, None))
            if not isinstance(value, str) or not value:
                return fallback
            # Ids come from the model too: a token there must not be stored.
            # Redacted whole, before it is escaped or cut.
            return _storable(self.redactor.redact_text(value))[:MAX_ID_LENGTH]

        call_id = text("call_id", "")
        if not call_id:
            call_id = f"tg-{uuid.uuid4().hex}"
        key = plain(getattr(call, "idempotency_key", None))
        metadata = getattr(call, "metadata", None)
        session = plain(getattr(call, "session_id", None))
        return _Attempt(
            call_id=call_id,
            tool_name=text("tool_name", "<invalid>"),
            actor=text("actor", "<invalid>"),
            session_id=text("session_id", "<invalid>"),
            idempotency_key=_storable(self.redactor.redact_text(key))[:MAX_ID_LENGTH]
            if isinstance(key, str)
            else None,
            metadata=metadata if isinstance(metadata, Mapping) else {},
            started_at=self._now(),
            t0=time.perf_counter(),
            raw_session_id=session if isinstance(session, str) else "",
            raw_idempotency_key=key if isinstance(key, str) else None,
        )

    def _check_fields(self, call: ToolCall, attempt: _Attempt) -> None:
        for name in ("call_id", "tool_name", "actor", "session_id"):
            value = plain(getattr(call, name))
            if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
                raise _bad_request(
                    f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters",
                    "request.fields",
                )
        key = plain(call.idempotency_key)
        if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_ID_LENGTH):
            raise _bad_request(
                "idempotency_key must be null or a non-empty string of at most "
                f"{MAX_ID_LENGTH} characters",
                "request.fields",
            )
        if not isinstance(call.metadata, Mapping):
            raise _bad_request("metadata must be an object", "request.fields")

    def _parse(self, raw: object) -> dict[str, Any]:
        if isinstance(raw, (str, bytes, bytearray)):
            try:
                raw = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise _bad_request(
                    f"arguments are not valid JSON: {_first_line(exc)}", "request.parse"
                ) from None
        if not isinstance(raw, Mapping):
            raise _bad_request(
                f"arguments must be a JSON object, got {_json_type(raw)}", "request.parse"
            )
        copied: dict[str, Any] = {}
        try:
            problem = plain_json_problem(raw)
            if not problem:
                copied = copy_json(raw)
        except Exception as exc:  # a mapping that cannot even be read
            problem = f"cannot be read ({type(exc).__name__})"
        if problem:
            raise _bad_request(f"arguments must be plain JSON data: {problem}", "request.parse")
        return copied

    def _lookup(self, tool_name: str) -> ToolSpec:
        spec = self.registry.get(tool_name)
        if spec is not None:
            return spec
        visible = [name for name in self.registry.names() if self.capabilities.permits_tool(name)]
        close = difflib.get_close_matches(tool_name, visible, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise _Refusal(
            ErrorCode.TOOL_NOT_FOUND,
            f"unknown tool: {tool_name}{hint}",
            "registry.lookup",
            CallState.FAILED,
        )

    def _admit(self, call: ToolCall, spec: ToolSpec, attempt: _Attempt) -> None:
        """Schema, policy and PreToolUse hooks; a rewrite goes through schema
        and policy again. Refuses with ``_Refusal``."""
        arguments = attempt.arguments
        assert arguments is not None
        self._validate_and_authorize(spec, arguments, attempt)
        approval: Approval | None = None
        for hook in self.hooks:
            if not isinstance(hook, PreToolUse):
                continue
            rule = f"hook.{getattr(hook, 'name', type(hook).__name__)}"
            # A copy: a hook changing it in place would skip schema and policy.
            event = PreToolUseEvent(
                call=call, spec=spec, arguments=MappingProxyType(copy_json(arguments))
            )
            try:
                answer = hook.pre_tool_use(event)
                if not isinstance(answer, HookDecision):
                    raise TypeError(f"returned {type(answer).__name__}, not a HookDecision")
            except Exception as exc:  # fail closed
                raise _Refusal(
                    ErrorCode.BLOCKED,
                    f"{rule} failed: {type(exc).__name__}: {_text(exc)}",
                    rule,
                    CallState.DENIED,
                ) from None
            if answer.action == "deny":
                raise _Refusal(
                    ErrorCode.BLOCKED,
                    answer.reason or f"{rule} denied the call",
                    rule,
                    CallState.DENIED,
                )
            if answer.action == "ask":
                raise _Refusal(
                    ErrorCode.APPROVAL_REQUIRED,
                    answer.reason or f"{rule} asks for approval",
                    rule,
                    CallState.DENIED,
                )
            if answer.arguments is not None:
                try:
                    arguments = self._parse(answer.arguments)
                except _Refusal as refusal:
                    raise _Refusal(
                        refusal.code, f"{rule} rewrite: {refusal.message}", rule, CallState.DENIED
                    ) from None
                attempt.arguments = arguments
                self._validate_and_authorize(spec, arguments, attempt, via=f"{rule}.rewrite")
                approval = None  # an earlier approval was for other arguments
            if answer.action == "allow":
                reason = self._redactor(spec).redact_message(
                    answer.reason or "approved", strings_in(arguments)
                )
                approval = Approval(rule, reason)
        if spec.risk.needs_approval and approval is None:
            raise _Refusal(
                ErrorCode.APPROVAL_REQUIRED,
                f"tool {spec.name} has risk {spec.risk} and needs an approval "
                "(a PreToolUse hook or an Approver answering allow)",
                "policy.approval",
                CallState.DENIED,
            )
        if approval is not None:
            attempt.rule, attempt.reason = approval.rule, approval.reason
        attempt.approval = approval
        attempt.decision = "allow"

    def _validate_and_authorize(
        self, spec: ToolSpec, arguments: Mapping[str, Any], attempt: _Attempt, via: str = ""
    ) -> None:
        errors = spec.input_validator.errors(arguments, show_key=self._redactor(spec).redact_text)
        if errors:
            raise _Refusal(
                ErrorCode.INVALID_ARGUMENT,
                "; ".join(errors),
                via or "schema.input",
                CallState.FAILED,
                redacted=True,
            )
        decision: PolicyDecision = authorize(
            spec,
            arguments,
            self.capabilities,
            self.workspace,
            self.variables,
            redact=self._redactor(spec).redact_text,
        )
        if not decision.allowed:
            raise _Refusal(decision.code, decision.reason, via or decision.rule, CallState.DENIED)
        if attempt.policy is not None:  # judged again after a hook's rewrite
            attempt.policy.close()
        attempt.policy = decision
        attempt.rule, attempt.reason = decision.rule, decision.reason

    def _start(self, call: ToolCall, spec: ToolSpec, attempt: _Attempt) -> ToolResult | _Running:
        """The idempotency claim and the RUNNING row, in one transaction."""
        arguments = attempt.arguments
        assert arguments is not None
        claim_key = self._claim_key(spec, attempt)
        record = self._record(attempt, CallState.RUNNING, None, "", "")
        try:
            audit_id, claim = self.audit.start(record, claim_key=claim_key)
        except AuditUnavailable as exc:
            return self._audit_down(attempt, exc)
        if audit_id is None:
            assert claim is not None
            return self._answer_claim(attempt, claim)
        attempt.idempotency_outcome = "claimed" if claim_key else None
        return _Running(call, spec, arguments, attempt, audit_id, claim_key)

    def _complete(self, running: _Running, outcome: ToolResult | Exception) -> ToolResult:
        """After the handler: the row finished, then the PostToolUse hooks."""
        result = self._settle(running, outcome)
        self._observe(running.call, running.spec, running.arguments, result)
        return result

    def _settle(self, running: _Running, outcome: ToolResult | Exception) -> ToolResult:
        """Finish the RUNNING row with the handler's result (an exception: a
        bug of ours after the handler may have run) and return the result."""
        spec, attempt, claim_key = running.spec, running.attempt, running.claim_key
        stored: dict[str, Any] | None = None
        if isinstance(outcome, ToolResult) and claim_key:
            try:
                stored = _stored_outcome(outcome, self._redacted_output(attempt), spec.result_limit)
            except Exception as exc:
                outcome = exc
        if isinstance(outcome, Exception):
            attempt.output = attempt.redacted_output = None
            outcome = self._failure(
                attempt,
                ErrorCode.EXECUTION_ERROR,
                f"internal error in the executor: {type(outcome).__name__}",
                CallState.FAILED,
            )
            stored = _stored_outcome(outcome, None, spec.result_limit) if claim_key else None
        # The RUNNING row is always finished, so neither a second row nor a
        # key stuck at DUPLICATE_CALL is left behind.
        self._finish(running.audit_id, attempt, outcome, claim_key, stored)
        return outcome

    def _claim_key(self, spec: ToolSpec, attempt: _Attempt) -> str | None:
        # Scoped on the raw session and key: their redacted forms collide
        # (two JWT session ids are both <redacted:jwt>).
        key = attempt.raw_idempotency_key
        if key is None:
            return None
        if self.idempotency_scope is not None:
            return scope_client_key(key, spec.name, self.idempotency_scope)
        return scope_client_key(key, spec.name, attempt.raw_session_id, scope_kind="session")

    def _answer_claim(self, attempt: _Attempt, claim: Claim) -> ToolResult:
        attempt.idempotency_outcome = claim.outcome.value.lower()
        attempt.replay_of = claim.original_call_id
        if claim.outcome is ClaimOutcome.RUNNING:
            return self._refuse(
                attempt,
                _Refusal(
                    ErrorCode.DUPLICATE_CALL,
                    f"a call with this idempotency key ({claim.original_call_id}) is still "
                    "running; "
                    "retry later to get its outcome",
                    "idempotency.running",
                    CallState.DENIED,
                ),
            )
        if claim.outcome is ClaimOutcome.CONFLICT:
            return self._refuse(
                attempt,
                _Refusal(
                    ErrorCode.IDEMPOTENCY_CONFLICT,
                    f"idempotency key already used by call {claim.original_call_id} "
                    "with other arguments",
                    "idempotency.conflict",
                    CallState.DENIED,
                ),
            )
        stored = claim.stored_result or {}
        original_ok = bool(stored.get("ok"))
        original_code = str(stored.get("code", "EXECUTION_ERROR"))
        result = ToolResult(
            call_id=attempt.call_id,
            tool_name=attempt.tool_name,
            ok=original_ok,
            code=ErrorCode.IDEMPOTENT_REPLAY if original_ok else _code(original_code),
            message=(
                f"replayed the outcome of call {claim.original_call_id}: "
                f"{stored.get('message', '')}"
            ),
            data=stored.get("data"),
            retryable=False,
            duration_ms=self._elapsed(attempt),
            state=CallState.SUCCEEDED if original_ok else CallState.FAILED,
            truncated=bool(stored.get("truncated", False)),
            total_size=stored.get("total_size"),
        )
        attempt.rule, attempt.reason = "idempotency.replay", f"replay of {claim.original_call_id}"
        self._write_row(attempt, result)
        return result

    def _handler_run(self, running: _Running) -> _HandlerRun:
        """The handler's context: a journaled workspace that refuses changes
        once the call is cancelled."""
        spec, attempt = running.spec, running.attempt
        call_id = attempt.call_id
        # In process mode the handler's journal entries are made in the child:
        # each is sent before its change, so a child killed at its deadline
        # still leaves what it changed to roll back.
        child_log = ChildLog() if self._isolation_mode == "process" else None

        cancelled = threading.Event()

        def on_change(path: str, previous: Previous) -> None:
            if cancelled.is_set():
                raise CallCancelled(
                    f"call {call_id} timed out: its handler may not change {show_path(path)}",
                    path,
                )
            if child_log is not None:
                child_log.send((path, previous))
            else:
                self.journal.record(call_id, path, previous)

        # Paths the handler asks about, for watch_files (travelling back from
        # a child process like the journal entries).
        accessed: list[str] | None = [] if self._file_watchers else None

        ctx = ToolContext(
            call_id=call_id,
            session_id=attempt.session_id,
            actor=attempt.actor,
            workspace=self.workspace.with_journal(
                on_change,
                allow_hardlinks=spec.allow_hardlinks or None,
                cancelled=cancelled,
                keep_at_most=self.journal.keep_at_most,
                # The handler reaches what the policy judged: one resolution.
                locations=attempt.policy.locations if attempt.policy is not None else (),
                on_access=None if accessed is None else accessed.append,
            ),
            capabilities=self.capabilities,
            variables=self.variables,
            metadata=attempt.metadata,
            cancelled=cancelled,
        )
        return _HandlerRun(
            spec.handler, ctx, dict(running.arguments), accessed, child_log, attempt.policy
        )

    def _invoke(self, running: _Running) -> ToolResult:
        """Run the handler through the isolation, blocking until it ends or
        its deadline passes."""
        handler = self._handler_run(running)
        try:
            outcome: _Outcome = self._isolation.run(
                handler.run, self._deadline(running.spec), running.attempt.call_id
            )
        except HandlerTimeout as exc:
            handler.cancel()
            return self._timed_out(running, handler, exc)
        except Exception as exc:  # the process died, or its outcome could not travel back
            outcome = (False, exc, handler.accessed)
        finally:
            handler.collect_journal(self.journal, running.attempt.call_id)
        return self._outcome(running, outcome)

    async def _ainvoke(self, running: _Running) -> ToolResult:
        """``_invoke`` without blocking the loop: an async handler as a task
        on it, anything else through the isolation in an executor thread."""
        import asyncio

        handler = self._handler_run(running)
        timeout, call_id = self._deadline(running.spec), running.attempt.call_id
        try:
            if running.spec.is_async and isinstance(self._isolation, ThreadIsolation):
                outcome: _Outcome = await self._isolation.run_async(
                    handler.arun, timeout, call_id, handler.cancel
                )
            else:
                outcome = await asyncio.to_thread(
                    self._isolation.run, handler.run, timeout, call_id
                )
        except HandlerTimeout as exc:
            handler.cancel()
            return self._timed_out(running, handler, exc)
        except asyncio.CancelledError:  # the caller's task: later writes are refused
            handler.cancel()
            if self._isolation_mode != "process":  # the handler runs on: it closes them
                handler.overrun(running.attempt)
            raise
        except Exception as exc:  # the process died, or its outcome could not travel back
            outcome = (False, exc, handler.accessed)
        finally:
            handler.collect_journal(self.journal, running.attempt.call_id)
        return self._outcome(running, outcome)

    def _deadline(self, spec: ToolSpec) -> float:
        return self.timeouts.get(spec.name, spec.timeout_seconds)

    def _timed_out(
        self, running: _Running, handler: _HandlerRun, exc: HandlerTimeout
    ) -> ToolResult:
        if handler.accessed is not None:  # a copy: the late handler may still add to it
            self._tell_watchers(running.attempt.call_id, list(handler.accessed))
        if self._isolation_mode != "process":  # a killed child uses no location any more
            handler.overrun(running.attempt)
        return self._failure(running.attempt, ErrorCode.TIMEOUT, str(exc), CallState.TIMED_OUT)

    def _outcome(self, running: _Running, outcome: _Outcome) -> ToolResult:
        """The result of a handler run that ended."""
        spec, attempt = running.spec, running.attempt
        finished, value, paths = outcome
        if paths is not None:
            self._tell_watchers(attempt.call_id, paths)
        if finished:
            return self._check_output(spec, value, attempt)
        redact = self._redactor(spec).redact_text
        if isinstance(value, SandboxError):
            return self._failure(
                attempt, value.code, self._scrub(_describe(value, redact)), CallState.FAILED
            )
        detail = self._scrub(_describe(value, redact))
        message = f"{type(value).__name__}: {detail}" if detail else type(value).__name__
        return self._failure(
            attempt, ErrorCode.EXECUTION_ERROR, f"handler raised {message}", CallState.FAILED
        )

    def _check_output(self, spec: ToolSpec, data: Any, attempt: _Attempt) -> ToolResult:
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
            return self._failure(
                attempt,
                ErrorCode.OUTPUT_INVALID,
                f"output is not JSON data: {_first_line(exc)}",
                CallState.FAILED,
            )
        if spec.output_validator is not None:
            errors = spec.output_validator.errors(data, show_key=self._redactor(spec).redact_text)
            if errors:
                return self._failure(
                    attempt,
                    ErrorCode.OUTPUT_INVALID,
                    "; ".join(errors),
                    CallState.FAILED,
                    redacted=True,
                )
        attempt.output = data
        shown, total = _truncate(data, text, spec.result_limit)
        return ToolResult(
            call_id=attempt.call_id,
            tool_name=attempt.tool_name,
            ok=True,
            code=ErrorCode.OK,
            message="ok"
            if total is None
            else f"ok; output truncated to {spec.result_limit} of {total} characters",
            data=shown,
            duration_ms=self._elapsed(attempt),
            state=CallState.SUCCEEDED,
            truncated=total is not None,
            total_size=total,
        )

    def _observe(
        self, call: ToolCall, spec: ToolSpec, arguments: Mapping[str, Any], result: ToolResult
    ) -> None:
        for hook in self.hooks:
            if isinstance(hook, PostToolUse):
                # Each observer gets copies: it cannot change what the caller,
                # the audit row or a later replay of the key sees.
                event = PostToolUseEvent(
                    call=call,
                    spec=spec,
                    arguments=MappingProxyType(copy_json(arguments)),
                    result=replace(result, data=copy_json(result.data)),
                )
                try:
                    hook.post_tool_use(event)
                except Exception as exc:  # observers never change the outcome
                    _warn(
                        f"PostToolUse hook {getattr(hook, 'name', 'hook')!r} raised "
                        f"{type(exc).__name__}: {_text(exc)}"
                    )

    # -- results and audit rows ---------------------------------------------

    def _failure(
        self,
        attempt: _Attempt,
        code: ErrorCode,
        message: str,
        state: CallState,
        *,
        redacted: bool = False,
    ) -> ToolResult:
        """A failed result. Its message is what the model and the audit row
        get: redacted (before it is bounded: a cut secret would no longer
        match its pattern) unless ``redacted`` says it already is."""
        if not redacted:
            message = self._redactor(attempt.spec).redact_message(
                message, strings_in(attempt.arguments)
            )
        message = _storable(message)
        return ToolResult(
            call_id=attempt.call_id,
            tool_name=attempt.tool_name,
            ok=False,
            code=code,
            message=_bounded(message),
            retryable=code.retryable,
            duration_ms=self._elapsed(attempt),
            state=state,
        )

    def _refuse(self, attempt: _Attempt, refusal: _Refusal) -> ToolResult:
        if refusal.state is CallState.DENIED:
            attempt.decision = "ask" if refusal.code is ErrorCode.APPROVAL_REQUIRED else "deny"
        result = self._failure(
            attempt, refusal.code, refusal.message, refusal.state, redacted=refusal.redacted
        )
        attempt.rule, attempt.reason = refusal.rule, result.message
        self._write_row(attempt, result)
        return result

    def _audit_down(self, attempt: _Attempt, exc: AuditUnavailable) -> ToolResult:
        # The handler never runs; the row of this refusal is queued like any
        # other that could not be written, so it is not lost either.
        return self._refuse(
            attempt,
            _Refusal(
                ErrorCode.AUDIT_UNAVAILABLE,
                f"the audit log could not record the call, so it did not run: {_text(exc)}",
                "audit.unavailable",
                CallState.DENIED,
            ),
        )

    def _write_row(self, attempt: _Attempt, result: ToolResult) -> None:
        record = self._record(
            attempt,
            result.state,
            result.code,
            self._preview(attempt, result),
            "" if result.ok else result.message,
            finished_at=self._now(),
            duration_ms=result.duration_ms,
        )
        self._try_or_queue(lambda: self.audit.record(record))

    def _finish(
        self,
        audit_id: int,
        attempt: _Attempt,
        result: ToolResult,
        claim_key: str | None,
        stored: dict[str, Any] | None,
    ) -> None:
        preview = self._preview(attempt, result)
        finished_at = self._now()
        error = "" if result.ok else result.message  # redacted when the result was made

        def finish(preview: str, error: str, stored: dict[str, Any] | None) -> None:
            self.audit.finish(
                audit_id,
                state=result.state,
                result_code=result.code,
                result_preview=preview,
                error_message=error,
                finished_at=finished_at,
                duration_ms=result.duration_ms,
                claim_key=claim_key,
                stored_result=stored,
            )

        try:
            self._try_or_queue(lambda: finish(preview, error, stored))
        except Exception as exc:
            # The store refused this row's content: the same row is still
            # finished and the key settled, without the preview and outcome
            # (never a second row, never a key left running).
            dropped = f"the audit store refused the outcome ({type(exc).__name__}); not kept"
            bare = {
                "ok": result.ok,
                "code": result.code.value,
                "message": dropped,
                "data": None,
                "truncated": False,
                "total_size": None,
            }
            try:
                self._try_or_queue(lambda: finish("", dropped, bare if claim_key else None))
            except Exception as again:
                _warn(f"audit row {audit_id} could not be finished: {type(again).__name__}")

    def _try_or_queue(self, write: Callable[[], object]) -> None:
        try:
            write()
        except AuditUnavailable as exc:
            with self._pending_lock:
                if len(self._pending) < PENDING_LIMIT:
                    self._pending.append(write)
                    kept = "queued for retry"
                else:
                    kept = "DROPPED: the retry queue is full"
            _warn(f"audit write failed ({_text(exc)}); {kept}")

    def flush_audit(self) -> int:
        """Retry queued audit writes; returns how many are still pending."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        failed = []
        for write in pending:
            try:
                write()
            except AuditUnavailable:
                failed.append(write)
        with self._pending_lock:
            self._pending[:0] = failed
            return len(self._pending)

    def _record(
        self,
        attempt: _Attempt,
        state: CallState,
        code: ErrorCode | None,
        preview: str,
        error: str,
        *,
        finished_at: str | None = None,
        duration_ms: int | None = None,
    ) -> AuditRecord:
        redactor = self._redactor(attempt.spec)
        if attempt.arguments is not None:
            shown = canonical_json(redactor.redact(attempt.arguments))
            digest = json_hash(attempt.arguments)
        else:
            shown, digest = "null", ""
        if len(shown) > ARGUMENTS_LIMIT:
            shown = shown[:ARGUMENTS_LIMIT] + f"...(truncated, {len(shown)} characters)"
        return AuditRecord(
            call_id=attempt.call_id,
            session_id=attempt.session_id,
            actor=attempt.actor,
            tool_name=attempt.tool_name,
            risk=str(attempt.spec.risk) if attempt.spec else "",
            arguments_json=_storable(shown),
            arguments_hash=digest,
            idempotency_key=attempt.idempotency_key,
            decision=attempt.decision,
            rule=attempt.rule,
            reason=_storable(attempt.reason),  # our own text, or redacted by _refuse
            state=state,
            result_code=code,
            result_preview=_storable(preview),
            error_message=_storable(error),  # a result's message: redacted by _failure
            started_at=attempt.started_at,
            finished_at=finished_at,
            duration_ms=duration_ms,
            replay_of=attempt.replay_of,
            idempotency_outcome=attempt.idempotency_outcome,
        )

    def _preview(self, attempt: _Attempt, result: ToolResult) -> str:
        if attempt.output is not None:
            redacted = self._redacted_output(attempt)
        elif result.data is not None:  # a replayed outcome: stored redacted
            redacted = self._redactor(attempt.spec).redact(result.data)
        else:
            return ""
        text = json.dumps(redacted, ensure_ascii=False, sort_keys=True, default=str)
        return text[:PREVIEW_LIMIT]

    def _redacted_output(self, attempt: _Attempt) -> Any:
        """The handler's whole output, redacted once per call."""
        if attempt.redacted_output is None:
            attempt.redacted_output = self._redactor(attempt.spec).redact(attempt.output)
        return attempt.redacted_output

    def _redactor(self, spec: ToolSpec | None) -> Redactor:
        return spec.redactor if spec is not None and spec.redactor is not None else self.redactor

    @functools.cached_property
    def _host_paths(self) -> tuple[str, ...]:
        """The workspace root as given and resolved, longest first (made on
        first use: most runtimes never need it)."""
        root = self.workspace.root
        return tuple(sorted({root, os.path.realpath(root)}, key=len, reverse=True))

    def _scrub(self, text: str) -> str:
        """No absolute host path of the workspace in anything a model sees."""
        for host_path in self._host_paths:
            text = text.replace(host_path + os.sep, "").replace(host_path, ".")
        return text

    def _now(self) -> str:
        return self._clock().astimezone(timezone.utc).isoformat(timespec="milliseconds")

    @staticmethod
    def _elapsed(attempt: _Attempt) -> int:
        return max(0, int((time.perf_counter() - attempt.t0) * 1000))

    # -- after the fact ------------------------------------------------------

    def rollback(self, call_id: str, *, actor: str = "toolguard") -> ToolResult:
        """Restore every file the call changed to what it held before the
        call, and record the rollback as its own audit row (tool
        ``toolguard.rollback``, ``replay_of`` = the call). INVALID_REQUEST
        when the runtime kept no changes for that call."""
        attempt = self._receive(
            ToolCall(call_id=f"rollback-{call_id}", tool_name="toolguard.rollback", actor=actor)
        )
        attempt.replay_of = call_id
        try:
            changes = self.journal.rollback(call_id, self.workspace)
        except KeyError:
            return self._refuse(
                attempt,
                _Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"no changes recorded for call {call_id}",
                    "runtime.rollback",
                    CallState.FAILED,
                ),
            )
        except (SandboxError, OSError) as exc:
            return self._refuse(
                attempt,
                _Refusal(
                    exc.code if isinstance(exc, LimitExceeded) else ErrorCode.EXECUTION_ERROR,
                    f"rollback failed: {self._scrub(_describe(exc, self.redactor.redact_text))}",
                    "runtime.rollback",
                    CallState.FAILED,
                ),
            )
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
            duration_ms=self._elapsed(attempt),
            state=CallState.SUCCEEDED,
        )
        self._write_row(attempt, result)
        return result

    def orphaned_handlers(self) -> list[str]:
        """Call ids whose handler overran its deadline and is still running
        (thread mode)."""
        orphans = getattr(self._isolation, "orphans", None)
        return list(orphans()) if orphans else []

    def close(self, join_timeout: float = 5.0) -> list[str]:
        """Wait up to ``join_timeout`` s for handlers that overran their
        deadline, retry queued audit writes, and return what is still wrong
        (call ids of handlers still alive, audit writes still pending). Warns
        with RuntimeWarning when that list is not empty."""
        problems = [
            f"handler still running: {name}" for name in self._isolation.close(join_timeout)
        ]
        pending = self.flush_audit()
        if pending:
            problems.append(f"{pending} audit write(s) could not be stored")
        if problems:
            _warn("; ".join(problems))
        for owned in self._owned:
            owned.close()
        self._owned.clear()
        return problems

    def __enter__(self) -> ToolRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _truncate(data: Any, text: str, limit: int) -> tuple[Any, int | None]:
    """``data`` as it goes to the model, and the full size when it was cut:
    over ``limit`` characters of JSON, the data becomes its first ``limit``
    characters of JSON text."""
    if len(text) <= limit:
        return data, None
    return text[:limit], len(text)


def _stored_outcome(result: ToolResult, redacted_output: Any, limit: int) -> dict[str, Any]:
    """What later calls with the same key get: the result with its data
    redacted from the whole output, then cut as the original was. (Messages
    are redacted when a result is made.)"""
    data, total = result.data, result.total_size
    if result.ok:
        text = json.dumps(redacted_output, ensure_ascii=False, sort_keys=True)
        data, total = _truncate(redacted_output, text, limit)
    return {
        "ok": result.ok,
        "code": result.code.value,
        "message": result.message,
        "data": data,
        "truncated": total is not None,
        "total_size": total,
    }


def _code(value: str) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.EXECUTION_ERROR


def _bounded(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


TIMEOUT_MAX = threading.TIMEOUT_MAX


def _valid_timeout(seconds: float) -> bool:
    return isinstance(seconds, (int, float)) and 0 < seconds <= TIMEOUT_MAX


def _text(exc: BaseException) -> str:
    """``str(exc)``, or its type's name when that raises."""
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__


def _release(attempt: _Attempt) -> None:
    """Close the locations the policy opened for the call, unless a handler
    that overran its deadline still holds them (it closes them itself)."""
    if attempt.policy is not None:
        attempt.policy.close()


def _describe(exc: BaseException, redact: Callable[[str], str]) -> str:
    """``exc``'s text with the values it quotes (a sandbox path, an OS
    error's file names) redacted before they were quoted: ``repr`` escapes a
    tab to ``\\t``, after which a Bearer pattern no longer matches."""
    if isinstance(exc, SandboxError):
        return exc.describe(redact)
    text = _text(exc)
    if isinstance(exc, OSError):
        for name in (exc.filename, exc.filename2):
            if isinstance(name, str) and repr(name) in text:
                text = text.replace(repr(name), repr(redact(name)))
    return text


def _warn(message: str) -> None:
    """A RuntimeWarning that never raises: under ``-W error`` a warning is
    an exception, and these are said on paths that must not raise."""
    with contextlib.suppress(Exception):
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def _json_type(value: object) -> str:
    names = {
        list: "an array",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__
