"""The Claude Code hook's own files are forbidden to every call it judges,
whatever the session's write roots say, in every spelling.

With ``write_roots: ["."]`` the agent may write anywhere in the project,
yet a call naming the hook's configuration, its audit database (and
SQLite's ``-wal``, ``-shm`` and ``-journal`` beside it), the session's
cassette (and its lock), or writing a directory that holds one, is
refused with FORBIDDEN_PATH: relative or absolute, through ``..``, ``./``,
a doubled or trailing slash, another case, a link to the directory or to
the file. Paths keep their ``..`` until the sandbox walks them: a ``..``
after a link climbs from the link's target, as the kernel does.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_toolguard import CallState, SQLiteAuditStore
from pytest_toolguard.bridges.transcripts.claude_code import relative_arguments
from pytest_toolguard.cli import main

SESSION = "own-files-session"
CASSETTE = f"cassettes/{SESSION}.yaml"

OWN = {
    "audit database": ".toolguard/audit.db",
    "audit wal": ".toolguard/audit.db-wal",
    "audit shm": ".toolguard/audit.db-shm",
    "audit journal": ".toolguard/audit.db-journal",
    "configuration": "toolguard.yaml",
    "cassette": CASSETTE,
    "cassette lock": f"cassettes/.{SESSION}.yaml.lock",
}


def make_project(root: Path, **config: Any) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    settings = {
        "registry": "hook_tools:registry",
        "audit": ".toolguard/audit.db",
        "cassette": "cassettes/{session_id}.yaml",
        "unknown_tools": "allow",
        "capabilities": {
            "allowed_risks": ["read", "write", "dangerous"],
            "write_roots": ["."],
        },
        **config,
    }
    (root / "toolguard.yaml").write_text(yaml.safe_dump(settings))
    return root


class Hook:
    """Sends PreToolUse events through ``main()``, as the hook command."""

    def __init__(self, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
        self.project, self.monkeypatch, self.capsys = project, monkeypatch, capsys
        self.sent = 0

    def pre(self, tool: str, tool_input: dict[str, Any]) -> tuple[str, str]:
        self.sent += 1
        body = {
            "session_id": SESSION,
            "transcript_path": str(self.project / "t.jsonl"),
            "cwd": str(self.project),
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": f"toolu_{self.sent}",
        }
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(body)))
        self.monkeypatch.chdir(self.project)
        status = main(["hook", "pre-tool-use", "--config", "toolguard.yaml"])
        out, err = self.capsys.readouterr()
        assert status == 0, err
        output = json.loads(out)["hookSpecificOutput"]
        return output["permissionDecision"], output["permissionDecisionReason"]


@pytest.fixture
def hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Hook:
    project = make_project(tmp_path / "project")
    sender = Hook(project, monkeypatch, capsys)
    # A first call: the database, the cassette and its lock now exist.
    assert sender.pre("Read", {"file_path": str(project / "src" / "app.py")})[0] == "allow"
    for name in ("audit.db-wal", "audit.db-shm", "audit.db-journal"):
        (project / ".toolguard" / name).touch(exist_ok=True)
    # Links inside the project: to the directories holding the files, and to each file.
    (project / "state").symlink_to(".toolguard")
    (project / "recordings").symlink_to("cassettes")
    (project / "here").symlink_to(".")
    for label, own in OWN.items():
        (project / f"link-{label.replace(' ', '-')}").symlink_to(own)
    return sender


def aliased(relative: str) -> str:
    """The same file through a link to its directory."""
    directory, name = os.path.split(relative)
    alias = {".toolguard": "state", "cassettes": "recordings", "": "here"}[directory]
    return f"{alias}/{name}"


SPELLINGS: dict[str, Callable[[Path, str, str], str]] = {
    "relative": lambda project, own, label: own,
    "absolute": lambda project, own, label: str(project / own),
    "dot slash": lambda project, own, label: f"./{own}",
    "through ..": lambda project, own, label: f"src/../{own}",
    "absolute through ..": lambda project, own, label: f"{project}/src/../{own}",
    "absolute through /./": lambda project, own, label: f"{project}/./{own}",
    "doubled slashes": lambda project, own, label: f"{project}//{own.replace('/', '//')}",
    "trailing slash": lambda project, own, label: f"{own}/",
    "upper case": lambda project, own, label: own.upper(),
    "link to its directory": lambda project, own, label: aliased(own),
    "absolute link to its directory": lambda project, own, label: str(project / aliased(own)),
    "link to the file": lambda project, own, label: f"link-{label.replace(' ', '-')}",
    "link then ..": lambda project, own, label: f"state/../{own}",
}

TOOLS: dict[str, Callable[[str], tuple[str, dict[str, Any]]]] = {
    "Write": lambda path: ("Write", {"file_path": path, "content": ""}),
    "Edit": lambda path: ("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}),
    "MultiEdit": lambda path: (
        "MultiEdit",
        {"file_path": path, "edits": [{"old_string": "a", "new_string": "b"}]},
    ),
    "Read": lambda path: ("Read", {"file_path": path}),
    "remove (DANGEROUS)": lambda path: ("remove", {"path": path}),
    "NotebookEdit (not in the registry)": lambda path: (
        "NotebookEdit",
        {"notebook_path": path, "new_source": ""},
    ),
}


def assert_forbidden(decision: str, reason: str) -> None:
    assert decision == "deny", reason
    assert "FORBIDDEN_PATH" in reason


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("label", sorted(OWN))
def test_a_write_of_the_hooks_own_file_is_forbidden_in_every_spelling(
    hook: Hook, label: str, spelling: str
) -> None:
    path = SPELLINGS[spelling](hook.project, OWN[label], label)
    assert_forbidden(*hook.pre("Write", {"file_path": path, "content": ""}))


@pytest.mark.parametrize("spelling", ["relative", "absolute", "through ..", "link to the file"])
@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("label", ["audit database", "configuration", "cassette"])
def test_every_tool_naming_the_hooks_own_file_is_forbidden(
    hook: Hook, label: str, tool: str, spelling: str
) -> None:
    path = SPELLINGS[spelling](hook.project, OWN[label], label)
    assert_forbidden(*hook.pre(*TOOLS[tool](path)))


@pytest.mark.parametrize(
    "directory", [".toolguard", "state", "cassettes", "recordings", ".", "./", "src/.."]
)
@pytest.mark.parametrize("tool", ["Write", "remove (DANGEROUS)"])
def test_a_write_of_a_directory_holding_the_hooks_files_is_forbidden(
    hook: Hook, directory: str, tool: str
) -> None:
    assert_forbidden(*hook.pre(*TOOLS[tool](directory)))


@pytest.mark.parametrize(
    ("tool", "path"),
    [
        ("Write", "src/app.py"),
        ("Write", "notes/audit.db"),
        ("Write", "toolguard.yaml.bak"),
        ("Write", ".toolguardian/audit.db"),
        ("Edit", "src/app.py"),
        ("Read", "src/app.py"),
        ("Read", "."),
    ],
)
def test_other_files_are_judged_by_the_roots_as_before(hook: Hook, tool: str, path: str) -> None:
    decision, reason = hook.pre(*TOOLS[tool](str(hook.project / path)))
    assert decision == "allow", reason


def test_a_glob_of_the_whole_project_is_allowed(hook: Hook) -> None:
    decision, reason = hook.pre("Glob", {"pattern": "**/*", "path": str(hook.project)})
    assert decision == "allow", reason


def test_the_audit_log_survives_every_refused_write(hook: Hook) -> None:
    database = hook.project / ".toolguard" / "audit.db"
    before = database.read_bytes()[:16]
    for spelling in sorted(SPELLINGS):
        path = SPELLINGS[spelling](hook.project, OWN["audit database"], "audit database")
        assert_forbidden(*hook.pre("Write", {"file_path": path, "content": ""}))
    assert database.read_bytes()[:16] == before == b"SQLite format 3\x00"
    with SQLiteAuditStore(database) as store:
        rows = store.rows(SESSION)
    assert rows[0].tool_name == "Read" and rows[0].call_id == "toolu_1"
    assert [row.state for row in rows[1:]] == [CallState.DENIED] * len(SPELLINGS)


@pytest.mark.parametrize("audit", ["var/log/tg.sqlite", "tg.sqlite"])
@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_a_configured_audit_path_is_forbidden_with_its_side_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, audit: str, suffix: str
) -> None:
    project = make_project(tmp_path / "project", audit=audit)
    sender = Hook(project, monkeypatch, capsys)
    target = str(project / f"{audit}{suffix}")
    assert_forbidden(*sender.pre("Write", {"file_path": target, "content": ""}))
    assert (project / audit).is_file()


def test_a_configuration_given_by_another_path_is_forbidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    project = make_project(tmp_path / "project")
    (project / "config").mkdir()
    (project / "toolguard.yaml").rename(project / "config" / "guard.yaml")
    sender = Hook(project, monkeypatch, capsys)
    monkeypatch.setattr(sys, "stdin", io.StringIO("{}"))
    body = {
        "session_id": SESSION,
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(project / "config" / "guard.yaml"), "content": ""},
        "tool_use_id": "toolu_cfg",
    }
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(body)))
    monkeypatch.chdir(project)
    status = main(["hook", "pre-tool-use", "--config", "config/guard.yaml"])
    output = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
    assert status == 0 and sender.sent == 0
    assert_forbidden(output["permissionDecision"], output["permissionDecisionReason"])


def test_a_hard_link_to_the_database_is_forbidden(hook: Hook) -> None:
    os.link(hook.project / ".toolguard" / "audit.db", hook.project / "src" / "copy.db")
    decision, reason = hook.pre("Read", {"file_path": str(hook.project / "src" / "copy.db")})
    assert decision == "deny"


# -- `..` after a link climbs from the link's target --------------------------------


@pytest.mark.parametrize(
    ("value", "relative"),
    [
        ("/proj/ln/../secret", "ln/../secret"),
        ("/proj/a/../../etc/passwd", "a/../../etc/passwd"),
        ("/proj/./a//b/", "a/b"),
        ("/proj", "."),
        ("/proj/", "."),
        ("//proj/x", "x"),
        ("/proj/../proj/x", "../proj/x"),
        ("/projx/y", "/projx/y"),
        ("/other/proj/y", "/other/proj/y"),
        ("relative/../x", "relative/../x"),
    ],
)
def test_relative_arguments_never_collapses_a_dotdot_as_text(value: str, relative: str) -> None:
    for name in ("file_path", "path", "notebook_path"):
        assert relative_arguments({name: value}, "/proj") == {name: relative}


@pytest.mark.parametrize("tool", ["Read", "Write", "Edit"])
@pytest.mark.parametrize("target", ["absolute", "relative"])
def test_a_dotdot_after_a_link_out_of_the_project_is_judged_where_it_leads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, tool: str, target: str
) -> None:
    project = make_project(tmp_path / "project")
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside\n")
    (project / "secret.txt").write_text("inside\n")
    link_target = outside / "inner" if target == "absolute" else Path("../outside/inner")
    (project / "ln").symlink_to(link_target)
    sender = Hook(project, monkeypatch, capsys)
    path = f"{project}/ln/../secret.txt"  # the kernel opens outside/secret.txt
    assert Path(path).read_text() == "outside\n"
    decision, reason = sender.pre(*TOOLS[tool](path))
    assert decision == "deny" and "PATH_OUTSIDE_WORKSPACE" in reason, reason
