"""mcp-text-editor, a server from the package index built on the mcp SDK
v1's low-level ``Server`` (tools registered through its decorators, every
path absolute, nested in arrays): wrapped in process, recorded for real,
its recorded root deleted, replayed; then its fault matrix and fuzzing.
Then the same server started as a command over stdio (its package's
entry point, ``mcp-text-editor``): recorded, replayed after its recorded
root is deleted, and the cells that catch its faults across a process.

mcp 2.x has no such server, so this file skips in the main suite; CI runs
it in an environment with mcp<2 (``.ci/mcp-v1-check``, which fails if it
skips)."""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.server.lowlevel")
text_editor = pytest.importorskip("mcp_text_editor")

import sessions  # noqa: E402
from real_tools import NOTES_CAPS  # noqa: E402
from sessions import Session, record  # noqa: E402

from pytest_toolguard import PathAccess, ToolRegistry  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_server import (  # noqa: E402
    from_mcp_command,
    from_mcp_server,
    restoring_process_state,
)
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets  # noqa: E402
from pytest_toolguard.faults.directory import full_disk_unavailable  # noqa: E402
from pytest_toolguard.fuzz import fuzz_tool  # noqa: E402
from pytest_toolguard.replay import load, replay  # noqa: E402

FIRST = "first\n"


def _notes(workspace: Path) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.txt").write_text(FIRST)


SESSION = Session(
    "text_editor",
    (
        (
            "get_text_file_contents",
            {"files": [{"file_path": "{root}/notes/a.txt", "ranges": [{"start": 1}]}]},
        ),
        (
            "edit_text_file_contents",
            {
                "files": [
                    {
                        "path": "{root}/notes/a.txt",
                        "file_hash": hashlib.sha256(FIRST.encode()).hexdigest(),
                        "patches": [
                            {
                                "line_start": 1,
                                "line_end": 1,
                                "contents": "FIRST\n",
                                "range_hash": hashlib.sha256(FIRST.encode()).hexdigest(),
                            }
                        ],
                    }
                ]
            },
        ),
        (
            "edit_text_file_contents",
            {
                "files": [
                    {
                        "path": "{root}/notes/new.txt",
                        "file_hash": "",
                        "patches": [{"contents": "new\n"}],
                    }
                ]
            },
        ),
    ),
    setup=_notes,
    capabilities=NOTES_CAPS,
)


RISKS = {"get_text_file_contents": "read", "edit_text_file_contents": "write"}
PATHS = {
    "get_text_file_contents": [PathAccess.read("{files[*].file_path}")],
    "edit_text_file_contents": [PathAccess.write("{files[*].path}")],
}


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    """The server, imported in a controlled scope (it calls
    ``logging.basicConfig`` at import); its tools carry no annotations, so
    their risks are given; the absolute paths in its arrays are declared
    (the agent developer's view: the policy checks each one); it reaches
    files by absolute path: the directory world."""
    with restoring_process_state():
        from mcp_text_editor.server import app
    specs = from_mcp_server(app, risks=RISKS, paths=PATHS)
    return ToolRegistry(specs, world="directory")


def test_the_text_editor_is_wrapped_through_its_low_level_handlers(registry: ToolRegistry) -> None:
    assert {spec.name for spec in registry} >= {
        "get_text_file_contents",
        "edit_text_file_contents",
    }


