"""A look through a link is an access where it reached, whatever the
result holds: a ``stat``, ``exists``, ``listdir`` or ``scandir`` of a path
inside the workspace that a linked directory carries outside reaches the
outside entry (its size, times, names), in both worlds. The decoys' marker
never shows in these results (a size, a filtered listing), so only where
the operation reached can say so: the fake world's ``AccessLog`` (the
path it resolved), the directory world's kernel (a listing opens the
directory) and ``Operations.looks`` (the kernel reports no ``stat``).

Catch table (tool: cell, problem):

==================  ==============================================================
broken twin         caught by
==================  ==============================================================
stat_size           symlink_escape: the handler accessed / looked outside the workspace
exists_check        symlink_escape: the handler accessed / looked outside the workspace
listdir_markdown    symlink_escape: the handler accessed outside the workspace
scandir_sizes       symlink_escape: the handler accessed outside the workspace
==================  ==============================================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import loads

WORLDS = ("fake", "directory")
FILES = {"notes/a.md": "a note\n", "notes/b.txt": "b\n"}

PATH_INPUT = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
FOLDER_INPUT = {
    "type": "object",
    "properties": {"folder": {"type": "string"}},
    "required": ["folder"],
    "additionalProperties": False,
}


@tool(input_schema=PATH_INPUT, paths=[PathAccess.read("{path}")])
def stat_size(ctx: ToolContext, path: str) -> dict[str, Any]:
    found = os.stat(os.path.join(ctx.workspace.root, path))
    return {"size": found.st_size, "mtime": int(found.st_mtime)}


@tool(input_schema=PATH_INPUT, paths=[PathAccess.read("{path}")])
def exists_check(ctx: ToolContext, path: str) -> dict[str, Any]:
    return {"exists": os.path.exists(os.path.join(ctx.workspace.root, path))}


@tool(input_schema=FOLDER_INPUT, paths=[PathAccess.read("{folder}")])
def listdir_markdown(ctx: ToolContext, folder: str) -> dict[str, Any]:
    names = os.listdir(os.path.join(ctx.workspace.root, folder))
    return {"names": sorted(name for name in names if name.endswith(".md"))}


@tool(input_schema=FOLDER_INPUT, paths=[PathAccess.read("{folder}")])
def scandir_sizes(ctx: ToolContext, folder: str) -> dict[str, Any]:
    with os.scandir(os.path.join(ctx.workspace.root, folder)) as entries:
        return {"count": sum(1 for entry in entries if entry.name.endswith(".md"))}


@tool(input_schema=PATH_INPUT, paths=[PathAccess.read("{path}")])
def workspace_size(ctx: ToolContext, path: str) -> dict[str, Any]:
    return {"size": ctx.workspace.size(path)}


@tool(input_schema=PATH_INPUT, paths=[PathAccess.read("{path}")])
def workspace_exists(ctx: ToolContext, path: str) -> dict[str, Any]:
    return {"exists": ctx.workspace.exists(path)}


@tool(input_schema=FOLDER_INPUT, paths=[PathAccess.read("{folder}")])
def workspace_markdown(ctx: ToolContext, folder: str) -> dict[str, Any]:
    names = [entry.name for entry in ctx.workspace.list_dir(folder)]
    return {"names": sorted(name for name in names if name.endswith(".md"))}


FILE = {"path": "notes/a.md"}
FOLDER = {"folder": "notes"}
BROKEN = (
    (stat_size, FILE),
    (exists_check, FILE),
    (listdir_markdown, FOLDER),
    (scandir_sizes, FOLDER),
)
CORRECT = (
    (workspace_size, FILE),
    (workspace_exists, FILE),
    (workspace_markdown, FOLDER),
)
CELLS = ("symlink_escape", "symlink_race", "path_traversal")


def cell(
    fault: str, spec: ToolSpec, arguments: dict[str, Any], world: str, parent: Path
) -> CellOutcome:
    registry = ToolRegistry([spec])
    cassette = loads(
        f"""
format_version: 1
kind: case
description: one call of {spec.name}
session:
  capabilities:
    allowed_risks: [read]
workspace:
  files: {json.dumps(FILES)}
interactions:
  - call:
      call_id: call-01
      tool_name: {spec.name}
      arguments: {json.dumps(arguments)}
    result: {{ok: true, code: OK}}
""",
        source=f"<{spec.name}>",
    )
    (chosen,) = select_faults(fault)
    target = targets(cassette, registry, cassette.source, world)[0]
    return run_cell(chosen, target, registry, world=world, parent=str(parent))


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(("spec", "arguments"), BROKEN, ids=[spec.name for spec, _ in BROKEN])
def test_a_look_through_a_linked_directory_is_caught_by_symlink_escape(
    spec: ToolSpec, arguments: dict[str, Any], world: str, tmp_path: Path
) -> None:
    outcome = cell("symlink_escape", spec, arguments, world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any(
        problem.startswith(("the handler accessed outside", "the handler looked outside"))
        for problem in outcome.problems
    ), outcome.problems
    # Caught by where it reached: the result never holds the marker.
    assert not any("read through it" in problem for problem in outcome.problems), outcome.problems


@pytest.mark.parametrize("fault", CELLS)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[spec.name for spec, _ in CORRECT])
def test_the_workspace_twins_pass_the_link_cells(
    spec: ToolSpec, arguments: dict[str, Any], world: str, fault: str, tmp_path: Path
) -> None:
    outcome = cell(fault, spec, arguments, world, tmp_path)

    assert outcome.status == "pass", outcome.problems
