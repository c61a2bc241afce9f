"""Real read-only data in the directory world: a directory the tool reads
but the cassette does not own (here a configured ``toolguard_real_paths``
directory the test makes; never the real time-zone database) may be read
and is never written. A handler's own writes there are refused and
reported; its processes' writes never reach the real directory (an
overlay's scratch layer in their mount namespace) and are reported; reads
are never reported; replay, fault cells and the fuzzer report the writes."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
import warnings
import zoneinfo
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from trees import tree_snapshot

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults import run_cell
from pytest_toolguard.faults.fault import AfterSuccess
from pytest_toolguard.faults.target import targets
from pytest_toolguard.fuzz import check_call
from pytest_toolguard.fuzz.call import CallChecker
from pytest_toolguard.fuzz.report import Problem
from pytest_toolguard.harness import directory_world, real_data
from pytest_toolguard.harness.child_setup import (
    NO_NAMESPACE,
    ChildProcessWarning,
    namespace_command,
    overlay_works,
)
from pytest_toolguard.harness.directory_world import DirectoryWorld
from pytest_toolguard.harness.fake_filesystem import FakeFilesystems
from pytest_toolguard.harness.kernel_watch import KernelAccessLog
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.cassette import WorkspaceState

FROZEN = "2024-05-01T12:00:00+00:00"

needs_overlay = pytest.mark.skipif(
    not overlay_works(), reason="this machine gives no mount namespace with overlays"
)
needs_inotify = pytest.mark.skipif(
    not KernelAccessLog.available(), reason="inotify-simple is not installed"
)

# -- what the tool does: chosen by the test, run by the handler -------------------------

Action = Callable[[str, str], Any]
"""(the real data directory, the workspace root) -> what the handler does."""


def _sh(script: str) -> Action:
    def run(data: str, root: str) -> Any:
        done = subprocess.run(
            ["sh", "-c", script.format(data=data, root=root)], capture_output=True, cwd=root
        )
        return done.returncode

    return run


def _python_child(code: str) -> Action:
    def run(data: str, root: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-c", code.format(data=data, root=root)], capture_output=True
        )
        return done.returncode

    return run


def _write_through_a_link(data: str, root: str) -> None:
    os.symlink(f"{data}/keep.txt", f"{root}/link")
    with open(f"{root}/link", "w") as handle:  # the link leads into the real data
        handle.write("through a link\n")


def _rename_in(data: str, root: str) -> None:
    Path(root, "made.txt").write_text("made\n")
    os.rename(f"{root}/made.txt", f"{data}/made.txt")


def _sqlite_create(data: str, root: str) -> None:
    connection = sqlite3.connect(f"{data}/new.db")
    try:
        connection.execute("create table t (x)")
    finally:
        connection.close()


IN_PROCESS: dict[str, Action] = {
    "open-w": lambda data, root: Path(data, "new.txt").write_text("x\n"),
    "open-a": lambda data, root: open(f"{data}/keep.txt", "a").close(),
    "os-open": lambda data, root: os.close(os.open(f"{data}/n", os.O_WRONLY | os.O_CREAT)),
    "remove": lambda data, root: os.remove(f"{data}/keep.txt"),
    "rename-into": _rename_in,
    "rename-out-of": lambda data, root: os.rename(f"{data}/keep.txt", f"{root}/keep.txt"),
    "sqlite-creates": _sqlite_create,
    "copyfile": lambda data, root: shutil.copyfile(f"{root}/a.txt", f"{data}/copy.txt"),
    "mkdir": lambda data, root: os.mkdir(f"{data}/sub"),
    "chmod": lambda data, root: os.chmod(f"{data}/keep.txt", 0o600),
    "truncate": lambda data, root: os.truncate(f"{data}/keep.txt", 0),
    "rmtree": lambda data, root: shutil.rmtree(f"{data}/inner"),
    "through-a-link": _write_through_a_link,
}
"""Python-level writes into the real data, in the handler's process."""

