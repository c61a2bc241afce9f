"""Lifecycle hooks: PreToolUse decides, PostToolUse observes.

A PreToolUse hook runs after the policy allowed a call and before any
idempotency claim or handler. It answers ``allow`` (also counts as the
approval that external and dangerous tools need), ``deny`` (BLOCKED),
``ask`` (APPROVAL_REQUIRED) or ``proceed`` (no opinion), and may rewrite the
arguments; rewritten arguments go through the schema and the policy again.

A PostToolUse hook sees every call whose handler ran, after the result is
final. It observes and updates its own state; it can never change or undo
the result: it gets copies, and an exception it raises is reported as a
RuntimeWarning, never propagated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from .contract import ToolCall, ToolResult

if TYPE_CHECKING:
    from .registry import ToolSpec

HookAction = Literal["allow", "deny", "ask", "proceed"]


@dataclass(frozen=True, slots=True)
class HookDecision:
    """A PreToolUse hook's answer. ``arguments``, when set, replaces the
    call's arguments (validated and authorised again)."""

    action: HookAction
    reason: str = ""
    arguments: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # A typo such as "block" must not pass as "proceed" (fail closed).
        if self.action not in ("allow", "deny", "ask", "proceed"):
            raise ValueError(
                f"HookDecision action must be allow, deny, ask or proceed, not {self.action!r}"
            )

    @classmethod
    def allow(cls, reason: str = "", arguments: Mapping[str, Any] | None = None) -> HookDecision:
        return cls("allow", reason, arguments)

    @classmethod
    def deny(cls, reason: str) -> HookDecision:
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str) -> HookDecision:
        return cls("ask", reason)

    @classmethod
    def proceed(cls, arguments: Mapping[str, Any] | None = None) -> HookDecision:
        return cls("proceed", "", arguments)


@dataclass(frozen=True, slots=True)
class Approval:
    """The hook decision that let a call through: the PreToolUse hook that
    answered ``allow`` last (``rule`` is ``hook.<its name>``, as in the
    audit row) and its reason, redacted. External and dangerous tools run
    only with one; replay grants the recorded ones again."""

    rule: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PreToolUseEvent:
    """What a PreToolUse hook sees: the call, its tool and the arguments as
    they stand (parsed, schema-valid, authorised)."""

    call: ToolCall
    spec: ToolSpec
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PostToolUseEvent:
    """What a PostToolUse hook sees: the call, its tool, the arguments the
    handler ran with and the final result."""

    call: ToolCall
    spec: ToolSpec
    arguments: Mapping[str, Any]
    result: ToolResult


@runtime_checkable
class PreToolUse(Protocol):
    name: str

    def pre_tool_use(self, event: PreToolUseEvent) -> HookDecision: ...


@runtime_checkable
class PostToolUse(Protocol):
    name: str

    def post_tool_use(self, event: PostToolUseEvent) -> None: ...


class Approver:
    """Turns a callback into the approval external and dangerous tools need.

    ``callback(event)`` returns True (allow), False (deny) or None (ask a
    human: APPROVAL_REQUIRED). Tools of lower risk pass untouched.
    """

    name = "approver"

    def __init__(self, callback: Callable[[PreToolUseEvent], bool | None]) -> None:
        self._callback = callback

    def pre_tool_use(self, event: PreToolUseEvent) -> HookDecision:
        if not event.spec.risk.needs_approval:
            return HookDecision.proceed()
        verdict = self._callback(event)
        if verdict is True:
            return HookDecision.allow(f"approved {event.spec.name}")
        if verdict is False:
            return HookDecision.deny(f"approval refused for {event.spec.name}")
        return HookDecision.ask(f"{event.spec.name} ({event.spec.risk}) needs approval")
