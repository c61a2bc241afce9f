"""pytest-toolguard: a safe execution boundary for LLM agents' tool calls,
and the pytest harness that tests it.

These names are the public API (what the README teaches: the runtime, tools
and their registry, calls and results, risks and capabilities, hooks and
the plan, the audit store, the redactor, the workspace, the one base class
of our exceptions); ``ARCHITECTURE.md`` ("The public surface") lists them
with the public subpackages'. Every other module is internal. The names
load on first use (``lazy_exports``): the pytest plugin imports this
package in every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .audit.row import AuditRecord as AuditRecord
    from .audit.sqlite import SQLiteAuditStore as SQLiteAuditStore
    from .capabilities import Capabilities as Capabilities
    from .capabilities import Risk as Risk
    from .context import ToolContext as ToolContext
    from .contract import CallState as CallState
    from .contract import ErrorCode as ErrorCode
    from .contract import ToolCall as ToolCall
    from .contract import ToolResult as ToolResult
    from .errors import ToolguardError as ToolguardError
    from .hooks import Approver as Approver
    from .hooks import HookDecision as HookDecision
    from .hooks import PostToolUse as PostToolUse
    from .hooks import PreToolUse as PreToolUse
    from .plan import PlanProgress as PlanProgress
    from .plan import PlanStep as PlanStep
    from .redaction import Redactor as Redactor
    from .registry import PathAccess as PathAccess
    from .registry import ToolRegistry as ToolRegistry
    from .registry import ToolSpec as ToolSpec
    from .registry import tool as tool
    from .runtime import ToolRuntime as ToolRuntime
    from .sandbox import Workspace as Workspace

__version__ = "0.1.0"

__toolguard_owned__ = True
"""Our code: an inline deadline never lands in it (``runtime/inline.py``);
packages holding tools' code set it false."""

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "audit.row": ("AuditRecord",),
        "audit.sqlite": ("SQLiteAuditStore",),
        "capabilities": ("Capabilities", "Risk"),
        "context": ("ToolContext",),
        "contract": ("CallState", "ErrorCode", "ToolCall", "ToolResult"),
        "errors": ("ToolguardError",),
        "hooks": ("Approver", "HookDecision", "PostToolUse", "PreToolUse"),
        "plan": ("PlanProgress", "PlanStep"),
        "redaction": ("Redactor",),
        "registry": ("PathAccess", "ToolRegistry", "ToolSpec", "tool"),
        "runtime": ("ToolRuntime",),
        "sandbox": ("Workspace",),
    },
)
__all__ += ["__version__"]
