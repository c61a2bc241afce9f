# The public API, listed once: what the README teaches. Everything else is
# in the submodule that owns it (pytest_toolguard.sandbox.CallCancelled, ...).
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

__version__: str
