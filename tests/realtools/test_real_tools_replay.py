"""Real tools recorded for real, their recorded root deleted, then replayed:
through the library (``replay``) and through ``pytest --toolguard-replay``.
A SQLite tool, git run as a subprocess, a tool taking absolute paths, and
two servers from the package index wrapped in process (mcp-server-time,
mcp-server-git). Replay passes, and writes nothing outside its world: the
decoys beside the worlds and the recorded root's parent are the same bytes
before and after, and no world is left behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import real_tools
import sessions
from sessions import SESSIONS, git_environment, record
from trees import tree_snapshot

from pytest_toolguard.replay import load, replay

pytest.importorskip("mcp_server_time")
pytest.importorskip("mcp_server_git")

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")
INI = "[pytest]\npythonpath = .\ntoolguard_registry = real_tools:registry\n"


@pytest.fixture(scope="module")
def registry() -> object:
    return real_tools.registry()


@pytest.mark.parametrize("name", list(SESSIONS))
def test_a_real_tool_replays_twice_after_its_recorded_root_is_deleted(
    name: str, registry: object, surroundings: object, tmp_path: Path
) -> None:
    path, workspace = record(
        SESSIONS[name], registry, surroundings.recorded, tmp_path / "cassettes"
    )
    cassette = load(path)
    sessions.delete(workspace)
    before = surroundings.snapshots()
    for _ in range(2):
        with git_environment():
            report = replay(cassette, registry)
        assert report.differences == ()
        assert [result.ok for result in report.results] == [True] * len(cassette.interactions)
    assert surroundings.snapshots() == before
    assert not workspace.exists()  # replay never made the recorded root again
    assert surroundings.worlds_left() == []


def test_the_time_server_replays_in_the_directory_world_too(
    registry: object, surroundings: object, tmp_path: Path
) -> None:
    """Its world is the fake one by default (it reads the time-zone
    database, mapped in read-only); forced into a real directory it gives
    the same answers."""
    path, workspace = record(SESSIONS["time"], registry, surroundings.recorded, tmp_path / "c")
    sessions.delete(workspace)
    before = surroundings.snapshots()
    report = replay(load(path), registry, world="directory")
    assert report.differences == ()
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []


def test_pytest_toolguard_replay_replays_every_real_tool_with_its_root_deleted(
    pytester: pytest.Pytester, registry: object, surroundings: object
) -> None:
    pytester.makeini(INI)
    here = Path(__file__).parent
    for module in ("real_tools.py", "sessions.py"):
        shutil.copy(here / module, pytester.path / module)
    cassettes = pytester.path / "cassettes"
    workspaces = [
        record(session, registry, surroundings.recorded, cassettes)[1]
        for session in SESSIONS.values()
    ]
    for workspace in workspaces:
        sessions.delete(workspace)
    watched = {**surroundings.snapshots(), "cassettes": tree_snapshot(cassettes)}
    with git_environment():
        result = pytester.runpytest("--toolguard-replay", *NO_XDIST)
    result.assert_outcomes(passed=len(SESSIONS))
    assert {**surroundings.snapshots(), "cassettes": tree_snapshot(cassettes)} == watched
    assert not any(workspace.exists() for workspace in workspaces)
    assert surroundings.worlds_left() == []


def test_building_the_servers_leaves_the_process_as_it_was() -> None:
    """The servers are built in a controlled scope: the environment, the
    working directory and the root logger are what they were."""
    import logging
    import os

    root = logging.getLogger()
    before = (dict(os.environ), os.getcwd(), list(root.handlers), root.level)
    real_tools.registry()
    assert (dict(os.environ), os.getcwd(), list(root.handlers), root.level) == before
