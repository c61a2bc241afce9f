"""MCP servers started as commands (``from_mcp_command``), any language,
over stdio: recorded, replayed with the recorded root deleted, the full
fault matrix and the fuzzer in the directory world; servers that stall,
die mid-call, start children, write garbage or do not start."""

from __future__ import annotations

import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp_servers.processes import ended, running, servers_running  # noqa: E402

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
from pytest_toolguard.bridges.errors import BridgeError  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command  # noqa: E402
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets  # noqa: E402
from pytest_toolguard.fuzz import fuzz_tool  # noqa: E402
from pytest_toolguard.harness.directory_world import (  # noqa: E402
    DirectoryWorld,
    world_directories,
)
from pytest_toolguard.replay import load, record_session, replay  # noqa: E402
from pytest_toolguard.replay.cassette import WorkspaceState  # noqa: E402
from pytest_toolguard.replay.root_map import ROOT_PLACEHOLDER  # noqa: E402

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


# -- correct servers, any language: record, replay, matrix, fuzz ------------------------


PATHS = {
    "read_note": [PathAccess.read("{path}")],
    "read_at": [PathAccess.read("{path}")],
    "write_note": [PathAccess.write("{path}")],
}
"""The agent developer's view: the paths each tool reaches, declared."""


@pytest.fixture(scope="module", params=sorted(COMMANDS))
def files(request: pytest.FixtureRequest) -> ToolRegistry:
    return ToolRegistry(from_mcp_command(COMMANDS[request.param], paths=PATHS))


