"""mcp-server-git from the package index, started as a command over stdio
(``python -m mcp_server_git --repository {workspace}``) in a real
repository world: a session recorded (status, add, commit, log), replayed
with the server started again in a fresh world after the recorded root is
deleted, and the full-disk cell of the fault matrix on the commit; and
fuzzed in a world whose workspace starts as a repository (``workspace=``).
The full matrix and a full fuzz take minutes (a Python server started per
world): they are run by hand."""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import sessions
from real_tools import CAPS, GIT_ENVIRONMENT, run_git
from sessions import Session, git_environment, record

from pytest_toolguard import ToolRegistry
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.fuzz import check_call, fuzz_tool
from pytest_toolguard.replay import load, replay
from pytest_toolguard.replay.cassette import WorkspaceState

pytest.importorskip("mcp_server_git")

GIT = [sys.executable, "-m", "mcp_server_git", "--repository", "{workspace}"]
RAW_DATE = "1714564800 +0000"
ENVIRONMENT = {
    **GIT_ENVIRONMENT,
    "GIT_AUTHOR_DATE": RAW_DATE,
    "GIT_COMMITTER_DATE": RAW_DATE,
    "GIT_OPTIONAL_LOCKS": "0",
}
"""The server's environment: GitPython writes commits itself and reads
only this form of a date; ``git status`` rewrites ``.git/index`` (its
cache of the files' times) unless optional locks are off, which the
fuzzer rightly holds against a read-only ``git_status``; the rest as
``real_tools``'s git."""


def _repository_with_a_note(workspace: Path) -> None:
    (workspace / "README.md").write_text("hello\n")
    run_git(str(workspace), "init", "-q")
    run_git(str(workspace), "add", "README.md")
    run_git(str(workspace), "commit", "-q", "-m", "first")
    (workspace / "notes.txt").write_text("a note\n")


def _state_of(directory: Path) -> WorkspaceState:
    """The files and directories under ``directory``, as a starting workspace."""
    files: dict[str, bytes] = {}
    directories: list[str] = []
    for folder, subfolders, names in os.walk(directory):
        relative = os.path.relpath(folder, directory)
        directories.extend(os.path.normpath(os.path.join(relative, name)) for name in subfolders)
        for name in names:
            files[os.path.normpath(os.path.join(relative, name))] = Path(folder, name).read_bytes()
    return WorkspaceState(root=str(directory), files=files, directories=tuple(sorted(directories)))


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


@pytest.mark.slow
def test_mcp_server_git_over_stdio_records_replays_and_its_commit_is_fault_tested(
    registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    """Replayed as recorded in a fresh world. On a full disk its commit
    leaves GitPython's temporary object behind in ``.git/objects``: a real
    fault of the server, caught. (Each world starts a Python server: the
    rest of the matrix, 84 cells, is run by hand.)"""
    assert {"git_status", "git_add", "git_commit", "git_log"} <= {spec.name for spec in registry}
    before = surroundings.snapshots()
    path, workspace = record(SESSION, registry, surroundings.recorded, tmp_path / "cassettes")
    sessions.delete(workspace)
    cassette = load(path)
    with git_environment():
        report = replay(cassette, registry)
        assert report.ok, [str(difference)[:300] for difference in report.differences]
        (commit,) = [t for t in targets(cassette, registry, str(path)) if t.index == 2]
        (disk_failure,) = select_faults("disk_failure")
        full_disk = run_cell(disk_failure, commit, registry)
    assert full_disk.status == "fail"
    assert "left behind" in full_disk.problems[0] and ".git/objects/" in full_disk.problems[0]
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []


@pytest.mark.slow
def test_mcp_server_git_over_stdio_is_fuzzed_in_a_repository_world(
    registry: ToolRegistry, surroundings: Any, tmp_path: Path
) -> None:
    """Every example's workspace starts as a repository, so the server
    starts and its status answers OK; no problem is reported (a server per
    example: a few random examples, without the path probes, and the
    repository's own root and the link leading out by ``check_call``)."""
    (tmp_path / "repository").mkdir()
    _repository_with_a_note(tmp_path / "repository")
    repository = _state_of(tmp_path / "repository")
    assert ".git/HEAD" in repository.files
    status = registry.get("git_status")
    assert status is not None
    before = surroundings.snapshots()
    # Declared: no argument is a path, so no probe (27 more servers).
    unprobed = dataclasses.replace(status, paths=(), paths_declared=True)
    report = fuzz_tool(unprobed, registry=registry, examples=5, workspace=repository)
    assert report.skipped is None and report.failures == (), str(report)
    assert report.handler_calls > 0 and "OK" in report.codes
    for repo_path in (".", "link-out"):
        assert check_call(status, {"repo_path": repo_path}, workspace=repository) == ()
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []
