"""Shared by the real tools' tests: where worlds are made, and what must
not change around them."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from trees import tree_snapshot

from pytest_toolguard.harness.directory_world import world_directories


@dataclass
class Surroundings:
    """The temporary directory worlds are made in (private to one test),
    a decoy tree inside it, beside every world, and the parent of the
    recorded workspaces."""

    temporary: Path
    decoys: Path
    recorded: Path

    def snapshots(self) -> dict[str, dict[str, tuple[int, bytes]]]:
        return {
            "decoys": tree_snapshot(self.decoys),
            "recorded parent": tree_snapshot(self.recorded),
        }

    def worlds_left(self) -> list[str]:
        return list(world_directories(str(self.temporary)))


@pytest.fixture
def surroundings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Surroundings]:
    """Worlds made in a temporary directory of this test's own (so another
    test's worlds never count), with decoys beside them: files a world's
    tool must never reach, a database where a tool that climbs out of its
    root would put one, and a directory sharing the workspaces' name."""
    temporary = tmp_path / "tmp"
    decoys = temporary / "decoys"
    (decoys / "deep").mkdir(parents=True)
    (decoys / "deep" / "secret.txt").write_text("decoy\n")
    (decoys / "crm.db").write_bytes(b"not a database")
    (temporary / "proj").mkdir()
    (temporary / "proj" / "keep.txt").write_text("decoy\n")
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv("TMPDIR", str(temporary))
    yield Surroundings(temporary, decoys, recorded)


@pytest.fixture(autouse=True)
def _same_working_directory() -> Iterator[None]:
    """A server may change the working directory: a test that lets it fails."""
    before = os.getcwd()
    yield
    assert os.getcwd() == before
