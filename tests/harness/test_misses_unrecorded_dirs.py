"""A write into a directory the recording found empty: the recorder keeps
the directories a call's declared paths go through (empty ones too), and
the link faults plant a decoy of the kind a clean run found or made there
(a directory, not a file), so a link-following write is caught instead of
failing on the decoy's kind; a failure the harness caused is never taken
for the tool's refusal.

Catch table (tool: cell, problem):

================================  ===========================================================
broken twin                       caught by
================================  ===========================================================
makedirs_then_open (recorded)     symlink_escape: the handler accessed / outside changed
makedirs_then_open (hand case,    symlink_escape, symlink_race: the handler accessed /
no outbox recorded)               outside changed
open_without_makedirs (its clean  symlink_escape: inconclusive, the call fails with nothing
run fails: outbox not there)      injected too
================================  ===========================================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.capabilities import Capabilities, Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette, loads

INPUT = {
    "type": "object",
    "properties": {"ticket_id": {"type": "string"}, "body": {"type": "string"}},
    "required": ["ticket_id", "body"],
    "additionalProperties": False,
}
CALL = {"ticket_id": "T7", "body": "we refunded you\n"}
DECLARED = [PathAccess.write("outbox/{ticket_id}.md", content="body")]
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("outbox",))


@tool(input_schema=INPUT, risk=Risk.WRITE, paths=DECLARED)
def makedirs_then_open(ctx: ToolContext, ticket_id: str, body: str) -> dict[str, Any]:
    """Follows whatever ``outbox`` is: a link swapped in sends the reply outside."""
    outbox = os.path.join(ctx.workspace.root, "outbox")
    os.makedirs(outbox, exist_ok=True)
    with open(os.path.join(outbox, f"{ticket_id}.md"), "w", encoding="utf-8") as handle:
        handle.write(body)
    return {"ticket_id": ticket_id}


@tool(input_schema=INPUT, risk=Risk.WRITE, paths=DECLARED)
def open_without_makedirs(ctx: ToolContext, ticket_id: str, body: str) -> dict[str, Any]:
    path = os.path.join(ctx.workspace.root, "outbox", f"{ticket_id}.md")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(body)
    return {"ticket_id": ticket_id}


@tool(input_schema=INPUT, risk=Risk.WRITE, paths=DECLARED)
def write_through_workspace(ctx: ToolContext, ticket_id: str, body: str) -> dict[str, Any]:
    ctx.workspace.write_text(f"outbox/{ticket_id}.md", body)
    return {"ticket_id": ticket_id}


def _recorded(tmp_path: Path, spec: ToolSpec) -> Cassette:
    """One call recorded in a workspace whose ``outbox/`` is empty (and a
    file elsewhere the call never names)."""
    workspace = tmp_path / "rec" / "desk"
    (workspace / "outbox").mkdir(parents=True)
    (workspace / "archive" / "old").mkdir(parents=True)
    (workspace / "README.md").write_text("support desk\n")
    runtime = ToolRuntime(ToolRegistry([spec]), str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "desk.yaml"
    with record_session(runtime, path):
        result = runtime.execute(ToolCall(call_id="c1", tool_name=spec.name, arguments=CALL))
    runtime.close()
    assert result.ok, result.message
    return load(path)


def _case(spec: ToolSpec) -> Cassette:
    """A hand-written case (as older recorders wrote them): no ``outbox/``."""
    return loads(
        f"""
format_version: 1
kind: case
description: a reply written where the case holds no directory
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [outbox]
workspace:
  files: {{"README.md": "support desk\\n"}}
interactions:
  - call:
      call_id: c1
      tool_name: {spec.name}
      arguments: {json.dumps(CALL)}
    result: {{ok: true, code: OK}}
""",
        source=f"<{spec.name}>",
    )


def _cell(fault: str, spec: ToolSpec, cassette: Cassette, world: str, parent: Path) -> CellOutcome:
    registry = ToolRegistry([spec])
    (chosen,) = select_faults(fault)
    target = targets(cassette, registry, cassette.source, world)[0]
    return run_cell(chosen, target, registry, world=world, parent=str(parent))


def _escaped(outcome: CellOutcome) -> bool:
    return any(
        "outside" in problem and "inconclusive" not in problem for problem in outcome.problems
    )


def test_the_recorder_keeps_the_directories_a_declared_path_goes_through(tmp_path: Path) -> None:
    cassette = _recorded(tmp_path, write_through_workspace)

    assert "outbox" in cassette.workspace.directories
    # A directory no call's path goes through stays out, as before.
    assert not {"archive", "archive/old"} & set(cassette.workspace.directories)


@pytest.mark.parametrize("world", ["fake", "directory"])
def test_a_link_following_write_into_a_recorded_empty_directory_is_caught(
    world: str, tmp_path: Path
) -> None:
    cassette = _recorded(tmp_path, makedirs_then_open)

    outcome = _cell("symlink_escape", makedirs_then_open, cassette, world, tmp_path)

    assert outcome.status == "fail" and _escaped(outcome), outcome


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize("fault", ["symlink_escape", "symlink_race"])
def test_a_directory_only_the_clean_run_makes_gets_a_directory_decoy(
    fault: str, world: str, tmp_path: Path
) -> None:
    outcome = _cell(fault, makedirs_then_open, _case(makedirs_then_open), world, tmp_path)

    assert outcome.status == "fail" and _escaped(outcome), outcome


@pytest.mark.parametrize("world", ["fake", "directory"])
def test_a_failure_the_clean_run_shares_is_no_refusal(world: str, tmp_path: Path) -> None:
    # outbox/ is in no file of the case: the call fails with nothing injected.
    spec = open_without_makedirs

    outcome = _cell("symlink_escape", spec, _case(spec), world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any("inconclusive" in problem for problem in outcome.problems), outcome.problems


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize("fault", ["symlink_escape", "symlink_race"])
def test_the_workspace_api_passes_on_a_recorded_empty_directory(
    fault: str, world: str, tmp_path: Path
) -> None:
    cassette = _recorded(tmp_path, write_through_workspace)

    outcome = _cell(fault, write_through_workspace, cassette, world, tmp_path)

    assert outcome.status == "pass", outcome.problems
