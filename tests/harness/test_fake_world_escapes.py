"""Under the fake world, a handler that reaches the real disk through what
pyfakefs cannot see (SQLite's C library, a process, a fork, Python's own
real ``open``) is refused before it happens and reported: by replay as a
difference, by a fault cell and the fuzzer as a problem. Toolguard's own
work and a handler's memory databases pass. Real read-only directories
(the time-zone database, installed packages, ``toolguard_real_paths``) are
mapped in: read freely, never judged as outside, never written."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import errno
import importlib
import io
import os
import pathlib
import pty
import shutil
import sqlite3
import subprocess
import sys
import threading
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults import iter_cells, run_cell, select_faults
from pytest_toolguard.fuzz import fuzz_tool
from pytest_toolguard.fuzz.report import Problem
from pytest_toolguard.harness.escapes import RealDiskRefused
from pytest_toolguard.harness.fake_filesystem import FakeFilesystems
from pytest_toolguard.harness.probes import HandlerProbe
from pytest_toolguard.harness.world import FakeWorld
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.cassette import WorkspaceState

OBJECT = {"type": "object"}
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
TOUCH = shutil.which("touch") or "/usr/bin/touch"
"""Found before any world: inside one, ``shutil.which`` looks in the fake one."""
DECLARE = 'declare world="directory"'


# -- tools ---------------------------------------------------------------------------


@tool(input_schema=OBJECT, risk=Risk.WRITE)
def crm_add(ctx: Any, name: str) -> dict[str, Any]:
    """Keeps its customers in a SQLite database in the workspace."""
    conn = sqlite3.connect(os.path.join(ctx.workspace.root, "crm.db"))
    try:
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS people (name TEXT)")
            conn.execute("INSERT INTO people VALUES (?)", (name,))
        return {"count": conn.execute("SELECT count(*) FROM people").fetchone()[0]}
    finally:
        conn.close()


@tool(input_schema=OBJECT, risk=Risk.WRITE)
def crm_add_quietly(ctx: Any, name: str) -> dict[str, Any]:
    """As ``crm_add``, but an I/O failure is answered as "saved later"."""
    try:
        return dict(crm_add.handler(ctx, name=name))
    except OSError:
        return {"count": "later"}


def _record(tmp_path: pathlib.Path, spec: ToolSpec, names: list[str]) -> pathlib.Path:
    """A cassette of ``spec`` called once per name, recorded in a real
    workspace under ``tmp_path``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = ToolRuntime(ToolRegistry([spec]), str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path, recorded_by="python record.py"):
        for index, name in enumerate(names):
            call = ToolCall(call_id=f"c{index}", tool_name=spec.name, arguments={"name": name})
            assert runtime.execute(call).ok
    runtime.close()
    return path


def _real_disk(report: Any) -> list[str]:
    return [str(d.replayed) for d in report.differences if d.field == "real disk"]


# -- a SQLite tool, recorded for real, replayed in the fake world ------------------------


@pytest.mark.parametrize("calls", [1, 2])
def test_a_sqlite_tool_replayed_never_changes_the_real_database(tmp_path, calls):
    cassette = _record(tmp_path, crm_add, [f"ann{i}" for i in range(calls)])
    database = tmp_path / "ws" / "crm.db"
    before = database.read_bytes()

    report = replay(load(cassette), ToolRegistry([crm_add]))

    assert database.read_bytes() == before
    found = _real_disk(report)
    assert len(found) == calls
    assert all(f"sqlite3.connect opened {database} outside the fake filesystem" in m for m in found)
    assert all(DECLARE in message for message in found)
    assert not report.ok


def test_a_sqlite_tool_replayed_never_creates_a_missing_database(tmp_path):
    cassette = _record(tmp_path, crm_add, ["ann"])
    database = tmp_path / "ws" / "crm.db"
    database.unlink()

    report = replay(load(cassette), ToolRegistry([crm_add]))

    assert not database.exists()
    assert not (tmp_path / "ws" / "crm.db-journal").exists()
    assert _real_disk(report)


