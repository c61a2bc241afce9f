"""``pytest --toolguard-replay`` of tools the fake world cannot contain: a
SQLite tool recorded for real fails its replay with the message saying
what it reached and what to declare, and the real database is left as it
was; a directory named in ``toolguard_real_paths`` is read in the fake
world."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.replay import record_session

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))

TOOLS = """\
import os
import sqlite3

from pytest_toolguard.registry import Risk, ToolRegistry, tool

SHARED = {shared!r}


@tool(input_schema={{"type": "object"}}, risk=Risk.WRITE)
def crm_add(ctx, name: str) -> dict:
    conn = sqlite3.connect(os.path.join(ctx.workspace.root, "crm.db"))
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS people (name TEXT)")
        conn.execute("INSERT INTO people VALUES (?)", (name,))
    count = conn.execute("SELECT count(*) FROM people").fetchone()[0]
    conn.close()
    return {{"count": count}}


@tool(input_schema={{"type": "object"}})
def shared_note(ctx, name: str) -> dict:
    with open(os.path.join(SHARED, name)) as file:
        return {{"note": file.read()}}


registry = ToolRegistry([crm_add, shared_note])
"""


def _project(pytester, tool: str, ini: str = ""):
    """A project holding the tools' module, a cassette of one call of
    ``tool`` recorded in a real workspace, and its ini."""
    shared = pytester.path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello from a real directory\n")
    module = pytester.path / "escape_tools.py"
    module.write_text(TOOLS.format(shared=str(shared)))
    spec = importlib.util.spec_from_file_location(f"escape_tools_{id(pytester)}", module)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    workspace = pytester.path / "ws"
    workspace.mkdir()
    runtime = ToolRuntime(loaded.registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    cassette = pytester.path / "cassettes" / "session.yaml"
    arguments = {"name": "ann"} if tool == "crm_add" else {"name": "hello.txt"}
    with record_session(runtime, cassette, recorded_by="python record.py"):
        assert runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments=arguments)).ok
    runtime.close()
    pytester.makeini(f"[pytest]\ntoolguard_registry = escape_tools:registry\n{ini}")
    pytester.syspathinsert()
    return workspace


def test_a_sqlite_tools_replay_fails_naming_the_database_and_leaves_it_alone(pytester):
    workspace = _project(pytester, "crm_add")
    database = workspace / "crm.db"
    before = database.read_bytes()

    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*sqlite3.connect opened {database} outside the fake filesystem; declare world=*"]
    )
    assert database.read_bytes() == before
    sys.modules.pop("escape_tools", None)


@pytest.mark.parametrize(
    ("ini", "passes"), [("toolguard_real_paths = shared\n", True), ("", False)]
)
def test_a_directory_in_toolguard_real_paths_is_read_in_replay(pytester, ini, passes):
    _project(pytester, "shared_note", ini)

    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay")

    result.assert_outcomes(passed=1 if passes else 0, failed=0 if passes else 1)
    sys.modules.pop("escape_tools", None)
