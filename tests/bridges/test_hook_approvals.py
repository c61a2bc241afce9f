"""``toolguard hook`` and Claude Code's permission prompt: a call our
policy leaves to the user keeps one audit row, whatever the user decides.

``ask`` leaves the call's RUNNING row (rule ``hook.claude_code_prompt``);
PostToolUse after an approval finishes that row with the outcome; Stop
closes a row nobody approved as APPROVAL_REQUIRED. Events go through
``main()`` with the JSON on stdin, as the hook command reads it."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import hook_tools
import pytest
import yaml

from pytest_toolguard import CallState, ErrorCode, SQLiteAuditStore
from pytest_toolguard.audit import AuditRecord
from pytest_toolguard.cli import main
from pytest_toolguard.replay import load, replay

SESSION = "9b2d-approvals"
PROMPT_RULE = "hook.claude_code_prompt"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "old.txt").write_text("stale\n")
    (tmp_path / "src" / "app.py").write_text("x = 1\n")
    (tmp_path / "toolguard.yaml").write_text(
        yaml.safe_dump(
            {
                "registry": "hook_tools:registry",
                "audit": "audit.db",
                "cassette": "session.yaml",
                "capabilities": {
                    "allowed_risks": ["read", "write", "dangerous"],
                    "write_roots": ["src"],
                },
            }
        )
    )
    return tmp_path


class Hook:
    def __init__(self, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
        self.project, self.monkeypatch, self.capsys = project, monkeypatch, capsys

    def send(
        self,
        command: str,
        name: str,
        tool: str,
        tool_input: dict[str, Any],
        tool_use_id: str,
        **extra: Any,
    ) -> str:
        body = {
            "session_id": SESSION,
            "transcript_path": str(self.project / "t.jsonl"),
            "cwd": str(self.project),
            "permission_mode": "default",
            "hook_event_name": name,
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": tool_use_id,
            **extra,
        }
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(body)))
        status = main(["hook", command, "--config", str(self.project / "toolguard.yaml")])
        out, err = self.capsys.readouterr()
        assert status == 0, err
        return out

    def pre(self, tool: str, tool_input: dict[str, Any], tool_use_id: str) -> str:
        out = self.send("pre-tool-use", "PreToolUse", tool, tool_input, tool_use_id)
        return str(json.loads(out)["hookSpecificOutput"]["permissionDecision"])

    def post(self, tool: str, tool_input: dict[str, Any], tool_use_id: str, **extra: Any) -> None:
        self.send(
            "post-tool-use",
            extra.pop("name", "PostToolUse"),
            tool,
            tool_input,
            tool_use_id,
            **extra,
        )

    def stop(self) -> None:
        body = {
            "session_id": SESSION,
            "cwd": str(self.project),
            "hook_event_name": "Stop",
            "stop_hook_active": False,
            "transcript_path": str(self.project / "t.jsonl"),
        }
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(body)))
        assert main(["hook", "stop", "--config", str(self.project / "toolguard.yaml")]) == 0

    def rows(self, call_id: str) -> list[AuditRecord]:
        with SQLiteAuditStore(self.project / "audit.db") as store:
            return [row for row in store.rows(SESSION) if row.call_id == call_id]


@pytest.fixture
def hook(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Hook:
    return Hook(project, monkeypatch, capsys)


REMOVE = "mcp__files__remove"


def removal(project: Path) -> dict[str, str]:
    return {"path": str(project / "src" / "old.txt")}


def test_an_asked_call_waits_in_one_running_row(hook: Hook, project: Path) -> None:
    assert hook.pre(REMOVE, removal(project), "toolu_a1") == "ask"
    [row] = hook.rows("toolu_a1")
    assert (row.state, row.decision, row.rule) == (CallState.RUNNING, "allow", PROMPT_RULE)


def test_post_tool_use_after_an_approved_ask_finishes_the_same_row(
    hook: Hook, project: Path
) -> None:
    hook.pre(REMOVE, removal(project), "toolu_a2")
    (project / "src" / "old.txt").unlink()  # the user approved; Claude Code ran the tool
    hook.post(
        REMOVE,
        removal(project),
        "toolu_a2",
        tool_response={"content": [{"type": "text", "text": "removed"}]},
    )
    [row] = hook.rows("toolu_a2")
    assert (row.state, row.result_code, row.rule) == (
        CallState.SUCCEEDED,
        ErrorCode.OK,
        PROMPT_RULE,
    )
    assert "removed" in (row.result_preview or "")


def test_stop_closes_an_ask_nobody_approved_as_approval_required(hook: Hook, project: Path) -> None:
    hook.pre(REMOVE, removal(project), "toolu_a3")  # the user declined: no PostToolUse comes
    hook.stop()
    [row] = hook.rows("toolu_a3")
    assert (row.state, row.result_code) == (CallState.DENIED, ErrorCode.APPROVAL_REQUIRED)


def test_stop_marks_an_allowed_call_that_never_reported_interrupted(
    hook: Hook, project: Path
) -> None:
    hook.pre("Read", {"file_path": str(project / "src" / "app.py")}, "toolu_a4")
    hook.stop()
    [row] = hook.rows("toolu_a4")
    assert (row.state, row.result_code) == (CallState.INTERRUPTED, ErrorCode.EXECUTION_ERROR)


def test_stop_leaves_finished_rows_as_they_are(hook: Hook, project: Path) -> None:
    read = {"file_path": str(project / "src" / "app.py")}
    hook.pre("Read", read, "toolu_a5")
    hook.post("Read", read, "toolu_a5", tool_response={"type": "text"})
    hook.stop()
    [row] = hook.rows("toolu_a5")
    assert row.state is CallState.SUCCEEDED


def test_post_tool_use_failure_finishes_the_row_failed_with_its_error(
    hook: Hook, project: Path
) -> None:
    edit = {"file_path": str(project / "src" / "app.py"), "old_string": "nope", "new_string": "y"}
    hook.pre("Edit", edit, "toolu_a6")
    hook.post(
        "Edit",
        edit,
        "toolu_a6",
        name="PostToolUseFailure",
        error="String to replace not found in file.",
    )
    [row] = hook.rows("toolu_a6")
    assert (row.state, row.result_code) == (CallState.FAILED, ErrorCode.EXECUTION_ERROR)
    assert "String to replace not found" in (row.error_message or "")


def test_an_approved_call_is_recorded_with_its_approval_and_replays(
    hook: Hook, project: Path
) -> None:
    hook.pre(REMOVE, removal(project), "toolu_a7")
    (project / "src" / "old.txt").unlink()
    hook.post(
        REMOVE,
        removal(project),
        "toolu_a7",
        tool_response={"content": [{"type": "text", "text": "removed"}]},
    )
    cassette = load(project / "session.yaml")
    [interaction] = cassette.interactions
    assert interaction.approval is not None and interaction.approval.rule == PROMPT_RULE
    assert cassette.final_files == {"src/old.txt": None}
    report = replay(cassette, hook_tools.registry())  # the approval is granted again
    assert report.ok, report.differences


def test_a_declined_call_is_not_appended(hook: Hook, project: Path) -> None:
    hook.pre(REMOVE, removal(project), "toolu_a8")
    hook.stop()
    assert load(project / "session.yaml").interactions == ()
