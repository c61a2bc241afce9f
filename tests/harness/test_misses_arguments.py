"""Arguments off the recorded path meet the confinement faults: a string
argument whose value a clean run joined into a path is a path argument
whatever its name (a glob ``pattern``, a note's ``title``), and the
faults also run with a few other argument sets (booleans flipped,
integers moved), so that a branch the recorded arguments never took (an
``open()`` of a host path only when ``start > 0``, a walk only when
``recursive``) meets the payloads and the links too. A declared path's
payloads are refused by the policy before any branch: there the link
swapped in as the handler starts is what meets it.

Catch table (tool: cell, problem):

=========================  ==============  =========================================================
broken twin                cell            caught by
=========================  ==============  =========================================================
glob_pattern               path_traversal  the handler accessed / looked outside the workspace
glob_all_pattern           path_traversal  the handler accessed / looked outside the workspace
note_by_title              path_traversal  the handler accessed / looked outside the workspace
note_by_title              symlink_escape  notes was a symlink ...: the call read through it
lines_from_start           symlink_escape  (start=1) the handler accessed outside
lines_checked_then_opened  symlink_race    (start=1) the handler accessed outside
walk_if_recursive          symlink_escape  (recursive=True) notes became a symlink ...: read through
walk_if_recursive          path_traversal  (recursive=True) the handler accessed outside
=========================  ==============  =========================================================
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.faults.reached import alternative_arguments
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import loads

FILES = {"notes/T1.md": "the first note\n", "notes/T2.md": "the second\n", "top.txt": "top\n"}


def _schema(**properties: Any) -> dict[str, Any]:
    required = [name for name, schema in properties.items() if "default" not in schema]
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


PATTERN = _schema(pattern={"type": "string"})
TITLE = _schema(title={"type": "string"})
LINES = _schema(path={"type": "string"}, start={"type": "integer", "minimum": 0, "default": 0})
FOLDER = _schema(folder={"type": "string"}, recursive={"type": "boolean", "default": False})


@tool(input_schema=PATTERN)
def glob_pattern(ctx: ToolContext, pattern: str) -> dict[str, Any]:
    root = ctx.workspace.root
    found = glob.glob(os.path.join(root, pattern))
    return {"matches": sorted(os.path.relpath(path, root) for path in found)}


@tool(name="glob_all_pattern", input_schema=PATTERN)
def glob_all_pattern(ctx: ToolContext, pattern: str) -> dict[str, Any]:
    return glob_pattern.handler(ctx, pattern=pattern)  # type: ignore[no-any-return]


@tool(input_schema=PATTERN)
def glob_in_workspace(ctx: ToolContext, pattern: str) -> dict[str, Any]:
    return {"matches": sorted(fnmatch.filter(ctx.workspace.walk("."), pattern))}


@tool(input_schema=TITLE)
def note_by_title(ctx: ToolContext, title: str) -> dict[str, Any]:
    path = os.path.join(ctx.workspace.root, "notes", title + ".md")
    with open(path, encoding="utf-8") as handle:
        return {"text": handle.read()}


@tool(input_schema=TITLE)
def note_in_workspace(ctx: ToolContext, title: str) -> dict[str, Any]:
    return {"text": ctx.workspace.read_text(f"notes/{title}.md")}


@tool(input_schema=LINES, paths=[PathAccess.read("{path}")])
def lines_from_start(ctx: ToolContext, path: str, start: int = 0) -> dict[str, Any]:
    if start > 0:  # the host path, unchecked: only this branch escapes
        with open(os.path.join(ctx.workspace.root, path), encoding="utf-8") as handle:
            return {"lines": handle.read().splitlines()[start:]}
    return {"lines": ctx.workspace.read_text(path).splitlines()}


@tool(input_schema=LINES, paths=[PathAccess.read("{path}")])
def lines_checked_then_opened(ctx: ToolContext, path: str, start: int = 0) -> dict[str, Any]:
    if start > 0:  # checked, then opened by its path again: a race on this branch only
        full = os.path.join(ctx.workspace.root, path)
        if not os.path.realpath(full).startswith(os.path.realpath(ctx.workspace.root) + "/"):
            raise PermissionError("outside the workspace")
        with open(full, encoding="utf-8") as handle:
            return {"lines": handle.read().splitlines()[start:]}
    return {"lines": ctx.workspace.read_text(path).splitlines()}


@tool(input_schema=LINES, paths=[PathAccess.read("{path}")])
def lines_in_workspace(ctx: ToolContext, path: str, start: int = 0) -> dict[str, Any]:
    return {"lines": ctx.workspace.read_text(path).splitlines()[start:]}


@tool(input_schema=FOLDER)
def walk_if_recursive(ctx: ToolContext, folder: str, recursive: bool = False) -> dict[str, Any]:
    if recursive:  # the host path, unchecked: only this branch escapes
        top = os.path.join(ctx.workspace.root, folder)
        names = [name for _dir, _dirs, files in os.walk(top, followlinks=True) for name in files]
        return {"names": sorted(names)}
    return {"names": sorted(entry.name for entry in ctx.workspace.list_dir(folder))}


@tool(input_schema=FOLDER)
def walk_in_workspace(ctx: ToolContext, folder: str, recursive: bool = False) -> dict[str, Any]:
    if recursive:
        return {"names": sorted(os.path.basename(name) for name in ctx.workspace.walk(folder))}
    return {"names": sorted(entry.name for entry in ctx.workspace.list_dir(folder))}


CAUGHT = (
    (glob_pattern, {"pattern": "notes/*.md"}, "path_traversal", ("fake", "directory")),
    (glob_all_pattern, {"pattern": "*.txt"}, "path_traversal", ("fake", "directory")),
    (note_by_title, {"title": "T1"}, "path_traversal", ("fake", "directory")),
    (note_by_title, {"title": "T1"}, "symlink_escape", ("fake", "directory")),
    (lines_from_start, {"path": "notes/T1.md"}, "symlink_escape", ("fake", "directory")),
    (lines_checked_then_opened, {"path": "notes/T1.md"}, "symlink_race", ("fake", "directory")),
    (walk_if_recursive, {"folder": "notes"}, "symlink_escape", ("fake", "directory")),
    (walk_if_recursive, {"folder": "notes"}, "path_traversal", ("fake", "directory")),
)
CORRECT = (
    (glob_in_workspace, {"pattern": "notes/*.md"}),
    (note_in_workspace, {"title": "T1"}),
    (lines_in_workspace, {"path": "notes/T1.md"}),
    (walk_in_workspace, {"folder": "notes"}),
)
CELLS = ("path_traversal", "symlink_escape", "symlink_race")


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


@pytest.mark.parametrize(
    ("spec", "arguments", "fault", "world"),
    [
        (spec, arguments, fault, world)
        for spec, arguments, fault, worlds in CAUGHT
        for world in worlds
    ],
    ids=[
        f"{spec.name}-{fault}-{world}"
        for spec, _arguments, fault, worlds in CAUGHT
        for world in worlds
    ],
)
def test_an_argument_off_the_recorded_path_is_caught(
    spec: ToolSpec, arguments: dict[str, Any], fault: str, world: str, tmp_path: Path
) -> None:
    outcome = cell(fault, spec, arguments, world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any("outside" in problem for problem in outcome.problems), outcome.problems


@pytest.mark.parametrize("fault", CELLS)
@pytest.mark.parametrize("world", ("fake", "directory"))
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[spec.name for spec, _ in CORRECT])
def test_the_workspace_twins_pass_every_confinement_cell(
    spec: ToolSpec, arguments: dict[str, Any], world: str, fault: str, tmp_path: Path
) -> None:
    outcome = cell(fault, spec, arguments, world, tmp_path)

    assert outcome.status in ("pass", "n/a"), outcome.problems


def test_a_string_that_reaches_no_path_leaves_the_link_cells_nothing_to_do(
    tmp_path: Path,
) -> None:
    @tool(input_schema=_schema(query={"type": "string"}))
    def shout(ctx: ToolContext, query: str) -> dict[str, Any]:
        return {"text": query.upper()}

    for fault in CELLS:
        outcome = cell(fault, shout, {"query": "hello"}, "fake", tmp_path)
        assert outcome.status == "n/a", (fault, outcome)


def test_the_other_argument_sets_flip_booleans_and_move_integers() -> None:
    registry = ToolRegistry([lines_from_start, walk_if_recursive])
    for spec, arguments, changed in (
        (lines_from_start, {"path": "a.txt"}, {"start": 1}),
        (walk_if_recursive, {"folder": "notes"}, {"recursive": True}),
    ):
        cassette = loads(
            f"""
format_version: 1
kind: case
description: one call
session: {{}}
interactions:
  - call: {{call_id: c1, tool_name: {spec.name}, arguments: {json.dumps(arguments)}}}
    result: {{ok: true, code: OK}}
""",
            source="<case>",
        )
        target = targets(cassette, registry, cassette.source, "fake")[0]
        assert alternative_arguments(target) == [{**arguments, **changed}]
