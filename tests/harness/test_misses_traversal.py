"""``path_traversal`` judges the path a payload makes, never the payload
alone: in ``outbox/{ticket_id}.md`` the payload ``..`` makes
``outbox/...md``, inside the workspace, and a call that writes it is no
escape. And a report makes a change in a failed cell's problems visible
(``problems_digest``), where its status stays ``fail``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome, MatrixReport
from pytest_toolguard.faults.report import (
    problems_digest,
    render_html,
    render_json,
    render_markdown,
    terminal_grid,
)
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import loads

INPUT = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "body": {"type": "string"}},
    "required": ["name", "body"],
    "additionalProperties": False,
}


def _filing(template: str) -> ToolSpec:
    """A correct tool writing where ``template`` says, through the workspace."""

    @tool(
        name="file_" + "".join(c if c.isalnum() else "_" for c in template),
        input_schema=INPUT,
        risk=Risk.WRITE,
        paths=[PathAccess.write(template, content="body")],
    )
    def handler(ctx: ToolContext, name: str, body: str) -> dict[str, Any]:
        ctx.workspace.write_text(template.replace("{name}", name), body)
        return {"name": name}

    return handler


TEMPLATES = ("outbox/{name}.md", "outbox/{name}/body.txt", "{name}.md")


@pytest.mark.parametrize(
    ("template", "world"),
    [(template, "fake") for template in TEMPLATES[::2]] + [(TEMPLATES[0], "directory")],
)
def test_a_template_that_keeps_the_payload_inside_is_no_escape(
    template: str, world: str, tmp_path: Path
) -> None:
    spec = _filing(template)
    cassette = loads(
        f"""
format_version: 1
kind: case
description: one reply filed
session:
  capabilities: {{allowed_risks: [read, write], write_roots: ["."]}}
workspace:
  files: {{"outbox/T0.md": "earlier\\n"}}
interactions:
  - call:
      call_id: call-01
      tool_name: {spec.name}
      arguments: {json.dumps({"name": "T1", "body": "hello"})}
    result: {{ok: true, code: OK}}
""",
        source="<reply>",
    )
    registry = ToolRegistry([spec])
    (fault,) = select_faults("path_traversal")
    target = targets(cassette, registry, cassette.source, world)[0]

    outcome = run_cell(fault, target, registry, world=world, parent=str(tmp_path))

    assert outcome.status == "pass", outcome.problems


# -- the report ------------------------------------------------------------------------


def _failed(*problems: str, source: str = "cases/desk.yaml") -> CellOutcome:
    return CellOutcome(
        source=source,
        interaction=1,
        tool="reply",
        fault="path_traversal",
        status="fail",
        problems=problems,
        nodeid=f"{source}::1-reply::path_traversal",
    )


def _report(*cells: CellOutcome) -> MatrixReport:
    return MatrixReport.of(["path_traversal"], cells)


def test_a_change_in_a_failed_cells_problems_changes_every_rendering() -> None:
    before = _report(_failed("name='..' escapes the workspace but the call succeeded"))
    after = _report(_failed("outside the workspace changed: /toolguard-outside/secret.txt"))

    assert [cell.status for cell in before.cells] == [cell.status for cell in after.cells]
    assert problems_digest(before.failures()) != problems_digest(after.failures())
    for render in (render_markdown, render_json, render_html):
        assert problems_digest(after.failures()) in render(after)
        assert problems_digest(before.failures()) not in render(after)
    assert any(problems_digest(after.failures()) in line for line in terminal_grid(after))
    assert json.loads(render_json(after))["problems_digest"] == problems_digest(after.failures())


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        # A directory world's own name is new every run: the same problems.
        (
            "outside changed: /tmp/toolguard-world-ab12cd/toolguard-outside/x",
            "outside changed: /tmp/toolguard-world-9zq_01/toolguard-outside/x",
            True,
        ),
        ("outside changed: /toolguard-outside/x", "outside changed: /toolguard-outside/y", False),
        ("a", "a ", False),
    ],
)
def test_the_digest_is_the_problems(first: str, second: str, same: bool) -> None:
    assert (problems_digest(_failed(first)) == problems_digest(_failed(second))) is same


def test_the_digest_of_passing_cells_is_that_of_no_failure() -> None:
    passed = CellOutcome(
        source="cases/desk.yaml", interaction=1, tool="reply", fault="timeout", status="pass"
    )

    assert problems_digest((passed,)) == problems_digest(())
    assert problems_digest((passed, _failed("x"))) == problems_digest(_failed("x"))
