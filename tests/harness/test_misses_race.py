"""A handler's own check-then-use race is caught by ``symlink_race``
whichever Python API made the check and the use, in both worlds: the
link is swapped in before every operation of a clean run that names the
link point (its first component), however many operations came before,
for tools that read as well as tools that write. The correct twins
(``O_NOFOLLOW`` through directory descriptors, the workspace API) pass
every link cell.

Catch table (tool: cell, problem):

==============================  ===========================================================
broken twin                     caught by
==============================  ===========================================================
write_realpath_then_open        symlink_race: the handler accessed / outside changed
write_lstat_then_open           symlink_race: the handler accessed / outside changed
write_resolve_then_write_text   symlink_race: the handler accessed / outside changed
write_after_many_looks          symlink_race (the swap past the 12th operation)
read_realpath_then_open         symlink_race: ... became a symlink ...: the call read through it
list_isdir_then_listdir         symlink_race: ... became a symlink ...: the call read through it
==============================  ===========================================================
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.directory import Operations
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import loads

WORLDS = ("fake", "directory")

WRITE_INPUT = {
    "type": "object",
    "properties": {"ticket_id": {"type": "string"}, "body": {"type": "string"}},
    "required": ["ticket_id", "body"],
    "additionalProperties": False,
}
READ_INPUT = {
    "type": "object",
    "properties": {"ticket_id": {"type": "string"}},
    "required": ["ticket_id"],
    "additionalProperties": False,
}
WRITE = {"ticket_id": "T1", "body": "thanks, fixed\n"}
READ = {"ticket_id": "T0"}
FILES = {"outbox/T0.md": "an earlier reply\n", "templates/a.txt": "a\n"}


def _inside(root: str, path: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def _writer(name: str, body: Callable[[ToolContext, str, str], None]) -> ToolSpec:
    @tool(
        name=name,
        input_schema=WRITE_INPUT,
        risk=Risk.WRITE,
        paths=[PathAccess.write("outbox/{ticket_id}.md", content="body")],
    )
    def handler(ctx: ToolContext, ticket_id: str, body_text: str = "", **rest: Any) -> Any:
        body(ctx, ticket_id, rest.get("body", body_text))
        return {"ticket_id": ticket_id}

    return handler


def _realpath_then_open(ctx: ToolContext, ticket_id: str, body: str) -> None:
    path = os.path.join(ctx.workspace.root, "outbox", f"{ticket_id}.md")
    if not _inside(ctx.workspace.root, path):
        raise PermissionError("outside")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(body)


def _lstat_then_open(ctx: ToolContext, ticket_id: str, body: str) -> None:
    outbox = os.path.join(ctx.workspace.root, "outbox")
    if stat.S_ISLNK(os.lstat(outbox).st_mode):
        raise PermissionError("a link")
    with open(os.path.join(outbox, f"{ticket_id}.md"), "w", encoding="utf-8") as handle:
        handle.write(body)


def _resolve_then_write_text(ctx: ToolContext, ticket_id: str, body: str) -> None:
    path = Path(ctx.workspace.root, "outbox", f"{ticket_id}.md")
    if not path.resolve().is_relative_to(Path(ctx.workspace.root).resolve()):
        raise PermissionError("outside")
    path.write_text(body, encoding="utf-8")


def _after_many_looks(ctx: ToolContext, ticket_id: str, body: str) -> None:
    # A realistic preamble: it looks for templates before it writes.
    for number in range(20):
        os.path.exists(os.path.join(ctx.workspace.root, "templates", f"t{number}.txt"))
    _realpath_then_open(ctx, ticket_id, body)


def _nofollow(ctx: ToolContext, ticket_id: str, body: str) -> None:
    """The correct way without the workspace API: every component opened
    relative to its parent's descriptor, links refused by the kernel."""
    top = os.open(ctx.workspace.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        outbox = os.open("outbox", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            fd = os.open(f"{ticket_id}.md", flags, 0o644, dir_fd=outbox)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(body)
        finally:
            os.close(outbox)
    finally:
        os.close(top)


def _workspace(ctx: ToolContext, ticket_id: str, body: str) -> None:
    ctx.workspace.write_text(f"outbox/{ticket_id}.md", body)


@tool(input_schema=READ_INPUT, paths=[PathAccess.read("outbox/{ticket_id}.md")])
def read_realpath_then_open(ctx: ToolContext, ticket_id: str) -> dict[str, Any]:
    path = os.path.join(ctx.workspace.root, "outbox", f"{ticket_id}.md")
    if not _inside(ctx.workspace.root, path):
        raise PermissionError("outside")
    with open(path, encoding="utf-8") as handle:
        return {"text": handle.read()}


@tool(input_schema=READ_INPUT, paths=[PathAccess.read("outbox/{ticket_id}.md")])
def read_through_workspace(ctx: ToolContext, ticket_id: str) -> dict[str, Any]:
    return {"text": ctx.workspace.read_text(f"outbox/{ticket_id}.md")}


LIST_INPUT = {
    "type": "object",
    "properties": {"folder": {"type": "string"}},
    "required": ["folder"],
    "additionalProperties": False,
}


@tool(input_schema=LIST_INPUT, paths=[PathAccess.read("{folder}")])
def list_isdir_then_listdir(ctx: ToolContext, folder: str) -> dict[str, Any]:
    path = os.path.join(ctx.workspace.root, folder)
    if os.path.islink(path) or not os.path.isdir(path):
        raise PermissionError("not a plain directory")
    return {"names": sorted(os.listdir(path))}


@tool(input_schema=LIST_INPUT, paths=[PathAccess.read("{folder}")])
def list_through_workspace(ctx: ToolContext, folder: str) -> dict[str, Any]:
    return {"names": sorted(entry.name for entry in ctx.workspace.list_dir(folder))}


BROKEN = (
    (_writer("write_realpath_then_open", _realpath_then_open), WRITE),
    (_writer("write_lstat_then_open", _lstat_then_open), WRITE),
    (_writer("write_resolve_then_write_text", _resolve_then_write_text), WRITE),
    (_writer("write_after_many_looks", _after_many_looks), WRITE),
    (read_realpath_then_open, READ),
    (list_isdir_then_listdir, {"folder": "outbox"}),
)
CORRECT = (
    (_writer("write_nofollow", _nofollow), WRITE),
    (_writer("write_through_workspace", _workspace), WRITE),
    (read_through_workspace, READ),
    (list_through_workspace, {"folder": "outbox"}),
)


def _case(spec: ToolSpec, arguments: dict[str, Any], files: dict[str, str]) -> Any:
    return loads(
        f"""
format_version: 1
kind: case
description: one call of {spec.name}
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [outbox]
workspace:
  files: {json.dumps(files)}
interactions:
  - call:
      call_id: call-01
      tool_name: {spec.name}
      arguments: {json.dumps(arguments)}
    result: {{ok: true, code: OK}}
""",
        source=f"<{spec.name}>",
    )


def cell(
    fault: str,
    spec: ToolSpec,
    arguments: dict[str, Any],
    world: str,
    parent: Path,
    files: dict[str, str] = FILES,
) -> CellOutcome:
    registry = ToolRegistry([spec])
    cassette = _case(spec, arguments, files)
    (chosen,) = select_faults(fault)
    target = targets(cassette, registry, cassette.source, world)[0]
    return run_cell(chosen, target, registry, world=world, parent=str(parent))


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(("spec", "arguments"), BROKEN, ids=[spec.name for spec, _ in BROKEN])
def test_a_handlers_own_check_then_use_is_caught_by_symlink_race(
    spec: ToolSpec, arguments: dict[str, Any], world: str, tmp_path: Path
) -> None:
    outcome = cell("symlink_race", spec, arguments, world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any(
        "outside" in problem and "inconclusive" not in problem for problem in outcome.problems
    ), outcome.problems


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[spec.name for spec, _ in CORRECT])
def test_correct_twins_pass_symlink_race(
    spec: ToolSpec, arguments: dict[str, Any], world: str, tmp_path: Path
) -> None:
    outcome = cell("symlink_race", spec, arguments, world, tmp_path)

    assert outcome.status == "pass", outcome.problems


LOOKS: dict[str, Callable[[str], object]] = {
    # Looked up when called, as a handler's os.stat(...) is.
    "os.stat": lambda path: os.stat(path),
    "os.lstat": lambda path: os.lstat(path),
    "os.path.exists": lambda path: os.path.exists(path),
    "os.path.isdir": lambda path: os.path.isdir(path),
    "os.path.islink": lambda path: os.path.islink(path),
    "os.path.realpath": lambda path: os.path.realpath(path),
    "os.access": lambda path: os.access(path, os.R_OK),
    "Path.exists": lambda path: Path(path).exists(),
    "Path.resolve": lambda path: Path(path).resolve(),
}


@pytest.mark.parametrize("look", sorted(LOOKS))
def test_the_directory_world_counts_a_look_that_raises_no_audit_event(
    look: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Outside a handler run nothing counts: the probe pretends to be one.
    monkeypatch.setattr(Operations, "_handlers", lambda self: True)
    (tmp_path / "a.txt").write_text("a")
    seen: list[tuple[int, str, str]] = []
    with Operations() as operations:
        operations.before = lambda index, event, path: seen.append((index, event, path))
        LOOKS[look](str(tmp_path / "a.txt"))

    assert len(seen) >= 1, look
    assert all(path == str(tmp_path / "a.txt") for _index, _event, path in seen), seen
    assert operations.paths == [path for _index, _event, path in seen]
    # Put back once uninstalled: nothing counts any more, nothing is wrapped.
    assert not hasattr(os.stat, "__wrapped__") and not hasattr(os.path.realpath, "__wrapped__")
