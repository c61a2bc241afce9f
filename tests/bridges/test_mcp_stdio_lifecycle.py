"""A server's life over stdio, with a raw JSON-RPC server in plain node
(``tests/mcp_servers/misbehaving_server.js``, tens of ms to start): a slow
start is never the first call's timeout; a server that stalls, dies
mid-call, writes garbage or starts children answers a stable code, leaves
no process and no RUNNING audit row."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
if shutil.which("node") is None:
    pytest.skip("node is not installed", allow_module_level=True)

from mcp_servers.processes import ended, running, servers_running  # noqa: E402

from pytest_toolguard import (  # noqa: E402
    Capabilities,
    ErrorCode,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.bridges.errors import BridgeError  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_stdio import KILL_AFTER_SECONDS  # noqa: E402
from pytest_toolguard.harness.directory_world import DirectoryWorld  # noqa: E402
from pytest_toolguard.replay.cassette import WorkspaceState  # noqa: E402

SERVER = str(Path(__file__).resolve().parent.parent / "mcp_servers" / "misbehaving_server.js")
SLOW_FILE = "slow-start-ms"
COMMAND = ["node", SERVER, "--slow-start", "{workspace}/" + SLOW_FILE]
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ}))
DEADLINE = 0.3
"""Every call's deadline here: far below the slow start below."""
SLOW_START_MS = 1000


@pytest.fixture(scope="module")
def misbehaving() -> ToolRegistry:
    """One registry for the module: each test's calls start their own server."""
    return ToolRegistry(from_mcp_command(COMMAND))


