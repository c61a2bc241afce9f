"""A tape playing back in the directory world: the test's calls matched with
the world's root spelt as the recorded one, results and files compared the
same way, and a tool writing beside its workspace reported."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.capabilities import Capabilities, Risk
from pytest_toolguard.harness.directory_world import WORLD_PREFIX
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette
from pytest_toolguard.replay.report import CallNotInCassette
from pytest_toolguard.replay.tape import PlaybackTape, tape_options

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def _insert(database: str) -> int:
    connection = sqlite3.connect(database)
    try:
        with connection:
            connection.execute("create table if not exists t (x text)")
            connection.execute("insert into t values ('x')")
        count: int = connection.execute("select count(*) from t").fetchone()[0]
    finally:
        connection.close()
    return count


@tool(risk=Risk.WRITE, world="directory")
def insert_at(ctx: Any, database: str) -> dict[str, Any]:
    """Inserts a row into the database at an absolute path; says where."""
    return {"count": _insert(database), "database": database}


@tool(risk=Risk.WRITE, world="directory")
def insert_beside(ctx: Any, database: str) -> dict[str, Any]:
    """The twin: uses the database beside the workspace, whatever it is given."""
    beside = os.path.join(os.path.dirname(ctx.workspace.root), "crm.db")
    return {"count": _insert(beside), "database": database}


GOOD = ToolRegistry([insert_at, insert_beside])


def _recorded(tmp_path: Path, tool_name: str) -> Cassette:
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    runtime = ToolRuntime(GOOD, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        arguments = {"database": f"{workspace}/crm.db"}
        assert runtime.execute(ToolCall(call_id="c1", tool_name=tool_name, arguments=arguments)).ok
    runtime.close()
    return load(path)


def _tape(cassette: Cassette, registry: ToolRegistry = GOOD, world: str = "auto") -> PlaybackTape:
    return PlaybackTape(cassette, registry, cassette_path="c.yaml", rerecord="r", world=world)


def test_a_call_naming_the_worlds_root_plays_the_recorded_one(tmp_path: Path) -> None:
    cassette = _recorded(tmp_path, "insert_at")
    tape = _tape(cassette)
    runtime = tape.start()
    try:
        assert os.path.basename(os.path.dirname(runtime.workspace.root)).startswith(WORLD_PREFIX)
        call = ToolCall(
            call_id="c1",
            tool_name="insert_at",
            arguments={"database": f"{runtime.workspace.root}/crm.db"},
        )
        result = runtime.execute(call)
        assert result.ok and result.data["count"] == 1
        assert result.data["database"].startswith(runtime.workspace.root)  # the test's spelling
    finally:
        report = tape.finish()
    assert report.differences == ()
    assert not (tmp_path / "rec" / "crm.db").exists()


def test_a_call_naming_another_root_is_not_the_recorded_one(tmp_path: Path) -> None:
    cassette = _recorded(tmp_path, "insert_at")
    tape = _tape(cassette)
    runtime = tape.start()
    try:
        call = ToolCall(
            call_id="c1", tool_name="insert_at", arguments={"database": "/elsewhere/crm.db"}
        )
        with pytest.raises(CallNotInCassette):
            runtime.execute(call)
    finally:
        tape.finish()


def test_a_tool_writing_beside_its_workspace_is_a_difference(tmp_path: Path) -> None:
    cassette = _recorded(tmp_path, "insert_beside")
    (tmp_path / "rec" / "crm.db").unlink()  # what the recording left beside its root
    tape = _tape(cassette)
    runtime = tape.start()
    try:
        call = ToolCall(
            call_id="c1",
            tool_name="insert_beside",
            arguments={"database": f"{runtime.workspace.root}/crm.db"},
        )
        runtime.execute(call)
    finally:
        report = tape.finish()
    outside = [d for d in report.differences if d.where == "outside the workspace"]
    assert [d.field for d in outside] == [f"{tmp_path}/rec/crm.db"]
    assert not (tmp_path / "rec" / "crm.db").exists()


@pytest.mark.parametrize(
    ("world", "chosen"), [("auto", "directory"), ("directory", "directory"), ("fake", "fake")]
)
def test_the_tape_world_is_chosen_as_replay_chooses_it(
    tmp_path: Path, world: str, chosen: str
) -> None:
    assert _tape(_recorded(tmp_path, "insert_at"), world=world).world == chosen


@pytest.mark.parametrize(("value", "kind"), [("fake", "fake"), ("directory", "directory")])
def test_the_marker_takes_a_world(value: str, kind: str) -> None:
    assert tape_options((), {"world": value}).world == kind
    assert tape_options((), {}).world is None


@pytest.mark.parametrize("value", ["auto", "tmpfs", 1, None.__class__])
def test_the_marker_refuses_another_world(value: object) -> None:
    with pytest.raises(ValueError, match="unknown world"):
        tape_options((), {"world": value})
