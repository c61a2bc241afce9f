"""``symlink_escape`` and ``symlink_race`` reach a tool that takes absolute
paths: an absolute argument naming a path beneath the recorded root gets
its link planted at its first component inside the workspace, in the
fake world and in the directory world alike. A tool that checks where a
path really leads passes; its twin, whose check never follows links,
fails. An absolute path naming no place inside the workspace gives the
cell nothing to plant (n/a)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    Capabilities,
    PathAccess,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.harness.directory_world import world_directories
from pytest_toolguard.registry import tool
from pytest_toolguard.replay import load, record_session

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("notes",))


def _checked(root: str, path: str) -> str:
    """``path`` once links are followed, refused unless it stays in ``root``."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if not os.path.isabs(path) or os.path.commonpath([real_root, real]) != real_root:
        raise PermissionError(f"{path} is outside the workspace")
    return real


def _lexical(root: str, path: str) -> str:
    """The twin's check: on the text alone, so a link inside leads outside."""
    normal = os.path.normpath(path)
    if not os.path.isabs(path) or os.path.commonpath([root, normal]) != root:
        raise PermissionError(f"{path} is outside the workspace")
    return normal


@tool(world="directory")
def read_checked(ctx: Any, path: str) -> dict[str, Any]:
    """Reads a file named by its absolute path, after checking where it leads."""
    with open(_checked(ctx.workspace.root, path), encoding="utf-8") as handle:
        return {"text": handle.read()}


@tool(world="directory")
def read_lexical(ctx: Any, path: str) -> dict[str, Any]:
    """Twin of read_checked whose check never follows links."""
    with open(_lexical(ctx.workspace.root, path), encoding="utf-8") as handle:
        return {"text": handle.read()}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}", content="text")])
def write_checked(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Writes a file named by its absolute path: its directory opened one
    component at a time from the root, never through a link."""
    real_root = os.path.realpath(ctx.workspace.root)
    target = _checked(ctx.workspace.root, path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    directory = os.open(real_root, flags)
    for part in os.path.relpath(os.path.dirname(target), real_root).split(os.sep):
        if part != ".":
            try:
                inner = os.open(part, flags | os.O_NOFOLLOW, dir_fd=directory)
            finally:
                os.close(directory)
            directory = inner
    try:
        fd = os.open(
            os.path.basename(target),
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=directory,
        )
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    finally:
        os.close(directory)
    return {"bytes": len(text)}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}", content="text")])
def write_check_then_open(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Twin of write_checked: checks where the path leads, then opens it by
    name, so a link swapped in between is followed."""
    with open(_checked(ctx.workspace.root, path), "w", encoding="utf-8") as handle:
        handle.write(text)
    return {"bytes": len(text)}


REGISTRY = ToolRegistry([read_checked, read_lexical, write_checked, write_check_then_open])

CASES = [
    # (tool, fault, world, expected status)
    ("read_checked", "symlink_escape", "fake", "pass"),
    ("read_lexical", "symlink_escape", "fake", "fail"),
    ("read_checked", "symlink_escape", "directory", "pass"),
    ("read_lexical", "symlink_escape", "directory", "fail"),
    ("write_checked", "symlink_escape", "directory", "pass"),
    ("write_check_then_open", "symlink_race", "directory", "fail"),
    ("write_checked", "symlink_race", "directory", "pass"),
]


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Worlds made in this test's own temporary directory."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv("TMPDIR", str(temporary))
    yield temporary
    assert list(world_directories(str(temporary))) == []


def _recorded(tmp_path: Path, name: str, relative: str) -> Path:
    """One call of ``name`` on ``<root>/<relative>``, recorded with the
    absolute path; the recorded root then deleted."""
    workspace = tmp_path / "rec" / "proj"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.txt").write_text("first\n")
    arguments: dict[str, Any] = {"path": f"{workspace}/{relative}"}
    if name.startswith("write"):
        arguments["text"] = "second\n"
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        result = runtime.execute(ToolCall(call_id="c1", tool_name=name, arguments=arguments))
    runtime.close()
    assert result.ok, result.message
    shutil.rmtree(workspace.parent)
    return path


def _status(path: Path, fault_name: str, world: str) -> tuple[str, list[str]]:
    (fault,) = select_faults(fault_name)
    (target,) = targets(load(path), REGISTRY, str(path), world)
    outcome = run_cell(fault, target, REGISTRY, world=world)
    return outcome.status, list(outcome.problems)


@pytest.mark.parametrize(("name", "fault", "world", "expected"), CASES)
def test_a_link_fault_reaches_an_absolute_path_argument_inside_the_workspace(
    name: str, fault: str, world: str, expected: str, tmp_path: Path, private_tmp: Path
) -> None:
    path = _recorded(tmp_path, name, "notes/a.txt")
    status, problems = _status(path, fault, world)
    assert status == expected, problems
    if expected == "fail":
        assert any("outside" in problem or "read through" in problem for problem in problems)


@pytest.mark.parametrize(
    ("spelt", "applies"),
    [
        ("{root}/notes/a.txt", True),
        ("{root}/notes/../notes/a.txt", True),
        ("{root}//notes/./a.txt", True),
        ("{root}/a.txt", True),
        ("{root}", False),
        ("{root}/", False),
        ("{root}/notes/../..", False),
        ("{root}2/notes/a.txt", False),
        ("{root}-old/a.txt", False),
        ("/etc/passwd", False),
        ("notes/a.txt", True),
        ("../proj2/a.txt", False),
    ],
)
def test_an_absolute_path_counts_only_beneath_the_recorded_root(
    spelt: str, applies: bool, tmp_path: Path, private_tmp: Path
) -> None:
    """Only a path beneath the root has a first component to swap: the
    root itself, a sibling sharing its prefix and a system file do not."""
    path = _recorded(tmp_path, "write_checked", "notes/a.txt")
    cassette = load(path)
    (item,) = cassette.interactions
    root = cassette.workspace.root
    arguments = {"path": spelt.replace("{root}", root), "text": "x"}
    moved = replace(
        cassette, interactions=(replace(item, call=replace(item.call, arguments=arguments)),)
    )
    (target,) = targets(moved, REGISTRY, str(path), "directory")
    for fault in select_faults("symlink_escape,symlink_race"):
        assert fault.applies(target) is applies, fault.name
