"""Deadlines: TIMEOUT in every mode; in thread mode with the orphan tracked,
in inline mode the late handler stopped; a real kill in process mode."""

from __future__ import annotations

import os
import threading
import time

import pytest
from conftest import WRITE_ANYWHERE, spy_tool

from pytest_toolguard import CallState, ErrorCode, ToolCall
from pytest_toolguard.isolation import HandlerTimeout, ThreadIsolation


def call(call_id="c1", **arguments):
    return ToolCall(call_id=call_id, tool_name="spy", arguments=arguments)


@pytest.mark.parametrize("mode", ["inline", "thread", "process"])
def test_a_handler_past_its_deadline_is_answered_timeout_in_every_mode(
    toolguard_runtime, registry_of, spy, mode
):
    release = threading.Event()
    tool = spy_tool(spy, result=lambda ctx, **a: release.wait(10) and {}, timeout_seconds=0.1)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, isolation=mode)
    result = runtime.execute(call())
    release.set()
    assert (result.code, result.state, result.retryable) == (
        ErrorCode.TIMEOUT,
        CallState.TIMED_OUT,
        True,
    )
    assert runtime.audit.get("c1").state is CallState.TIMED_OUT
    assert runtime.close(join_timeout=5) == []


def test_inline_mode_stops_the_late_handler_instead_of_orphaning_it(
    toolguard_runtime, registry_of, spy
):
    stopped: list[str] = []

    def held(ctx, **arguments):
        try:
            threading.Event().wait(30)  # nobody sets it
        except BaseException as exc:
            stopped.append(type(exc).__name__)
            raise
        return {}

    tool = spy_tool(spy, result=held, timeout_seconds=0.1)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, isolation="inline")
    assert runtime.execute(call()).code is ErrorCode.TIMEOUT
    assert stopped == ["DeadlinePassed"]
    assert runtime.orphaned_handlers() == []


def test_thread_mode_answers_timeout_at_the_deadline_and_tracks_the_orphan(
    toolguard_runtime, registry_of, spy
):
    release = threading.Event()
    tool = spy_tool(spy, result=lambda ctx, **a: release.wait(10) and {}, timeout_seconds=0.2)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, isolation="thread")
    result = runtime.execute(call())
    assert (result.code, result.state, result.retryable) == (
        ErrorCode.TIMEOUT,
        CallState.TIMED_OUT,
        True,
    )
    assert runtime.audit.get("c1").state is CallState.TIMED_OUT
    assert runtime.orphaned_handlers() == ["c1"]
    release.set()
    assert runtime.close(join_timeout=5) == []
    assert runtime.orphaned_handlers() == []


def test_close_reports_an_orphan_that_is_still_alive(toolguard_runtime, registry_of, spy):
    release = threading.Event()
    tool = spy_tool(spy, result=lambda ctx, **a: release.wait(30) and {}, timeout_seconds=0.1)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, isolation="thread")
    runtime.execute(call())
    with pytest.warns(RuntimeWarning, match="handler still running: c1"):
        problems = runtime.close(join_timeout=0.1)
    assert problems == ["handler still running: c1"]
    release.set()  # let it end so the fixture's teardown is clean
    assert runtime.close(join_timeout=5) == []


def test_worker_threads_are_reused_between_calls():
    isolation = ThreadIsolation()
    names = {isolation.run(lambda: threading.get_ident(), 5, "x") for _ in range(20)}
    assert len(names) == 1
    assert isolation.close() == []


def test_an_orphaned_worker_is_not_reused():
    isolation = ThreadIsolation()
    release = threading.Event()
    first = isolation.run(threading.get_ident, 5, "a")
    with pytest.raises(HandlerTimeout):
        isolation.run(lambda: release.wait(10), 0.05, "slow")
    second = isolation.run(threading.get_ident, 5, "b")
    assert second != first
    release.set()
    assert isolation.close() == []


