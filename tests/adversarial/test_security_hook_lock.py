"""The Claude Code hook's cassette lock file is its own: created 0600, never
opened through a link planted at its name, never anything but a regular file.

Each event of a session with ``cassette:`` takes ``cassettes/.<name>.lock``
before it changes the cassette. Another process (or the agent, through a tool
the hook does not judge, such as Bash) can plant something at that name
first. Whatever is planted, nothing is created or changed where it points,
and the hook blocks (exit 2, one line) rather than record through it."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_toolguard.cli import USAGE_ERROR, main

SESSION = "lock-session"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "cassettes").mkdir()
    (root / "toolguard.yaml").write_text(
        yaml.safe_dump(
            {
                "audit": ".toolguard/audit.db",
                "cassette": "cassettes/{session_id}.yaml",
                "capabilities": {"allowed_risks": ["read", "write"], "write_roots": ["src"]},
            }
        )
    )
    return root


def lock_of(project: Path) -> Path:
    return project / "cassettes" / f".{SESSION}.yaml.lock"


def pre_tool_use(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], project: Path
) -> tuple[int, str, str]:
    body: dict[str, Any] = {
        "session_id": SESSION,
        "transcript_path": str(project / "t.jsonl"),
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(project / "src" / "app.py")},
        "tool_use_id": "toolu_lock",
    }
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(body).encode()), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.chdir(project)
    status = main(["hook", "pre-tool-use", "--config", str(project / "toolguard.yaml")])
    out, err = capsys.readouterr()
    return status, out, err


def plant_dangling_link(lock: Path, outside: Path) -> Path:
    victim = outside / "created-by-the-hook"
    lock.symlink_to(victim)
    return victim


def plant_link_to_a_file(lock: Path, outside: Path) -> Path:
    victim = outside / "kept.txt"
    victim.write_text("mine\n")
    victim.chmod(0o640)
    lock.symlink_to(victim)
    return victim


def plant_relative_link(lock: Path, outside: Path) -> Path:
    victim = outside / "relative-victim"
    lock.symlink_to(os.path.relpath(victim, lock.parent))
    return victim


def plant_link_to_a_directory(lock: Path, outside: Path) -> Path:
    victim = outside / "a-directory"
    victim.mkdir()
    lock.symlink_to(victim)
    return victim


def plant_fifo(lock: Path, outside: Path) -> Path:
    os.mkfifo(lock)
    return lock


def plant_directory(lock: Path, outside: Path) -> Path:
    lock.mkdir()
    return lock


PLANTS = {
    "dangling link": plant_dangling_link,
    "link to a file": plant_link_to_a_file,
    "relative link": plant_relative_link,
    "link to a directory": plant_link_to_a_directory,
    "fifo": plant_fifo,
    "directory": plant_directory,
}


def state_of(path: Path) -> tuple[Any, ...] | None:
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    content = path.read_bytes() if stat.S_ISREG(status.st_mode) else None
    names = sorted(os.listdir(path)) if stat.S_ISDIR(status.st_mode) else None
    return (stat.S_IFMT(status.st_mode), stat.S_IMODE(status.st_mode), content, names)


@pytest.mark.parametrize("plant", list(PLANTS.values()), ids=list(PLANTS))
def test_whatever_is_planted_at_the_lock_is_never_followed_and_the_hook_blocks(
    plant: Any,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = plant(lock_of(project), outside)
    before, listing = state_of(victim), sorted(os.listdir(outside))
    status, out, err = pre_tool_use(monkeypatch, capsys, project)
    assert state_of(victim) == before
    assert sorted(os.listdir(outside)) == listing
    assert status == USAGE_ERROR, (status, out, err)
    assert out == "" and err.startswith("toolguard: ") and err.count("\n") == 1, err
    assert "lock" in err
    assert not (project / "cassettes" / f"{SESSION}.yaml").exists()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000])
def test_a_new_lock_file_is_private_whatever_the_umask(
    umask: int,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = os.umask(umask)
    try:
        status, out, err = pre_tool_use(monkeypatch, capsys, project)
    finally:
        os.umask(old)
    assert status == 0, err
    lock = lock_of(project)
    assert stat.S_ISREG(os.lstat(lock).st_mode)
    assert stat.S_IMODE(os.lstat(lock).st_mode) == 0o600
    assert (project / "cassettes" / f"{SESSION}.yaml").is_file()


def test_an_existing_lock_file_is_used_as_it_is(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = lock_of(project)
    lock.write_bytes(b"")
    lock.chmod(0o640)
    for _ in range(2):
        status, _, err = pre_tool_use(monkeypatch, capsys, project)
        assert status == 0, err
    assert stat.S_IMODE(os.lstat(lock).st_mode) == 0o640
    assert lock.read_bytes() == b""