@pytest.fixture(params=["no world", "directory world"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the calls run: a plain workspace (as when recording), or a
    directory world (as when replaying or testing)."""
    if request.param == "no world":
        root = tmp_path / "ws"
        root.mkdir()
        yield str(root)
        return
    with DirectoryWorld(WorkspaceState(root=str(tmp_path / "recorded" / "proj"))) as world:
        yield world.root


def _runtime(
    registry: ToolRegistry, root: str, isolation: Any = "thread"
) -> tuple[ToolRuntime, SQLiteAuditStore]:
    store = SQLiteAuditStore(":memory:")
    deadlines = dict.fromkeys(("hello", "pid", "stall", "die", "spawn", "garble"), DEADLINE)
    runtime = ToolRuntime(registry, root, CAPS, store, timeouts=deadlines, isolation=isolation)
    return runtime, store


def _states(store: SQLiteAuditStore) -> list[str]:
    return [row.state.value for row in store.rows()]


# -- start-up: out of the first call's deadline ---------------------------------------


@pytest.mark.parametrize("isolation", ["thread", "inline"])
def test_a_slow_start_is_not_the_first_calls_timeout(
    misbehaving: ToolRegistry, place: str, isolation: str
) -> None:
    """The server takes three deadlines to start: the call still answers,
    as the start runs before the deadline's clock (bounded by
    ``startup_timeout`` alone)."""
    Path(place, SLOW_FILE).write_text(str(SLOW_START_MS))
    runtime, store = _runtime(misbehaving, place, isolation)
    with runtime:
        first = runtime.execute(ToolCall("1", "hello", {"name": "slow"}))
        assert (first.code, first.data) == (ErrorCode.OK, "hello slow")
        server = int(runtime.execute(ToolCall("2", "pid", {})).data)
    assert _states(store) == ["SUCCEEDED", "SUCCEEDED"]
    assert running(server)  # the server outlives the call: it serves the world


def test_a_start_past_its_own_bound_fails_the_call_and_is_no_timeout(tmp_path: Path) -> None:
    registry = ToolRegistry(from_mcp_command(COMMAND, startup_timeout=0.5))
    root = tmp_path / "ws"
    root.mkdir()
    (root / SLOW_FILE).write_text("60000")
    # This test's own server: the file's other tests run the same command
    # on another worker meanwhile.
    spelt = [word.replace("{workspace}", str(root)) for word in COMMAND]
    runtime, store = _runtime(registry, str(root))
    with runtime:
        result = runtime.execute(ToolCall("1", "hello", {"name": "x"}))
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert "did not answer initialize within 0.5 s" in result.message
    assert _states(store) == ["FAILED"]
    assert servers_running(spelt) == set()


# -- misbehaving servers ----------------------------------------------------------


@pytest.mark.parametrize("isolation", ["thread", "inline"])
def test_a_stalled_server_answers_timeout_and_is_killed(
    misbehaving: ToolRegistry, place: str, isolation: str
) -> None:
    """The stall blocks the whole node process (no cancellation reaches
    it): TIMEOUT at the deadline, the server killed a bound later, the next
    call on a new server."""
    runtime, store = _runtime(misbehaving, place, isolation)
    with runtime:
        server = int(runtime.execute(ToolCall("1", "pid", {})).data)
        stalled = runtime.execute(ToolCall("2", "stall", {"seconds": 3600}))
        assert stalled.code is ErrorCode.TIMEOUT
        assert ended(server, DEADLINE + KILL_AFTER_SECONDS + 10.0)
        again = runtime.execute(ToolCall("3", "pid", {}))
        assert again.ok and int(again.data) != server
    assert _states(store) == ["SUCCEEDED", "TIMED_OUT", "SUCCEEDED"]


@pytest.mark.parametrize("code", [0, 1, 137])
def test_a_server_dying_mid_call_answers_a_stable_code(
    misbehaving: ToolRegistry, place: str, code: int
) -> None:
    runtime, store = _runtime(misbehaving, place)
    with runtime:
        server = int(runtime.execute(ToolCall("1", "pid", {})).data)
        died = runtime.execute(ToolCall("2", "die", {"code": code}))
        assert died.code is ErrorCode.EXECUTION_ERROR
        assert "exited during the call" in died.message
        assert f"dying with {code}" in died.message  # the end of its stderr
        assert ended(server, 10.0)
        again = runtime.execute(ToolCall("3", "hello", {"name": "y"}))
        assert again.data == "hello y"
    assert _states(store) == ["SUCCEEDED", "FAILED", "SUCCEEDED"]


def test_what_a_server_started_does_not_outlive_the_world(
    misbehaving: ToolRegistry, tmp_path: Path
) -> None:
    """The server, its child and a grandchild in a session of its own all
    end with the world (read in /proc)."""
    with DirectoryWorld(WorkspaceState(root=str(tmp_path / "recorded" / "proj"))) as world:
        runtime, store = _runtime(misbehaving, world.root)
        with runtime:
            server = int(runtime.execute(ToolCall("1", "pid", {})).data)
            spawned = runtime.execute(ToolCall("2", "spawn", {}))
            assert spawned.ok, spawned.message
            children = [int(pid) for pid in spawned.data.strip("[]").split(",")]
            assert len(children) == 2
            assert all(running(pid) for pid in [server, *children])
    for pid in [server, *children]:
        assert ended(pid, 10.0), pid
    assert _states(store) == ["SUCCEEDED", "SUCCEEDED"]


def test_garbage_in_the_middle_of_a_session_is_passed_over_quietly(
    misbehaving: ToolRegistry, place: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A line that is not JSON-RPC after the start: the call it came with
    and the next ones answer; the SDK's traceback about it is not printed."""
    runtime, store = _runtime(misbehaving, place)
    with runtime:
        garbled = runtime.execute(ToolCall("1", "garble", {}))
        assert garbled.data == "garbled"
        assert runtime.execute(ToolCall("2", "hello", {"name": "z"})).ok
    assert _states(store) == ["SUCCEEDED", "SUCCEEDED"]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("--garbage", ["does not speak MCP", "Server ready on stdio", "starting up"]),
        ("--exit", ["exited before answering initialize", "bad config | line two"]),
    ],
)
def test_a_server_that_is_not_one_is_one_error_line_naming_the_command(
    option: str, says: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    command = ["node", SERVER, option]
    with pytest.raises(BridgeError) as raised:
        from_mcp_command(command)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"MCP server node {SERVER} {option}")
    assert all(part in message for part in says), message
    assert servers_running(command) == set()
    assert "Traceback" not in capfd.readouterr().err


# -- the runtime's side: a handler's ``prepare`` runs before the deadline -------------


class _Prepare:
    """A ``prepare`` that takes ``seconds`` (then raises with ``fails``)
    and keeps the workspace of the context it got; ``timeout_seconds`` is
    its bound."""

    def __init__(self, seconds: float, fails: bool, bound: float) -> None:
        self.seconds, self.fails, self.timeout_seconds, self.seen = seconds, fails, bound, ""

    def __call__(self, ctx: Any) -> None:
        import time

        time.sleep(self.seconds)  # a slow start, not a wait for anything
        if self.fails:
            raise RuntimeError("the server would not start")
        self.seen = str(ctx.workspace.root)


class _Prepared:
    """A handler with a ``prepare``; the call answers what it kept."""

    def __init__(self, seconds: float, *, fails: bool = False, bound: float = 30.0) -> None:
        self.prepare = _Prepare(seconds, fails, bound)

    def __call__(self, ctx: Any) -> str:
        return self.prepare.seen


