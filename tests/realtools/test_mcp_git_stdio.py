"""mcp-server-git from the package index, started as a command over stdio
(``python -m mcp_server_git --repository {workspace}``) in a real
repository world: a session recorded (status, add, commit, log), replayed
with the server started again in a fresh world after the recorded root is
deleted, and two cells of the fault matrix on the commit. The full
matrix and fuzzing take minutes (a Python server started per world): they
are run by hand."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import sessions
from real_tools import CAPS, GIT_ENVIRONMENT, run_git
from sessions import Session, git_environment, record

from pytest_toolguard import ToolRegistry
from pytest_toolguard.bridges.mcp import from_mcp_command
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.replay import load, replay

pytest.importorskip("mcp_server_git")

GIT = [sys.executable, "-m", "mcp_server_git", "--repository", "{workspace}"]
RAW_DATE = "1714564800 +0000"
ENVIRONMENT = {**GIT_ENVIRONMENT, "GIT_AUTHOR_DATE": RAW_DATE, "GIT_COMMITTER_DATE": RAW_DATE}
"""The server's environment: GitPython writes commits itself and reads
only this form of a date; the rest as ``real_tools``'s git."""


def _repository_with_a_note(workspace: Path) -> None:
    (workspace / "README.md").write_text("hello\n")
    run_git(str(workspace), "init", "-q")
    run_git(str(workspace), "add", "README.md")
    run_git(str(workspace), "commit", "-q", "-m", "first")
    (workspace / "notes.txt").write_text("a note\n")


SESSION = Session(
    "mcp_git_stdio",
    (
        ("git_status", {"repo_path": "{root}"}),
        ("git_add", {"repo_path": "{root}", "files": ["notes.txt"]}),
        ("git_commit", {"repo_path": "{root}", "message": "add notes"}),
        ("git_log", {"repo_path": "{root}", "max_count": 5}),
    ),
    setup=_repository_with_a_note,
    # git's index holds inode numbers and times; the reflog, the clock's
    # time when GitPython wrote it (the recorded time in a world).
    volatile=("files..git/index", "files..git/logs/HEAD", "files..git/logs/refs/heads/main"),
    capabilities=CAPS,
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ToolRegistry:
    """The server's tools, listed in a repository (it refuses to start in
    an empty directory)."""
    listing = tmp_path_factory.mktemp("listing")
    _repository_with_a_note(listing)
    with warnings.catch_warnings():  # the author's view: no path declared
        warnings.simplefilter("ignore")
        return ToolRegistry(from_mcp_command(GIT, env=ENVIRONMENT, list_in=listing))


def test_mcp_server_git_over_stdio_records_replays_and_its_commit_is_fault_tested(
    registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    """Replayed as recorded in a fresh world. Its commit contains a
    traversal (the server refuses a repo_path outside ``--repository``),
    and on a full disk it leaves GitPython's temporary object behind in
    ``.git/objects``: a real fault of the server, caught."""
    assert {"git_status", "git_add", "git_commit", "git_log"} <= {spec.name for spec in registry}
    before = surroundings.snapshots()
    path, workspace = record(SESSION, registry, surroundings.recorded, tmp_path / "cassettes")
    sessions.delete(workspace)
    cassette = load(path)
    with git_environment():
        report = replay(cassette, registry)
        assert report.ok, [str(difference)[:300] for difference in report.differences]
        (commit,) = [t for t in targets(cassette, registry, str(path)) if t.index == 2]
        traversal, full_disk = (
            run_cell(fault, commit, registry)
            for fault in select_faults("path_traversal,disk_failure")
        )
    assert traversal.status == "pass", traversal.problems
    assert full_disk.status == "fail"
    assert "left behind" in full_disk.problems[0] and ".git/objects/" in full_disk.problems[0]
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []
