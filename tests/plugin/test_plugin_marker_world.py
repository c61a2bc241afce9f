"""``@pytest.mark.toolguard(world=...)``: a test's cassette plays back in the
world its marker names, over ``--toolguard-world`` and the ini's
``toolguard_world``; without one, in the world its tools declare. A
directory-world tape maps the recorded root to its own and leaves nothing
behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_toolguard.harness.directory_world import WORLD_PREFIX
from pytest_toolguard.options import FUZZ, FUZZ_EXAMPLES, RECORD_MODE, WORLD

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")
INI = "[pytest]\npythonpath = .\ntoolguard_registry = marker_tools:registry\n"

TOOLS = '''
import os
import sqlite3

from pytest_toolguard import Capabilities, Risk
from pytest_toolguard.registry import PathAccess, ToolRegistry, tool


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("crm.db")])
def add_contact(ctx, name: str) -> dict:
    """Adds a contact to the workspace's SQLite database."""
    connection = sqlite3.connect(os.path.join(ctx.workspace.root, "crm.db"))
    with connection:
        connection.execute("create table if not exists contacts (name text)")
        connection.execute("insert into contacts values (?)", (name,))
    count = connection.execute("select count(*) from contacts").fetchone()[0]
    connection.close()
    return {"count": count}


@tool(risk=Risk.WRITE)
def write_note(ctx, name: str, text: str) -> dict:
    """Writes a note with Python's own open()."""
    with open(os.path.join(ctx.workspace.root, name), "w", encoding="utf-8") as handle:
        handle.write(text)
    return {"written": len(text)}


CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def registry():
    return ToolRegistry([add_contact, write_note])
'''

TEST = """
import os

import pytest
from marker_tools import CAPS
from pytest_toolguard import ToolCall


def _world(runtime):
    print(f"WORLD {{os.path.basename(os.path.dirname(runtime.workspace.root))}}")


@pytest.mark.toolguard(capabilities=CAPS{contact_marker})
def test_contact(toolguard):
    with open(os.path.join(toolguard.workspace.root, "seed.txt"), "w") as handle:
        handle.write("set-up\\n")
    result = toolguard.execute(
        ToolCall(call_id="c1", tool_name="add_contact", arguments={{"name": "Ada"}})
    )
    _world(toolguard)
    assert result.ok, result.message
    assert result.data == {{"count": 1}}


@pytest.mark.toolguard(capabilities=CAPS{note_marker})
def test_note(toolguard):
    result = toolguard.execute(
        ToolCall(
            call_id="c1",
            tool_name="write_note",
            arguments={{"name": "n.txt", "text": "hello"}},
        )
    )
    _world(toolguard)
    assert result.ok, result.message
"""


def _marker(world: str | None) -> str:
    return "" if world is None else f", world={world!r}"


def _project(pytester: pytest.Pytester, contact: str | None, note: str | None) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(marker_tools=TOOLS)
    pytester.makepyfile(
        test_marked=TEST.format(contact_marker=_marker(contact), note_marker=_marker(note))
    )


def _worlds(stdout: str) -> dict[str, str]:
    """Each test's world, from what it printed: ``directory`` or ``fake``."""
    found = {}
    for name, world in re.findall(r"test_marked\.py::(test_\w+) WORLD (\S*)", stdout):
        found[name] = "directory" if world.startswith(WORLD_PREFIX) else "fake"
    return found


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(where))
    return where


@pytest.mark.parametrize(
    ("contact", "note", "option", "worlds", "passed"),
    [
        (None, None, None, {"test_contact": "directory", "test_note": "fake"}, 2),
        (None, "directory", None, {"test_contact": "directory", "test_note": "directory"}, 2),
        (
            "directory",
            "directory",
            "fake",
            {"test_contact": "directory", "test_note": "directory"},
            2,
        ),
        (None, "fake", "directory", {"test_contact": "directory", "test_note": "fake"}, 2),
        ("fake", None, None, {"test_contact": "fake", "test_note": "fake"}, 1),
        (None, None, "fake", {"test_contact": "fake", "test_note": "fake"}, 1),
    ],
    ids=[
        "tools-decide",
        "marker-directory",
        "marker-over-option-fake",
        "marker-fake-over-option-directory",
        "marker-fake-refuses-sqlite",
        "option-fake-refuses-sqlite",
    ],
)
def test_the_marker_selects_the_world_a_tape_plays_in(
    pytester: pytest.Pytester,
    temporary: Path,
    contact: str | None,
    note: str | None,
    option: str | None,
    worlds: dict[str, str],
    passed: int,
) -> None:
    _project(pytester, contact, note)
    recorded = pytester.runpytest(*NO_XDIST, f"{RECORD_MODE}=once")
    recorded.assert_outcomes(passed=2)
    assert sorted(p.name for p in (pytester.path / "cassettes").rglob("*.yaml")) == [
        "test_contact.yaml",
        "test_note.yaml",
    ]
    chosen = (WORLD, option) if option else ()
    played = pytester.runpytest(*NO_XDIST, "-v", "-s", f"{RECORD_MODE}=none", *chosen)
    # A refused call fails the test, and its playback's differences its teardown.
    played.assert_outcomes(passed=passed, failed=2 - passed, errors=2 - passed)
    assert _worlds(played.stdout.str()) == worlds
    if passed == 1:  # the SQLite tool forced into the fake world is refused, never run
        played.stdout.fnmatch_lines(['*outside the fake filesystem; declare world="directory"*'])
    assert list(temporary.iterdir()) == []  # every directory world removed


@pytest.mark.parametrize("value", ["tmpfs", "", 3])
def test_an_unknown_marker_world_fails_that_test_alone(
    pytester: pytest.Pytester, value: object
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(marker_tools=TOOLS)
    pytester.makepyfile(
        test_marked=TEST.format(contact_marker=f", world={value!r}", note_marker="")
    )
    result = pytester.runpytest(*NO_XDIST, f"{RECORD_MODE}=once")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.toolguard: world: unknown world*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(("option", "passed"), [(None, 1), ("directory", 1), ("fake", 0)], ids=str)
def test_fuzz_items_fuzz_a_directory_tool_in_the_world_replay_would_choose(
    pytester: pytest.Pytester, temporary: Path, option: str | None, passed: int
) -> None:
    _project(pytester, None, None)
    chosen = (WORLD, option) if option else ()
    result = pytester.runpytest(*NO_XDIST, FUZZ, f"{FUZZ_EXAMPLES}=5", "-k", "add_contact", *chosen)
    result.assert_outcomes(passed=passed, failed=1 - passed)
    if not passed:  # forced into the fake world, its SQLite file is refused
        result.stdout.fnmatch_lines(["*real-disk*"])
    assert list(temporary.iterdir()) == []  # every container and world removed
