"""``pytest --toolguard-replay --toolguard-faults=all`` on cassettes of
tools that declare ``world="directory"``: every cell runs in a world of
its own, removed afterwards; a fault that cannot run there is a skip that
says why."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import directory_cell_tools as tools
import pytest

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults import disk as disk_faults
from pytest_toolguard.harness.directory_world import world_directories
from pytest_toolguard.replay import record_session

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")
INI = "[pytest]\npythonpath = .\ntoolguard_registry = directory_cell_tools:registry\n"


@pytest.fixture
def project(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with one cassette of the SQLite tool and the child-process
    tool, recorded in a directory that is then removed; worlds are made in
    a temporary directory of the test's own (returned)."""
    pytester.makeini(INI)
    (pytester.path / "directory_cell_tools.py").write_text(Path(tools.__file__).read_text())
    (pytester.path / "cassettes").mkdir()
    workspace = tmp_path / "recorded" / "proj"
    workspace.mkdir(parents=True)
    tools.make_database(str(workspace))
    (workspace / "list.txt").write_text("b\na\n")
    runtime = ToolRuntime(tools.CORRECT, str(workspace), tools.CAPS, SQLiteAuditStore(":memory:"))
    with record_session(runtime, pytester.path / "cassettes" / "crm.yaml"):
        for index, (name, arguments) in enumerate(
            [("add_contact", {"name": "Ada"}), ("sort_lines", {"path": "list.txt"})]
        ):
            call = ToolCall(call_id=f"c{index}", tool_name=name, arguments=arguments)
            assert runtime.execute(call).ok
    runtime.close()
    for path in sorted(workspace.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() else path.rmdir()
    workspace.rmdir()
    worlds = tmp_path / "tmp"
    worlds.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(worlds))
    return worlds


@pytest.mark.slow
def test_every_cell_of_a_directory_world_cassette_passes_and_leaves_no_world(
    pytester: pytest.Pytester, project: Path
) -> None:
    result = pytester.runpytest("--toolguard-replay", "--toolguard-faults=all", *NO_XDIST)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] > 20
    assert list(world_directories(str(project))) == []
    assert os.listdir(project) == []


def test_a_fault_that_cannot_run_in_the_directory_world_is_a_skip_with_its_reason(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk_faults, "full_disk_unavailable", lambda: "unshare: not permitted")
    result = pytester.runpytest(
        "--toolguard-replay", "--toolguard-faults=partial_write", "-rs", *NO_XDIST
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["skipped"] == 2
    result.stdout.fnmatch_lines(
        ["*partial_write: skipped in the directory world: a full disk needs a private mount*"]
    )
    result.stdout.fnmatch_lines(["*skipped partial_write (2) in the directory world: a full disk*"])
