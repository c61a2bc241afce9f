"""The executor as a gate in front of a tool another program runs.

An agent framework (the OpenAI Agents SDK, Claude Code) keeps running its
own tools; we decide each call and keep the audit log. ``admit`` is
``ToolRuntime.admit``: the whole pipeline up to the handler, so a refusal
gets the same code, message and audit row as ``execute`` gives, and an
admitted call leaves its RUNNING row. ``finish_admitted`` finishes that
row once the other program reports the outcome, possibly from another
process (a Claude Code PostToolUse hook): it finds the row by call id in
the audit store. Given the call as it was admitted, it also tells the
runtime's listeners the outcome (``ToolRuntime.tell_listeners``), as
``execute`` does: a ``record_session`` around a guarded agent records the
calls the guard admitted, not only those it refused. An idempotency key is
not supported on this path (the other program runs the tool, so we cannot
replay its outcome).

The audit row keeps a call's ids as ``stored_id`` makes them (a token in
an id redacted, a lone surrogate escaped, cut to ``MAX_ID_LENGTH``): the
row of a call is looked up by that form, never by the raw id.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ..audit import AuditRecord
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..hooks import Approval
from ..runtime import MESSAGE_LIMIT, PREVIEW_LIMIT, ToolRuntime, storable_id


def stored_id(runtime: ToolRuntime, text: str) -> str:
    """An id (a call's, a session's) as ``runtime`` stores it in the audit
    row: redacted whole, a lone surrogate escaped, cut to ``MAX_ID_LENGTH``.
    Idempotent. Ids come from a model or a transcript: a token there never
    reaches a row or a cassette, and the row of a call is found again."""
    return storable_id(runtime.redactor, text)


def admit(runtime: ToolRuntime, call: ToolCall) -> ToolResult | None:
    """None when ``call`` may run (its RUNNING row is committed); the
    refusal otherwise."""
    if call.idempotency_key is not None:
        call = ToolCall(
            call_id=call.call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            actor=call.actor,
            session_id=call.session_id,
            metadata=call.metadata,
        )
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
    call as admitted), the runtime's listeners hear its outcome. False
    when there is no such RUNNING row (never admitted, or finished
    already)."""
    row = runtime.audit.get(stored_id(runtime, call_id))
    if row is None:
        return False
    return close_admitted(
        runtime,
        row,
        state=CallState.SUCCEEDED if ok else CallState.FAILED,
        code=ErrorCode.OK if ok else ErrorCode.EXECUTION_ERROR,
        data=data,
        message=message,
        call=call,
    )


def close_admitted(
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
    runtime's listeners then hear the outcome as a ``ToolResult``. False
    when the row is not RUNNING (any more)."""
    if row.state is not CallState.RUNNING or row.audit_id is None:
        return False
    now = datetime.now(timezone.utc)
    preview = ""
    if data is not None:
        redacted = runtime.redactor.redact(data)
        preview = json.dumps(redacted, ensure_ascii=False, sort_keys=True, default=str)
    ok = code is ErrorCode.OK
    shown = "" if ok else runtime.redactor.redact_text(message)[:MESSAGE_LIMIT]
    duration = _since(row.started_at, now)
    runtime.audit.finish(
        row.audit_id,
        state=state,
        result_code=code,
        result_preview=preview[:PREVIEW_LIMIT],
        error_message=shown,
        finished_at=now.isoformat(timespec="milliseconds"),
        duration_ms=duration,
    )
    if call is not None:
        _tell_listeners(runtime, call, row, state, code, data if ok else None, shown, duration)
    return True


def _tell_listeners(
    runtime: ToolRuntime,
    call: ToolCall,
    row: AuditRecord,
    state: CallState,
    code: ErrorCode,
    data: Any,
    message: str,
    duration: int | None,
) -> None:
    """The outcome another program reported, told to the runtime's
    listeners as ``execute`` tells its own: the data redacted with the
    tool's redactor and cut to its result limit, the approval of the hook
    that let the call through (as its row names it)."""
    spec = runtime.registry.get(row.tool_name)
    redactor = spec.redactor if spec is not None and spec.redactor is not None else None
    stored = (redactor or runtime.redactor).redact(data)
    total = None
    if data is not None:
        text = json.dumps(stored, ensure_ascii=False, sort_keys=True, default=str)
        limit = spec.result_limit if spec is not None else len(text)
        if len(text) > limit:
            stored, total = text[:limit], len(text)
    approval = (
        Approval(row.rule, row.reason)
        if row.decision == "allow" and row.rule.startswith("hook.")
        else None
    )
    result = ToolResult(
        call_id=row.call_id,  # as stored: the recorder finds the row again by it
        tool_name=row.tool_name,
        ok=code is ErrorCode.OK,
        code=code,
        message=message,
        data=stored,
        retryable=code.retryable,
        duration_ms=duration or 0,
        state=state,
        truncated=total is not None,
        total_size=total,
    )
    runtime.tell_listeners(call, result, stored, approval)


def _since(started_at: str, now: datetime) -> int | None:
    try:
        started = datetime.fromisoformat(started_at)
    except ValueError:
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return max(0, int((now - started).total_seconds() * 1000))