@pytest.mark.parametrize("mode", ["thread", "inline", "async"])
@pytest.mark.parametrize(
    ("handler", "code", "state"),
    [
        pytest.param(lambda: _Prepared(3 * DEADLINE), ErrorCode.OK, "SUCCEEDED", id="slow"),
        pytest.param(
            lambda: _Prepared(0.0, fails=True), ErrorCode.EXECUTION_ERROR, "FAILED", id="fails"
        ),
        pytest.param(
            lambda: _Prepared(3 * DEADLINE, bound=DEADLINE),
            ErrorCode.EXECUTION_ERROR,
            "FAILED",
            id="past-its-bound",
        ),
    ],
)
def test_a_handlers_prepare_runs_before_the_deadline_under_its_own_bound(
    tmp_path: Path, mode: str, handler: Any, code: ErrorCode, state: str
) -> None:
    import asyncio

    from pytest_toolguard import ToolSpec

    prepared = handler()
    spec = ToolSpec("t", "A tool.", {"type": "object"}, prepared, timeout_seconds=DEADLINE)
    store = SQLiteAuditStore(":memory:")
    isolation = "inline" if mode == "inline" else "thread"
    with ToolRuntime(ToolRegistry([spec]), str(tmp_path), CAPS, store, isolation=isolation) as rt:
        call = ToolCall("1", "t", {})
        result = asyncio.run(rt.aexecute(call)) if mode == "async" else rt.execute(call)
    assert (result.code, _states(store)) == (code, [state]), result.message
    if code is ErrorCode.OK:
        assert result.data == str(tmp_path)


class _Needed:
    """A ``prepare`` whose ``needed(ctx)`` answers ``answer`` (raises it
    when it is an exception); counts its runs and the threads it ran on."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.runs, self.checked_on = answer, 0, ""
        self.timeout_seconds = 30.0

    def needed(self, ctx: Any) -> bool:
        import threading

        self.checked_on = threading.current_thread().name
        if isinstance(self.answer, Exception):
            raise self.answer
        return bool(self.answer)

    def __call__(self, ctx: Any) -> None:
        self.runs += 1


class _NeedsPreparing:
    def __init__(self, answer: Any) -> None:
        self.prepare = _Needed(answer)

    def __call__(self, ctx: Any) -> int:
        return self.prepare.runs


@pytest.mark.parametrize("mode", ["thread", "inline", "async"])
@pytest.mark.parametrize(
    ("answer", "runs"),
    [
        pytest.param(False, 0, id="nothing-to-prepare"),
        pytest.param(0, 0, id="falsy"),
        pytest.param(True, 1, id="needed"),
        pytest.param(RuntimeError("cannot tell"), 1, id="needed-raises"),
    ],
)
def test_a_prepare_that_says_it_is_not_needed_is_not_run(
    tmp_path: Path, mode: str, answer: Any, runs: int
) -> None:
    """``prepare.needed(ctx)`` is asked on the calling thread; False spares
    the run (and its hand-off to a worker), an error in it runs ``prepare``."""
    import asyncio
    import threading

    from pytest_toolguard import ToolSpec

    handler = _NeedsPreparing(answer)
    spec = ToolSpec("t", "A tool.", {"type": "object"}, handler, timeout_seconds=DEADLINE)
    store = SQLiteAuditStore(":memory:")
    registry = ToolRegistry([spec])
    with ToolRuntime(
        registry, str(tmp_path), CAPS, store, isolation="inline" if mode == "inline" else "thread"
    ) as rt:
        call = ToolCall("1", "t", {})
        result = asyncio.run(rt.aexecute(call)) if mode == "async" else rt.execute(call)
    assert (result.code, result.data, _states(store)) == (ErrorCode.OK, runs, ["SUCCEEDED"])
    assert handler.prepare.checked_on == threading.current_thread().name


def test_a_running_server_needs_no_preparing_and_a_dead_one_does(tmp_path: Path) -> None:
    """The bridge's ``prepare.needed``: True before its world's server runs,
    False while it runs (the call skips the hand-off), True again once it
    died; False for a cancelled call (its ``prepare`` does nothing)."""
    import threading
    from types import SimpleNamespace

    from pytest_toolguard.bridges.guards.mcp_stdio import MCPServerDied, StdioServers

    servers = StdioServers(["node", SERVER], env=None, cwd=None, startup_timeout=30.0)
    handler: Any = servers.handler("die")
    prepare = handler.prepare
    ctx = SimpleNamespace(workspace=SimpleNamespace(root=tmp_path), cancelled=threading.Event())
    before = prepare.needed(ctx)
    prepare(ctx)
    server = servers.of(str(tmp_path))
    try:
        running = prepare.needed(ctx)
        ctx.cancelled.set()
        cancelled = prepare.needed(ctx)
        ctx.cancelled.clear()
        with pytest.raises(MCPServerDied):
            server.call("die", {"code": 3}, None)
        assert (before, running, cancelled, prepare.needed(ctx)) == (True, False, False, True)
    finally:
        server.stop()


# -- amplification over stdio -------------------------------------------------------


def test_a_stdio_servers_cassette_is_amplified_and_its_variants_replay(tmp_path: Path) -> None:
    """Variants of each call recorded against the server in a world of
    their own, spelt as recorded, replayed through fresh branches."""
    from pytest_toolguard import PathAccess
    from pytest_toolguard.amplify import amplify
    from pytest_toolguard.replay import load, record_session
    from pytest_toolguard.replay.variants import replay_variants

    files = str(Path(SERVER).with_name("files_server.js"))
    reads = [PathAccess.read("{path}")]
    paths = {"read_note": reads, "read_at": reads, "write_note": [PathAccess.write("{path}")]}
    registry = ToolRegistry(from_mcp_command(["node", files, "{workspace}"], paths=paths))
    workspace = tmp_path / "recorded" / "proj"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.md").write_text("first\n")
    caps = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
    runtime = ToolRuntime(registry, str(workspace), caps, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        calls = [
            ("write_note", {"path": "notes/b.md", "text": "two\n"}),
            ("read_note", {"path": "notes/b.md"}),
        ]
        assert all(runtime.execute(ToolCall(f"c{i}", *call)).ok for i, call in enumerate(calls))
    runtime.close()
    shutil.rmtree(workspace.parent)
    amplified, report = amplify(load(path), registry)
    assert report.ok, report.lines()
    ran = [v for i in amplified.interactions for v in i.variants if not v.refused]
    assert ran, report.lines()
    assert "toolguard-world-" not in str([v.result.data for v in ran])  # spelt as recorded
    assert replay_variants(amplified, registry).differences == ()
    assert not workspace.exists()


# -- nothing outlives the test process -------------------------------------------------

ABANDONING = """
import gc, sys
from pytest_toolguard import (
    Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRegistry, ToolRuntime,
)
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command

