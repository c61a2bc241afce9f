"""Relative paths in the worlds: while a world runs, the working directory
is its workspace root, so a handler's ``open("notes.txt", "w")``,
``sqlite3.connect("crm.db")`` or a process started with no ``cwd`` lands in
the world, never in the project the test run started in; the directory the
run was in is the working directory again once the world ends, however it
ends. Recording changes no working directory.

Every test runs from a decoy project directory (``project``) that must be
byte for byte as it was afterwards, and makes its worlds in a temporary
directory of its own that must hold none once it is done."""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from trees import tree_snapshot

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults import BUILTIN_FAULTS, iter_cells, run_cell
from pytest_toolguard.fuzz import check_call, fuzz_tool
from pytest_toolguard.fuzz.directory import CONTAINER_PREFIX
from pytest_toolguard.harness.branching import SessionWalk
from pytest_toolguard.harness.directory_world import WORLD_PREFIX, DirectoryWorld
from pytest_toolguard.harness.world import FakeWorld
from pytest_toolguard.registry import PathAccess, ToolRegistry, tool
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.cassette import Cassette, WorkspaceState
from pytest_toolguard.replay.tape import PlaybackTape

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
FROZEN = "2024-05-01T12:00:00+00:00"

WRITTEN: list[str] = []
"""Where ``write_relative`` wrote, links resolved: a fuzz workspace is gone
once the call is judged."""

GIT_ENVIRONMENT = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def _write(path: str, text: str) -> dict[str, Any]:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    WRITTEN.append(os.path.realpath(path))
    return {"written": len(text)}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}")])
def write_relative(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Writes ``text`` to ``path`` as given: a relative one from the working directory."""
    return _write(path, text)


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{database}")])
def add_relative(ctx: Any, database: str, name: str) -> dict[str, Any]:
    """Adds a row to the SQLite database ``database`` as given (C code opens it)."""
    connection = sqlite3.connect(database)
    try:
        with connection:
            connection.execute("create table if not exists names (name text)")
            connection.execute("insert into names values (?)", (name,))
        count: int = connection.execute("select count(*) from names").fetchone()[0]
    finally:
        connection.close()
    return {"count": count}


@tool(risk=Risk.READ, world="directory")
def where_am_i(ctx: Any) -> dict[str, Any]:
    """Says the working directory."""
    return {"cwd": os.getcwd()}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}")])
def shell_relative(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Writes ``text`` to ``path`` from a shell started with no ``cwd``."""
    script = 'printf "%s" "$1" > "$2"'
    done = subprocess.run(["sh", "-c", script, "sh", text, path], check=False)
    return {"code": done.returncode}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{repo_path}")])
def git_init_relative(ctx: Any, repo_path: str) -> dict[str, Any]:
    """Makes a git repository at ``repo_path`` as given, with no ``cwd``:
    what a git server does with the repository path a model sends."""
    argv = ["git", "-c", "init.defaultBranch=main", "init", "-q", "--", repo_path]
    done = subprocess.run(argv, env=GIT_ENVIRONMENT, check=False)
    return {"code": done.returncode}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{repo_path}")])
def gitpython_init_relative(ctx: Any, repo_path: str) -> dict[str, Any]:
    """GitPython given the repository path as sent, as mcp-server-git gives it."""
    import git

    repository = git.Repo.init(repo_path, mkdir=True, initial_branch="main")
    repository.close()
    return {"bare": repository.bare}


REGISTRY = ToolRegistry(
    [
        write_relative,
        add_relative,
        where_am_i,
        shell_relative,
        git_init_relative,
        gitpython_init_relative,
    ]
)

CALLS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    # variant: (tool, arguments, the workspace file it makes)
    "open relative": ("write_relative", {"path": "notes.txt", "text": "hi"}, "notes.txt"),
    "sqlite3 relative": ("add_relative", {"database": "crm.db", "name": "Ada"}, "crm.db"),
    "os.getcwd": ("where_am_i", {}, None),
    "process with no cwd": ("shell_relative", {"path": "out.txt", "text": "hi"}, "out.txt"),
    "git, a relative repository": ("git_init_relative", {"repo_path": "repo"}, "repo/.git/HEAD"),
    "GitPython, a relative repository": (
        "gitpython_init_relative",
        {"repo_path": "repo"},
        "repo/.git/HEAD",
    ),
}


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Where worlds are made: none may be left in it."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    yield where
    assert not [n for n in os.listdir(where) if n.startswith((WORLD_PREFIX, CONTAINER_PREFIX))]


