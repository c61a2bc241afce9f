"""``pytest --toolguard-replay`` in the directory world: SQLite, git and
absolute-path tools recorded in a directory that is then deleted, replayed
green twice, with nothing outside the world changed; ``--toolguard-world``
and ini ``toolguard_world`` choose the world, and a bad value is one
usage error."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import directory_tools
import pytest
from directory_tools import CAPS, REGISTRY
from trees import tree_snapshot

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.harness.directory_world import world_directories
from pytest_toolguard.options import WORLD, WORLD_INI
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import dump

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")
INI = "[pytest]\npythonpath = .\ntoolguard_registry = directory_tools:registry\n"


def _record(
    base: Path, cassettes: Path, name: str, calls: list[tuple[str, Any]], setup: Any = None
) -> None:
    workspace = base / name / "proj"
    workspace.mkdir(parents=True)
    if setup is not None:
        setup(workspace)
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = cassettes / f"{name}.yaml"
    with record_session(runtime, path):
        for index, (tool_name, arguments) in enumerate(calls):
            assert runtime.execute(
                ToolCall(call_id=f"c{index}", tool_name=tool_name, arguments=arguments)
            ).ok
    runtime.close()


def _git_repository(workspace: Path) -> None:
    (workspace / "README.md").write_text("hello\n")
    directory_tools._git(str(workspace), "init")
    directory_tools._git(str(workspace), "add", "README.md")
    directory_tools._git(str(workspace), "commit", "-m", "first")


def _notes(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("one\ntwo\n")


@pytest.fixture
def project(pytester: pytest.Pytester, tmp_path: Path) -> Path:
    """A pytester project with three recorded cassettes whose recorded
    directories are gone; returns the parent those directories had."""
    pytester.makeini(INI)
    (pytester.path / "directory_tools.py").write_text(Path(directory_tools.__file__).read_text())
    cassettes = pytester.path / "cassettes"
    cassettes.mkdir()
    recorded = tmp_path / "recorded"
    _record(recorded, cassettes, "crm", [("add_contact", {"name": "Ada"})])
    _record(
        recorded,
        cassettes,
        "repo",
        [("git_commit_note", {"name": "note.txt", "text": "remember\n"})],
        _git_repository,
    )
    git = cassettes / "repo.yaml"
    dump(replace(load(git), volatile=("files..git/index",)), git)
    notes = str(recorded / "absolute" / "proj" / "notes.txt")
    _record(recorded, cassettes, "absolute", [("count_lines_at", {"path": notes})], _notes)
    for name in ("crm", "repo", "absolute"):
        shutil.rmtree(recorded / name)
    return recorded


def test_directory_world_cassettes_replay_green_twice_and_change_nothing_outside(
    pytester: pytest.Pytester, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Worlds are made in a temporary directory of this test's own: other
    # processes' worlds in the shared one come and go while it runs.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    decoys = tmp_path / "decoys"
    (decoys / "deep").mkdir(parents=True)
    (decoys / "deep" / "secret.txt").write_text("decoy\n")
    (decoys / "crm.db").write_bytes(b"not a database")
    watched = {
        "decoys": decoys,
        "recorded parent": project,
        "cassettes": pytester.path / "cassettes",
    }
    before = {name: tree_snapshot(top) for name, top in watched.items()}
    assert list(world_directories()) == []
    for _ in range(2):
        result = pytester.runpytest("--toolguard-replay", *NO_XDIST)
        result.assert_outcomes(passed=3)
    assert {name: tree_snapshot(top) for name, top in watched.items()} == before
    assert os.listdir(project) == []  # no recorded root made again
    assert list(world_directories()) == []


def test_the_fake_world_forced_on_them_fails_them(pytester: pytest.Pytester, project: Path) -> None:
    result = pytester.runpytest("--toolguard-replay", WORLD, "fake", *NO_XDIST)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2  # sqlite3 and git find no files there
    assert os.listdir(project) == []


def test_the_ini_world_is_used_and_the_option_overrides_it(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.makeini(INI + f"{WORLD_INI} = fake\n")
    assert pytester.runpytest("--toolguard-replay", *NO_XDIST).parseoutcomes().get("failed", 0) >= 2
    result = pytester.runpytest("--toolguard-replay", WORLD, "auto", *NO_XDIST)
    result.assert_outcomes(passed=3)


@pytest.mark.parametrize("where", ["option", "ini"])
def test_an_unknown_world_is_one_usage_error(pytester: pytest.Pytester, where: str) -> None:
    pytester.makeini(INI + (f"{WORLD_INI} = real\n" if where == "ini" else ""))
    arguments = [WORLD, "real"] if where == "option" else []
    result = pytester.runpytest("--toolguard-replay", *arguments, *NO_XDIST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "real" in text and "directory" in text
    assert "Traceback" not in text