registry = ToolRegistry(from_mcp_command({command!r}))
runtime = ToolRuntime(registry, sys.argv[1], Capabilities(allowed_risks=frozenset({{Risk.READ}})),
                      SQLiteAuditStore(":memory:"), timeouts={{"stall": 0.2}})
print(runtime.execute(ToolCall("1", "pid", {{}})).data, flush=True)
print(runtime.execute(ToolCall("2", "stall", {{"seconds": 3600}})).code.value, flush=True)
runtime.close()
del runtime, registry
gc.collect()
"""


def test_a_stalled_server_does_not_outlive_a_process_that_exits_at_once(tmp_path: Path) -> None:
    """The process ends within the bound after the stall's deadline, its
    registry already collected: the server (blocked, deaf to its closed
    stdin) is still killed, at exit."""
    import os
    import subprocess
    import sys

    script = ABANDONING.format(command=["node", SERVER])
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    server, code = done.stdout.split()
    assert code == "TIMEOUT", done.stderr
    assert ended(int(server), 10.0)


def test_a_probe_passes_on_the_prepare_of_the_handler_it_wraps_even_when_a_fault_wraps_it() -> None:
    from pytest_toolguard.harness.probes import HandlerProbe

    handler = _Prepared(0.0)
    probe = HandlerProbe(handler)
    assert probe.prepare is handler.prepare
    probe.handler = lambda ctx: "a fault's wrapper"  # as Cell.replace_handler does
    assert probe.prepare is handler.prepare
    assert HandlerProbe(lambda ctx: None).prepare is None


def test_the_end_of_a_servers_stderr_is_kept_after_its_loop_ended(tmp_path: Path) -> None:
    """A call that learns the server died may ask for its stderr after the
    server's loop has ended and closed the file: the end is kept."""
    from pytest_toolguard.bridges.guards.mcp_stdio import MCPServerDied, StdioServers

    server = StdioServers(["node", SERVER], env=None, cwd=None, startup_timeout=30.0).start(
        str(tmp_path)
    )
    with pytest.raises(MCPServerDied):
        server.call("die", {"code": 3}, None)
    server.stop()  # the loop has ended: its stderr file is closed
    assert "dying with 3" in str(server.died())
