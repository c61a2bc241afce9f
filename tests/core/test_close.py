"""``ToolRuntime.close()`` ends what the runtime started:
handlers other threads are still waiting for are joined with the same bound
as orphaned ones and reported when still alive, their workers stop, and the
audit store's connections of threads that ended are closed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, Spy, spy_tool

from pytest_toolguard import Risk, SQLiteAuditStore, ToolCall, ToolRegistry, ToolResult, ToolRuntime
from pytest_toolguard.contract import ErrorCode

BOUND = 30.0
"""Seconds to wait for something sure to happen (a bound, not a guess)."""


def _held_until_released(
    spy: Spy, workspace_dir: Path
) -> tuple[ToolRuntime, threading.Thread, list[ToolResult], list[threading.Thread]]:
    """A runtime whose call c1 is running in another thread, its handler
    held by the spy (deadline: 60 s), and the worker thread it runs on. The
    store is the test's (it outlives ``close()``, so c1's row is finished)."""
    workers: list[threading.Thread] = []

    def on_worker(ctx: Any, **arguments: Any) -> Any:
        workers.append(threading.current_thread())
        return {}

    spy.block()
    tool = spy_tool(spy, result=on_worker, timeout_seconds=60.0)
    runtime = ToolRuntime(ToolRegistry([tool]), workspace_dir, audit=SQLiteAuditStore())
    results: list[ToolResult] = []
    caller = threading.Thread(
        target=lambda: results.append(
            runtime.execute(ToolCall(call_id="c1", tool_name="spy", arguments={}))
        )
    )
    caller.start()
    assert spy.started.wait(BOUND)
    return runtime, caller, results, workers


def test_close_reports_a_handler_still_running_within_its_deadline(
    spy: Spy, workspace_dir: Path
) -> None:
    runtime, caller, _results, _workers = _held_until_released(spy, workspace_dir)
    try:
        with pytest.warns(RuntimeWarning, match="handler still running: c1"):
            problems = runtime.close(join_timeout=0.2)
    finally:
        spy.release()
        caller.join(BOUND)
    assert problems == ["handler still running: c1"]


def test_close_stops_the_worker_of_a_handler_that_ends_after_it(
    spy: Spy, workspace_dir: Path
) -> None:
    runtime, caller, results, workers = _held_until_released(spy, workspace_dir)
    with pytest.warns(RuntimeWarning, match="handler still running: c1"):
        runtime.close(join_timeout=0.0)
    spy.release()
    caller.join(BOUND)
    assert results[0].ok  # the caller still got its answer
    (worker,) = workers
    worker.join(BOUND)
    assert not worker.is_alive()


def _wal_descriptors(database: Path) -> int:
    wal = f"{database}-wal"
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == wal:
                count += 1
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    return count


def test_close_closes_the_given_stores_connections_of_threads_that_ended(
    tmp_path: Path, workspace_dir: Path, spy: Spy
) -> None:
    database = tmp_path / "audit.db"
    store = SQLiteAuditStore(database)
    together = threading.Barrier(8, timeout=BOUND)  # every thread's connection open at once
    # A WRITE tool: its RUNNING row opens each thread's connection before the
    # handler (a READ call writes its one row after the barrier, and a thread
    # that ended meanwhile would have its connection closed already).
    tool = spy_tool(spy, risk=Risk.WRITE, result=lambda ctx, **arguments: {"at": together.wait()})
    runtime = ToolRuntime(ToolRegistry([tool]), workspace_dir, WRITE_ANYWHERE, audit=store)
    threads = [
        threading.Thread(
            target=runtime.execute,
            args=(ToolCall(call_id=f"c{number}", tool_name="spy", arguments={}),),
        )
        for number in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _wal_descriptors(database) >= 8
    assert runtime.close() == []
    # What stays is this thread's own connection; the store is still open.
    assert _wal_descriptors(database) <= 1
    assert store.count() == 8
    store.close()
    assert _wal_descriptors(database) == 0


def test_close_reports_a_process_child_still_running_within_its_deadline(
    workspace_dir: Path, spy: Spy
) -> None:
    ready_read, ready_write = os.pipe()

    def tell_pid_then_sleep(ctx: Any, **arguments: Any) -> Any:
        os.write(ready_write, str(os.getpid()).encode())
        time.sleep(BOUND)
        return {}

    tool = spy_tool(spy, result=tell_pid_then_sleep, timeout_seconds=2 * BOUND)
    runtime = ToolRuntime(
        ToolRegistry([tool]), workspace_dir, audit=SQLiteAuditStore(), isolation="process"
    )
    results: list[ToolResult] = []
    caller = threading.Thread(
        target=lambda: results.append(
            runtime.execute(ToolCall(call_id="c1", tool_name="spy", arguments={}))
        )
    )
    caller.start()
    child = int(os.read(ready_read, 32))  # the child runs the handler now
    try:
        with pytest.warns(RuntimeWarning, match="handler still running: c1"):
            problems = runtime.close(join_timeout=0.2)
    finally:
        os.kill(child, signal.SIGKILL)
        caller.join(BOUND)
        os.close(ready_read)
        os.close(ready_write)
    assert problems == ["handler still running: c1"]
    assert results[0].code is ErrorCode.EXECUTION_ERROR  # the child died without a result