def test_the_text_editor_replays_twice_after_its_recorded_root_is_deleted(
    registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    path, workspace = record(SESSION, registry, surroundings.recorded, tmp_path / "cassettes")
    assert (workspace / "notes" / "a.txt").read_text() == "FIRST\n"
    assert (workspace / "notes" / "new.txt").read_text() == "new\n"
    cassette = load(path)
    sessions.delete(workspace)
    before = surroundings.snapshots()
    for _ in range(2):
        report = replay(cassette, registry)
        assert report.differences == ()
        assert all(result.ok for result in report.results)
    assert surroundings.snapshots() == before
    assert not workspace.exists()
    assert surroundings.worlds_left() == []


def _cells(registry: ToolRegistry, surroundings: Any, cassettes: Path, faults: Any) -> list[Any]:
    path, workspace = record(SESSION, registry, surroundings.recorded, cassettes)
    sessions.delete(workspace)
    return [
        run_cell(fault, target, registry)
        for target in targets(load(path), registry, str(path))
        for fault in faults
    ]


TORN = {
    # fault: the interactions (edits) whose cell must fail
    "disk_failure": {2, 3},
    "partial_write": {3},
    "resource_leak": {2, 3},
}
"""An I/O error tears either edit. A real full disk tears only the edit that
grows its file (3, a new file): the one rewriting a line of the same length
(2) frees its page as it truncates and takes it back as it writes, so the
kernel never says ENOSPC to it. ``resource_leak`` fails the edits at their
file operations in turn (EIO at the open, a full disk at the first write):
each answers OK with its file other than a clean run leaves it."""


@pytest.mark.parametrize("fault", sorted(TORN))
def test_the_matrix_catches_the_text_editor_tearing_a_file_on_a_full_disk(
    fault: str, registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    """Its edit truncates the file, then writes: on a full disk, or an I/O
    error, the file is left torn while the call answers with
    ``isError: false``."""
    if fault == "partial_write" and full_disk_unavailable() is not None:
        pytest.skip(f"no full disk here: {full_disk_unavailable()}")
    outcomes = _cells(registry, surroundings, tmp_path / "c", select_faults(fault))
    failed = {
        outcome.interaction
        for outcome in outcomes
        if outcome.tool == "edit_text_file_contents" and outcome.status == "fail"
    }
    assert failed >= TORN[fault]
    assert surroundings.worlds_left() == []


LINKS = {
    # fault: the tools whose every cell must fail
    "symlink_escape": {"get_text_file_contents", "edit_text_file_contents"},
    "symlink_race": {"edit_text_file_contents"},
}
"""The server follows links wherever they lead: one swapped in for ``notes``
(the absolute paths' first component inside the workspace) as the call
runs, or between its check and its write, is read or written through."""


@pytest.mark.parametrize("fault", sorted(LINKS))
def test_the_matrix_catches_the_text_editor_following_a_link_swapped_in_after_its_check(
    fault: str, registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    outcomes = _cells(registry, surroundings, tmp_path / "c", select_faults(fault))
    caught = [outcome for outcome in outcomes if outcome.tool in LINKS[fault]]
    assert caught and all(outcome.status == "fail" for outcome in caught)
    assert {outcome.tool for outcome in caught} == LINKS[fault]


CATCHES = {*TORN, *LINKS}
"""The cells where the text editor's own faults are caught (see above)."""


def test_the_rest_of_the_matrix_has_no_false_positive_on_the_text_editor(
    registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    faults = [fault for fault in BUILTIN_FAULTS if fault.name not in CATCHES]
    outcomes = _cells(registry, surroundings, tmp_path / "c", faults)
    failed = [
        f"{outcome.interaction} {outcome.fault}: {'; '.join(outcome.problems)[:200]}"
        for outcome in outcomes
        if outcome.status == "fail"
    ]
    assert failed == []
    assert all(outcome.problems for outcome in outcomes if outcome.status == "n/a")


@pytest.mark.parametrize("name", ["get_text_file_contents", "edit_text_file_contents"])
def test_fuzzing_the_text_editor_finds_nothing(
    name: str, registry: ToolRegistry, surroundings: Any
) -> None:
    before = surroundings.snapshots()
    report = fuzz_tool(
        registry.get(name), examples=10, seed=0, registry=registry, timeout_seconds=60.0
    )
    assert [(failure.problem, failure.detail) for failure in report.failures] == []
    assert surroundings.snapshots() == before


# -- the same server over stdio ------------------------------------------------------

ENTRY_POINT = os.path.join(os.path.dirname(sys.executable), "mcp-text-editor")
"""The package's command, installed beside the interpreter running the tests."""


@pytest.fixture(scope="module")
def over_stdio() -> ToolRegistry:
    """The server started as its package's command, in the world's root;
    risks and paths as in process (the agent developer's view)."""
    if not os.path.exists(ENTRY_POINT):
        pytest.skip(f"no {ENTRY_POINT}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ToolRegistry(
            from_mcp_command([ENTRY_POINT], cwd="{workspace}", risks=RISKS, paths=PATHS)
        )


def test_the_text_editor_over_stdio_replays_after_its_recorded_root_is_deleted(
    over_stdio: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    assert {spec.world for spec in over_stdio} == {"directory"}
    path, workspace = record(SESSION, over_stdio, surroundings.recorded, tmp_path / "cassettes")
    assert (workspace / "notes" / "a.txt").read_text() == "FIRST\n"
    assert (workspace / "notes" / "new.txt").read_text() == "new\n"
    sessions.delete(workspace)
    before = surroundings.snapshots()
    report = replay(load(path), over_stdio)
    assert report.differences == ()
    assert all(result.ok for result in report.results)
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []


OVER_STDIO = {
    # fault: the interactions whose cell must fail
    "symlink_escape": {1, 2, 3},
    "disk_failure": {3},
}
"""Over stdio the server is another process: a link is swapped in as the
call starts (the read and the edit of ``notes/a.txt`` read through it; the
new file's edit hashes the decoy there, seen by the world's accesses:
``pytest-toolguard[directory]``), and
a full disk is a real one, which tears only the edit that grows its file
(3: ``notes/new.txt`` left empty, answered ``isError: false``; see ``TORN``).
``symlink_race`` swaps between the handler's own file operations, which it
sees in this process only: over stdio it finds no point to swap at."""


@pytest.mark.parametrize("fault", sorted(OVER_STDIO))
def test_the_matrix_catches_the_text_editors_faults_over_stdio(
    fault: str, over_stdio: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    outcomes = _cells(over_stdio, surroundings, tmp_path / "c", select_faults(fault))
    failed = {outcome.interaction for outcome in outcomes if outcome.status == "fail"}
    assert failed >= OVER_STDIO[fault]
    assert surroundings.worlds_left() == []
