"""The ``process_killed`` fault: a process a tool started (or the tool's
own process) killed with SIGKILL mid-call, in the directory world. Correct
tools pass; a tool that hides its process's death behind OK fails; the fake
world does not run it."""

from __future__ import annotations

import inspect
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults import BUILTIN_FAULTS, iter_cells, run_cell, select_faults
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.faults.processes import ProcessKilledFault
from pytest_toolguard.faults.target import targets
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette

pytestmark = pytest.mark.skipif(
    "world" not in inspect.signature(run_cell).parameters,
    reason="needs fault cells in the directory world (run_cell(world=...))",
)

SORT = "import sys; sys.stdout.write(''.join(sorted(sys.stdin.read().splitlines(True))))"
SERVE = (
    "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper()); sys.stdout.flush()\n"
)
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def _sorted_by_child(text: str, *, check: bool) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SORT], input=text, capture_output=True, text=True, check=check
    )
    return done.stdout


@tool(risk=Risk.WRITE, world="directory")
def sort_notes(ctx: Any, path: str) -> dict[str, Any]:
    """Sorts a file's lines through a child process; its failure is the call's."""
    full = os.path.join(ctx.workspace.root, path)
    with open(full) as handle:
        text = handle.read()
    result = _sorted_by_child(text, check=True)
    with open(full, "w") as handle:
        handle.write(result)
    return {"lines": result.count("\n")}


@tool(risk=Risk.WRITE, world="directory")
def sort_notes_ignoring_exit(ctx: Any, path: str) -> dict[str, Any]:
    """The twin: never looks at its child's exit status, and writes what came back."""
    full = os.path.join(ctx.workspace.root, path)
    with open(full) as handle:
        text = handle.read()
    result = _sorted_by_child(text, check=False)
    with open(full, "w") as handle:
        handle.write(result)
    return {"lines": result.count("\n")}


