"""PreToolUse decides (allow, deny, ask, rewrite); PostToolUse observes;
PlanProgress keeps the model on its plan."""

from __future__ import annotations

import json

import pytest
from conftest import WRITE_ANYWHERE, spy_tool

from pytest_toolguard import (
    CallState,
    Capabilities,
    ErrorCode,
    HookDecision,
    PlanProgress,
    PlanStep,
    Risk,
    ToolCall,
)
from pytest_toolguard.plan import Artifact
from pytest_toolguard.tools import builtin_registry


class Hook:
    name = "test_hook"

    def __init__(self, decide):
        self.decide = decide
        self.seen = []

    def pre_tool_use(self, event):
        self.seen.append(dict(event.arguments))
        return self.decide(event)


class Observer:
    name = "observer"

    def __init__(self, fail=False):
        self.results = []
        self.fail = fail

    def post_tool_use(self, event):
        self.results.append(event.result.code)
        if self.fail:
            raise RuntimeError("observer bug")


def call(tool_name="spy", arguments=None, call_id="c1"):
    return ToolCall(call_id=call_id, tool_name=tool_name, arguments=arguments or {})


def test_deny_answers_blocked_with_the_hooks_reason(toolguard_runtime, registry_of, spy):
    hook = Hook(lambda e: HookDecision.deny("not on Fridays"))
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[hook])
    result = runtime.execute(call())
    assert (result.code, result.message, result.state) == (
        ErrorCode.BLOCKED,
        "not on Fridays",
        CallState.DENIED,
    )
    row = runtime.audit.get("c1")
    assert row is not None and (row.decision, row.rule, row.reason) == (
        "deny",
        "hook.test_hook",
        "not on Fridays",
    )
    assert spy.count == 0


def test_ask_answers_approval_required(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(
        registry_of(spy_tool(spy)),
        WRITE_ANYWHERE,
        hooks=[Hook(lambda e: HookDecision.ask("sure?"))],
    )
    assert runtime.execute(call()).code is ErrorCode.APPROVAL_REQUIRED
    assert spy.count == 0


def test_allow_from_a_hook_approves_an_external_tool(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, risk=Risk.EXTERNAL)),
        WRITE_ANYWHERE,
        hooks=[Hook(lambda e: HookDecision.allow("ok"))],
    )
    assert runtime.execute(call()).ok
    assert spy.count == 1


def test_hooks_run_after_the_policy(toolguard_runtime, registry_of, spy):
    hook = Hook(lambda e: HookDecision.proceed())
    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, risk=Risk.WRITE)), Capabilities(), hooks=[hook]
    )
    assert runtime.execute(call()).code is ErrorCode.PERMISSION_DENIED
    assert hook.seen == []


def test_rewritten_arguments_are_what_the_handler_gets(toolguard_runtime, registry_of, spy):
    hook = Hook(lambda e: HookDecision.proceed({"text": e.arguments["text"].upper()}))
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[hook])
    assert runtime.execute(call(arguments={"text": "hi"})).ok
    assert spy.calls == [{"text": "HI"}]
    row = runtime.audit.get("c1")
    assert row is not None and json.loads(row.arguments_json) == {"text": "HI"}


def test_rewritten_arguments_are_validated_again(toolguard_runtime, registry_of, spy):
    hook = Hook(lambda e: HookDecision.allow("ok", {"txt": 1}))
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[hook])
    result = runtime.execute(call(arguments={"text": "hi"}))
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert "arguments.txt" in result.message
    assert runtime.audit.get("c1").rule == "hook.test_hook.rewrite"
    assert spy.count == 0


def test_rewritten_arguments_are_authorised_again(toolguard_runtime, workspace_dir):
    (workspace_dir / ".env").write_text("TOKEN=1")
    (workspace_dir / "a.txt").write_text("a")
    hook = Hook(lambda e: HookDecision.proceed({"path": ".env"}))
    runtime = toolguard_runtime(builtin_registry(), Capabilities(), hooks=[hook])
    result = runtime.execute(call("read_text", {"path": "a.txt"}))
    assert result.code is ErrorCode.FORBIDDEN_PATH
    assert "TOKEN" not in json.dumps(result.data)


def test_a_failing_pre_hook_blocks_the_call(toolguard_runtime, registry_of, spy):
    def broken(event):
        raise ValueError("hook bug")

    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[Hook(broken)])
    result = runtime.execute(call())
    assert result.code is ErrorCode.BLOCKED and "ValueError" in result.message
    assert spy.count == 0


