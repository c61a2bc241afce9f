"""pytest-toolguard: a safe execution boundary for LLM agents' tool calls,
and the pytest harness that tests it.

Everything public is re-exported here; submodules hold one noun each.
The re-exports load on first use (PEP 562), so importing the package, as
the pytest plugin does in every test run, costs no jsonschema or sqlite
set-up; ``from pytest_toolguard import ToolRuntime`` works as always.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .audit import AuditRecord, AuditStore, AuditUnavailable, SQLiteAuditStore
    from .capabilities import Capabilities, Risk
    from .context import ToolContext
    from .contract import CallState, ErrorCode, ToolCall, ToolResult
    from .hooks import (
        Approval,
        Approver,
        HookDecision,
        PostToolUse,
        PostToolUseEvent,
        PreToolUse,
        PreToolUseEvent,
    )
    from .idempotency import make_idempotency_key
    from .isolation import HandlerTimeout
    from .plan import Artifact, PlanProgress, PlanStep, StopReport
    from .policy import PolicyDecision
    from .redaction import Redactor
    from .registry import PathAccess, ToolRegistry, ToolSpec, tool
    from .runtime import ToolRuntime
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
    "Approval",
    "Approver",
    "Artifact",
    "AuditRecord",
    "AuditStore",
    "AuditUnavailable",
    "CallCancelled",
    "CallState",
    "Capabilities",
    "PolicyDecision",
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

# The submodule each re-export comes from; keep it in step with the
# TYPE_CHECKING imports above (tests/test_plugin_import.py resolves every name).
_EXPORTED_FROM = {
    "audit": ("AuditRecord", "AuditStore", "AuditUnavailable", "SQLiteAuditStore"),
    "contract": ("CallState", "ErrorCode", "ToolCall", "ToolResult"),
    "hooks": (
        "Approval",
        "Approver",
        "HookDecision",
        "PostToolUse",
        "PostToolUseEvent",
        "PreToolUse",
        "PreToolUseEvent",
    ),
    "plan": ("Artifact", "PlanProgress", "PlanStep", "StopReport"),
    "idempotency": ("make_idempotency_key",),
    "isolation": ("HandlerTimeout",),
    "capabilities": ("Capabilities", "Risk"),
    "policy": ("PolicyDecision",),
    "redaction": ("Redactor",),
    "registry": ("PathAccess", "ToolRegistry", "ToolSpec", "tool"),
    "context": ("ToolContext",),
    "runtime": ("ToolRuntime",),
    "sandbox": (
        "CallCancelled",
        "ForbiddenPath",
        "InvalidPath",
        "LimitExceeded",
        "PathOutsideWorkspace",
        "SandboxError",
        "Workspace",
    ),
    "schema": ("InvalidSchema",),
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTED_FROM)
