"""pytest-toolguard: a safe execution boundary for LLM agents' tool calls,
and the pytest harness that tests it.

Everything public is re-exported here; submodules hold one noun each.
"""

from .audit import AuditRecord, AuditStore, AuditUnavailable, SQLiteAuditStore
from .contract import CallState, ErrorCode, ToolCall, ToolResult
from .hooks import (
    Approver,
    Artifact,
    HookDecision,
    PlanProgress,
    PlanStep,
    PostToolUse,
    PostToolUseEvent,
    PreToolUse,
    PreToolUseEvent,
    StopReport,
)
from .idempotency import make_idempotency_key
from .isolation import HandlerTimeout
from .policy import Capabilities, Decision, Risk
from .redaction import Redactor
from .registry import PathAccess, ToolRegistry, ToolSpec, tool
from .runtime import ToolContext, ToolRuntime
from .sandbox import (
    CallCancelled,
    ForbiddenPath,
    InvalidPath,
    LimitExceeded,
    PathOutsideWorkspace,
    SandboxError,
    Workspace,
)
from .schema import InvalidSchema

__version__ = "0.1.0"

__all__ = [
    "Approver",
    "Artifact",
    "AuditRecord",
    "AuditStore",
    "AuditUnavailable",
    "CallCancelled",
    "CallState",
    "Capabilities",
    "Decision",
    "ErrorCode",
    "ForbiddenPath",
    "HandlerTimeout",
    "HookDecision",
    "InvalidPath",
    "InvalidSchema",
    "LimitExceeded",
    "PathAccess",
    "PathOutsideWorkspace",
    "PlanProgress",
    "PlanStep",
    "PostToolUse",
    "PostToolUseEvent",
    "PreToolUse",
    "PreToolUseEvent",
    "Redactor",
    "Risk",
    "SQLiteAuditStore",
    "SandboxError",
    "StopReport",
    "ToolCall",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolRuntime",
    "ToolSpec",
    "Workspace",
    "make_idempotency_key",
    "tool",
    "__version__",
]
