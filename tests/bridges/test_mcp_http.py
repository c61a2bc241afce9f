"""MCP servers started as commands and spoken to over Streamable HTTP on the
loopback (``from_mcp_http``): recorded, replayed in a fresh world, fault
cells, servers that stall or die mid-call, and commands that give no
server: the lifecycle of ``from_mcp_command``, another transport."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp_servers.processes import ended, running  # noqa: E402

from pytest_toolguard import (  # noqa: E402
    Approver,
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.bridges.errors import BridgeError  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_http  # noqa: E402
from pytest_toolguard.faults import run_cell, select_faults, targets  # noqa: E402
from pytest_toolguard.fuzz import fuzz_tool  # noqa: E402
from pytest_toolguard.harness.directory_world import (  # noqa: E402
    DirectoryWorld,
    world_directories,
)
from pytest_toolguard.replay import load, record_session, replay  # noqa: E402
from pytest_toolguard.replay.cassette import WorkspaceState  # noqa: E402

SERVER = Path(__file__).resolve().parent.parent / "mcp_servers" / "http_server.py"
PYTHON = sys.executable
COMMAND = [PYTHON, str(SERVER), "{workspace}", "--port", "{port}"]
CAPS = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE, Risk.EXTERNAL}), write_roots=(".",)
)
PATHS = {
    "read_note": [PathAccess.read("{path}")],
    "write_note": [PathAccess.write("{path}")],
}
FILE_CALLS = (
    ("read_note", {"path": "notes/a.md"}),
    ("write_note", {"path": "notes/b.md", "text": "second\n"}),
    ("read_note", {"path": "notes/b.md"}),
)
DEADLINE = 0.5
MARKER = b"TOOLGUARD_MCP_SERVER="


@pytest.fixture(autouse=True)
def _own_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Worlds made in this test's own temporary directory."""
    import tempfile

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv("TMPDIR", str(temporary))
    return temporary