@tool(risk=Risk.READ, world="directory")
def shout(ctx: Any, text: str) -> dict[str, Any]:
    """Asks a server process of its own (line in, line out) to shout ``text``."""
    with subprocess.Popen(
        [sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        try:
            server.stdin.write(text + "\n")
            server.stdin.flush()
        except BrokenPipeError as exc:
            raise RuntimeError("the server died") from exc
        answer = server.stdout.readline()
        server.stdin.close()
    if not answer:
        raise RuntimeError(f"the server died (exit {server.returncode})")
    return {"answer": answer.strip()}


def _ask(text: str, *, when_dead: Any) -> dict[str, Any]:
    """``shout``'s exchange; an empty answer (the server died once it had
    the question) is left to ``when_dead``, the planted bug."""
    with subprocess.Popen(
        [sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        try:
            server.stdin.write(text + "\n")
            server.stdin.flush()
        except BrokenPipeError as exc:
            raise RuntimeError("the server died") from exc
        answer = server.stdout.readline()
        if not answer:
            return dict(when_dead())
        server.stdin.close()
    return {"answer": answer.strip()}


def _wait_for_a_server_that_never_comes() -> dict[str, Any]:
    threading.Event().wait(WAITED)  # bounded, for the tests' sake
    raise RuntimeError("no server came back")


WAITED = 2.0
"""How long ``shout_waiting`` waits for its dead server: past its deadline."""


@tool(risk=Risk.READ, world="directory", timeout_seconds=WAITED / 2)
def shout_waiting(ctx: Any, text: str) -> dict[str, Any]:
    """The twin that, when its server dies mid-call, waits for another one
    that never comes: it answers only at its deadline, TIMEOUT."""
    return _ask(text, when_dead=_wait_for_a_server_that_never_comes)


@tool(risk=Risk.READ, world="directory")
def shout_answering_empty(ctx: Any, text: str) -> dict[str, Any]:
    """The twin that takes a dead server's silence for an empty answer: OK."""
    return _ask(text, when_dead=lambda: {"answer": ""})


@tool(risk=Risk.WRITE, world="directory")
def add_row(ctx: Any, name: str) -> dict[str, Any]:
    """Adds a row to the workspace's SQLite database: no process of its own."""
    connection = sqlite3.connect(os.path.join(ctx.workspace.root, "crm.db"))
    try:
        with connection:
            connection.execute("create table if not exists t (name text)")
            connection.execute("insert into t values (?)", (name,))
        count: int = connection.execute("select count(*) from t").fetchone()[0]
    finally:
        connection.close()
    return {"count": count}


@tool(risk=Risk.READ)
def read_note(ctx: Any, path: str) -> dict[str, Any]:
    """A fake-world tool."""
    return {"text": ctx.workspace.read_text(path)}


REGISTRY = ToolRegistry(
    [
        sort_notes,
        sort_notes_ignoring_exit,
        shout,
        shout_waiting,
        shout_answering_empty,
        add_row,
        read_note,
    ]
)


def _record(tmp_path: Path, tool_name: str, arguments: dict[str, Any]) -> Cassette:
    """One call recorded in ``tmp_path/rec/proj``, then that directory deleted."""
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("pear\napple\nfig\n")
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        result = runtime.execute(ToolCall(call_id="c1", tool_name=tool_name, arguments=arguments))
    runtime.close()
    assert result.ok, result.message
    shutil.rmtree(workspace.parent)
    return load(path)


def _cell(tmp_path: Path, tool_name: str, arguments: dict[str, Any]) -> CellOutcome:
    cassette = _record(tmp_path, tool_name, arguments)
    parent = tmp_path / "worlds"
    parent.mkdir()
    (target, fault), *others = list(
        iter_cells(cassette, REGISTRY, "session.yaml", select_faults("process_killed"))
    )
    assert others == []
    outcome: CellOutcome = run_cell(fault, target, REGISTRY, world="directory", parent=str(parent))
    assert os.listdir(parent) == []
    return outcome


@pytest.mark.parametrize(
    ("tool_name", "arguments"),
    [
        ("sort_notes", {"path": "notes.txt"}),  # a child process, killed
        ("shout", {"text": "hello"}),  # a server process, killed
        ("add_row", {"name": "Ada"}),  # no process: the handler's own dies
    ],
)
def test_a_correct_tool_passes_process_killed(
    tmp_path: Path, tool_name: str, arguments: dict[str, Any]
) -> None:
    outcome = _cell(tmp_path, tool_name, arguments)
    assert outcome.status == "pass", outcome.problems


def test_a_tool_hiding_its_killed_process_behind_ok_fails(tmp_path: Path) -> None:
    outcome = _cell(tmp_path, "sort_notes_ignoring_exit", {"path": "notes.txt"})
    assert outcome.status == "fail"
    assert any("answered OK though the process it started" in p for p in outcome.problems)


@pytest.mark.parametrize(
    ("tool_name", "said"),
    [
        ("shout_waiting", "answered TIMEOUT: it waited until its deadline"),
        ("shout_answering_empty", "answered OK though the process it started"),
    ],
)
def test_a_server_dying_mid_call_is_noticed_in_the_wait_or_the_tool_fails(
    tmp_path: Path, tool_name: str, said: str
) -> None:
    """Killed right after it starts, the server is mostly found dead by the
    write of the question (a broken pipe), which both twins heed; killed
    once the handler waits on its answer, it must be noticed there: the
    mid-call kill is what catches them, whatever the first one found."""
    outcome = _cell(tmp_path, tool_name, {"text": "hello"})
    assert outcome.status == "fail"
    assert any(said in problem and "killed mid-call" in problem for problem in outcome.problems)


def test_process_killed_is_a_built_in_fault_the_fake_world_does_not_run(tmp_path: Path) -> None:
    assert "process_killed" in [fault.name for fault in BUILTIN_FAULTS]
    cassette = _record(tmp_path, "read_note", {"path": "notes.txt"})
    (target,) = targets(cassette, REGISTRY, "session.yaml")
    (fault,) = select_faults("process_killed")
    outcome = run_cell(fault, target, REGISTRY)
    assert outcome.status == "n/a"
    assert outcome.problems == (f"not applicable: applies to {ProcessKilledFault.applies_to}",)
