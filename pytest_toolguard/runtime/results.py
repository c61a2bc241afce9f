"""The ``ToolResult``s the runtime answers, and what it keeps of them.

A failed result's message is redacted before it is bounded (a cut secret
would no longer match its pattern); a successful one's data is cut to the
tool's ``result_limit``; what later calls with the same idempotency key
get (``stored_outcome``) and what listeners are told (``stored_data``) are
redacted from the whole output, then cut as the result was.
"""

from __future__ import annotations

import json
from typing import Any

from ..contract import CallState, ErrorCode, ToolResult
from ..redaction import strings_in
from ..storable import storable_text
from .attempt import Attempt
from .messages import bounded, hide_secret_arguments
from .settings import RuntimeSettings


def failure(
    settings: RuntimeSettings,
    attempt: Attempt,
    code: ErrorCode,
    message: str,
    state: CallState,
    *,
    redacted: bool = False,
) -> ToolResult:
    """A failed result. Its message is what the model and the audit row
    get: redacted (before it is bounded: a cut secret would no longer
    match its pattern) unless ``redacted`` says it already is; the values of
    secret arguments (by their name: of no shape a pattern knows) are hidden
    in any case."""
    redactor = settings.redactor_for(attempt.spec)
    message = hide_secret_arguments(message, redactor, attempt.arguments)
    if not redacted:
        message = redactor.redact_message(message, strings_in(attempt.arguments))
    message = storable_text(message)
    return ToolResult(
        call_id=attempt.call_id,
        tool_name=attempt.tool_name,
        ok=False,
        code=code,
        message=bounded(message),
        retryable=code.retryable,
        duration_ms=attempt.elapsed_ms(),
        state=state,
    )


def truncate(data: Any, text: str, limit: int) -> tuple[Any, int | None]:
    """``data`` as it goes to the model, and the full size when it was cut:
    over ``limit`` characters of JSON, the data becomes its first ``limit``
    characters of JSON text."""
    if len(text) <= limit:
        return data, None
    return text[:limit], len(text)


def redacted_output(settings: RuntimeSettings, attempt: Attempt) -> Any:
    """The handler's whole output, redacted once per call."""
    if attempt.redacted_output is None:
        attempt.redacted_output = settings.redactor_for(attempt.spec).redact(attempt.output)
    return attempt.redacted_output


def stored_outcome(result: ToolResult, redacted: Any, limit: int) -> dict[str, Any]:
    """What later calls with the same key get: the result with its data
    redacted from the whole output (``redacted``), then cut as the original
    was. (Messages are redacted when a result is made.)"""
    data, total = result.data, result.total_size
    if result.ok:
        text = json.dumps(redacted, ensure_ascii=False, sort_keys=True)
        data, total = truncate(redacted, text, limit)
    return {
        "ok": result.ok,
        "code": result.code.value,
        "message": result.message,
        "data": data,
        "truncated": total is not None,
        "total_size": total,
    }


def stored_data(settings: RuntimeSettings, attempt: Attempt, result: ToolResult) -> Any:
    """The result's data as it may be stored (what listeners get): redacted
    from the whole output, then cut like the result. Failures carry no
    data; replays carry the stored, redacted data."""
    spec = attempt.spec
    if attempt.output is not None and spec is not None and result.ok:
        redacted = redacted_output(settings, attempt)
        shown, _ = truncate(
            redacted,
            json.dumps(redacted, ensure_ascii=False, sort_keys=True),
            spec.result_limit,
        )
        return shown
    return settings.redactor_for(spec).redact(result.data)


def replayed_code(value: str) -> ErrorCode:
    """A stored outcome's code (EXECUTION_ERROR for one this version does
    not know)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.EXECUTION_ERROR