IN_CHILDREN: dict[str, Action] = {
    "sh-create": _sh("echo x > {data}/new.txt"),
    "sh-append": _sh("echo x >> {data}/keep.txt"),
    "sh-remove": _sh("rm {data}/keep.txt"),
    "sh-mkdir": _sh("mkdir {data}/sub"),
    "sh-move-out": _sh("mv {data}/keep.txt {root}/"),
    "python-child": _python_child("open('{data}/new.txt', 'w').write('x')"),
    "sqlite-child": _python_child(
        "import sqlite3; sqlite3.connect('{data}/new.db').execute('create table t (x)')"
    ),
}
"""The same through processes the handler starts."""


def _read_all(data: str, root: str) -> Any:
    text = Path(data, "keep.txt").read_text()
    names = sorted(os.listdir(data))
    os.stat(f"{data}/keep.txt")
    uri = f"file:{data}/data.db?mode=ro"
    connection = sqlite3.connect(uri, uri=True)
    try:
        rows = connection.execute("select x from t").fetchall()
    finally:
        connection.close()
    return [text, names, rows]


def _zoneinfo(data: str, root: str) -> Any:
    zoneinfo.ZoneInfo.clear_cache()  # read from the time-zone database, not the cache
    zone = zoneinfo.ZoneInfo("Europe/Warsaw")
    return str(zone)


READS: dict[str, Action] = {
    "reads": _read_all,
    "zoneinfo": _zoneinfo,
    "cat-child": _sh("cat {data}/keep.txt; ls {data}"),
    "python-child-imports": _python_child(
        "import zoneinfo, json, sqlite3; zoneinfo.ZoneInfo('Europe/Warsaw'); "
        "print(open('{data}/keep.txt').read())"
    ),
    "writes-its-workspace": lambda data, root: Path(root, "out.txt").write_text("mine\n"),
}
"""What a correct tool does: reads the real data, writes its own workspace."""

PLAN: dict[str, Any] = {"action": None, "data": ""}
"""What the handler does now (set by each test; read by the handler)."""


@tool(risk=Risk.WRITE, world="directory")
def poke(ctx: Any, what: str) -> dict[str, Any]:
    """Does what the test planned, swallowing any OSError: a refusal is
    reported even when the handler hides it."""
    action = PLAN["action"]
    if action is None:
        return {"did": "nothing"}
    try:
        return {"did": what, "out": action(PLAN["data"], ctx.workspace.root)}
    except OSError as exc:
        return {"did": what, "refused": exc.errno}


REGISTRY = ToolRegistry([poke])
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """The configured real data directory: a file, a nested one, a database."""
    where = tmp_path / "real-data"
    (where / "inner").mkdir(parents=True)
    (where / "keep.txt").write_text("kept\n")
    (where / "inner" / "deep.txt").write_text("deep\n")
    connection = sqlite3.connect(where / "data.db")
    with connection:
        connection.execute("create table t (x)")
        connection.execute("insert into t values (1)")
    connection.close()
    yield where
    PLAN.update(action=None, data="")


@pytest.fixture
def parent(tmp_path: Path) -> str:
    where = tmp_path / "worlds"
    where.mkdir()
    return str(where)


def _run(
    data: Path, parent: str, action: Action, *, real_paths: list[str] | None = None
) -> tuple[list[str], dict[str, Any]]:
    """``action`` run by the handler in a directory world guarding ``data``;
    the escapes' details and the result's data."""
    PLAN.update(action=action, data=str(data))
    state = WorkspaceState(root=f"{parent}/recorded/proj", files={"a.txt": b"a\n"})
    paths = [str(data)] if real_paths is None else real_paths
    with DirectoryWorld(state, frozen_at=FROZEN, parent=parent, real_paths=paths) as world:
        runtime = ToolRuntime(REGISTRY, world.root, CAPS, SQLiteAuditStore(":memory:"))
        result = runtime.execute(
            ToolCall(
                call_id=f"c{time.perf_counter_ns()}", tool_name="poke", arguments={"what": "x"}
            )
        )
        runtime.close()
        found = [escape.detail for escape in world.escapes()]
    return found, dict(result.data or {})


