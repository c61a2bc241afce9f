"""Processes a tool starts in the directory world: the recorded time
(libfaketime), the world at the recorded root (a private mount namespace),
killed at the deadline plus a bound and when the world ends, a file size
limit. Every test runs real processes."""

from __future__ import annotations

import asyncio
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.contract import CallState, ErrorCode, ToolResult
from pytest_toolguard.harness.child_processes import (
    MARKER,
    ChildProcesses,
    limit_file_size,
    processes_of,
)
from pytest_toolguard.harness.child_setup import (
    NO_FAKETIME,
    NO_NAMESPACE,
    ChildProcessWarning,
    find_libfaketime,
    frozen_seconds,
    namespace_command,
    say_once,
)
from pytest_toolguard.harness.directory_world import DirectoryWorld
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay.cassette import WorkspaceState

FROZEN = "2024-05-01T12:00:00+00:00"
FROZEN_SECONDS = 1714564800

needs_faketime = pytest.mark.skipif(
    find_libfaketime() is None,
    reason="libfaketime is not installed (apt-get install faketime; .ci/run installs it)",
)
needs_namespace = pytest.mark.skipif(
    namespace_command() is None, reason="this machine gives no private mount namespace"
)


@tool(risk=Risk.WRITE, world="directory")
def run(ctx: Any, argv: list[str], stdin: str = "") -> dict[str, Any]:
    """Runs a command in the workspace; returns its exit code and output."""
    done = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, cwd=ctx.workspace.root, check=False
    )
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}


@tool(risk=Risk.WRITE, world="directory")
def run_checked(ctx: Any, argv: list[str]) -> dict[str, Any]:
    """Runs a command; a failure is the call's failure."""
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ctx.workspace.root, check=True)
    return {"out": done.stdout}


