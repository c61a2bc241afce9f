"""The executor as a gate in front of a tool another program runs.

An agent framework (the OpenAI Agents SDK, Claude Code) keeps running its
own tools; we decide each call and keep the audit log. ``admit`` is
``ToolRuntime.admit``: the whole pipeline up to the handler, so a refusal
gets the same code, message and audit row as ``execute`` gives, and an
admitted call leaves its RUNNING row. ``finish_admitted`` finishes that
row once the other program reports the outcome, possibly from another
process (a Claude Code PostToolUse hook): it finds the row by call id in
the audit store (``finish_admitted_row`` when the caller has the row). The
row is finished through the runtime's audit log
(``ToolRuntime.finish_reported``), as every write of the runtime is: a
store that is down gets the write queued and retried, never lost. Given
the call as it was admitted, it also tells the runtime's listeners the
outcome (``ToolRuntime.tell_listeners``), as
``execute`` does: a ``record_session`` around a guarded agent records the
calls the guard admitted, not only those it refused.

A call may carry an idempotency key (``ToolCall.idempotency_key``): ``admit``
claims it as ``execute`` does, so a call whose key already has an outcome
is answered that outcome (``IDEMPOTENT_REPLAY``, or the stored failure)
and must not run, and one whose key is still running is refused
(DUPLICATE_CALL); ``finish_admitted`` given the call stores the outcome
under the key. The key is scoped as ``execute`` scopes it (the runtime's
``idempotency_scope``, else the session).

The audit row keeps a call's ids as ``stored_id`` makes them (a token in
an id redacted, a lone surrogate escaped, cut to ``MAX_ID_LENGTH``): the
row of a call is looked up by that form, never by the raw id.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ...audit.row import AuditRecord
from ...contract import CallState, ErrorCode, ToolCall, ToolResult
from ...hooks import Approval
from ...idempotency import scope_client_key
from ...runtime import ToolRuntime
from ...runtime.admission import storable_id
from ...runtime.limits import MESSAGE_LIMIT


def stored_id(runtime: ToolRuntime, text: str) -> str:
    """An id (a call's, a session's) as ``runtime`` stores it in the audit
    row: redacted whole, a lone surrogate escaped, cut to ``MAX_ID_LENGTH``.
    Idempotent. Ids come from a model or a transcript: a token there never
    reaches a row or a cassette, and the row of a call is found again."""
    return storable_id(runtime.redactor, text)


def admit(runtime: ToolRuntime, call: ToolCall) -> ToolResult | None:
    """None when ``call`` may run (its RUNNING row is committed, its
    idempotency key claimed); otherwise the answer it gets instead of
    running: a refusal, or the outcome its key already holds (``ok`` for
    an ``IDEMPOTENT_REPLAY``, with the stored data)."""
    return runtime.admit(call)


def finish_admitted(
    runtime: ToolRuntime,
    call_id: str,
    *,
    ok: bool,
    data: Any = None,
    message: str = "",
    call: ToolCall | None = None,
) -> bool:
    """Finish the RUNNING row ``admit`` left for ``call_id``: SUCCEEDED
    (OK) with a redacted preview of ``data``, or FAILED
    (EXECUTION_ERROR) with the redacted ``message``. With ``call`` (the
    call as admitted), the outcome is stored under its idempotency key and
    the runtime's listeners hear it. False when there is no such RUNNING
    row (never admitted, or finished already)."""
    row = runtime.audit.get(stored_id(runtime, call_id))
    if row is None:
        return False
    return finish_admitted_row(
        runtime,
        row,
        state=CallState.SUCCEEDED if ok else CallState.FAILED,
        code=ErrorCode.OK if ok else ErrorCode.EXECUTION_ERROR,
        data=data,
        message=message,
        call=call,
    )


def finish_admitted_row(
    runtime: ToolRuntime,
    row: AuditRecord,
    *,
    state: CallState,
    code: ErrorCode,
    data: Any = None,
    message: str = "",
    call: ToolCall | None = None,
) -> bool:
    """Finish ``row``, a RUNNING row ``admit`` left, in ``state`` with
    ``code``: a redacted preview of ``data`` and, unless the code is OK,
    the redacted ``message``. With ``call`` (the call as admitted), the
    outcome is stored under its idempotency key and the runtime's
    listeners hear it as a ``ToolResult``. False when the row is not
    RUNNING (any more)."""
    if row.state is not CallState.RUNNING or row.audit_id is None:
        return False
    now = datetime.now(timezone.utc)
    result = _result(runtime, row, state, code, data, message, now)
    claim = _claim_key(runtime, call) if call is not None else None
    if not runtime.finish_reported(row, result, data, claim):
        return False  # finished meanwhile by another process, or by recovery
    if call is not None:
        approval = (
            Approval(row.rule, row.reason)
            if row.decision == "allow" and row.rule.startswith("hook.")
            else None
        )
        runtime.tell_listeners(call, result, result.data, approval)
    return True


def _result(
    runtime: ToolRuntime,
    row: AuditRecord,
    state: CallState,
    code: ErrorCode,
    data: Any,
    message: str,
    now: datetime,
) -> ToolResult:
    """The outcome another program reported, as ``execute`` would answer
    it: a failure's message redacted and no data; a success's data
    redacted with the tool's redactor and cut to its result limit (what
    listeners and a later call with the same key get)."""
    ok = code is ErrorCode.OK
    spec = runtime.registry.get(row.tool_name)
    shown, total = None, None
    if ok and data is not None:
        redactor = spec.redactor if spec is not None and spec.redactor is not None else None
        shown = (redactor or runtime.redactor).redact(data)
        text = json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str)
        limit = spec.result_limit if spec is not None else len(text)
        if len(text) > limit:
            shown, total = text[:limit], len(text)
    return ToolResult(
        call_id=row.call_id,  # as stored: the recorder finds the row again by it
        tool_name=row.tool_name,
        ok=ok,
        code=code,
        message="" if ok else runtime.redactor.redact_text(message)[:MESSAGE_LIMIT],
        data=shown,
        retryable=code.retryable,
        duration_ms=_since(row.started_at, now) or 0,
        state=state,
        truncated=total is not None,
        total_size=total,
    )


def _claim_key(runtime: ToolRuntime, call: ToolCall) -> str | None:
    """The stored form of ``call``'s idempotency key, scoped as ``execute``
    scopes it (on the raw key and session, never their redacted forms)."""
    if call.idempotency_key is None:
        return None
    scope = runtime.idempotency_scope
    if scope is not None:
        return scope_client_key(call.idempotency_key, call.tool_name, scope)
    return scope_client_key(
        call.idempotency_key, call.tool_name, call.session_id, scope_kind="session"
    )


def _since(started_at: str, now: datetime) -> int | None:
    try:
        started = datetime.fromisoformat(started_at)
    except ValueError:
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return max(0, int((now - started).total_seconds() * 1000))