def test_a_handler_that_swallows_the_refusal_is_still_reported(tmp_path):
    cassette = _record(tmp_path, crm_add_quietly, ["ann"])
    database = tmp_path / "ws" / "crm.db"
    before = database.read_bytes()

    report = replay(load(cassette), ToolRegistry([crm_add_quietly]))

    assert report.results[0].ok  # the handler answered; the refusal is reported anyway
    assert report.results[0].data == {"count": "later"}
    assert any(d.where == "interaction 1 (crm_add_quietly)" for d in report.differences)
    assert any("sqlite3.connect" in message for message in _real_disk(report))
    assert database.read_bytes() == before


# -- every kind of reach, run in a world --------------------------------------------------


def _run(
    tmp_path: pathlib.Path,
    handler: Callable[..., Any],
    *,
    fake_filesystems: FakeFilesystems | None = None,
    probe: bool = False,
) -> tuple[Any, FakeWorld]:
    """``handler`` as a tool, called once through a runtime in a fake world
    whose workspace is ``tmp_path/ws`` (with a probe over the world's
    access log when ``probe``: its accesses outside go in ``world.outside_accesses``)."""
    root = str(tmp_path / "ws")
    spec = tool(input_schema=OBJECT, name="reach", risk=Risk.WRITE)(handler)
    with FakeWorld(WorkspaceState(root=root), fake_filesystems=fake_filesystems) as world:
        if probe:
            spec = spec.with_handler(HandlerProbe(spec.handler, world.accesses))
        runtime = ToolRuntime(ToolRegistry([spec]), root, CAPS, SQLiteAuditStore(":memory:"))
        try:
            result = runtime.execute(ToolCall(call_id="c1", tool_name="reach", arguments={}))
        finally:
            runtime.close()
        world.outside_accesses = world.accesses.outside(root)  # type: ignore[attr-defined]
    return result, world


def _fork(target: str) -> None:
    pid = os.fork()
    if pid == 0:  # the child (only where the fork was not refused)
        os._exit(0)
    os.waitpid(pid, 0)


def _forkpty(target: str) -> None:
    pid, fd = pty.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)


async def _async_touch(target: str) -> None:
    process = await asyncio.create_subprocess_exec(TOUCH, target)
    await process.wait()


REACHES: dict[str, tuple[str, Callable[[str], object]]] = {
    "sqlite3 file": ("sqlite3.connect", lambda t: sqlite3.connect(t).execute("CREATE TABLE x(a)")),
    "sqlite3 Path": (
        "sqlite3.connect",
        lambda t: sqlite3.connect(pathlib.Path(t)).execute("VACUUM"),
    ),
    "sqlite3 bytes": ("sqlite3.connect", lambda t: sqlite3.connect(t.encode()).execute("VACUUM")),
    "sqlite3 file URI": (
        "sqlite3.connect",
        lambda t: sqlite3.connect(f"file:{t}?mode=rwc", uri=True).execute("CREATE TABLE x(a)"),
    ),
    "subprocess.run": ("subprocess.Popen", lambda t: subprocess.run([TOUCH, t], check=True)),
    "subprocess shell": ("subprocess.Popen", lambda t: subprocess.run(f"touch {t}", shell=True)),
    "subprocess captured": (
        "subprocess.Popen",
        lambda t: subprocess.run([TOUCH, t], capture_output=True, check=True),
    ),
    "subprocess piped": ("subprocess.Popen", lambda t: subprocess.check_output([TOUCH, t])),
    "os.popen": ("subprocess.Popen", lambda t: os.popen(f"touch {t}").read()),
    "asyncio subprocess": ("subprocess.Popen", lambda t: asyncio.run(_async_touch(t))),
    "os.system": ("os.system", lambda t: os.system(f"touch {t}")),
    "os.posix_spawn": (
        "os.posix_spawn",
        lambda t: os.waitpid(os.posix_spawn(TOUCH, [TOUCH, t], dict(os.environ)), 0),
    ),
    "os.spawnv": ("os.fork", lambda t: os.spawnv(os.P_WAIT, TOUCH, [TOUCH, t])),
    "os.fork": ("os.fork", _fork),
    "pty.fork": ("os.forkpty", _forkpty),
    "io.FileIO": ("open", lambda t: io.FileIO(t, "w").write(b"x")),
    "io.open_code to append": ("open", lambda t: io.FileIO(t, "a").write(b"x")),
}


