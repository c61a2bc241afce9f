"""A retry with an idempotency key still goes through every PreToolUse hook;
only the plan's own block is lifted for the exact retry of a call it let run."""

from __future__ import annotations

from typing import Any

from pytest_toolguard import (
    Capabilities,
    ErrorCode,
    HookDecision,
    PlanProgress,
    PlanStep,
    ToolCall,
    ToolRegistry,
    ToolSpec,
)


def _report(ctx: Any, **arguments: Any) -> Any:
    return {"report": "confidential numbers"}


REGISTRY = ToolRegistry([ToolSpec("report", "a report", {"type": "object"}, _report)])
CAPS = Capabilities(allowed_tools=frozenset({"report", "other"}))


class DenyMallory:
    name = "deny_mallory"

    def pre_tool_use(self, event: Any) -> HookDecision:
        if event.call.actor == "mallory":
            return HookDecision.deny("mallory may not read reports")
        return HookDecision.proceed()


def test_a_denied_actor_gets_no_replay_of_another_actors_keyed_call(toolguard_runtime) -> None:
    runtime = toolguard_runtime(REGISTRY, CAPS, hooks=[DenyMallory()], idempotency_scope="team")
    alice = runtime.execute(ToolCall("c1", "report", {}, actor="alice", idempotency_key="k1"))
    mallory = runtime.execute(ToolCall("c2", "report", {}, actor="mallory", idempotency_key="k1"))
    assert alice.code is ErrorCode.OK
    assert mallory.code is ErrorCode.BLOCKED
    assert mallory.data is None


def test_the_plan_lets_the_exact_retry_of_a_call_it_ran_through(toolguard_runtime) -> None:
    plan = PlanProgress([PlanStep("read", frozenset({"report"}))])
    runtime = toolguard_runtime(REGISTRY, CAPS, hooks=[plan])
    first = runtime.execute(ToolCall("c1", "report", {}, idempotency_key="k1"))
    assert plan.is_complete
    retry = runtime.execute(ToolCall("c2", "report", {}, idempotency_key="k1"))
    other_key = runtime.execute(ToolCall("c3", "report", {}, idempotency_key="k2"))
    no_key = runtime.execute(ToolCall("c4", "report", {}))
    assert first.code is ErrorCode.OK
    assert (retry.code, retry.data) == (ErrorCode.IDEMPOTENT_REPLAY, first.data)
    assert other_key.code is ErrorCode.BLOCKED
    assert no_key.code is ErrorCode.BLOCKED