@tool(risk=Risk.WRITE, world="directory")
def die(ctx: Any) -> dict[str, Any]:
    """Its own process dies (SIGKILL) mid-call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


@tool(risk=Risk.WRITE, world="directory")
def run_in_thread(ctx: Any, argv: list[str]) -> dict[str, Any]:
    """Runs a command from a thread of its own and waits for it."""
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(subprocess.call(argv)))
    worker.start()
    worker.join()
    return {"code": done[0]}


REGISTRY = ToolRegistry([run, run_checked, die, run_in_thread])
CAPABILITIES = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def _state(root: str, **files: bytes) -> WorkspaceState:
    return WorkspaceState(root=root, files={"a.txt": b"in the world\n", **files})


def _runtime(world: DirectoryWorld, **options: Any) -> ToolRuntime:
    return ToolRuntime(REGISTRY, world.root, CAPABILITIES, SQLiteAuditStore(":memory:"), **options)


def _call(runtime: ToolRuntime, argv: list[str], tool_name: str = "run", **more: Any) -> ToolResult:
    arguments: dict[str, Any] = {"argv": argv, **more} if tool_name != "die" else {}
    return runtime.execute(
        ToolCall(call_id=f"c{time.perf_counter_ns()}", tool_name=tool_name, arguments=arguments)
    )


@pytest.fixture
def recorded(tmp_path: Path) -> str:
    """A recorded root that does not exist on this machine (its parent does)."""
    return str(tmp_path / "recorded" / "proj")


@pytest.fixture
def parent(tmp_path: Path) -> str:
    where = tmp_path / "worlds"
    where.mkdir()
    return str(where)


# -- the recorded time ------------------------------------------------------------------


@needs_faketime
@pytest.mark.parametrize(
    ("frozen_at", "seconds"),
    [
        (FROZEN, FROZEN_SECONDS),
        ("2024-05-01T12:00:00", FROZEN_SECONDS),  # no offset: UTC, as the in-process clock
        ("2024-05-01T14:00:00+02:00", FROZEN_SECONDS),
        ("2031-12-31T23:59:59+00:00", 1956527999),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["date", "+%s"],
        [sys.executable, "-c", "import time; print(int(time.time()))"],
        ["sh", "-c", "sleep 0.01; date +%s"],  # the clock stays stopped; sleeping still ends
    ],
    ids=["date", "python", "after-sleep"],
)
def test_a_process_reads_the_recorded_time(
    recorded: str, parent: str, frozen_at: str, seconds: int, command: list[str]
) -> None:
    assert frozen_seconds(frozen_at) == seconds
    with DirectoryWorld(_state(recorded), frozen_at=frozen_at, parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, command)
        runtime.close()
    assert result.code is ErrorCode.OK, result.message
    assert int(result.data["out"].strip()) == seconds


@needs_faketime
def test_git_commits_carry_the_recorded_time(recorded: str, parent: str) -> None:
    script = (
        "git -c init.defaultBranch=main init -q . && "
        "git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m x && "
        "git log -1 --format='%at %ct'"
    )
    environment = {"HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
    command = ["env", *(f"{key}={value}" for key, value in environment.items()), "sh", "-c", script]
    with DirectoryWorld(_state(recorded), frozen_at=FROZEN, parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, command)
        runtime.close()
    assert result.code is ErrorCode.OK, result.message
    assert result.data["out"].split() == [str(FROZEN_SECONDS)] * 2, result.data


def test_without_libfaketime_processes_see_the_real_clock(
    recorded: str, parent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NO_FAKETIME, "1")
    with DirectoryWorld(_state(recorded), frozen_at=FROZEN, parent=parent) as world:
        processes = processes_of(world)
        assert processes is not None and not processes.faketime
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, ["sh", "-c", 'date +%s; echo "${LD_PRELOAD-none}"'])
        runtime.close()
    out = result.data["out"].split()
    assert int(out[0]) > FROZEN_SECONDS + 365 * 86400
    assert out[1] == "none"


def test_what_cannot_be_done_is_said_once() -> None:
    message = f"a note said once {time.perf_counter_ns()}"
    with pytest.warns(ChildProcessWarning, match="a note said once"):
        say_once(message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        say_once(message)


def test_a_process_the_test_itself_starts_is_left_alone(recorded: str, parent: str) -> None:
    # Only handler runs' processes are the world's: the harness's own are not wrapped.
    with DirectoryWorld(_state(recorded), frozen_at=FROZEN, parent=parent) as world:
        out = subprocess.run(
            ["sh", "-c", f'date +%s; echo "${{{MARKER}-none}}"'],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert processes_of(world) is not None and processes_of(world).started == ()  # type: ignore[union-attr]
    assert int(out[0]) > FROZEN_SECONDS + 365 * 86400
    assert out[1] == "none"


# -- the recorded root ---------------------------------------------------------------------


def _write_through_the_recorded_root(root: str) -> list[str]:
    quoted = shlex.quote(root)
    return [
        "sh",
        "-c",
        f"cat {quoted}/a.txt && echo written > {quoted}/out.txt && ls {quoted}",
    ]


@needs_namespace
@pytest.mark.parametrize("layout", ["exists", "missing", "missing-deeper", "missing-below-a-link"])
def test_a_process_using_the_recorded_root_reaches_the_world(
    tmp_path: Path, parent: str, layout: str
) -> None:
    real = tmp_path / "machine"
    real.mkdir()
    beside = real / "beside.txt"
    beside.write_text("the real machine's\n")
    (real / ".hidden").write_text("hidden\n")
    (real / "link").symlink_to("beside.txt")
    (real / "sub").mkdir()
    (real / "sub" / "deep.txt").write_text("deep\n")
    if layout == "exists":
        root = real / "proj"
        root.mkdir()
        (root / "a.txt").write_text("the real disk's\n")
    elif layout == "missing":
        root = real / "proj"
    elif layout == "missing-deeper":
        root = real / "gone" / "deeper" / "proj"
    else:  # the nearest existing parent holds a link to a directory
        (real / "dirlink").symlink_to("sub")
        root = real / "gone" / "proj"
    before = sorted(str(path.relative_to(real)) for path in real.rglob("*"))
    contents = {path: path.read_bytes() for path in real.rglob("*") if path.is_file()}
    with DirectoryWorld(_state(str(root)), frozen_at=FROZEN, parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, _write_through_the_recorded_root(str(root)))
        # The parent's own entries are still there for the process.
        seen = _call(
            runtime,
            [
                "cat",
                str(beside),
                str(real / ".hidden"),
                str(real / "link"),
                str(real / "sub/deep.txt"),
            ],
        )
        runtime.close()
        assert result.code is ErrorCode.OK, result.message
        assert result.data["code"] == 0, result.data
        assert result.data["out"].splitlines() == ["in the world", "a.txt", "out.txt"]
        assert Path(world.root, "out.txt").read_text() == "written\n"
        assert seen.data["out"] == "the real machine's\nhidden\nthe real machine's\ndeep\n"
    assert sorted(str(path.relative_to(real)) for path in real.rglob("*")) == before
    assert {path: path.read_bytes() for path in real.rglob("*") if path.is_file()} == contents


@needs_namespace
@pytest.mark.parametrize("depth", [1, 3])
def test_a_recorded_root_whose_top_directory_is_missing_is_reached_too(
    parent: str, depth: int
) -> None:
    # /workspace on a machine without it: / cannot be covered, so the
    # process gets a root of its own holding /'s entries and the world.
    top = f"/toolguard-missing-{os.getpid()}-{time.perf_counter_ns()}"
    root = "/".join([top, *["level"] * (depth - 1)])
    with DirectoryWorld(_state(root), frozen_at=FROZEN, parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, _write_through_the_recorded_root(root))
        where = _call(runtime, ["sh", "-c", "pwd; cat /etc/hostname >/dev/null && echo etc"])
        runtime.close()
        assert result.data["out"].splitlines() == ["in the world", "a.txt", "out.txt"], result.data
        assert Path(world.root, "out.txt").read_text() == "written\n"
        assert where.data["out"].splitlines() == [world.root, "etc"]
        assert os.listdir(Path(world.around, ".toolguard-root")) == []
    assert not os.path.lexists(top)


def test_without_a_namespace_nothing_is_made_at_the_missing_recorded_root(
    recorded: str, parent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NO_NAMESPACE, "1")
    with DirectoryWorld(_state(recorded), frozen_at=FROZEN, parent=parent) as world:
        processes = processes_of(world)
        assert processes is not None and not processes.mounted
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, _write_through_the_recorded_root(recorded))
        runtime.close()
    assert result.data["code"] != 0
    assert not os.path.lexists(os.path.dirname(recorded))


# -- the command as asked -------------------------------------------------------------------


@tool(risk=Risk.WRITE, world="directory")
def popen_variant(ctx: Any, variant: str) -> dict[str, Any]:
    """Starts a process in one of Popen's spellings; returns what it saw."""
    root = ctx.workspace.root
    os.makedirs(os.path.join(root, "sub"), exist_ok=True)
    if variant == "shell":
        done = subprocess.run(
            'echo "$0 $HOME" | tr a-z A-Z; exit 3',
            shell=True,
            capture_output=True,
            text=True,
            cwd=root,
            env={"HOME": "/h", "PATH": os.environ["PATH"]},
        )
        return {"rc": done.returncode, "out": done.stdout}
    if variant == "argv":
        done = subprocess.run(
            ["printf", "%s|", "a b", "'q'", '"d"', "$x", ""],
            capture_output=True,
            text=True,
            cwd=root,
        )
        return {"rc": done.returncode, "out": done.stdout}
    if variant == "cwd":
        done = subprocess.run(
            ["pwd"], capture_output=True, text=True, cwd=os.path.join(root, "sub")
        )
        return {"rc": done.returncode, "out": done.stdout.replace(root, "<root>")}
    if variant == "stdin":
        counted = subprocess.run(["wc", "-c"], input=b"12345", capture_output=True, cwd=root)
        return {"rc": counted.returncode, "out": counted.stdout.decode().strip()}
    if variant == "env":
        done = subprocess.run(
            ["sh", "-c", 'echo "$ONLY_HERE ${PATH:+path}"'],
            capture_output=True,
            text=True,
            env={"ONLY_HERE": "yes", "PATH": "/usr/bin:/bin"},
        )
        return {"rc": done.returncode, "out": done.stdout}
    if variant == "bytes-env":
        raw = subprocess.run(
            [b"sh", b"-c", b'echo "$ONLY_HERE"'],
            capture_output=True,
            env={b"ONLY_HERE": b"bytes", b"PATH": b"/usr/bin:/bin"},
        )
        return {"rc": raw.returncode, "out": raw.stdout.decode()}
    if variant == "executable":
        done = subprocess.run(
            ["whatever", "-c", "echo $0"], executable="/bin/sh", capture_output=True, text=True
        )
        return {"rc": done.returncode, "out": done.stdout}
    if variant == "missing":
        try:
            subprocess.run(["toolguard-no-such-program"], capture_output=True)
        except FileNotFoundError as exc:
            return {"rc": None, "out": type(exc).__name__}
        return {"rc": None, "out": "started"}
    if variant == "check":
        try:
            subprocess.run(["false"], check=True)
        except subprocess.CalledProcessError as exc:
            return {"rc": exc.returncode, "out": repr(exc.cmd)}
    if variant == "popen-args":
        with subprocess.Popen(["true"]) as process:
            process.wait()
        return {"rc": process.returncode, "out": repr(process.args)}
    if variant == "os.popen":
        with os.popen("echo piped") as pipe:
            return {"rc": 0, "out": pipe.read()}
    if variant == "exit-code":
        return {"rc": subprocess.call(["sh", "-c", "exit 42"]), "out": ""}
    if variant == "asyncio":

        async def shout() -> bytes:
            process = await asyncio.create_subprocess_exec(
                "tr", "a-z", "A-Z", stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            out, _ = await process.communicate(b"quiet")
            return out

        return {"rc": 0, "out": asyncio.run(shout()).decode()}
    if variant == "pass-fds":
        read_end, write_end = os.pipe()
        try:
            subprocess.run(["sh", "-c", f"echo through >&{write_end}"], pass_fds=(write_end,))
            os.close(write_end)
            return {"rc": 0, "out": os.read(read_end, 100).decode()}
        finally:
            os.close(read_end)
    if variant == "stderr-merged":
        done = subprocess.run(
            ["sh", "-c", "echo out; echo err >&2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return {"rc": done.returncode, "out": done.stdout}
    raise AssertionError(variant)


VARIANTS = [
    "shell",
    "argv",
    "cwd",
    "stdin",
    "env",
    "bytes-env",
    "executable",
    "missing",
    "check",
    "popen-args",
    "os.popen",
    "exit-code",
    "stderr-merged",
    "asyncio",
    "pass-fds",
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("namespace", ["on", "off"])
def test_a_wrapped_command_keeps_its_arguments_environment_directory_and_streams(
    tmp_path: Path, parent: str, variant: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if namespace == "off":
        monkeypatch.setenv(NO_NAMESPACE, "1")
    elif namespace_command() is None:
        pytest.skip("this machine gives no private mount namespace")
    registry = ToolRegistry([popen_variant])
    real_root = tmp_path / "real" / "proj"
    real_root.mkdir(parents=True)
    expected = popen_variant.handler(_Context(str(real_root)), variant=variant)
    with DirectoryWorld(
        _state(str(tmp_path / "recorded" / "proj")), frozen_at=FROZEN, parent=parent
    ) as world:
        runtime = ToolRuntime(
            registry,
            world.root,
            CAPABILITIES,
            SQLiteAuditStore(":memory:"),
            timeouts={"popen_variant": 30},
        )
        result = runtime.execute(
            ToolCall(call_id="v", tool_name="popen_variant", arguments={"variant": variant})
        )
        runtime.close()
        started = processes_of(world).started  # type: ignore[union-attr]
    assert result.code is ErrorCode.OK, result.message
    assert result.data == expected
    assert (started == ()) is (variant == "missing")


class _Context:
    """What ``popen_variant`` reads of a context, outside any world."""

    def __init__(self, root: str) -> None:
        self.workspace = type("W", (), {"root": root})()


# -- killed at the deadline plus a bound, and when the world ends -------------------------


def _ended(pid: int, within: float) -> bool:
    """Whether ``pid`` ends within ``within`` seconds (its pidfd becomes readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], within)
        return bool(readable)
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize(
    "command",
    [
        ["sleep", "1000"],
        ["sh", "-c", "sleep 1000; echo never"],
        ["sh", "-c", "trap '' TERM INT HUP; sleep 1000"],
    ],
    ids=["sleep", "shell", "ignoring-signals"],
)
@pytest.mark.parametrize("tool_name", ["run", "run_in_thread"])
def test_a_stalled_process_is_killed_at_the_deadline_plus_the_bound(
    recorded: str, parent: str, command: list[str], tool_name: str
) -> None:
    deadline = 0.2
    with DirectoryWorld(_state(recorded), parent=parent) as world:  # the clock left alone
        processes = processes_of(world)
        assert processes is not None
        runtime = _runtime(world, timeouts={tool_name: deadline})
        started = time.monotonic()
        result = _call(runtime, command, tool_name)
        answered = time.monotonic() - started
        (child,) = processes.started
        assert _ended(child.pid, 30)
        ended = time.monotonic() - started
        runtime.close(join_timeout=30)
    assert result.code is ErrorCode.TIMEOUT and result.state is CallState.TIMED_OUT
    assert answered < deadline + processes.kill_after
    assert ended >= deadline + processes.kill_after
    assert child.killed


@pytest.mark.parametrize(
    "script",
    [
        "(sleep 1000 & echo $! > pid); sleep 1000",  # double-forked, same session
        "setsid sleep 1000 & echo $! > pid; wait",  # a session of its own: found by its marker
        # left behind by a process that ended
        "nohup sleep 1000 >/dev/null 2>&1 & echo $! > pid; exit 0",
    ],
    ids=["double-fork", "setsid", "left-behind"],
)
def test_no_process_is_left_running_when_the_world_ends(
    recorded: str, parent: str, script: str
) -> None:
    with DirectoryWorld(_state(recorded), parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 0.3})
        _call(runtime, ["sh", "-c", script])
        pid_file = Path(world.root, "pid")
        assert pid_file.exists()
        left = int(pid_file.read_text())
        runtime.close(join_timeout=30)
    assert _ended(left, 10)
    assert not _running(left)


def test_a_process_started_by_a_handler_in_process_isolation_dies_with_the_world(
    recorded: str, parent: str
) -> None:
    # The handler runs in a forked child: the world never sees its processes
    # start, and finds them by their marker when it ends.
    with DirectoryWorld(_state(recorded), parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30}, isolation="process")
        result = _call(runtime, ["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $! > pid"])
        runtime.close()
        left = int(Path(world.root, "pid").read_text())
        assert result.code is ErrorCode.OK, result.message
        assert _running(left)
    assert _ended(left, 10)
    assert not _running(left)


def test_a_process_that_ends_in_time_is_not_killed(recorded: str, parent: str) -> None:
    with DirectoryWorld(_state(recorded), parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30})
        result = _call(runtime, ["sh", "-c", "exit 7"])
        runtime.close()
        (child,) = processes_of(world).started  # type: ignore[union-attr]
    assert result.data["code"] == 7
    assert not child.killed


# -- a file size limit ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["sh", "-c", "head -c 5000 /dev/zero > big; echo $?"],
        [
            sys.executable,
            "-c",
            "import os\nfd = os.open('big', os.O_WRONLY | os.O_CREAT)\ndata = bytes(5000)\n"
            "try:\n    while data:\n        data = data[os.write(fd, data):]\n"
            "except OSError as e:\n    print(e.errno)",
        ],
    ],
    ids=["shell", "python"],
)
def test_a_file_size_limit_stops_writes_past_it(
    recorded: str, parent: str, command: list[str]
) -> None:
    with DirectoryWorld(_state(recorded), parent=parent) as world:
        runtime = _runtime(world, timeouts={"run": 30})
        with limit_file_size(world, 1000) as limited:
            result = _call(runtime, command)
        limited_size = Path(world.root, "big").stat().st_size
        after = _call(runtime, command)
        runtime.close()
        size_after = Path(world.root, "big").stat().st_size
    assert limited
    assert result.code is ErrorCode.OK
    assert limited_size <= 1000
    assert result.data["out"].strip() not in ("0", "")
    assert size_after == 5000 and after.data["code"] == 0


def test_a_file_size_limit_in_a_fake_world_does_nothing() -> None:
    with limit_file_size(object(), 10) as limited:
        assert not limited


# -- a process dying under a call ---------------------------------------------------------------


def test_a_handler_whose_own_process_dies_answers_an_error_and_finishes_its_row(
    recorded: str, parent: str
) -> None:
    store = SQLiteAuditStore(":memory:")
    with DirectoryWorld(_state(recorded), parent=parent) as world:
        runtime = ToolRuntime(
            REGISTRY, world.root, CAPABILITIES, store, isolation="process", timeouts={"die": 30}
        )
        result = runtime.execute(ToolCall(call_id="dies", tool_name="die", arguments={}))
        rows = store.rows()
        runtime.close()
    assert result.code is ErrorCode.EXECUTION_ERROR and result.state is CallState.FAILED
    assert [row.state for row in rows] == [CallState.FAILED]


def test_a_started_process_killed_mid_call_is_the_calls_failure(recorded: str, parent: str) -> None:
    store = SQLiteAuditStore(":memory:")
    with DirectoryWorld(_state(recorded), parent=parent) as world:
        processes = processes_of(world)
        assert processes is not None
        processes.hooks.started.append(processes.kill)
        runtime = ToolRuntime(
            REGISTRY, world.root, CAPABILITIES, store, timeouts={"run_checked": 30}
        )
        result = runtime.execute(
            ToolCall(call_id="k", tool_name="run_checked", arguments={"argv": ["sleep", "1000"]})
        )
        rows = store.rows()
        runtime.close()
    assert result.code is ErrorCode.EXECUTION_ERROR and "CalledProcessError" in result.message
    assert "sleep" in result.message and "unshare" not in result.message
    assert [row.state for row in rows] == [CallState.FAILED]


def test_child_processes_stand_alone_without_a_directory_world(tmp_path: Path) -> None:
    with ChildProcesses(
        around=str(tmp_path),
        world_root=str(tmp_path),
        recorded_root="/nonexistent-root/proj",
        frozen_at=None,
        faketime=False,
        namespace=False,
    ) as processes:
        assert processes.started == () and not processes.mounted and not processes.faketime
    assert processes.kill_all() == []


@pytest.fixture(autouse=True)
def _no_world_left(parent: str) -> Iterator[None]:
    yield
    assert os.listdir(parent) == []