@pytest.mark.parametrize("kind", sorted(REACHES))
def test_each_reach_of_the_real_disk_is_refused_before_it_happens(tmp_path, kind):
    event, reach = REACHES[kind]
    target = str(tmp_path / "reached")

    def handler(ctx: Any) -> dict[str, Any]:
        reach(target)
        return {"reached": True}

    result, world = _run(tmp_path, handler)

    assert not os.path.exists(target)
    assert result.code.value == "EXECUTION_ERROR"
    escapes = world.escapes()
    assert escapes and escapes[0].event == event  # pty.fork tries os.fork after os.forkpty
    assert all(escape.message.startswith(f"{escape.event} ") for escape in escapes)
    assert all(
        escape.message.endswith(f"outside the fake filesystem; {DECLARE}") for escape in escapes
    )


@pytest.mark.parametrize("kind", ["sqlite3 file", "subprocess.run", "os.system", "io.FileIO"])
def test_the_refusal_is_an_os_error_the_handler_can_catch(tmp_path, kind):
    _event, reach = REACHES[kind]
    target = str(tmp_path / "reached")
    caught: list[BaseException] = []

    def handler(ctx: Any) -> dict[str, Any]:
        try:
            reach(target)
        except OSError as exc:
            caught.append(exc)
        return {}

    result, world = _run(tmp_path, handler)

    assert result.ok
    assert len(caught) == 1 and isinstance(caught[0], RealDiskRefused)
    assert isinstance(caught[0], PermissionError)
    assert str(world.escapes()[0]) in str(caught[0])
    assert not os.path.exists(target)


def _in_thread(work: Callable[[], object]) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - carried to the handler
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


THREADED: dict[str, Callable[[Callable[[], object]], None]] = {
    "a thread": _in_thread,
    "a thread's thread": lambda work: _in_thread(lambda: _in_thread(work)),
    "a pool": lambda work: concurrent.futures.ThreadPoolExecutor(1).submit(work).result(),
    "a timer": lambda work: _in_thread(work),
}


@pytest.mark.parametrize("how", sorted(THREADED))
@pytest.mark.parametrize("kind", ["sqlite3 file", "subprocess.run", "io.FileIO"])
def test_a_thread_the_handler_starts_is_refused_too(tmp_path, how, kind):
    event, reach = REACHES[kind]
    target = str(tmp_path / "reached")

    def handler(ctx: Any) -> dict[str, Any]:
        THREADED[how](lambda: reach(target))
        return {}

    result, world = _run(tmp_path, handler)

    assert not os.path.exists(target)
    assert not result.ok
    assert [escape.event for escape in world.escapes()] == [event]


@pytest.mark.parametrize(
    ("database", "uri"),
    [
        (":memory:", False),
        ("", False),
        ("file::memory:", True),
        ("file::memory:?cache=shared", True),
        ("file:scratch?mode=memory&cache=shared", True),
    ],
)
def test_a_database_in_memory_is_the_handlers_to_use(tmp_path, database, uri):
    def handler(ctx: Any) -> dict[str, Any]:
        conn = sqlite3.connect(database, uri=uri)
        conn.execute("CREATE TABLE t (a)")
        conn.execute("INSERT INTO t VALUES (1)")
        return {"rows": conn.execute("SELECT count(*) FROM t").fetchone()[0]}

    result, world = _run(tmp_path, handler)

    assert result.ok and result.data == {"rows": 1}
    assert world.escapes() == ()