def _beneath(found: list[str], data: Path) -> bool:
    return bool(found) and all(str(data) in detail for detail in found)


# -- writes are reported, and never reach the real directory -----------------------------


@pytest.mark.parametrize("name", sorted(IN_PROCESS))
def test_a_handlers_write_into_real_data_is_refused_and_reported(
    data: Path, parent: str, name: str
) -> None:
    before = tree_snapshot(data)
    found, result = _run(data, parent, IN_PROCESS[name])
    assert _beneath(found, data), found
    assert result["refused"] == 30  # EROFS, as a read-only mount answers
    assert tree_snapshot(data) == before


@needs_overlay
@pytest.mark.parametrize("name", sorted(IN_CHILDREN))
def test_a_process_s_write_into_real_data_never_reaches_it_and_is_reported(
    data: Path, parent: str, name: str
) -> None:
    before = tree_snapshot(data)
    found, _ = _run(data, parent, IN_CHILDREN[name])
    assert _beneath(found, data), found
    assert tree_snapshot(data) == before


@needs_overlay
def test_every_process_is_covered_not_only_the_first_few(data: Path, parent: str) -> None:
    def many(data: str, root: str) -> list[int]:
        script = f"echo x > {data}/file-$0"
        return [subprocess.call(["sh", "-c", script, str(n)]) for n in range(7)]

    before = tree_snapshot(data)
    found, result = _run(data, parent, many)
    assert result["out"] == [0] * 7  # each wrote, into its own scratch layer
    assert sorted(found) == [f"{data}/file-{n}" for n in range(7)]
    assert tree_snapshot(data) == before


@needs_inotify
def test_without_a_namespace_a_process_s_write_is_reported(
    data: Path, parent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NO_NAMESPACE, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ChildProcessWarning)
        found, _ = _run(data, parent, _sh("echo x > {data}/new.txt"))
    assert found == [f"{data}/new.txt"]  # written for real (no namespace), and said


