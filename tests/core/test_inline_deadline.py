"""Inline mode (opt-in, ``isolation="inline"``): a sync handler runs on the main thread under a
SIGALRM deadline, and goes to a worker thread wherever that cannot be done
safely."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, spy_tool
from test_async_handlers import sleeper

from pytest_toolguard import CallState, ErrorCode, ToolCall
from pytest_toolguard.runtime import inline

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM is POSIX")


def call(call_id: str = "c1", **arguments: Any) -> ToolCall:
    return ToolCall(call_id=call_id, tool_name="spy", arguments=arguments)


def _thread_of(ctx: Any, **arguments: Any) -> Any:
    return {"thread": threading.get_ident()}


@pytest.fixture
def toolguard_runtime(toolguard_runtime: Any) -> Any:
    """The plugin's factory, with ``isolation="inline"`` (opt-in) unless a
    test asks for another mode."""

    def make(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("isolation", "inline")
        return toolguard_runtime(*args, **kwargs)

    return make


def test_inline_runs_a_handler_on_the_calling_main_thread(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=_thread_of)))
    assert runtime.execute(call()).data == {"thread": threading.get_ident()}


def test_the_default_is_thread_mode(tmp_path, registry_of, spy):
    from pytest_toolguard import ToolRuntime

    (tmp_path / "ws").mkdir()
    runtime = ToolRuntime(registry_of(spy_tool(spy, result=_thread_of)), tmp_path / "ws")
    try:
        assert runtime.execute(call()).data != {"thread": threading.get_ident()}
    finally:
        runtime.close()


def test_a_handler_waiting_on_its_cancellation_returns_at_the_deadline(
    toolguard_runtime, registry_of, spy
):
    # ctx.cancelled.wait(...) is how a handler cooperates with its deadline:
    # inline, the alarm marks the event from a signal handler (which may take
    # no lock), so the wait must see the mark without being woken.
    waited: list[bool] = []

    def patient(ctx: Any, **arguments: Any) -> Any:
        waited.append(ctx.cancelled.wait(30))
        return {}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=patient, timeout_seconds=0.1)))
    started = time.monotonic()
    result = runtime.execute(call())
    assert result.code is ErrorCode.TIMEOUT
    assert waited == [True]
    assert time.monotonic() - started < 20  # a bound far from both 0.1 s and 30 s


def test_a_watchdog_alarm_with_the_default_action_is_left_alone(
    toolguard_runtime, registry_of, spy
):
    # signal.alarm with SIGALRM's default action is a "kill me after N s"
    # watchdog: an inline call must neither disarm it nor take it over.
    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=_thread_of)))
    previous = signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 3600)
    try:
        assert runtime.execute(call()).ok  # on a worker thread: the timer is someone else's
        assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_off_the_main_thread_a_handler_runs_on_a_worker_thread(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=_thread_of)))
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(runtime.execute(call())))
    caller.start()
    caller.join(10)
    assert answers[0].ok
    assert answers[0].data["thread"] not in (caller.ident, threading.get_ident())


def test_off_the_main_thread_the_deadline_still_holds(toolguard_runtime, registry_of, spy):
    release = threading.Event()
    tool = spy_tool(spy, result=lambda ctx, **a: release.wait(10) and {}, timeout_seconds=0.1)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE)
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(runtime.execute(call())))
    caller.start()
    caller.join(10)
    release.set()
    assert answers[0].code is ErrorCode.TIMEOUT
    assert runtime.audit.get("c1").state is CallState.TIMED_OUT


def test_except_exception_in_the_handler_does_not_swallow_the_deadline(
    toolguard_runtime, registry_of, spy
):
    caught: list[bool] = []

    def careless(ctx: Any, **arguments: Any) -> Any:
        try:
            threading.Event().wait(30)
        except Exception:
            caught.append(True)
        return {"done": True}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=careless, timeout_seconds=0.1)))
    result = runtime.execute(call())
    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert caught == []


def test_a_swallowed_deadline_comes_back_and_the_call_is_answered_timeout(
    toolguard_runtime, registry_of, spy
):
    swallowed: list[str] = []

    def stubborn(ctx: Any, **arguments: Any) -> Any:
        while len(swallowed) < 3:
            try:
                threading.Event().wait(30)
            except BaseException as exc:  # noqa: BLE001 - swallowing is the point
                swallowed.append(type(exc).__name__)
        return {"survived": True}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=stubborn, timeout_seconds=0.1)))
    result = runtime.execute(call())
    assert swallowed == ["DeadlinePassed"] * 3
    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert runtime.audit.get("c1").state is CallState.TIMED_OUT


def test_after_the_call_no_alarm_is_left_armed(toolguard_runtime, registry_of, spy):
    tool = spy_tool(spy, result=lambda ctx, **a: time.sleep(5) or {}, timeout_seconds=0.05)
    runtime = toolguard_runtime(registry_of(tool))
    assert runtime.execute(call()).code is ErrorCode.TIMEOUT
    assert runtime.execute(call("c2")).code is ErrorCode.TIMEOUT
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_someone_elses_alarm_sends_the_handler_to_a_worker_thread(
    toolguard_runtime, registry_of, spy
):
    theirs: list[int] = []

    def their_handler(signum: int, frame: Any) -> None:
        theirs.append(signum)

    previous = signal.signal(signal.SIGALRM, their_handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 60)  # as pytest-timeout's signal method does
        runtime = toolguard_runtime(registry_of(spy_tool(spy, result=_thread_of)))
        result = runtime.execute(call())
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert result.ok and result.data["thread"] != threading.get_ident()
    assert 0 < left <= 60  # their timer still runs
    assert handler is their_handler
    assert theirs == []


def test_an_armed_timer_of_another_handler_is_left_as_it_was(toolguard_runtime, registry_of, spy):
    # Our own SIGALRM handler installed, someone's timer armed (a nested call).
    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=_thread_of)))
    runtime.execute(call("warm-up"))
    assert inline.installed()
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        result = runtime.execute(call())
        left = signal.getitimer(signal.ITIMER_REAL)[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert result.ok and result.data["thread"] != threading.get_ident()
    assert 50 < left <= 60


def test_a_call_nested_in_a_handler_finishes_its_own_row(toolguard_runtime, registry_of, spy):
    inner_runtime: list[Any] = []

    def outer(ctx: Any, **arguments: Any) -> Any:
        if arguments.get("inner"):
            return {"thread": threading.get_ident()}
        inner = inner_runtime[0].execute(call("inner", inner="yes"))
        return {"inner_ok": inner.ok, "inner_thread": inner.data["thread"]}

    schema = {"type": "object", "properties": {"inner": {"type": "string"}}}
    registry = registry_of(spy_tool(spy, result=outer, schema=schema))
    runtime = toolguard_runtime(registry)
    inner_runtime.append(toolguard_runtime(registry))
    result = runtime.execute(call("outer"))
    assert result.ok and result.data["inner_ok"]
    assert result.data["inner_thread"] != threading.get_ident()
    assert inner_runtime[0].audit.get("inner").state is CallState.SUCCEEDED
    assert runtime.audit.get("outer").state is CallState.SUCCEEDED


def test_a_nested_call_past_the_outer_deadline_still_finishes_its_row(
    toolguard_runtime, registry_of, spy
):
    inner_runtime: list[Any] = []

    def outer(ctx: Any, **arguments: Any) -> Any:
        if arguments.get("inner"):
            time.sleep(0.3)  # on a worker thread, past the outer deadline
            return {}
        inner_runtime[0].execute(call("inner", inner="yes"))
        threading.Event().wait(30)
        return {}

    schema = {"type": "object", "properties": {"inner": {"type": "string"}}}
    registry = registry_of(spy_tool(spy, result=outer, schema=schema, timeout_seconds=0.1))
    runtime = toolguard_runtime(registry)
    inner_runtime.append(toolguard_runtime(registry, timeouts={"spy": 5}))
    result = runtime.execute(call("outer"))
    assert result.code is ErrorCode.TIMEOUT
    assert inner_runtime[0].audit.get("inner").state is CallState.SUCCEEDED


def test_a_handler_may_install_its_own_signal_handlers(toolguard_runtime, registry_of, spy):
    def uses_signals(ctx: Any, **arguments: Any) -> Any:
        previous = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
        signal.signal(signal.SIGUSR1, previous)
        return {"ok": True}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=uses_signals)))
    assert runtime.execute(call()).ok


def test_a_handler_that_replaces_the_alarm_handler_gets_ours_back(
    toolguard_runtime, registry_of, spy
):
    def replaces(ctx: Any, **arguments: Any) -> Any:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        return {}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=replaces)))
    assert runtime.execute(call()).ok
    assert inline.installed()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_thread_mode_never_runs_inline(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=_thread_of)), isolation="thread")
    assert runtime.execute(call()).data["thread"] != threading.get_ident()


def test_an_awaitable_a_sync_handler_returns_is_cancelled_at_the_deadline(
    toolguard_runtime, registry_of, spy
):
    # As in thread mode: the coroutine runs on a worker's loop, cancelled there
    # at the deadline (inline, an event loop on the main thread would run on).
    stopped, log = threading.Event(), []
    sleeps = sleeper(stopped, log)
    tool = spy_tool(spy, result=lambda ctx, **a: sleeps(ctx), timeout_seconds=0.1)
    runtime = toolguard_runtime(registry_of(tool))
    started = time.monotonic()
    result = runtime.execute(call())
    assert time.monotonic() - started < 20  # a bound far from both 0.1 s and 60 s
    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert stopped.wait(10) and log == ["cancelled"]
    assert runtime.audit.get("c1").state is CallState.TIMED_OUT
    assert runtime.close(join_timeout=5) == []


def test_an_awaitable_a_sync_handler_returns_gives_its_value(toolguard_runtime, registry_of, spy):
    async def answer() -> Any:
        await asyncio.sleep(0)
        return {"answer": 42}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=lambda ctx, **a: answer())))
    assert runtime.execute(call()).data == {"answer": 42}


def _interrupting_setitimer(when: Callable[[float, float], bool]) -> Callable[..., Any]:
    """``signal.setitimer``, but a ``KeyboardInterrupt`` (Ctrl-C) lands once,
    when ``when(seconds, interval)``: just before the timer is set (for a
    disarming) or just after (for an arming), as a signal may."""
    real = signal.setitimer
    landed: list[bool] = []

    def setitimer(which: int, seconds: float, interval: float = 0.0) -> Any:
        if landed or not when(seconds, interval):
            return real(which, seconds, interval)
        landed.append(True)
        if seconds == 0:
            raise KeyboardInterrupt  # before the disarming
        real(which, seconds, interval)
        raise KeyboardInterrupt  # as the arming returns

    return setitimer


def test_a_keyboard_interrupt_as_the_deadline_is_armed_leaves_no_timer(
    toolguard_runtime, registry_of, spy, monkeypatch
):
    runtime = toolguard_runtime(registry_of(spy_tool(spy)))
    monkeypatch.setattr(signal, "setitimer", _interrupting_setitimer(lambda s, i: i > 0))
    try:
        with pytest.raises(KeyboardInterrupt):
            runtime.execute(call())
        monkeypatch.undo()
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        monkeypatch.undo()
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_a_keyboard_interrupt_before_the_disarming_still_disarms(
    toolguard_runtime, registry_of, spy, monkeypatch
):
    def replaces(ctx: Any, **arguments: Any) -> Any:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        return {}

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=replaces)))
    monkeypatch.setattr(signal, "setitimer", _interrupting_setitimer(lambda s, i: s == 0))
    try:
        with pytest.raises(KeyboardInterrupt):
            runtime.execute(call())
        monkeypatch.undo()
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert inline.installed()  # the handler's SIG_IGN replaced again
    finally:
        monkeypatch.undo()
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_an_awaitable_returned_after_the_deadline_is_closed_unstarted(
    toolguard_runtime, registry_of, spy
):
    ran: list[str] = []

    async def body() -> Any:
        ran.append("body")
        return {}

    def late_then_awaitable(ctx: Any, **arguments: Any) -> Any:
        with contextlib.suppress(BaseException):  # the deadline, swallowed
            threading.Event().wait(30)
        return body()

    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, result=late_then_awaitable, timeout_seconds=0.05))
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runtime.execute(call())
        gc.collect()
    assert result.code is ErrorCode.TIMEOUT
    assert ran == []
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def test_a_timed_wait_on_the_cancellation_ends_under_a_frozen_clock():
    """freezegun (replay's clock without time-machine) stops time.monotonic:
    wait_for_file's polls, ``ctx.cancelled.wait(0.05)``, must still end."""
    from pytest_toolguard.harness.clock import frozen_clock

    ended = threading.Event()

    def wait() -> None:
        inline.Cancellation().wait(0.1)
        ended.set()

    with frozen_clock(None, backend="freezegun"):
        threading.Thread(target=wait, daemon=True).start()
        assert ended.wait(30)
