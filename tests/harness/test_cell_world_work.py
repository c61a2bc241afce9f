"""The cheaper ways a cell reads its world answer as the costly ones did:

- ``WorldFiles.directories()`` (a walk of lstats, no file read) lists the
  directories ``save_workspace`` lists, in both worlds (nested, empty; a
  link to a directory is a link);
- the fake world's temporary directory, told after each reset:
  ``tempfile.gettempdir()`` is ``/tmp`` and leaves no probe file there.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from pytest_toolguard.faults.directory import WorldFiles
from pytest_toolguard.harness.directory_world import DirectoryWorld
from pytest_toolguard.harness.world import FakeWorld
from pytest_toolguard.replay.cassette import WorkspaceState

STATE = WorkspaceState(
    root="/r/proj",
    files={"a.txt": b"a", "notes/deep/b.md": b"b"},
    directories=("empty", "notes/also-empty"),
    symlinks={"linked": "notes"},
)


def _saved_directories(world: FakeWorld | DirectoryWorld) -> frozenset[str]:
    entries = world.save_workspace()
    return frozenset(relative for relative, mode, _data in entries if stat.S_ISDIR(mode))


def test_directories_in_the_directory_world_are_those_a_save_lists(tmp_path: Path) -> None:
    with DirectoryWorld(STATE, parent=str(tmp_path)) as world:
        os.mkdir(os.path.join(world.root, "made"))
        found = WorldFiles(world).directories()
        assert found == _saved_directories(world)
        assert found == {"empty", "made", "notes", "notes/also-empty", "notes/deep"}


def test_directories_in_the_fake_world_are_those_a_save_lists() -> None:
    with FakeWorld(STATE) as world:
        found = WorldFiles(world).directories()
        assert found == _saved_directories(world)
        assert "linked" not in found and "notes/deep" in found


def test_the_fake_worlds_temporary_directory_is_told_and_no_probe_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("TMPDIR", "TEMP", "TMP"):  # /tmp: the one pyfakefs makes by itself
        monkeypatch.delenv(name, raising=False)

    def probes(*_: object) -> str:  # what gettempdir() runs when nobody told it
        raise AssertionError("gettempdir() wrote a probe file to find the directory")

    with FakeWorld(STATE):
        pass
    monkeypatch.setattr(tempfile, "_get_default_tempdir", probes)
    with FakeWorld(STATE):  # from a reset filesystem: told before anything asks
        assert tempfile.tempdir == "/tmp"
        assert tempfile.gettempdir() == "/tmp"