@pytest.mark.skipif(namespace_command() is None, reason="no mount namespace on this machine")
def test_where_overlays_are_refused_the_real_data_is_bound_read_only(
    data: Path, parent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(real_data, "overlay_works", lambda: False)
    before = tree_snapshot(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ChildProcessWarning)
        _found, result = _run(data, parent, _sh("echo x > {data}/new.txt"))
    assert result["out"] != 0  # refused (EROFS) by the read-only mount
    assert tree_snapshot(data) == before


# -- reads are never reported --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(READS))
def test_reading_real_data_is_never_reported(data: Path, parent: str, name: str) -> None:
    before = tree_snapshot(data)
    found, result = _run(data, parent, READS[name])
    assert found == []
    assert "refused" not in result
    if name.endswith("child") or name.startswith("python-child"):
        assert result["out"] == 0
    assert tree_snapshot(data) == before


def test_the_time_zone_database_reads_as_it_does_outside_the_world(data: Path, parent: str) -> None:
    found, result = _run(data, parent, _zoneinfo, real_paths=None)
    assert found == [] and result["out"] == "Europe/Warsaw"


@needs_overlay
def test_real_data_holding_the_world_is_left_out_and_the_world_still_binds(
    data: Path, parent: str
) -> None:
    # The configured path holds the world's own directory: never guarded.
    script = "echo x > {root}/made.txt && cat {root}/made.txt"
    found, result = _run(data, parent, _sh(script), real_paths=[str(Path(parent).parent)])
    assert found == [] and result["out"] == 0


# -- replay, fault cells and the fuzzer report them -----------------------------------------


def _recorded(tmp_path: Path) -> Path:
    """One ``poke`` call recorded doing nothing, its root then gone."""
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    (workspace / "a.txt").write_text("a\n")
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        assert runtime.execute(ToolCall(call_id="c0", tool_name="poke", arguments={"what": "x"})).ok
    runtime.close()
    shutil.rmtree(workspace.parent)
    return path


@pytest.mark.parametrize(
    "name", ["open-w", "sqlite-creates", "sh-create", "python-child", "writes-its-workspace"]
)
def test_replay_reports_a_write_into_configured_real_data(
    tmp_path: Path, data: Path, name: str
) -> None:
    action = {**IN_PROCESS, **IN_CHILDREN, **READS}[name]
    if name in IN_CHILDREN and not overlay_works():
        pytest.skip("no mount namespace with overlays")
    path = _recorded(tmp_path)
    before = tree_snapshot(data)
    PLAN.update(action=action, data=str(data))
    report = replay(load(path), REGISTRY, fake_filesystems=FakeFilesystems(real_paths=[str(data)]))
    real = [d for d in report.differences if d.field == "real disk"]
    if name == "writes-its-workspace":
        assert real == []
    else:
        assert real and all(str(data) in str(d.replayed) for d in real), report.differences
        assert real[0].where.startswith("interaction 1")
    assert tree_snapshot(data) == before


class _CallAgain(AfterSuccess):
    """A fault that only calls the target again: the cell's own invariants judge it."""

    name = "call_again"
    injection = "none: the call again"
    expected = "what every cell checks"

    def inject(self, cell: Any) -> None:
        cell.execute(cell.call())


@pytest.mark.parametrize("name", ["open-w", "sh-create", "reads"])
def test_a_fault_cell_reports_a_write_into_configured_real_data(
    tmp_path: Path, data: Path, parent: str, name: str
) -> None:
    if name in IN_CHILDREN and not overlay_works():
        pytest.skip("no mount namespace with overlays")
    (target,) = targets(load(_recorded(tmp_path)), REGISTRY, "session.yaml")
    before = tree_snapshot(data)
    PLAN.update(action={**IN_PROCESS, **IN_CHILDREN, **READS}[name], data=str(data))
    outcome = run_cell(
        _CallAgain(),
        target,
        REGISTRY,
        fake_filesystems=FakeFilesystems(real_paths=[str(data)]),
        world="directory",
        parent=parent,
    )
    named = [problem for problem in outcome.problems if str(data) in problem]
    if name == "reads":
        assert outcome.status == "pass", outcome.problems
    else:
        assert outcome.status == "fail" and named, outcome.problems
    assert tree_snapshot(data) == before


@pytest.mark.parametrize("name", ["remove", "sh-append", "reads"])
def test_the_fuzzer_reports_a_write_into_configured_real_data(data: Path, name: str) -> None:
    if name in IN_CHILDREN and not overlay_works():
        pytest.skip("no mount namespace with overlays")
    before = tree_snapshot(data)
    PLAN.update(action={**IN_PROCESS, **IN_CHILDREN, **READS}[name], data=str(data))
    spec = REGISTRY.get("poke")
    assert spec is not None
    failures = check_call(
        spec,
        {"what": "x"},
        capabilities=CAPS,
        fake_filesystems=FakeFilesystems(real_paths=[str(data)]),
        world="directory",
    )
    real = [failure for failure in failures if failure.problem is Problem.REAL_DISK]
    if name == "reads":
        assert real == []
    else:
        assert real and str(data) in real[0].detail
    assert tree_snapshot(data) == before


def test_a_fuzz_world_kept_between_examples_reports_each_write_once(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unobserved by the kernel, a fuzz workspace is kept from one example to the
    # next; one that saw a write into the real data is not.
    monkeypatch.setattr(directory_world, "watching", lambda top: None)
    spec = REGISTRY.get("poke")
    assert spec is not None
    checker = CallChecker(
        spec,
        capabilities=CAPS,
        registry=None,
        variables=None,
        approve=True,
        timeout_seconds=None,
        fake_filesystems=FakeFilesystems(real_paths=[str(data)]),
        world="directory",
    )
    found = []
    try:
        for action in (IN_PROCESS["open-w"], READS["reads"]):
            PLAN.update(action=action, data=str(data))
            problems = checker.check({"what": "x"}, True)
            found.append([problem for problem, _ in problems if problem is Problem.REAL_DISK])
    finally:
        checker.close()
    assert found == [[Problem.REAL_DISK], []]
