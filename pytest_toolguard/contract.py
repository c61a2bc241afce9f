"""The data that crosses every layer: calls, results, error codes and states.

Nothing here does I/O or policy. ``ErrorCode`` is the one stable vocabulary of
outcomes: the same spelling appears in code, docs, cassettes and the audit
table, so never rename a member.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ErrorCode(str, enum.Enum):
    """Every outcome a call can have. ``code.retryable`` says if retrying the
    same call unchanged can succeed."""

    OK = "OK"
    """The handler ran and its output passed the output schema."""
    IDEMPOTENT_REPLAY = "IDEMPOTENT_REPLAY"
    """A call with this idempotency key already ran; its first outcome is
    returned and the handler did not run again."""
    INVALID_REQUEST = "INVALID_REQUEST"
    """The call itself is malformed (arguments not a JSON object, bad ids)."""
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    """No tool of that name is registered."""
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    """The arguments break the tool's input schema; the message lists every
    error as ``arguments.<path>: <message>``. Retry with fixed arguments."""
    PERMISSION_DENIED = "PERMISSION_DENIED"
    """The session may not use this tool, this risk, this write target or
    this network host."""
    PATH_OUTSIDE_WORKSPACE = "PATH_OUTSIDE_WORKSPACE"
    """A path argument resolves outside the workspace (``..``, absolute path,
    escaping symlink)."""
    FORBIDDEN_PATH = "FORBIDDEN_PATH"
    """A path argument names a forbidden file (``.env`` in any component)."""
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    """A read or write is larger than the session's byte limits."""
    BLOCKED = "BLOCKED"
    """A PreToolUse hook (for example the plan) refused the call."""
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    """The call needs an approval nobody gave (external or dangerous tools,
    or a hook that answered ``ask``)."""
    DUPLICATE_CALL = "DUPLICATE_CALL"
    """A call with the same idempotency key is still running. Retryable: ask
    again once it finished to get its outcome."""
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
    """The idempotency key was used before with other arguments."""
    AUDIT_UNAVAILABLE = "AUDIT_UNAVAILABLE"
    """The audit log could not record the call, so the handler never ran
    (fail closed). Retryable."""
    TIMEOUT = "TIMEOUT"
    """The handler overran its deadline. Retryable."""
    EXECUTION_ERROR = "EXECUTION_ERROR"
    """The handler raised; the message names the exception type."""
    OUTPUT_INVALID = "OUTPUT_INVALID"
    """The handler's output broke the tool's output schema: a tool bug."""
    ROLLBACK_CONFLICT = "ROLLBACK_CONFLICT"
    """A rollback was refused: a file the call changed is no longer what the
    call left (a later call, session or process wrote, deleted or replaced
    it). Nothing was restored; the result's data lists the paths."""

    @property
    def retryable(self) -> bool:
        """True where the same call, unchanged, may succeed later."""
        return self in _RETRYABLE

    @property
    def ok(self) -> bool:
        """True for the codes that carry a successful outcome."""
        return self in (ErrorCode.OK, ErrorCode.IDEMPOTENT_REPLAY)

    def __str__(self) -> str:
        return self.value


_RETRYABLE = frozenset({ErrorCode.DUPLICATE_CALL, ErrorCode.AUDIT_UNAVAILABLE, ErrorCode.TIMEOUT})


class CallState(str, enum.Enum):
    """Where a call stands in its life; the audit row's ``state`` column."""

    RECEIVED = "RECEIVED"
    VALIDATED = "VALIDATED"
    AUTHORIZED = "AUTHORIZED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DENIED = "DENIED"
    TIMED_OUT = "TIMED_OUT"
    INTERRUPTED = "INTERRUPTED"
    """A RUNNING row found after a crash (see ``SQLiteAuditStore.recover``)."""

    @property
    def finished(self) -> bool:
        return self in _FINISHED

    def __str__(self) -> str:
        return self.value


_FINISHED = frozenset(
    {
        CallState.SUCCEEDED,
        CallState.FAILED,
        CallState.DENIED,
        CallState.TIMED_OUT,
        CallState.INTERRUPTED,
    }
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a model proposed. Untrusted: every field may be wrong.

    ``arguments`` may be a mapping or the JSON text a model produced.
    ``idempotency_key``, when given, says "these calls are the same business
    action": see ``pytest_toolguard.idempotency``.
    """

    call_id: str
    tool_name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    actor: str = "agent"
    session_id: str = "default"
    idempotency_key: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


OBSERVATION_LIMIT = 8000
"""Default upper bound, in characters, of ``ToolResult.to_observation()``."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The executor's answer to one call. ``ok`` says success; ``code`` is
    what programs branch on; ``message`` is for the model and humans."""

    call_id: str
    tool_name: str
    ok: bool
    code: ErrorCode
    message: str
    data: Any = None
    retryable: bool = False
    duration_ms: int = 0
    state: CallState = CallState.RECEIVED
    truncated: bool = False
    total_size: int | None = None
    """Size in characters of the full serialized output when ``truncated``."""

    def to_observation(self, limit: int = OBSERVATION_LIMIT) -> str:
        """The JSON text that goes back to the model as the tool message.

        Always valid JSON and at most ``limit`` characters: when the data does
        not fit, it is replaced by a string preview and ``truncated`` is set.
        """
        body: dict[str, Any] = {
            "ok": self.ok,
            "code": self.code.value,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.truncated:
            body["truncated"] = True
            body["total_size"] = self.total_size
        body["data"] = self.data
        text = json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)
        if len(text) <= limit:
            return text
        body["truncated"] = True
        body["total_size"] = self.total_size or len(text)
        body["data"] = None
        body["message"] = self.message[: max(0, limit // 4)]
        room = limit - len(json.dumps(body, ensure_ascii=False, sort_keys=True, default=str))
        data_text = json.dumps(self.data, ensure_ascii=False, sort_keys=True, default=str)
        # Each character may grow when escaped inside a JSON string; shrink until it fits.
        cut = max(0, room - 2)
        while cut > 0:
            body["data"] = data_text[:cut]
            text = json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)
            if len(text) <= limit:
                return text
            cut = cut * 3 // 4
        body["data"] = None
        return json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)[:limit]
