"""Every document that comes from outside is parsed within ``documents``'
limits: the hook's configuration and stdin event, a tool output an OpenAI
transcript holds, a plan artifact a handler wrote, and the JSON-text
arguments a cassette holds. Over a limit is one refusal naming it (or, where
the value is optional, the value is taken as not JSON), never a
``RecursionError``, a ``MemoryError`` or an alias expanded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import hook_in_process

from pytest_toolguard import documents
from pytest_toolguard.bridges.transcripts.openai import output_result, read_chat
from pytest_toolguard.cli import USAGE_ERROR
from pytest_toolguard.contract import ToolCall
from pytest_toolguard.faults import Target
from pytest_toolguard.harness.effects import call_arguments
from pytest_toolguard.hooks import Approval
from pytest_toolguard.plan import Artifact, PlanProgress, PlanStep
from pytest_toolguard.redaction import Redactor
from pytest_toolguard.replay.approvals import approval_hooks
from pytest_toolguard.replay.cassette import (
    Cassette,
    Expectation,
    Interaction,
    Session,
    WorkspaceState,
)
from pytest_toolguard.sandbox import Workspace

SESSION = "parse-session"


def deep_json(depth: int, leaf: Any = "x") -> str:
    return '{"a":' * depth + json.dumps(leaf) + "}" * depth


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
)


# -- the hook's configuration -----------------------------------------------------------

CONFIGS = {
    "billion laughs": (
        LAUGHS + "\ncapabilities: {allowed_risks: [read], write_roots: *i}\n",
        "alias",
    ),
    "one alias": ("x: &r src\ncapabilities: {write_roots: [*r]}\n", "alias"),
    "deep block nesting": (
        "capabilities:\n  write_roots:\n"
        + "".join("  " * (i + 2) + "- \n" for i in range(150))
        + "  " * 152
        + "- src\n",
        "MAX_DEPTH",
    ),
    "deep flow nesting": (
        "capabilities: {write_roots: " + "[" * 150 + "src" + "]" * 150 + "}\n",
        "MAX_DEPTH",
    ),
    "huge integer": ("audit: " + "7" * 5000 + "\n", "MAX_NUMBER_CHARS"),
    "huge base-60 integer": ("audit: " + ":".join(["59"] * 600) + "\n", "MAX_NUMBER_CHARS"),
}


def event(project: Path, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session_id": SESSION,
        "transcript_path": str(project / "t.jsonl"),
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(project / "src" / "app.py")},
        "tool_use_id": "toolu_parse",
    }
    body.update(fields)
    return body


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "toolguard.yaml").write_text(
        yaml.safe_dump(
            {
                "audit": ".toolguard/audit.db",
                "capabilities": {"allowed_risks": ["read", "write"], "write_roots": ["src"]},
            }
        )
    )
    return root


def assert_blocked_naming(status: int, out: str, err: str, limit: str) -> None:
    assert status == USAGE_ERROR, (status, out, err)
    assert out == ""
    assert err.startswith("toolguard: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert limit in err, err


@pytest.mark.parametrize(("text", "limit"), list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_hostile_hook_configuration_is_refused_naming_its_limit(
    text: str,
    limit: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (project / "toolguard.yaml").write_text(text)
    status, out, err = hook_in_process(
        monkeypatch, capsys, project, "pre-tool-use", json.dumps(event(project)).encode()
    )
    assert_blocked_naming(status, out, err, limit)
    assert not (project / ".toolguard").exists()  # refused before anything is opened


def test_a_hook_configuration_within_the_limits_still_loads(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "toolguard.yaml").write_text(
        "capabilities:\n  allowed_risks: [read]\n  write_roots: [src]\naudit: a.db  # comment\n"
    )
    status, out, err = hook_in_process(
        monkeypatch, capsys, project, "pre-tool-use", json.dumps(event(project)).encode()
    )
    assert status == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"


# -- the hook's event on stdin ----------------------------------------------------------

EVENTS = {
    "tool_input past the depth": ("pre-tool-use", {"tool_input": json.loads(deep_json(120))}),
    "tool_response past the depth": (
        "post-tool-use",
        {"hook_event_name": "PostToolUse", "tool_response": json.loads(deep_json(150))},
    ),
    "an unread field past the depth": ("pre-tool-use", {"extra": json.loads(deep_json(101))}),
    "lists past the depth": ("stop", {"hook_event_name": "Stop", "x": json.loads(deep_list(200))}),
}


@pytest.mark.parametrize(("command", "fields"), list(EVENTS.values()), ids=list(EVENTS))
def test_an_event_nested_past_the_limit_blocks_naming_it(
    command: str,
    fields: dict[str, Any],
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stdin = json.dumps(event(project, **fields)).encode()
    status, out, err = hook_in_process(monkeypatch, capsys, project, command, stdin)
    assert_blocked_naming(status, out, err, "MAX_DEPTH")


@pytest.mark.parametrize("command", ["pre-tool-use", "post-tool-use", "stop"])
def test_an_event_over_the_size_limit_blocks_naming_it(
    command: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stdin = json.dumps(event(project, padding="p" * 5000)).encode()
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", 4096)
    status, out, err = hook_in_process(monkeypatch, capsys, project, command, stdin)
    assert_blocked_naming(status, out, err, "MAX_DOCUMENT_BYTES")


def test_an_event_at_the_depth_limit_is_still_answered(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = {"extra": json.loads(deep_json(documents.MAX_DEPTH - 1))}
    stdin = json.dumps(event(project, **fields)).encode()
    status, out, err = hook_in_process(monkeypatch, capsys, project, "pre-tool-use", stdin)
    assert status == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"


# -- an OpenAI transcript's tool output ---------------------------------------------------

OUTPUTS = {
    "object nested 5000 deep": deep_json(5000),
    "list nested 5000 deep": deep_list(5000),
    "error nested 5000 deep": '{"error": ' + deep_json(5000) + "}",
    "object nested 150 deep": deep_json(150),
}


@pytest.mark.parametrize("output", list(OUTPUTS.values()), ids=list(OUTPUTS))
def test_a_tool_output_nested_past_the_limit_is_read_as_text(output: str) -> None:
    result = output_result(output)
    assert result.ok is None  # a text: the format does not say whether it failed
    assert result.content == output


@pytest.mark.parametrize("output", list(OUTPUTS.values()), ids=list(OUTPUTS))
def test_a_chat_transcript_with_a_deep_tool_output_is_read(output: str) -> None:
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_text", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": output},
    ]
    transcript = read_chat(json.dumps(messages))
    assert [call.call_id for call in transcript.calls] == ["call_1"]
    result = transcript.calls[0].result
    assert result is not None and result.ok is None


def test_a_tool_output_within_the_limit_is_still_judged() -> None:
    observation = '{"ok": false, "code": "NOT_FOUND", "data": ' + deep_json(10, "x") + "}"
    assert output_result(observation).ok is False
    assert output_result(deep_json(10, "x")).ok is None


# -- a plan artifact a handler wrote ---------------------------------------------------------

ARTIFACTS = {
    "object nested 5000 deep": (deep_json(5000), "MAX_DEPTH"),
    "list nested 5000 deep": (deep_list(5000), "MAX_DEPTH"),
    "object nested 150 deep": (deep_json(150), "MAX_DEPTH"),
    "not JSON": ("{nope", "not valid JSON"),
}


@pytest.mark.parametrize(("text", "said"), list(ARTIFACTS.values()), ids=list(ARTIFACTS))
def test_a_hostile_plan_artifact_is_a_problem_naming_why(
    text: str, said: str, tmp_path: Path
) -> None:
    (tmp_path / "out.json").write_text(text)
    plan = PlanProgress(
        [
            PlanStep(
                "only",
                frozenset({"write_file"}),
                artifacts=(Artifact("out.json", {"type": "object"}),),
            )
        ]
    )
    report = plan.stop_validation(Workspace(str(tmp_path)))
    assert report.ok is False
    assert any("out.json" in problem and said in problem for problem in report.problems), (
        report.problems
    )


# -- JSON-text arguments a cassette holds ------------------------------------------------------

ARGUMENT_TEXTS = {
    "object nested 5000 deep": deep_json(5000),
    "list nested 5000 deep": deep_list(5000),
    "object nested 150 deep": deep_json(150),
}


def interaction(arguments: str, *, approved: bool = False) -> Interaction:
    return Interaction(
        call=ToolCall(call_id="c1", tool_name="write_file", arguments=arguments),
        result=Expectation(ok=True, code="OK", state="SUCCEEDED"),
        approval=Approval(rule="hook.approver", reason="yes") if approved else None,
    )


def target(item: Interaction) -> Target:
    cassette = Cassette(
        kind="cassette",
        name="hostile",
        session=Session(),
        workspace=WorkspaceState(),
        interactions=(item,),
    )
    return Target("hostile.yaml", cassette, 0, None)


@pytest.mark.parametrize("arguments", list(ARGUMENT_TEXTS.values()), ids=list(ARGUMENT_TEXTS))
def test_recorded_arguments_nested_past_the_limit_are_not_an_object(arguments: str) -> None:
    assert call_arguments(arguments) == {}
    assert target(interaction(arguments)).arguments is None
    # An approval on a call whose arguments are not an object grants nothing.
    assert approval_hooks([interaction(arguments, approved=True)], Redactor()) == []


def test_recorded_arguments_within_the_limit_are_still_read() -> None:
    text = json.dumps({"path": "a.txt", "content": json.loads(deep_json(20))})
    assert call_arguments(text)["path"] == "a.txt"
    assert target(interaction(text)).arguments == json.loads(text)