def test_post_hooks_observe_and_cannot_change_the_result(toolguard_runtime, registry_of, spy):
    observer = Observer(fail=True)
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[observer])
    with pytest.warns(RuntimeWarning, match="observer bug"):
        result = runtime.execute(call())
    assert result.ok and observer.results == [ErrorCode.OK]


def test_post_hooks_see_only_calls_whose_handler_ran(toolguard_runtime, registry_of, spy):
    observer = Observer()
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[observer])
    runtime.execute(call("nope"))
    runtime.execute(call(arguments={"bad": 1}))
    assert observer.results == []


# -- PlanProgress ---------------------------------------------------------

ARTIFACTS = "runs/r1/artifacts"


def feedback_plan():
    return PlanProgress(
        [
            PlanStep("step_1", frozenset({"read_csv"})),
            PlanStep(
                "step_2",
                frozenset({"write_json_file"}),
                artifacts=(
                    Artifact(
                        f"{ARTIFACTS}/analysis.json", {"type": "object", "required": ["items"]}
                    ),
                ),
            ),
            PlanStep(
                "step_3",
                frozenset({"write_markdown_file"}),
                artifacts=(Artifact(f"{ARTIFACTS}/report.md"),),
            ),
        ]
    )


@pytest.fixture
def planned(toolguard_runtime, workspace_dir):
    (workspace_dir / "data").mkdir()
    (workspace_dir / "data" / "feedback.csv").write_text("id,text\n1,slow\n")
    plan = feedback_plan()
    caps = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(ARTIFACTS,))
    runtime = toolguard_runtime(builtin_registry(), caps, hooks=[plan], variables={"run_id": "r1"})
    return runtime, plan


def test_plan_blocks_a_tool_the_current_step_does_not_allow(planned):
    runtime, plan = planned
    result = runtime.execute(
        call("write_markdown_file", {"artifact_name": "report.md", "content": "x"})
    )
    assert result.code is ErrorCode.BLOCKED
    assert result.message == "tool write_markdown_file is not allowed for current plan step step_1"
    assert runtime.audit.get("c1").rule == "hook.plan_progress"


def test_plan_advances_on_success_and_blocks_after_completion(planned, workspace_dir):
    runtime, plan = planned
    assert runtime.execute(call("read_csv", {"path": "data/feedback.csv"}, "1")).ok
    assert plan.current_step.id == "step_2"
    assert runtime.execute(
        call("write_json_file", {"artifact_name": "analysis.json", "content": {"items": []}}, "2")
    ).ok
    assert runtime.execute(
        call("write_markdown_file", {"artifact_name": "report.md", "content": "# r"}, "3")
    ).ok
    assert plan.is_complete
    late = runtime.execute(call("read_csv", {"path": "data/feedback.csv"}, "4"))
    assert late.code is ErrorCode.BLOCKED and "plan is complete" in late.message
    assert plan.stop_validation(runtime.workspace).ok


def test_failed_handler_marks_the_step_failed_and_a_retry_recovers(planned):
    runtime, plan = planned
    assert (
        runtime.execute(call("read_csv", {"path": "data/missing.csv"}, "1")).code
        is ErrorCode.EXECUTION_ERROR
    )
    assert plan.status("step_1") == "failed"
    assert runtime.execute(call("read_csv", {"path": "data/feedback.csv"}, "2")).ok
    assert plan.status("step_1") == "done"


def test_stop_validation_reports_missing_and_invalid_artifacts(planned, workspace_dir):
    runtime, plan = planned
    runtime.execute(call("read_csv", {"path": "data/feedback.csv"}, "1"))
    runtime.execute(
        call("write_json_file", {"artifact_name": "analysis.json", "content": {"no_items": 1}}, "2")
    )
    report = plan.stop_validation(runtime.workspace)
    assert not report.ok
    assert any("analysis.json.items: field is required" in p for p in report.problems)
    assert any("report.md is missing" in p for p in report.problems)
    assert any("step_3 is active" in p for p in report.problems)


def test_required_tools_must_all_succeed_before_the_step_is_done(toolguard_runtime, workspace_dir):
    (workspace_dir / "a.txt").write_text("a")
    plan = PlanProgress(
        [
            PlanStep(
                "look",
                frozenset({"read_text", "list_files"}),
                required_tools=("read_text", "list_files"),
            )
        ]
    )
    runtime = toolguard_runtime(builtin_registry(), Capabilities(), hooks=[plan])
    runtime.execute(call("read_text", {"path": "a.txt"}, "1"))
    assert not plan.is_complete
    runtime.execute(call("list_files", {}, "2"))
    assert plan.is_complete
