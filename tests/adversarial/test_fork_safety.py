"""Process isolation never forks a process whose SQLite locks another thread
holds: a child copies every mutex of the parent but only
the forking thread, so a mutex held inside SQLite at the fork stays held in
the child for ever."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, Spy, spy_tool, wait_for

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRegistry, ToolRuntime, ToolSpec
from pytest_toolguard.audit import AuditRecord
from pytest_toolguard.capabilities import Risk
from pytest_toolguard.contract import CallState, ErrorCode
from pytest_toolguard.forking import FORK_GATE
from pytest_toolguard.registry import PathAccess


@pytest.fixture
def writer_blocked_inside_sqlite(tmp_path: Path) -> Iterator[None]:
    """A thread inside ``SQLiteAuditStore.record``, waiting in SQLite for a
    write lock another connection holds, until the fixture ends."""
    path = tmp_path / "busy.db"
    store = SQLiteAuditStore(path, busy_timeout_ms=60_000)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    record = AuditRecord(
        call_id="w",
        session_id="s",
        actor="a",
        tool_name="t",
        risk="read",
        arguments_json="{}",
        arguments_hash="h",
        state=CallState.SUCCEEDED,
        result_code=ErrorCode.OK,
        started_at="2026-01-01T00:00:00Z",
    )
    writer = threading.Thread(target=store.record, args=(record,))
    writer.start()
    wait_for(lambda: FORK_GATE.threads_inside() == 1)
    yield
    blocker.execute("ROLLBACK")
    blocker.close()
    writer.join()
    store.close()


def _mark_ran(ctx: Any, **arguments: Any) -> Any:
    ctx.workspace.write_text("ran.txt", "the handler ran")
    return {}


def test_a_process_call_never_forks_while_a_thread_is_inside_sqlite(
    writer_blocked_inside_sqlite: None, workspace_dir: Path, spy: Spy
) -> None:
    tool = spy_tool(
        spy,
        result=_mark_ran,
        timeout_seconds=1.0,
        risk=Risk.WRITE,
        paths=(PathAccess.write("ran.txt"),),
    )
    with ToolRuntime(
        ToolRegistry([tool]), workspace_dir, WRITE_ANYWHERE, isolation="process"
    ) as runtime:
        result = runtime.execute(ToolCall(call_id="p1", tool_name="spy", arguments={}))
    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert not (workspace_dir / "ran.txt").exists()


CALLS = 200
"""Process calls made beside the writers: each fork meets writers inside the
store, so each is a trial of the gate's waiting and waking. A gate that
never wakes a waiting fork fails within the first ten or so; a thousand
calls caught nothing that two hundred did not, in five times the time."""
DEADLINE = 10.0
ANSWER_BOUND = 5.0
"""Beyond its deadline, what a call may take to be answered: the fork, the
reap, the audit rows (a hung child is only killed at the deadline)."""


@pytest.mark.slow
def test_hundreds_of_process_calls_beside_audit_writers_never_hang(
    tmp_path: Path, workspace_dir: Path
) -> None:
    def noop(ctx: Any) -> Any:
        return {"ok": True}

    store = SQLiteAuditStore(tmp_path / "audit.db")
    spec = ToolSpec(
        name="noop",
        description="returns at once",
        input_schema={"type": "object"},
        handler=noop,
        timeout_seconds=DEADLINE,
    )
    forked = ToolRuntime(ToolRegistry([spec]), workspace_dir, audit=store, isolation="process")
    writers_runtime = ToolRuntime(ToolRegistry([spec]), workspace_dir, audit=store)
    stop = threading.Event()
    written = [0, 0, 0]

    def write_rows(index: int) -> None:
        while not stop.is_set():
            writers_runtime.execute(
                ToolCall(call_id=f"w{index}-{written[index]}", tool_name="noop", arguments={})
            )
            written[index] += 1

    writers = [threading.Thread(target=write_rows, args=(i,)) for i in range(3)]
    for writer in writers:
        writer.start()
    slowest, failed = 0.0, []
    try:
        for number in range(CALLS):
            started = time.monotonic()
            result = forked.execute(ToolCall(call_id=f"p{number}", tool_name="noop", arguments={}))
            slowest = max(slowest, time.monotonic() - started)
            if not result.ok:
                failed.append((number, result.code))
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    print(f"{CALLS} process calls beside {sum(written)} audit writes; slowest {slowest:.3f} s")
    assert failed == []
    assert slowest < DEADLINE + ANSWER_BOUND
    assert forked.close() == [] and writers_runtime.close() == []
    assert store.count() == CALLS + sum(written)
    store.close()
