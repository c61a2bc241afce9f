"""``toolguard hook`` with ``cassette:``: a Claude Code session recorded one
hook event at a time, then replayed.

The session is piped to the real command, one process per event, as Claude
Code runs it; between an event pair the test does what Claude Code's tool
would have done to the files."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import python_path

from pytest_toolguard.bridges.definitions.claude_code import claude_code_registry
from pytest_toolguard.cli import main
from pytest_toolguard.replay import load, replay

ROOT = Path(__file__).parents[2]
SESSION = "5f0c9a1e-session"


def event(
    project: Path, name: str, tool: str, tool_input: dict[str, Any], tool_use_id: str, **extra: Any
) -> dict[str, Any]:
    """A hook event as Claude Code sends it (DESIGN.md: Claude Code hooks)."""
    return {
        "session_id": SESSION,
        "transcript_path": str(project / f"{SESSION}.jsonl"),
        "cwd": str(project),
        "permission_mode": "default",
        "hook_event_name": name,
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": tool_use_id,
        **extra,
    }


def piped(project: Path, command: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``toolguard hook COMMAND`` as a process, the event on its stdin."""
    environment = {
        **os.environ,
        "PYTHONPATH": python_path(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest_toolguard", "hook", command, "--config", "toolguard.yaml"],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        cwd=project,
        env=environment,
        timeout=120,
    )


def make_project(root: Path, **config: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "src" / "util.py").write_text("def f():\n    return 1\n")
    settings = {
        "audit": ".toolguard/audit.db",
        "cassette": "cassettes/{session_id}.yaml",
        "capabilities": {"allowed_risks": ["read", "write", "dangerous"], "write_roots": ["src"]},
        **config,
    }
    (root / "toolguard.yaml").write_text(yaml.safe_dump(settings))
    return root


class Session:
    """Sends event pairs through the real command, doing the tool's work between."""

    def __init__(self, project: Path) -> None:
        self.project = project

    def pre(self, tool: str, tool_input: dict[str, Any], tool_use_id: str) -> str:
        run = piped(
            self.project,
            "pre-tool-use",
            event(self.project, "PreToolUse", tool, tool_input, tool_use_id),
        )
        assert run.returncode == 0, run.stderr
        return str(json.loads(run.stdout)["hookSpecificOutput"]["permissionDecision"])

    def post(self, tool: str, tool_input: dict[str, Any], tool_use_id: str, response: Any) -> None:
        body = event(
            self.project, "PostToolUse", tool, tool_input, tool_use_id, tool_response=response
        )
        run = piped(self.project, "post-tool-use", body)
        assert run.returncode == 0, run.stderr


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short session: Read, Write (a new file), Edit, a Read the policy
    refuses, Grep over a directory, and an approved Bash."""
    project = make_project(tmp_path_factory.mktemp("hook") / "project")
    session = Session(project)
    app, new = str(project / "src" / "app.py"), str(project / "src" / "new.py")

    assert session.pre("Read", {"file_path": app}, "toolu_01") == "allow"
    session.post(
        "Read",
        {"file_path": app},
        "toolu_01",
        {"type": "text", "file": {"filePath": app, "content": "x = 1\n", "numLines": 1}},
    )

    write = {"file_path": new, "content": "y = 2\n"}
    assert session.pre("Write", write, "toolu_02") == "allow"
    Path(new).write_text("y = 2\n")  # Claude Code's Write
    session.post(
        "Write", write, "toolu_02", {"type": "create", "filePath": new, "content": "y = 2\n"}
    )

    edit = {"file_path": app, "old_string": "x = 1", "new_string": "x = 3"}
    assert session.pre("Edit", edit, "toolu_03") == "allow"
    Path(app).write_text("x = 3\n")  # Claude Code's Edit
    session.post(
        "Edit", edit, "toolu_03", {"filePath": app, "oldString": "x = 1", "newString": "x = 3"}
    )

    assert session.pre("Read", {"file_path": "/etc/passwd"}, "toolu_04") == "deny"

    grep = {"pattern": "return", "path": str(project / "src")}
    assert session.pre("Grep", grep, "toolu_05") == "allow"
    session.post(
        "Grep",
        grep,
        "toolu_05",
        {"mode": "files_with_matches", "filenames": ["src/util.py"], "numFiles": 1},
    )

    assert session.pre("Bash", {"command": "ls src"}, "toolu_06") == "ask"
    session.post(
        "Bash",
        {"command": "ls src"},
        "toolu_06",
        {"stdout": "app.py\nnew.py\nutil.py", "stderr": "", "interrupted": False},
    )
    return project / "cassettes" / f"{SESSION}.yaml"


def test_a_piped_hook_session_replays_through_the_real_executor(recorded: Path) -> None:
    report = replay(load(recorded), claude_code_registry())
    assert report.ok, report.differences
    assert [i.call.call_id for i in load(recorded).interactions] == [
        "toolu_01",
        "toolu_02",
        "toolu_03",
        "toolu_04",
        "toolu_05",
    ]


def test_the_hook_cassette_replays_with_pytest_toolguard_replay(recorded: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_toolguard",
            "replay",
            str(recorded),
            "--registry",
            "pytest_toolguard.bridges.definitions.claude_code:claude_code_registry",
            "--",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        cwd=recorded.parent,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_a_file_is_kept_as_it_was_before_the_first_call_that_declared_it(recorded: Path) -> None:
    cassette = load(recorded)
    assert cassette.workspace.files["src/app.py"] == b"x = 1\n"
    assert cassette.final_files["src/app.py"].content == b"x = 3\n"  # type: ignore[union-attr]


def test_a_file_a_call_created_is_absent_before_and_present_after(recorded: Path) -> None:
    cassette = load(recorded)
    assert "src/new.py" not in cassette.workspace.files
    assert cassette.final_files["src/new.py"].content == b"y = 2\n"  # type: ignore[union-attr]


def test_a_declared_directory_brings_every_file_beneath_it(recorded: Path) -> None:
    assert load(recorded).workspace.files["src/util.py"] == b"def f():\n    return 1\n"


def test_a_call_the_policy_refused_is_appended_with_its_refusal(recorded: Path) -> None:
    refused = load(recorded).interactions[3]
    assert (refused.result.code, refused.audit.decision) == ("PATH_OUTSIDE_WORKSPACE", "deny")


def test_claude_codes_response_is_kept_and_never_compared(recorded: Path) -> None:
    read = load(recorded).interactions[0]
    assert read.result.check_data is False
    assert read.transcript_result == {
        "ok": True,
        "content": {
            "type": "text",
            "file": {
                "filePath": str(recorded.parent.parent / "src" / "app.py"),
                "content": "x = 1\n",
                "numLines": 1,
            },
        },
    }


def test_a_tool_toolguard_never_runs_is_audited_but_not_appended(recorded: Path) -> None:
    from pytest_toolguard import CallState, SQLiteAuditStore

    with SQLiteAuditStore(recorded.parent.parent / ".toolguard" / "audit.db") as store:
        row = store.get("toolu_06")
    assert row is not None and row.state is CallState.SUCCEEDED
    assert "toolu_06" not in [i.call.call_id for i in load(recorded).interactions]


def test_hooks_of_parallel_calls_lose_no_interaction(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    session = Session(project)
    calls = [
        (f"toolu_p{n}", {"file_path": str(project / "src" / "app.py"), "offset": n + 1})
        for n in range(4)
    ]
    for tool_use_id, tool_input in calls:
        assert session.pre("Read", tool_input, tool_use_id) == "allow"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    running = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_toolguard",
                "hook",
                "post-tool-use",
                "--config",
                "toolguard.yaml",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=project,
            env=environment,
        )
        for _ in calls
    ]
    for process, (tool_use_id, tool_input) in zip(running, calls, strict=True):
        body = event(
            project, "PostToolUse", "Read", tool_input, tool_use_id, tool_response={"type": "text"}
        )
        process.communicate(json.dumps(body), timeout=120)
        assert process.returncode == 0
    cassette = load(project / "cassettes" / f"{SESSION}.yaml")
    assert sorted(i.call.call_id for i in cassette.interactions) == [c for c, _ in calls]


# -- in process: main() with the event on stdin ---------------------------------------------


def hook(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    project: Path,
    command: str,
    body: dict[str, Any],
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(body)))
    status = main(["hook", command, "--config", str(project / "toolguard.yaml")])
    out, err = capsys.readouterr()
    return status, out, err


def test_toolguards_own_files_and_git_are_never_recorded(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    project = make_project(tmp_path / "project")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    glob = {"pattern": "**/*.py", "path": str(project)}
    statuses = [
        hook(
            monkeypatch,
            capsys,
            project,
            "pre-tool-use",
            event(project, "PreToolUse", "Glob", glob, "g1"),
        )[0],
        hook(
            monkeypatch,
            capsys,
            project,
            "post-tool-use",
            event(project, "PostToolUse", "Glob", glob, "g1", tool_response={}),
        )[0],
        # Now the cassette, its lock and the audit database are in the project.
        hook(
            monkeypatch,
            capsys,
            project,
            "pre-tool-use",
            event(project, "PreToolUse", "Glob", glob, "g2"),
        )[0],
    ]
    assert statuses == [0, 0, 0]
    files = set(load(project / "cassettes" / f"{SESSION}.yaml").workspace.files)
    assert files == {"src/app.py", "src/util.py", "toolguard.yaml"}


def test_a_cassette_of_another_session_is_refused_with_exit_2(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    project = make_project(tmp_path / "project", cassette="cassettes/one.yaml")
    read = {"file_path": str(project / "src" / "app.py")}
    hook(
        monkeypatch,
        capsys,
        project,
        "pre-tool-use",
        event(project, "PreToolUse", "Read", read, "r1"),
    )
    other = {**event(project, "PreToolUse", "Read", read, "r2"), "session_id": "another"}
    status, out, err = hook(monkeypatch, capsys, project, "pre-tool-use", other)
    assert status == 2 and out == ""
    assert "holds session" in err and "{session_id}" in err


def test_a_cassette_path_naming_other_fields_is_a_usage_error(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    project = make_project(tmp_path / "project", cassette="cassettes/{tool_name}.yaml")
    read = {"file_path": str(project / "src" / "app.py")}
    status, _, err = hook(
        monkeypatch,
        capsys,
        project,
        "pre-tool-use",
        event(project, "PreToolUse", "Read", read, "r1"),
    )
    assert status == 2 and "may name only {session_id}" in err


def test_a_link_out_of_the_project_is_kept_as_a_link_and_refused_again(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    project = make_project(tmp_path / "project")
    (tmp_path / "secret.txt").write_text("tg-outside-content-7f3a\n")
    (project / "src" / "out.txt").symlink_to(tmp_path / "secret.txt")
    read = {"file_path": str(project / "src" / "out.txt")}
    status, out, _ = hook(
        monkeypatch,
        capsys,
        project,
        "pre-tool-use",
        event(project, "PreToolUse", "Read", read, "l1"),
    )
    assert status == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
    cassette = load(project / "cassettes" / f"{SESSION}.yaml")
    assert cassette.workspace.symlinks == {"src/out.txt": str(tmp_path / "secret.txt")}
    assert (
        b"tg-outside-content-7f3a" not in (project / "cassettes" / f"{SESSION}.yaml").read_bytes()
    )
    report = replay(cassette, claude_code_registry())
    assert report.ok, report.differences


def test_a_secret_in_a_call_its_file_and_the_response_never_reaches_the_cassette(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    secret = "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
    project = make_project(tmp_path / "project")
    path = project / "src" / "config.py"
    write = {"file_path": str(path), "content": f"TOKEN = '{secret}'\n"}
    hook(
        monkeypatch,
        capsys,
        project,
        "pre-tool-use",
        event(project, "PreToolUse", "Write", write, "w1"),
    )
    path.write_text(write["content"])  # Claude Code's Write
    status, _, err = hook(
        monkeypatch,
        capsys,
        project,
        "post-tool-use",
        event(
            project,
            "PostToolUse",
            "Write",
            write,
            "w1",
            tool_response={"content": write["content"]},
        ),
    )
    assert status == 0, err
    cassette_file = project / "cassettes" / f"{SESSION}.yaml"
    assert secret.encode() not in cassette_file.read_bytes()
    assert replay(load(cassette_file), claude_code_registry()).ok
