"""Writes (and reads) inside the workspace but outside what the call
declared: a handler that decodes or normalises its path after the
executor's check lands elsewhere than the path that was checked.
``path_traversal`` also sends payloads that climb out of the argument's
own directory but not out of the workspace, spelt so that only such a
handler climbs (``..%2f``, ``%2e%2e%2f``, twice encoded, ``‥/``), and
every change a call makes is judged against its declarations and the
write roots; a read of the planted ``.env`` shows its marker.

Catch table (tool: cell, problem):

=============================  ===============================================================
broken twin                    caught by
=============================  ===============================================================
write_url_decoded              path_traversal: toolguard-moved.txt changed, but the call
                               declared writes to drafts/..%2ftoolguard-moved.txt
write_nfkc_normalised          path_traversal: toolguard-moved.txt changed, but the call
                               declared writes to drafts/‥/toolguard-moved.txt
write_twice_decoded            path_traversal: ... changed, but the call declared writes to
                               drafts/%252e%252e%252ftoolguard-moved.txt
write_with_undeclared_sibling  path_traversal (any cell that runs it): drafts/index.json
                               changed, but the call declared writes to ...
read_url_decoded_inside        path_traversal: the result holds a forbidden .env file's content
=============================  ===============================================================
"""

from __future__ import annotations

import json
import os
import posixpath
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import loads
from pytest_toolguard.tools import read_text, write_file

FILES = {"drafts/a.md": "old draft\n", "src/x.py": "print('x')\n"}
WRITE = {"path": "drafts/a.md", "content": "new draft\n"}
READ = {"path": "drafts/a.md"}


def _writer(name: str, transform: Callable[[str], str], sibling: bool = False) -> ToolSpec:
    @tool(
        name=name,
        input_schema=write_file.input_schema,
        risk=Risk.WRITE,
        paths=[PathAccess.write("{path}", content="content")],
    )
    def handler(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
        ctx.workspace.write_text(transform(path), content)
        if sibling:  # an index beside the draft, never declared
            ctx.workspace.write_text("drafts/index.json", json.dumps([path]))
        return {"path": path, "bytes_written": len(content.encode()), "created": False}

    return handler


def _twice(path: str) -> str:
    return unquote(unquote(path))


def _nfkc(path: str) -> str:
    return posixpath.normpath(unicodedata.normalize("NFKC", path))


@tool(
    input_schema=read_text.input_schema,
    paths=[PathAccess.read("{path}")],
)
def read_url_decoded_inside(ctx: ToolContext, path: str) -> dict[str, Any]:
    """Decodes after the check, then checks only that it stays in the workspace."""
    full = os.path.realpath(os.path.join(ctx.workspace.root, unquote(path)))
    if not full.startswith(os.path.realpath(ctx.workspace.root) + os.sep):
        raise PermissionError("outside the workspace")
    with open(full, encoding="utf-8") as handle:
        return {"content": handle.read()}


BROKEN = (
    (_writer("write_url_decoded", unquote), WRITE, "changed, but the call declared writes"),
    (_writer("write_nfkc_normalised", _nfkc), WRITE, "changed, but the call declared writes"),
    (_writer("write_twice_decoded", _twice), WRITE, "changed, but the call declared writes"),
    (
        _writer("write_with_undeclared_sibling", str, sibling=True),
        WRITE,
        "drafts/index.json changed, but the call declared writes",
    ),
    (read_url_decoded_inside, READ, "forbidden .env"),
)
CORRECT = ((_writer("write_as_given", str), WRITE), (read_text, READ))


def _cell(spec: ToolSpec, arguments: dict[str, Any], world: str, parent: Path) -> CellOutcome:
    cassette = loads(
        f"""
format_version: 1
kind: case
description: one call of {spec.name}
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [drafts]
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
    registry = ToolRegistry([spec])
    (fault,) = select_faults("path_traversal")
    target = targets(cassette, registry, cassette.source, world)[0]
    return run_cell(fault, target, registry, world=world, parent=str(parent))


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(
    ("spec", "arguments", "problem"), BROKEN, ids=[spec.name for spec, _, _ in BROKEN]
)
def test_a_change_or_read_beyond_the_declared_path_is_caught(
    spec: ToolSpec, arguments: dict[str, Any], problem: str, world: str, tmp_path: Path
) -> None:
    outcome = _cell(spec, arguments, world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any(problem in line for line in outcome.problems), outcome.problems


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[spec.name for spec, _ in CORRECT])
def test_a_tool_using_the_path_as_checked_passes(
    spec: ToolSpec, arguments: dict[str, Any], world: str, tmp_path: Path
) -> None:
    outcome = _cell(spec, arguments, world, tmp_path)

    assert outcome.status == "pass", outcome.problems