def test_toolguards_own_store_on_a_real_file_works_in_the_world(tmp_path):
    """The test's own code (no handler) opens a store on a real file inside
    the world, and a handler runs a nested session on another real file
    store: toolguard's connections are its own, never refused."""
    (tmp_path / "ws").mkdir()
    inner_path = tmp_path / "inner-audit.db"
    inner_store = SQLiteAuditStore(str(inner_path))

    @tool(input_schema=OBJECT)
    def echo(ctx: Any) -> dict[str, Any]:
        return {"echo": True}

    root = str(tmp_path / "ws")
    inner = ToolRuntime(ToolRegistry([echo]), root, CAPS, inner_store)

    def handler(ctx: Any) -> dict[str, Any]:
        answer = inner.execute(ToolCall(call_id="inner-1", tool_name="echo", arguments={}))
        return {"inner": answer.code.value}

    spec = tool(input_schema=OBJECT, name="outer")(handler)
    outer_path = tmp_path / "outer-audit.db"
    with FakeWorld(WorkspaceState(root=root)) as world:
        outer_store = SQLiteAuditStore(str(outer_path))
        runtime = ToolRuntime(ToolRegistry([spec]), root, CAPS, outer_store)
        result = runtime.execute(ToolCall(call_id="outer-1", tool_name="outer", arguments={}))
        runtime.close()
        outer_store.close()
    inner.close()
    inner_store.close()

    assert result.ok and result.data == {"inner": "OK"}
    assert world.escapes() == ()
    for path, call_id in ((inner_path, "inner-1"), (outer_path, "outer-1")):
        store = SQLiteAuditStore(str(path))
        assert [row.call_id for row in store.rows()] == [call_id]
        store.close()


def test_code_outside_a_handler_is_not_refused(tmp_path):
    target = tmp_path / "made-by-the-test"
    with FakeWorld(WorkspaceState(root=str(tmp_path / "ws"))) as world:
        subprocess.run([TOUCH, str(target)], check=True)
        sqlite3.connect(str(tmp_path / "test.db")).close()
    assert target.exists()
    assert world.escapes() == ()


# -- real read-only directories --------------------------------------------------------


ZONES = ["Europe/Warsaw", "America/New_York", "Asia/Kolkata", "UTC"]


@pytest.mark.parametrize("zone", ZONES)
def test_the_time_zone_database_is_read_in_the_world_and_not_outside(tmp_path, zone):
    def handler(ctx: Any) -> dict[str, Any]:
        offset = datetime.datetime(2024, 1, 15, 12, tzinfo=zoneinfo.ZoneInfo(zone)).utcoffset()
        return {"offset": str(offset)}

    zoneinfo.ZoneInfo.clear_cache()  # read from the database, not remembered
    expected = str(datetime.datetime(2024, 1, 15, 12, tzinfo=zoneinfo.ZoneInfo(zone)).utcoffset())
    zoneinfo.ZoneInfo.clear_cache()

    result, world = _run(tmp_path, handler, probe=True)

    assert result.ok, result.message
    assert result.data == {"offset": expected}
    assert world.outside_accesses == []
    assert world.escapes() == ()


@tool(input_schema={"type": "object", "properties": {"zone": {"type": "string"}}})
def local_time(ctx: Any, zone: str) -> dict[str, Any]:
    """The offset of a time zone; zoneinfo refuses keys that escape."""
    try:
        tz = zoneinfo.ZoneInfo(zone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError) as exc:
        return {"error": type(exc).__name__}
    return {"offset": str(datetime.datetime(2024, 1, 15, tzinfo=tz).utcoffset())}