def test_the_servers_tools_are_mapped_as_an_in_process_servers(files: ToolRegistry) -> None:
    mapped = {spec.name: (spec.risk, spec.idempotent, spec.world) for spec in files}
    assert {name: mapped[name] for name in ("read_note", "write_note")} == {
        "read_note": (Risk.READ, False, "directory"),
        "write_note": (Risk.WRITE, True, "directory"),
    }
    write_note = files.get("write_note")
    assert write_note is not None and write_note.input_schema["required"] == ["path", "text"]


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


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["node", "servers/files_server.js", "{workspace}"], id="script"),
        pytest.param(["./run.sh", "{workspace}"], id="program"),
        pytest.param(["node", "files_server.js", "{workspace}"], id="cwd"),
    ],
)
def test_a_command_spelt_relative_to_the_test_still_starts_in_a_world(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A world moves the working directory into itself while it runs; a
    command spelt relative to the project must still find its files there."""
    project = tmp_path / "project"
    (project / "servers").mkdir(parents=True)
    shutil.copy(SERVERS / "files_server.js", project / "servers" / "files_server.js")
    run = project / "run.sh"
    run.write_text('#!/bin/sh\nexec node "$(dirname "$0")/servers/files_server.js" "$@"\n')
    run.chmod(0o755)
    monkeypatch.chdir(project)
    cwd = "servers" if command[1] == "files_server.js" else None
    registry = ToolRegistry(from_mcp_command(command, cwd=cwd, paths=PATHS))
    path, workspace = record(registry, FILE_CALLS, tmp_path)
    shutil.rmtree(workspace.parent)
    report = replay(load(path), registry)
    assert report.ok, [(d, r.message) for d in report.differences for r in report.results][:3]
    assert sorted(p.name for p in project.iterdir()) == ["run.sh", "servers"]


def test_symlink_race_over_stdio_is_not_applicable_never_a_pass(tmp_path: Path) -> None:
    """The server is another process: once it runs, no file operation of
    the handler's is seen here, so no swap can land between two; the cell
    says so. (The first call starts the server: its swaps land then.)"""
    registry = ToolRegistry(quiet_specs(COMMANDS["node"], paths=PATHS))
    path, _ = record(registry, FILE_CALLS, tmp_path)
    cassette = load(path)
    outcomes = [
        run_cell(fault, target, registry)
        for target in targets(cassette, registry, str(path))
        for fault in select_faults("symlink_race")
    ]
    assert outcomes[0].status == "pass"
    assert [o.status for o in outcomes[1:]] == ["n/a"] * (len(FILE_CALLS) - 1)
    assert all("no file operation in this process" in o.problems[0] for o in outcomes[1:])


@pytest.mark.slow
def test_a_correct_server_passes_every_cell_of_the_full_matrix_in_the_authors_view(
    tmp_path: Path,
) -> None:
    """No path declared: every escape reaches the server, which refuses it
    on its own; a tool that writes may write anywhere in its workspace.
    (node: the same matrix over the SDK's Python server takes minutes.)"""
    authors = ToolRegistry(quiet_specs(COMMANDS["node"]))
    path, workspace = record(authors, FILE_CALLS, tmp_path)
    shutil.rmtree(workspace.parent)
    outcomes = matrix(authors, path)
    assert failed(outcomes) == [], "\n".join(failed(outcomes))
    passed = {o.fault for o in outcomes if o.status == "pass"}
    assert {"path_traversal", "symlink_escape", "timeout", "process_killed"} <= passed
    assert {"disk_failure", "partial_write"} <= passed
    assert all(o.problems for o in outcomes if o.status == "n/a")
    assert list(world_directories(str(tmp_path / "tmp"))) == []


def test_an_absolute_path_argument_is_recorded_with_the_root_placeholder_and_mapped_on_replay(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry(from_mcp_command(COMMANDS["node"], paths=PATHS))
    workspace = tmp_path / "recorded" / "proj"
    calls = (("read_at", {"path": f"{workspace}/notes/a.md"}),)
    path, workspace = record(registry, calls, tmp_path)
    text = path.read_text()
    assert f"path: '{ROOT_PLACEHOLDER}/notes/a.md'" in text
    assert text.count(str(workspace)) == 1  # the recorded root, said once
    shutil.rmtree(workspace.parent)
    report = replay(load(path), registry)
    assert report.ok, [(d, r.message) for d in report.differences for r in report.results][:3]
    assert report.results[0].data == "first\n"
    outcomes = matrix(registry, path)
    assert failed(outcomes) == [], "\n".join(failed(outcomes))
    assert not workspace.exists()


def test_a_tool_that_writes_and_declares_no_path_may_write_its_workspace() -> None:
    """Its server is started for that workspace: the boundary checks none
    of its arguments, and the session's write roots must hold the root."""
    for paths in (None, {"read_note": PATHS["read_note"]}):
        specs = {spec.name: spec for spec in quiet_specs(COMMANDS["node"], paths=paths)}
        assert specs["write_note"].paths == (PathAccess.write("."),)
        assert specs["read_note"].paths == (() if paths is None else tuple(PATHS["read_note"]))
    declared = {spec.name: spec for spec in quiet_specs(COMMANDS["node"], paths=PATHS)}
    assert declared["write_note"].paths == tuple(PATHS["write_note"])


@pytest.fixture(scope="module")
def leaky_cassette(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A read and a write recorded with the correct server, its root deleted."""
    place = tmp_path_factory.mktemp("leaky")
    path, workspace = record(
        ToolRegistry(from_mcp_command(COMMANDS["node"])), FILE_CALLS[:2], place
    )
    shutil.rmtree(workspace.parent)
    return str(path)


@pytest.mark.parametrize("tool", ["read_note", "write_note"])
@pytest.mark.parametrize(
    ("fault", "contained"), [("path_traversal", True), ("symlink_escape", False)]
)
def test_a_leaky_twin_is_caught_in_the_authors_view(
    leaky_cassette: str, tool: str, fault: str, contained: bool
) -> None:
    """The twin joins the path to its root as given and follows links. The
    author's view (no paths declared): the payloads reach the server and
    the world's oracles see it reach outside. The agent developer's view
    (paths declared): the boundary refuses a traversal before the server,
    but a link swapped in during the call only the server itself can
    refuse (the correct server passes that cell: the full matrix above)."""
    leaky = [*COMMANDS["node"], "--leaky"]
    authors = ToolRegistry(quiet_specs(leaky))
    developers = ToolRegistry(from_mcp_command(leaky, paths=PATHS))
    (chosen,) = select_faults(fault)
    (target,) = [t for t in targets(load(leaky_cassette), developers, leaky_cassette)
                 if t.call.tool_name == tool]  # fmt: skip
    caught = run_cell(chosen, target, authors)
    assert caught.status == "fail" and "outside" in " ".join(caught.problems), caught
    in_the_developers_view = run_cell(chosen, target, developers)
    assert in_the_developers_view.status == ("pass" if contained else "fail")


def test_fuzzing_a_correct_server_finds_nothing() -> None:
    """node: the SDK's Python server, started for each example, takes minutes."""
    files = ToolRegistry(from_mcp_command(COMMANDS["node"], paths=PATHS))
    for name in ("read_note", "write_note"):
        spec = files.get(name)
        assert spec is not None
        report = fuzz_tool(spec, examples=5, seed=0, registry=files, timeout_seconds=60.0)
        assert [(f.problem, f.detail, f.arguments) for f in report.failures] == []
        assert report.skipped is None and report.handler_calls > 0


TIME = [PYTHON, "-m", "mcp_server_time", "--local-timezone", "UTC"]
TIME_CALLS = (
    (
        "convert_time",
        {"source_timezone": "Europe/Warsaw", "time": "12:00", "target_timezone": "Asia/Kolkata"},
    ),
)


@pytest.mark.slow
def test_mcp_server_time_over_stdio_records_replays_and_passes_the_matrix(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mcp_server_time")
    registry = ToolRegistry(quiet_specs(TIME))
    assert {spec.name for spec in registry} >= {"convert_time", "get_current_time"}
    path, workspace = record(registry, TIME_CALLS, tmp_path, setup=None)
    shutil.rmtree(workspace.parent)
    report = replay(load(path), registry)
    assert report.ok, [(d, r.message) for d in report.differences for r in report.results][:3]
    outcomes = matrix(registry, path)
    assert failed(outcomes) == [], "\n".join(failed(outcomes))
    assert any(o.status == "pass" for o in outcomes)
    assert list(world_directories(str(tmp_path / "tmp"))) == []


# -- servers that misbehave ----------------------------------------------------------

MISBEHAVING = [PYTHON, str(SERVERS / "misbehaving_server.py")]
DEADLINE = 0.5


@pytest.fixture(scope="module")
def misbehaving() -> ToolRegistry:
    return ToolRegistry(quiet_specs(MISBEHAVING))


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
    runtime = ToolRuntime(
        registry, root, CAPS, store, timeouts={"stall": DEADLINE}, isolation=isolation
    )
    return runtime, store


@pytest.mark.parametrize("isolation", ["thread", "inline"])
def test_a_stalled_server_is_killed_at_the_deadline_plus_the_bound_and_answers_timeout(
    misbehaving: ToolRegistry, place: str, isolation: str
) -> None:
    """Thread mode sets ``ctx.cancelled`` at the deadline; inline mode
    interrupts the handler's wait: either way the request is cancelled and
    the server killed a bound later."""
    from pytest_toolguard.bridges.guards.mcp_stdio import KILL_AFTER_SECONDS

    runtime, store = _runtime(misbehaving, place, isolation)
    with runtime:
        first = runtime.execute(ToolCall("1", "pid", {}))
        assert first.ok
        server = int(first.data["result"])
        stalled = runtime.execute(ToolCall("2", "stall", {"seconds": 3600}))
        assert stalled.code is ErrorCode.TIMEOUT
        assert ended(server, DEADLINE + KILL_AFTER_SECONDS + 10.0)
        assert not running(server)
        again = runtime.execute(ToolCall("3", "pid", {}))  # a new server, started again
        assert again.ok and int(again.data["result"]) != server
        assert runtime.execute(ToolCall("4", "hello", {"name": "x"})).data == {"result": "hello x"}
    states = [row.state.value for row in store.rows()]
    assert "RUNNING" not in states and states.count("TIMED_OUT") == 1


@pytest.mark.parametrize("code", [0, 3, 137])
def test_a_server_dying_mid_call_answers_a_stable_code_and_no_running_row(
    misbehaving: ToolRegistry, place: str, code: int
) -> None:
    runtime, store = _runtime(misbehaving, place)
    with runtime:
        server = int(runtime.execute(ToolCall("1", "pid", {})).data["result"])
        died = runtime.execute(ToolCall("2", "die", {"code": code}))
        assert died.code is ErrorCode.EXECUTION_ERROR
        assert "exited during the call" in died.message
        assert ended(server, 10.0)
        again = runtime.execute(ToolCall("3", "hello", {"name": "y"}))
        assert again.ok and again.data == {"result": "hello y"}
    states = [row.state.value for row in store.rows()]
    assert states == ["SUCCEEDED", "FAILED", "SUCCEEDED"]


def test_what_a_server_started_dies_with_the_world(
    misbehaving: ToolRegistry, tmp_path: Path
) -> None:
    with DirectoryWorld(WorkspaceState(root=str(tmp_path / "recorded" / "proj"))) as world:
        runtime, _store = _runtime(misbehaving, world.root)
        with runtime:
            server = int(runtime.execute(ToolCall("1", "pid", {})).data["result"])
            spawned = runtime.execute(ToolCall("2", "spawn", {}))
            assert spawned.ok, spawned.message
            children = [int(pid) for pid in spawned.data["result"]]
            assert all(running(pid) for pid in [server, *children])
    for pid in [server, *children]:
        assert ended(pid, 10.0), pid
        assert not running(pid)


def test_in_a_directory_world_the_server_is_the_worlds_process(
    misbehaving: ToolRegistry, tmp_path: Path
) -> None:
    """Started from the first call's handler run, so the world's
    ``ChildProcesses`` starts it: it carries the world's marker (killed with
    the world) and the recorded time where libfaketime is installed."""
    from pytest_toolguard.harness.child_processes import MARKER

    with DirectoryWorld(WorkspaceState(root=str(tmp_path / "recorded" / "proj"))) as world:
        runtime, _store = _runtime(misbehaving, world.root)
        with runtime:
            server = int(runtime.execute(ToolCall("1", "pid", {})).data["result"])
            with open(f"/proc/{server}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            assert any(entry.startswith(f"{MARKER}={world.around}#".encode()) for entry in environ)
            assert [p.pid for p in world.processes.started] == [server]
    assert ended(server, 10.0)


def test_a_server_whose_world_directory_is_gone_is_stopped(
    misbehaving: ToolRegistry, tmp_path: Path
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    runtime, _store = _runtime(misbehaving, str(gone))
    with runtime:
        server = int(runtime.execute(ToolCall("1", "pid", {})).data["result"])
    shutil.rmtree(gone)
    other = tmp_path / "other"
    other.mkdir()
    runtime, _store = _runtime(misbehaving, str(other))
    with runtime:
        assert runtime.execute(ToolCall("1", "hello", {"name": "z"})).ok
    assert ended(server, 10.0)


# -- servers that are not servers: one error line -------------------------------------


@pytest.mark.parametrize(
    ("command", "says"),
    [
        pytest.param(
            [PYTHON, str(SERVERS / "garbage_server.py")],
            ["does not speak MCP", "Welcome to the notes server", "starting up"],
            id="garbage",
        ),
        pytest.param(
            [PYTHON, "-c", "import sys; sys.stderr.write('bad config\\nline two\\n'); sys.exit(2)"],
            ["exited before answering initialize", "bad config | line two"],
            id="exits-at-once",
        ),
        pytest.param(["no-such-mcp-server-anywhere", "--flag"], ["not found"], id="not-found"),
        pytest.param(
            [str(SERVERS / "garbage_server.py")], ["cannot be started"], id="not-executable"
        ),
        pytest.param(
            [PYTHON, "-c", "import time; time.sleep(120)"],
            ["did not answer initialize within 1 s"],
            id="silent",
        ),
        pytest.param(
            [PYTHON, "-c", 'import sys; sys.stdout.write(\'{"jsonrpc": "1.0"}\\n\'); input()'],
            ["does not speak MCP", "jsonrpc"],
            id="wrong-json",
        ),
    ],
)
def test_a_command_that_gives_no_mcp_server_is_one_bridge_error_line(
    command: list[str], says: list[str]
) -> None:
    before = servers_running(command)
    # Only a silent server is meant to run out of start-up time; the others
    # answer (or die) at once, and a loaded machine may take seconds to start
    # Python.
    silent = any("did not answer initialize" in part for part in says)
    with pytest.raises(BridgeError) as raised:
        from_mcp_command(command, startup_timeout=1.0 if silent else 60.0)
    message = str(raised.value)
    assert "\n" not in message
    assert command[0] in message
    for part in says:
        assert part in message
    assert servers_running(command) - before == set()


def test_a_string_command_is_refused() -> None:
    with pytest.raises(BridgeError):
        from_mcp_command("python server.py")  # a str is a Sequence[str]: refused at run time


def test_a_thread_serving_the_world_is_never_a_thread_left_running() -> None:
    """A server's loop thread lives as long as its world, across calls: the
    oracles of threads left running pass it over, and only it."""
    import threading

    from pytest_toolguard.harness.probes import ThreadWatch, serving_the_world, still_working

    watch = ThreadWatch()
    stop = threading.Event()
    served = threading.Thread(target=stop.wait, name="served")
    plain = threading.Thread(target=stop.wait, name="plain")
    serving_the_world(served)
    served.start()
    plain.start()
    try:
        assert watch.leftover(0.0) == ["plain"]
        assert not still_working(served) and still_working(plain)
    finally:
        stop.set()
        served.join()
        plain.join()


# -- the plugin: pytest --toolguard-replay --toolguard-faults=all -------------------------

PLUGIN_REGISTRY = """
import warnings
from pytest_toolguard import PathAccess, ToolRegistry
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command

PATHS = {{
    "read_note": [PathAccess.read("{{path}}")],
    "write_note": [PathAccess.write("{{path}}")],
}}


def registry():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ToolRegistry(from_mcp_command({command!r}, paths=PATHS))
"""


@pytest.mark.slow
def test_the_plugin_replays_and_runs_every_cell_of_a_stdio_servers_cassette(
    pytester: pytest.Pytester, tmp_path: Path, _own_temporary: Path
) -> None:
    pytester.makeini("[pytest]\npythonpath = .\ntoolguard_registry = stdio_registry:registry\n")
    command = COMMANDS["node"]
    (pytester.path / "stdio_registry.py").write_text(PLUGIN_REGISTRY.format(command=command))
    registry = ToolRegistry(from_mcp_command(command, paths=PATHS))
    path, workspace = record(registry, FILE_CALLS, tmp_path)
    shutil.rmtree(workspace.parent)
    (pytester.path / "cassettes").mkdir()
    shutil.copy(path, pytester.path / "cassettes" / "notes.yaml")
    result = pytester.runpytest(
        "--toolguard-replay", "--toolguard-faults=all", "-p", "no:xdist", "-p", "no:randomly"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] > 20, result.stdout.str()[-3000:]
    assert list(world_directories(str(_own_temporary))) == []
    # The servers of this run's worlds, all made in this test's own temporary
    # directory: other workers run the same command meanwhile.
    assert servers_running([*command[:-1], str(_own_temporary)]) == set()