@pytest.fixture(scope="module")
def notes() -> ToolRegistry:
    """The server's tools, listed once for the module (each world still
    starts its own server)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stall/die/hello declare no paths
        return ToolRegistry(from_mcp_http(COMMAND, paths=PATHS, risks={"hello": Risk.EXTERNAL}))


def _notes(workspace: Path) -> None:
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.md").write_text("first\n")


def record(registry: ToolRegistry, calls: Any, tmp_path: Path) -> tuple[Path, Path]:
    """The calls recorded in ``tmp_path/recorded/proj``; (cassette, root)."""
    workspace = tmp_path / "recorded" / "proj"
    workspace.mkdir(parents=True)
    _notes(workspace)
    runtime = ToolRuntime(
        registry,
        str(workspace),
        CAPS,
        SQLiteAuditStore(":memory:"),
        hooks=[Approver(lambda event: True)],
    )
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        results = [
            runtime.execute(ToolCall(f"c{index}", name, arguments))
            for index, (name, arguments) in enumerate(calls)
        ]
    runtime.close()
    assert [(r.code, r.message) for r in results if not r.ok] == []
    return path, workspace


def _servers_running(word: str) -> set[int]:
    """The running processes carrying a server's marker whose command line
    holds ``word`` (other workers of the run start servers meanwhile)."""
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                marked = MARKER in handle.read()
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                ours = word.encode() in handle.read()
        except OSError:
            continue
        if marked and ours and running(int(name)):
            found.add(int(name))
    return found


def _left_running(word: str) -> set[int]:
    """``_servers_running(word)``, once those retired at a deadline (killed a
    bound later) had the time to end."""
    for pid in _servers_running(word):
        ended(pid, 5.0)
    return _servers_running(word)


# -- a correct server: mapped, recorded, replayed, fault cells -----------------------


def test_the_servers_tools_are_mapped_as_an_in_process_servers(notes: ToolRegistry) -> None:
    mapped = {spec.name: (spec.risk, spec.idempotent, spec.world) for spec in notes}
    assert {name: mapped[name] for name in ("read_note", "write_note", "hello")} == {
        "read_note": (Risk.READ, False, "directory"),
        "write_note": (Risk.WRITE, True, "directory"),
        "hello": (Risk.EXTERNAL, False, "directory"),
    }
    write_note = notes.get("write_note")
    assert write_note is not None and write_note.input_schema["required"] == ["path", "text"]


def test_a_recorded_session_replays_in_a_fresh_world_and_passes_its_fault_cells(
    notes: ToolRegistry, tmp_path: Path
) -> None:
    """The recorded root deleted: replay starts a server in a world of its
    own; so does each cell. An external tool's protocol requests are not the
    tool's HTTP traffic: none is kept in the cassette, none is looked for on
    replay."""
    calls = (*FILE_CALLS, ("hello", {"name": "x"}))
    path, workspace = record(notes, calls, tmp_path)
    text = path.read_text()
    assert "127.0.0.1" not in text and "/mcp" not in text
    shutil.rmtree(workspace.parent)
    report = replay(load(path), notes)
    assert report.ok, [(d, r.message) for d in report.differences for r in report.results][:3]
    assert [r.data for r in report.results] == [
        {"result": "first\n"},
        {"result": "wrote 7 characters"},
        {"result": "second\n"},
        {"result": "hello x"},
    ]
    first = targets(load(path), notes, str(path))[0]
    for fault in select_faults("timeout,process_killed"):
        outcome = run_cell(fault, first, notes)
        assert outcome.status == "pass", (fault.name, outcome.problems)
    assert not workspace.exists()
    assert list(world_directories(str(tmp_path / "tmp"))) == []
    assert _left_running(str(tmp_path / "tmp")) == set()  # the worlds' servers ended with them


# -- servers that stall, die, belong to a world --------------------------------------


@pytest.fixture
def place(tmp_path: Path) -> Iterator[str]:
    """A directory world, as when replaying or testing (with no world, as
    when recording, the same code runs: ``test_mcp_stdio`` covers both)."""
    with DirectoryWorld(WorkspaceState(root=str(tmp_path / "recorded" / "proj"))) as world:
        yield world.root


def _runtime(registry: ToolRegistry, root: str) -> tuple[ToolRuntime, SQLiteAuditStore]:
    store = SQLiteAuditStore(":memory:")
    runtime = ToolRuntime(
        registry,
        root,
        CAPS,
        store,
        timeouts={"stall": DEADLINE},
        hooks=[Approver(lambda event: True)],
    )
    return runtime, store


def test_a_stalled_server_is_killed_at_the_deadline_plus_the_bound_and_a_dead_one_restarts(
    notes: ToolRegistry, place: str
) -> None:
    """At the deadline: TIMEOUT, the server killed a bound later, the next
    call on a new server. A server dying mid-call: a stable code, its row
    FAILED, the next call on a new server."""
    from pytest_toolguard.bridges.guards.mcp_stdio import KILL_AFTER_SECONDS

    runtime, store = _runtime(notes, place)
    with runtime:
        first = runtime.execute(ToolCall("1", "pid", {}))
        assert first.ok, first.message
        server = int(first.data["result"])
        stalled = runtime.execute(ToolCall("2", "stall", {"seconds": 3600}))
        assert stalled.code is ErrorCode.TIMEOUT
        assert ended(server, DEADLINE + KILL_AFTER_SECONDS + 10.0)
        assert not running(server)
        second = int(runtime.execute(ToolCall("3", "pid", {})).data["result"])
        assert second != server
        died = runtime.execute(ToolCall("4", "die", {"code": 3}))
        assert died.code is ErrorCode.EXECUTION_ERROR
        assert "exited during the call" in died.message
        assert ended(second, 10.0)
        again = runtime.execute(ToolCall("5", "hello", {"name": "y"}))
        assert again.ok and again.data == {"result": "hello y"}
    states = [row.state.value for row in store.rows()]
    assert states == ["SUCCEEDED", "TIMED_OUT", "SUCCEEDED", "FAILED", "SUCCEEDED"]


def test_in_a_directory_world_the_server_is_the_worlds_process_and_dies_with_it(
    notes: ToolRegistry, tmp_path: Path
) -> None:
    from pytest_toolguard.harness.child_processes import MARKER as WORLD_MARKER

    with DirectoryWorld(WorkspaceState(root=str(tmp_path / "recorded" / "proj"))) as world:
        runtime, _store = _runtime(notes, world.root)
        with runtime:
            server = int(runtime.execute(ToolCall("1", "pid", {})).data["result"])
            with open(f"/proc/{server}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            assert any(
                entry.startswith(f"{WORLD_MARKER}={world.around}#".encode()) for entry in environ
            )
            assert [p.pid for p in world.processes.started] == [server]
    assert ended(server, 10.0)


# -- commands that give no server, urls off the loopback: one error line -------------


@pytest.mark.slow
def test_fuzzing_reaches_the_server_the_world_started_and_finds_nothing(
    notes: ToolRegistry,
) -> None:
    """The client's connection to the world's own server is how a call gets
    to the tool, not the tool's traffic: the fuzzer's network refusal lets
    it through (it refused every call before), and nothing is reported."""
    spec = notes.get("read_note")
    assert spec is not None
    report = fuzz_tool(spec, registry=notes, examples=2, timeout_seconds=30.0)
    assert report.skipped is None, report.skipped
    assert report.failures == () and report.handler_calls > 0 and "OK" in report.codes
    assert not any("network refused" in note for note in report.notes), report.notes


@pytest.mark.parametrize(
    ("command", "says"),
    [
        pytest.param(
            [PYTHON, "-c", "import sys; sys.stderr.write('bad config\\nline two\\n'); sys.exit(2)"],
            ["exited before answering initialize", "bad config | line two"],
            id="exits-at-once",
        ),
        pytest.param(["no-such-mcp-http-server", "{port}"], ["not found"], id="not-found"),
        pytest.param(
            [PYTHON, "-m", "http.server", "{port}", "--bind", "127.0.0.1"],
            ["does not speak MCP at http://127.0.0.1:", "/mcp", "501"],
            id="not-mcp-on-its-port",
        ),
        pytest.param(
            [*COMMAND, "--path", "/elsewhere"],
            ["does not speak MCP at http://127.0.0.1:", "/mcp", "404"],
            id="mcp-on-another-path",
        ),
        pytest.param(
            [PYTHON, "-c", "import time; print('never listens', flush=True); time.sleep(120)"],
            ["did not answer initialize within 1 s", "never listens"],
            id="never-listens",
        ),
    ],
)
def test_a_command_that_gives_no_server_is_one_bridge_error_line(
    command: list[str], says: list[str]
) -> None:
    silent = any("within 1 s" in part for part in says)
    before = _servers_running(command[-1])
    with pytest.raises(BridgeError) as raised:
        from_mcp_http(command, startup_timeout=1.0 if silent else 60.0)
    message = str(raised.value)
    assert "\n" not in message
    assert command[0] in message
    for part in says:
        assert part in message
    assert _servers_running(command[-1]) - before == set()


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:{port}/mcp",
        "http://example.com:{port}/mcp",
        "http://10.0.0.1:{port}/mcp",
        "http://127.0.0.1/mcp",
        "http://0.0.0.0:{port}/mcp",
        "ftp://localhost:{port}/mcp",
    ],
)
def test_a_url_off_the_loopback_is_refused_before_anything_runs(url: str) -> None:
    with pytest.raises(BridgeError, match="loopback"):
        from_mcp_http(["no-such-mcp-http-server"], url=url)


def test_a_string_command_is_refused() -> None:
    with pytest.raises(BridgeError):
        from_mcp_http("python server.py")  # a str is a Sequence[str]: refused at run time