@pytest.fixture
def project(tmp_path: Path, temporary: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The decoy project checkout the run starts in: it is the working
    directory again afterwards, and nothing in it changed."""
    checkout = tmp_path / "project"
    (checkout / "sub").mkdir(parents=True)  # the fuzz workspace's own names too
    (checkout / "sub" / "nested.txt").write_text("the project's own file\n")
    (checkout / "notes.txt").write_text("the project's own notes\n")
    monkeypatch.chdir(checkout)
    before = tree_snapshot(checkout)
    WRITTEN.clear()
    yield checkout
    assert os.getcwd() == str(checkout)
    assert tree_snapshot(checkout) == before


def _recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str) -> Cassette:
    """The variant's call recorded as a tool run from its workspace records it
    (the working directory is the workspace), then that workspace removed."""
    name, arguments, _made = CALLS[variant]
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    here = os.getcwd()
    monkeypatch.chdir(workspace)
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        result = runtime.execute(ToolCall(call_id="c1", tool_name=name, arguments=arguments))
    runtime.close()
    assert result.ok, result.message
    monkeypatch.chdir(here)
    _remove(workspace.parent)
    return load(path)


def _remove(top: Path) -> None:
    for path in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    top.rmdir()


# -- every way a world runs a call -------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(CALLS))
def test_a_replayed_call_resolves_its_relative_paths_in_the_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path, variant: str
) -> None:
    if variant.startswith("GitPython"):
        pytest.importorskip("git")
    cassette = _recorded(tmp_path, monkeypatch, variant)
    report = replay(cassette, REGISTRY)
    assert report.ok, report.differences
    assert report.results[0].ok


@pytest.mark.parametrize("variant", ["open relative", "os.getcwd"])
def test_the_fake_world_resolves_a_relative_path_in_its_workspace_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path, variant: str
) -> None:
    cassette = _recorded(tmp_path, monkeypatch, variant)
    report = replay(cassette, REGISTRY, world="fake")
    assert report.ok, report.differences


def _played_on_tape(cassette: Cassette) -> dict[str, bytes]:
    tape = PlaybackTape(cassette, REGISTRY, cassette_path="c.yaml", rerecord="r")
    runtime = tape.start()
    try:
        assert runtime.execute(cassette.interactions[0].call).ok
        assert isinstance(tape._world, DirectoryWorld)
        tree = tape._world.tree()
    finally:
        report = tape.finish()
    assert report.ok, report.differences
    return tree


def _walked(cassette: Cassette) -> dict[str, bytes]:
    with SessionWalk(cassette, REGISTRY) as walk:
        assert walk.step().ok
        return walk.world.tree()


Entry = Callable[[Cassette], dict[str, bytes]]
ENTRIES: dict[str, Entry] = {"fixture playback": _played_on_tape, "amplification's walk": _walked}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("variant", ["open relative", "process with no cwd"])
def test_each_way_a_world_runs_a_call_resolves_relative_paths_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path, variant: str, entry: str
) -> None:
    cassette = _recorded(tmp_path, monkeypatch, variant)
    tree = ENTRIES[entry](cassette)
    made = CALLS[variant][2]
    assert tree.get(str(made)) == b"hi"


@pytest.mark.parametrize("fault", ["response_lost", "duplicate_submission"])
@pytest.mark.parametrize("variant", ["open relative", "process with no cwd"])
def test_a_fault_cell_resolves_relative_paths_in_its_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path, variant: str, fault: str
) -> None:
    cassette = _recorded(tmp_path, monkeypatch, variant)
    faults = tuple(f for f in BUILTIN_FAULTS if f.name == fault)
    cells = list(iter_cells(cassette, REGISTRY, "session.yaml", faults))
    assert len(cells) == 1
    outcome = run_cell(cells[0][1], cells[0][0], REGISTRY, world="directory")
    assert outcome.status == "pass", outcome.problems


@pytest.mark.parametrize("path", ["notes.txt", "./new.txt", "sub/nested.txt", "sub/../data.csv"])
def test_a_fuzzed_relative_path_lands_in_the_fuzz_world(
    project: Path, temporary: Path, path: str
) -> None:
    failures = check_call(write_relative, {"path": path, "text": "fuzzed"}, world="directory")
    assert [f.problem for f in failures if f.problem.name != "HANDLER_RAISED"] == []
    assert WRITTEN, "the handler never wrote"
    assert all(where.startswith(f"{temporary}/{CONTAINER_PREFIX}") for where in WRITTEN), WRITTEN


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{title}")])
def save_note(ctx: Any, title: str, text: str) -> dict[str, Any]:
    """Saves a note under its title, as given: a relative path (not named
    as one, so the fuzzer sends it any text rather than its path probes)."""
    return _write(title, text)


def test_a_fuzz_run_writes_a_relative_path_in_its_world(project: Path, temporary: Path) -> None:
    report = fuzz_tool(save_note, examples=2, seed=2, world="directory")
    assert report.failures == (), report.format()
    assert WRITTEN, "the handler never wrote"
    assert all(where.startswith(f"{temporary}/{CONTAINER_PREFIX}") for where in WRITTEN), WRITTEN


# -- the working directory itself ---------------------------------------------------------

STATE = WorkspaceState(root="/workspace", files={"a.txt": b"a\n"})


def test_inside_a_directory_world_the_working_directory_is_its_root(project: Path) -> None:
    with DirectoryWorld(STATE, frozen_at=FROZEN) as world:
        assert os.getcwd() == world.root
        Path("made.txt").write_text("x")
        assert world.tree() == {"a.txt": b"a\n", "made.txt": b"x"}


def test_inside_the_fake_world_the_working_directory_is_its_root(project: Path) -> None:
    with FakeWorld(STATE) as world:
        assert os.getcwd() == "/workspace"
        Path("made.txt").write_text("x")
        assert world.tree() == {"a.txt": b"a\n", "made.txt": b"x"}


class Stop(Exception):
    pass


@pytest.mark.parametrize("error", [Stop, KeyboardInterrupt], ids=lambda e: e.__name__)
@pytest.mark.parametrize("moved", [False, True], ids=["stayed", "moved by the handler"])
def test_the_working_directory_comes_back_however_the_world_ends(
    project: Path, error: type[BaseException], moved: bool
) -> None:
    with pytest.raises(error), DirectoryWorld(STATE) as world:
        assert os.getcwd() == world.root
        if moved:
            os.chdir("/")
        raise error()
    assert os.getcwd() == str(project)


def test_the_working_directory_comes_back_when_the_project_directory_was_renamed(
    project: Path,
) -> None:
    with DirectoryWorld(STATE):
        project.rename(project.with_name("moved"))
    assert os.path.samefile(os.getcwd(), project.with_name("moved"))
    project.with_name("moved").rename(project)


def test_worlds_ended_out_of_order_still_end_where_the_first_began(project: Path) -> None:
    first, second = DirectoryWorld(STATE), DirectoryWorld(STATE)
    first.__enter__()
    try:
        second.__enter__()
        inner = second.root
    finally:
        first.__exit__(None, None, None)
    try:
        assert os.getcwd() == inner  # the running one keeps its directory
    finally:
        second.__exit__(None, None, None)
    assert os.getcwd() == str(project)


def test_pwd_names_the_world_while_it_runs(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PWD", str(project))
    with DirectoryWorld(STATE) as world:
        assert os.environ["PWD"] == world.root
        shown = subprocess.run(
            [sys.executable, "-c", "import os; print(os.environ['PWD'])"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shown.stdout.strip() == world.root
    assert os.environ["PWD"] == str(project)


@pytest.mark.parametrize("entry", ["", "."])
def test_a_relative_import_path_never_imports_from_the_world(
    project: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    name = "toolguard_cwd_probe"
    (project / f"{name}.py").write_text("WHERE = 'project'\n")
    monkeypatch.setattr(sys, "path", [entry, *sys.path])
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delitem(sys.modules, name, raising=False)
    planted = replace(STATE, files={**STATE.files, f"{name}.py": b"WHERE = 'world'\n"})
    try:
        with DirectoryWorld(planted):
            module = importlib.import_module(name)
        assert module.WHERE == "project"
        assert sys.path[0] == entry
    finally:
        sys.modules.pop(name, None)
        (project / f"{name}.py").unlink()


def test_recording_changes_no_working_directory(tmp_path: Path, project: Path) -> None:
    workspace = tmp_path / "rec"
    workspace.mkdir()
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    with record_session(runtime, tmp_path / "session.yaml"):
        result = runtime.execute(ToolCall(call_id="c1", tool_name="where_am_i", arguments={}))
    runtime.close()
    assert result.data == {"cwd": str(project)}
