"""MCP servers started as commands (``from_mcp_command``), any language,
over stdio: recorded, replayed with the recorded root deleted, the full
fault matrix and the fuzzer in the directory world; servers that stall,
die mid-call, start children, write garbage or do not start."""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from pytest_toolguard import (  # noqa: E402
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.bridges.definitions import BridgeError  # noqa: E402
from pytest_toolguard.bridges.mcp import from_mcp_command  # noqa: E402
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, targets  # noqa: E402
from pytest_toolguard.fuzz import fuzz_tool  # noqa: E402
from pytest_toolguard.harness.directory_world import (  # noqa: E402
    DirectoryWorld,
    world_directories,
)
from pytest_toolguard.replay import load, record_session, replay  # noqa: E402
from pytest_toolguard.replay.cassette import WorkspaceState  # noqa: E402

SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
PYTHON = sys.executable
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))

COMMANDS = {
    "python": [PYTHON, str(SERVERS / "files_server.py"), "{workspace}"],
    "node": ["node", str(SERVERS / "files_server.js"), "{workspace}"],
}
FILE_CALLS = (
    ("read_note", {"path": "notes/a.md"}),
    ("write_note", {"path": "notes/b.md", "text": "second\n"}),
    ("read_note", {"path": "notes/b.md"}),
)


def quiet_specs(command: list[str], **options: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return from_mcp_command(command, **options)


@pytest.fixture(autouse=True)
def _own_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Worlds made in this test's own temporary directory."""
    import tempfile

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv("TMPDIR", str(temporary))
    return temporary


def _notes(workspace: Path) -> None:
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.md").write_text("first\n")


def record(
    registry: ToolRegistry, calls: Any, tmp_path: Path, setup: Any = _notes
) -> tuple[Path, Path]:
    """The calls recorded in ``tmp_path/recorded/proj``; (cassette, root)."""
    workspace = tmp_path / "recorded" / "proj"
    workspace.mkdir(parents=True)
    if setup is not None:
        setup(workspace)
    runtime = ToolRuntime(registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        results = [
            runtime.execute(ToolCall(f"c{index}", name, arguments))
            for index, (name, arguments) in enumerate(calls)
        ]
    runtime.close()
    assert [(r.code, r.message) for r in results if not r.ok] == []
    return path, workspace


def matrix(registry: ToolRegistry, path: Path) -> list[Any]:
    cassette = load(path)
    return [
        run_cell(fault, target, registry)
        for target in targets(cassette, registry, str(path))
        for fault in BUILTIN_FAULTS
    ]


def failed(outcomes: list[Any]) -> list[str]:
    return [
        f"{o.interaction} {o.tool} {o.fault}: {'; '.join(o.problems)[:400]}"
        for o in outcomes
        if o.status == "fail"
    ]


def _ended(pid: int, timeout: float) -> bool:
    """Whether ``pid`` ended within ``timeout`` s (waited for on a pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


# -- correct servers, any language: record, replay, matrix, fuzz ------------------------


PATHS = {
    "read_note": [PathAccess.read("{path}")],
    "write_note": [PathAccess.write("{path}")],
}
"""The agent developer's view: the paths each tool reaches, declared."""


@pytest.fixture(scope="module", params=sorted(COMMANDS))
def files(request: pytest.FixtureRequest) -> ToolRegistry:
    return ToolRegistry(from_mcp_command(COMMANDS[request.param], paths=PATHS))


def test_the_servers_tools_are_mapped_as_an_in_process_servers(files: ToolRegistry) -> None:
    assert {spec.name: (spec.risk, spec.idempotent, spec.world) for spec in files} == {
        "read_note": (Risk.READ, False, "directory"),
        "write_note": (Risk.WRITE, True, "directory"),
    }
    assert files.get("write_note").input_schema["required"] == ["path", "text"]


def test_a_correct_server_replays_twice_with_its_recorded_root_deleted(
    files: ToolRegistry, tmp_path: Path
) -> None:
    path, workspace = record(files, FILE_CALLS, tmp_path)
    shutil.rmtree(workspace.parent)
    for _ in range(2):
        report = replay(load(path), files)
        assert report.ok, [(d, r.message) for d in report.differences for r in report.results][:3]
    assert not workspace.exists()
    assert list(world_directories(str(tmp_path / "tmp"))) == []


def test_a_correct_server_passes_every_cell_of_the_full_matrix(
    files: ToolRegistry, tmp_path: Path
) -> None:
    path, workspace = record(files, FILE_CALLS, tmp_path)
    shutil.rmtree(workspace.parent)
    outcomes = matrix(files, path)
    assert failed(outcomes) == [], '\n'.join(failed(outcomes))
    passed = {o.fault for o in outcomes if o.status == "pass"}
    assert {"path_traversal", "timeout", "process_killed", "disk_failure"} <= passed
    assert all(o.problems for o in outcomes if o.status == "n/a")
    assert list(world_directories(str(tmp_path / "tmp"))) == []
