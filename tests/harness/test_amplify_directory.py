"""Amplifying a cassette whose tools run in the directory world: variants
recorded on real files, spelt as recorded, that replay; a variant whose run
reached beyond its world (the real disk from the fake world, an entry
outside the workspace of the directory world) dropped with its reason."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from trees import tree_snapshot

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.amplify import amplify
from pytest_toolguard.capabilities import Capabilities, Risk
from pytest_toolguard.harness.branching import SessionWalk
from pytest_toolguard.harness.directory_world import DirectoryWorld
from pytest_toolguard.harness.world import FakeWorld
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette
from pytest_toolguard.replay.variants import replay_variants

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}},
    "required": ["name"],
    "additionalProperties": False,
}


def _insert(database: str, name: str) -> int:
    connection = sqlite3.connect(database)
    try:
        with connection:
            connection.execute("create table if not exists contacts (name text)")
            connection.execute("insert into contacts values (?)", (name,))
        count: int = connection.execute("select count(*) from contacts").fetchone()[0]
    finally:
        connection.close()
    return count


@tool(risk=Risk.WRITE, world="directory", input_schema=NAME_SCHEMA)
def add_contact(ctx: Any, name: str) -> dict[str, Any]:
    """Adds a contact to the workspace's SQLite database and says where it is."""
    database = os.path.join(ctx.workspace.root, "crm.db")
    return {"count": _insert(database, name), "database": database}


@tool(risk=Risk.WRITE, world="directory", input_schema=NAME_SCHEMA)
def add_contact_or_beside(ctx: Any, name: str) -> dict[str, Any]:
    """The twin: an empty name goes to a database beside the workspace."""
    folder = ctx.workspace.root if name else os.path.dirname(ctx.workspace.root)
    return {"count": _insert(os.path.join(folder, "crm.db"), name)}


@tool(risk=Risk.WRITE, world="directory", input_schema=NAME_SCHEMA)
def add_contact_or_prefix(ctx: Any, name: str) -> dict[str, Any]:
    """The twin: an empty name is noted in ``<root>2/keep.txt``, a sibling
    sharing the root's prefix (a decoy of the directory world)."""
    if not name:
        with open(ctx.workspace.root + "2/keep.txt", "a", encoding="utf-8") as handle:
            handle.write("noted\n")
    return {"count": _insert(os.path.join(ctx.workspace.root, "crm.db"), name)}


@tool(risk=Risk.WRITE, input_schema=NAME_SCHEMA)
def note_or_run(ctx: Any, name: str) -> dict[str, Any]:
    """A fake-world tool that starts a process for an empty name."""
    if not name:
        subprocess.run(["true"], check=False)
    with open(os.path.join(ctx.workspace.root, "notes.txt"), "a", encoding="utf-8") as handle:
        handle.write(name + "\n")
    return {"noted": name}


REGISTRY = ToolRegistry([add_contact, add_contact_or_beside, add_contact_or_prefix, note_or_run])


def _recorded(tmp_path: Path, tool_name: str) -> Cassette:
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        for index, name in enumerate(["Ada", "Lin"]):
            call = ToolCall(call_id=f"c{index}", tool_name=tool_name, arguments={"name": name})
            assert runtime.execute(call).ok
    runtime.close()
    return load(path)


def test_a_directory_world_cassette_is_amplified_on_real_files_and_its_variants_replay(
    tmp_path: Path,
) -> None:
    cassette = _recorded(tmp_path, "add_contact")
    recorded_root = cassette.workspace.root
    outside = tree_snapshot(tmp_path / "rec")
    amplified, report = amplify(cassette, REGISTRY)
    assert report.ok, report.replay_differences
    variants = [v for i in amplified.interactions for v in i.variants]
    ran = [v for v in variants if not v.refused]
    assert ran, report.lines()
    # Run on the real database: the second call's variants see the first row.
    second = [v for v in amplified.interactions[1].variants if not v.refused]
    assert all(v.result.data["count"] == 2 for v in second if v.result.ok), second
    # Spelt as recorded: the world's temporary root never reaches a cassette.
    assert all(v.result.data["database"] == f"{recorded_root}/crm.db" for v in ran if v.result.ok)
    assert replay_variants(amplified, REGISTRY).differences == ()
    assert tree_snapshot(tmp_path / "rec") == outside


def test_the_walk_runs_in_the_world_replay_chooses(tmp_path: Path) -> None:
    cassette = _recorded(tmp_path, "add_contact")
    with SessionWalk(cassette, REGISTRY) as walk:
        assert isinstance(walk.world, DirectoryWorld)
    with SessionWalk(cassette, REGISTRY, world="fake") as walk:
        assert isinstance(walk.world, FakeWorld)
    fake = _recorded(tmp_path / "other", "note_or_run")
    with SessionWalk(fake, REGISTRY) as walk:
        assert isinstance(walk.world, FakeWorld)
    with SessionWalk(fake, REGISTRY, world="directory") as walk:
        assert isinstance(walk.world, DirectoryWorld)


@pytest.mark.parametrize(
    ("tool_name", "says"),
    [
        ("add_contact_or_beside", "created /tmp/"),
        ("add_contact_or_prefix", "changed /tmp/"),
        ("note_or_run", 'declare world="directory"'),
    ],
    ids=["directory-world-beside", "directory-world-prefix", "fake-world-process"],
)
def test_a_variant_that_reached_beyond_its_world_is_dropped_and_says_why(
    tmp_path: Path, tool_name: str, says: str
) -> None:
    cassette = _recorded(tmp_path, tool_name)
    outside = tree_snapshot(tmp_path / "rec")
    amplified, report = amplify(cassette, REGISTRY)
    assert report.ok, report.replay_differences
    reached = [d for d in report.dropped if "reached beyond its world" in d.reason]
    # Put back after each: the second call's variant meets the same world.
    assert [d.interaction for d in reached] == [1, 2], report.lines()
    assert all(says in d.reason for d in reached), reached
    kept = [v for i in amplified.interactions for v in i.variants]
    assert all(v.arguments.get("name") != "" for v in kept)
    assert kept, "the other variants are still recorded"
    assert replay_variants(amplified, REGISTRY).differences == ()
    assert tree_snapshot(tmp_path / "rec") == outside