def test_a_job_ending_as_its_deadline_passes_is_answered_and_its_worker_reused(monkeypatch):
    # The wait gives up just as the job ends: its "done" is still on its way.
    # The call gets the job's value, and the worker's next job never takes
    # that stale "done" for its own ending.
    isolation = ThreadIsolation()
    assert isolation.run(lambda: "warm", 5, "warm") == "warm"
    (worker,) = isolation._idle
    worker_class = type(worker)
    real_wait = worker_class.wait
    late = {"once": True}

    def wait_that_gives_up_once(self, timeout=None):
        if timeout is not None and late.pop("once", False):
            real_wait(self)  # the job ended...
            self._done.release()  # ...and its release is still to come
            return False
        return real_wait(self, timeout)

    monkeypatch.setattr(worker_class, "wait", wait_that_gives_up_once)
    assert isolation.run(lambda: "first", 5, "first") == "first"
    release = threading.Event()
    with pytest.raises(HandlerTimeout):
        isolation.run(lambda: release.wait(10), 0.05, "slow")
    assert isolation.orphans() == ["slow"]
    release.set()
    assert isolation.close() == []


def test_handler_errors_travel_back_from_the_worker():
    isolation = ThreadIsolation()
    with pytest.raises(ZeroDivisionError):
        isolation.run(lambda: 1 / 0, 5, "x")
    isolation.close()


def _sleep_then_write(ctx, **arguments):
    ctx.workspace.write_text("pid.txt", str(os.getpid()))
    time.sleep(float(arguments.get("seconds", "2")))
    ctx.workspace.write_text("late.txt", "written after the deadline")
    return {}


def test_process_mode_kills_the_handler_so_nothing_is_written_late(
    toolguard_runtime, registry_of, spy, workspace_dir
):
    tool = spy_tool(
        spy,
        result=_sleep_then_write,
        timeout_seconds=1.0,
        schema={"type": "object", "properties": {"seconds": {"type": "string"}}},
    )
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, isolation="process")
    started = time.monotonic()
    result = runtime.execute(call(seconds="30"))
    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert time.monotonic() - started < 10
    # The child is gone (killed and reaped), so it can never write late.txt.
    pid = int((workspace_dir / "pid.txt").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (workspace_dir / "late.txt").exists()


def test_process_mode_returns_results_and_errors(
    toolguard_runtime, registry_of, spy, workspace_dir
):
    def work(ctx, **arguments):
        if arguments.get("text") == "fail":
            raise PermissionError("no")
        ctx.workspace.write_text("out.txt", "from the child")
        return {"pid": os.getpid()}

    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, result=work)), WRITE_ANYWHERE, isolation="process"
    )
    ok = runtime.execute(call())
    assert ok.ok and ok.data["pid"] != os.getpid()
    assert (workspace_dir / "out.txt").read_text() == "from the child"
    failed = runtime.execute(call("c2", text="fail"))
    assert failed.code is ErrorCode.EXECUTION_ERROR and "PermissionError" in failed.message


def test_process_mode_keeps_changes_for_rollback(
    toolguard_runtime, registry_of, spy, workspace_dir
):
    (workspace_dir / "out.txt").write_text("before")

    def work(ctx, **arguments):
        ctx.workspace.write_text("out.txt", "after")
        return {}

    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, result=work)), WRITE_ANYWHERE, isolation="process"
    )
    assert runtime.execute(call()).ok
    assert runtime.rollback("c1").ok
    assert (workspace_dir / "out.txt").read_text() == "before"


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_a_runtime_can_tighten_a_tools_deadline(toolguard_runtime, registry_of, spy, mode):
    release = threading.Event()
    tool = spy_tool(spy, result=lambda ctx, **a: release.wait(10) and {}, timeout_seconds=30)
    runtime = toolguard_runtime(
        registry_of(tool), WRITE_ANYWHERE, timeouts={"spy": 0.1}, isolation=mode
    )
    started = time.monotonic()
    assert runtime.execute(call()).code is ErrorCode.TIMEOUT
    assert time.monotonic() - started < 5
    release.set()


def test_timeouts_must_be_positive(toolguard_runtime, registry_of, spy):
    with pytest.raises(ValueError, match="positive"):
        toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, timeouts={"spy": 0})