@pytest.mark.slow
def test_time_zone_lookups_are_no_false_positive_of_the_fault_matrix(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = ToolRuntime(ToolRegistry([local_time]), str(workspace), CAPS, SQLiteAuditStore())
    path = tmp_path / "tz.yaml"
    with record_session(runtime, path, recorded_by="python record.py"):
        for index, zone in enumerate(ZONES):
            call = ToolCall(call_id=f"c{index}", tool_name="local_time", arguments={"zone": zone})
            assert runtime.execute(call).ok
    runtime.close()
    registry = ToolRegistry([local_time])
    outcomes = []
    for target, fault in iter_cells(load(path), registry, "tz.yaml", select_faults("all")):
        zoneinfo.ZoneInfo.clear_cache()  # each cell reads the database
        outcomes.append(run_cell(fault, target, registry))
    assert len(outcomes) >= 4 * 5
    assert [o.problems for o in outcomes if o.status == "fail"] == []


def test_the_packages_own_modules_are_read_in_the_world_and_not_outside(tmp_path):
    # An editable install keeps them outside site-packages, and the runtime
    # imports some of them only once a handler needs them.
    import pytest_toolguard

    source = pathlib.Path(pytest_toolguard.__file__).parent / "thread_loops.py"

    def handler(ctx: Any) -> dict[str, Any]:
        return {"head": source.read_text(encoding="utf-8")[:3]}

    result, world = _run(tmp_path, handler, probe=True)

    assert result.ok, result.message
    assert result.data == {"head": '"""'}
    assert world.outside_accesses == []
    assert world.escapes() == ()


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[tuple[pathlib.Path, FakeFilesystems]]:
    """A real directory given as a real path, and a FakeFilesystems mapping it."""
    directory = tmp_path_factory.mktemp("shared")
    (directory / "data.txt").write_text("shared data\n")
    (directory / "sub").mkdir()
    (directory / "sub" / "more.txt").write_text("more\n")
    fake_filesystems = FakeFilesystems(real_paths=[directory])
    yield directory, fake_filesystems
    fake_filesystems.close()


def _tree(directory: pathlib.Path) -> dict[str, Any]:
    return {
        str(path.relative_to(directory)): (
            path.stat().st_mode,
            path.read_bytes() if path.is_file() else None,
        )
        for path in sorted(directory.rglob("*"))
    }


def test_a_given_real_path_is_read_in_the_world(tmp_path, shared):
    directory, fake_filesystems = shared

    def handler(ctx: Any) -> dict[str, Any]:
        return {
            "data": (directory / "data.txt").read_text(),
            "names": sorted(os.listdir(directory)),
            "more": open(directory / "sub" / "more.txt").read(),  # noqa: SIM115
        }

    result, world = _run(tmp_path, handler, fake_filesystems=fake_filesystems, probe=True)

    assert result.ok, result.message
    assert result.data == {"data": "shared data\n", "names": ["data.txt", "sub"], "more": "more\n"}
    assert world.outside_accesses == []
    assert world.escapes() == ()


WRITES: dict[str, tuple[str, Callable[[pathlib.Path], object]]] = {
    "open w existing": ("open", lambda d: open(d / "data.txt", "w")),  # noqa: SIM115
    "open a existing": ("open", lambda d: open(d / "data.txt", "a")),  # noqa: SIM115
    "open r+ existing": ("open", lambda d: open(d / "data.txt", "r+")),  # noqa: SIM115
    "open x new": ("open", lambda d: open(d / "new.txt", "x")),  # noqa: SIM115
    "open w in a subdirectory": ("open", lambda d: open(d / "sub" / "new.txt", "w")),  # noqa: SIM115
    "os.open O_CREAT": ("open", lambda d: os.open(d / "new.txt", os.O_CREAT | os.O_WRONLY)),
    "Path.write_text": ("open", lambda d: (d / "new.txt").write_text("x")),
    "shutil.copy into": ("open", lambda d: shutil.copy(d / "data.txt", d / "copy.txt")),
    "os.remove": ("remove", lambda d: os.remove(d / "data.txt")),
    "Path.unlink": ("remove", lambda d: (d / "data.txt").unlink()),
    "os.rename away": ("rename", lambda d: os.rename(d / "data.txt", d / "moved.txt")),
    "os.mkdir": ("makedir", lambda d: os.mkdir(d / "newdir")),
    "os.makedirs": ("makedir", lambda d: os.makedirs(d / "a" / "b")),
    "os.rmdir": ("rmdir", lambda d: os.rmdir(d / "sub")),
    "shutil.rmtree": ("remove", lambda d: shutil.rmtree(d / "sub")),
    "os.chmod": ("chmod", lambda d: os.chmod(d / "data.txt", 0o777)),
    "os.utime": ("utime", lambda d: os.utime(d / "data.txt", (0, 0))),
    "os.truncate": ("truncate", lambda d: os.truncate(d / "data.txt", 0)),
    "os.symlink into": ("create_symlink", lambda d: os.symlink("/etc/passwd", d / "link")),
}


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_a_write_beneath_a_real_path_is_refused_and_reported(tmp_path, shared, kind):
    directory, fake_filesystems = shared
    operation, write = WRITES[kind]
    real_before = _tree(directory)

    def handler(ctx: Any) -> dict[str, Any]:
        try:
            write(directory)
        except OSError as exc:
            return {"errno": exc.errno, "refused": isinstance(exc, RealDiskRefused)}
        return {"errno": None}

    result, world = _run(tmp_path, handler, fake_filesystems=fake_filesystems)

    assert result.data == {"errno": errno.EROFS, "refused": True}
    escapes = world.escapes()
    assert [escape.event for escape in escapes] == [operation]
    assert escapes[0].detail.startswith(str(directory))
    assert _tree(directory) == real_before


def test_a_write_through_a_link_into_a_real_path_is_refused(tmp_path, shared):
    directory, fake_filesystems = shared

    def handler(ctx: Any) -> dict[str, Any]:
        os.symlink(directory, os.path.join(ctx.workspace.root, "shared"))
        try:
            with open(os.path.join(ctx.workspace.root, "shared", "data.txt"), "w") as file:
                file.write("changed")
        except OSError as exc:
            return {"errno": exc.errno}
        return {"errno": None}

    result, world = _run(tmp_path, handler, fake_filesystems=fake_filesystems)

    assert result.data == {"errno": errno.EROFS}
    assert world.escapes()[0].detail == str(directory / "data.txt")
    assert (directory / "data.txt").read_text() == "shared data\n"


# -- fault cells and the fuzzer ------------------------------------------------------


@pytest.mark.parametrize("fault", ["duplicate_submission", "response_lost", "timeout"])
def test_a_fault_cell_reports_an_escape_as_its_own_problem(tmp_path, fault):
    cassette = _record(tmp_path, crm_add_quietly, ["ann", "bob"])
    database = tmp_path / "ws" / "crm.db"
    before = database.read_bytes()
    registry = ToolRegistry([crm_add_quietly])

    cells = list(iter_cells(load(cassette), registry, "session.yaml", select_faults(fault)))
    outcomes = [run_cell(f, target, registry) for target, f in cells]

    assert outcomes
    for outcome in outcomes:
        if outcome.status == "n/a":
            continue
        assert outcome.status == "fail"
        reached = [p for p in outcome.problems if p.startswith("the handler reached the real disk")]
        assert reached and all("sqlite3.connect opened" in p and DECLARE in p for p in reached)
    assert database.read_bytes() == before


@pytest.mark.parametrize("kind", ["sqlite3 file", "subprocess.run", "os.system"])
def test_the_fuzzer_reports_an_escape(tmp_path, kind):
    _event, reach = REACHES[kind]
    target = str(tmp_path / "reached")

    @tool(input_schema={"type": "object", "properties": {"name": {"type": "string"}}})
    def reaching(ctx: Any, name: str = "") -> dict[str, Any]:
        with contextlib.suppress(OSError):  # swallowed: reported all the same
            reach(target)
        return {}

    report = fuzz_tool(reaching, examples=3)

    problems = {failure.problem for failure in report.failures}
    assert Problem.REAL_DISK in problems
    assert not os.path.exists(target)


def test_a_module_imported_from_a_real_path_during_a_call_is_no_write(
    tmp_path, tmp_path_factory, monkeypatch
):
    """A handler importing a module that lives beneath a real path makes
    the import system write its byte-code cache there: the interpreter's
    work, never reported as the tool's write."""
    directory = tmp_path_factory.mktemp("modules")
    name = f"toolguard_lazy_{os.getpid()}_{id(tmp_path)}"
    (directory / f"{name}.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    fake_filesystems = FakeFilesystems(real_paths=[directory])

    def handler(ctx: Any) -> dict[str, Any]:
        return {"value": importlib.import_module(name).VALUE}

    try:
        result, world = _run(tmp_path, handler, fake_filesystems=fake_filesystems)
    finally:
        fake_filesystems.close()
        sys.modules.pop(name, None)
    assert result.ok and result.data == {"value": 42}, result.message
    assert world.escapes() == ()
