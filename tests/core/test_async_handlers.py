"""``async def`` handlers: ``execute`` and ``aexecute`` await them, the
deadline cancels them and refuses their late writes; ``aexecute`` answers,
audits and notifies exactly as ``execute`` does, without blocking the loop.

Synchronisation is by events only: a handler that must overrun its deadline
awaits ``asyncio.sleep(60)`` and is cancelled long before."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE

from pytest_toolguard import (
    CallState,
    ErrorCode,
    PathAccess,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.isolation import CoroutineRunner, HandlerTimeout, ThreadIsolation
from pytest_toolguard.replay.cassette import load
from pytest_toolguard.replay.recorder import record_session
from pytest_toolguard.sandbox import CallCancelled
from pytest_toolguard.thread_loops import CountingExecutor, holds_more

TEXT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "path": {"type": "string"}},
    "additionalProperties": False,
}
HOW = ("execute", "aexecute")
"""The two entry points every behaviour here is checked through."""

DEADLINE_MODES = [("thread", "async_def"), ("thread", "sync_def"), ("inline", "sync_def")]
"""The isolation and the handler's shape the deadline is checked in: an
``async def`` handler, or a sync one returning its coroutine (which inline
mode hands to a worker's loop; an ``async def`` one never runs inline)."""


def shaped(handler: Callable[..., Any], shape: str) -> Callable[..., Any]:
    """``handler`` (an ``async def``) as it is, or as a sync handler that
    returns its coroutine."""
    if shape == "async_def":
        return handler

    def returns_its_coroutine(ctx: Any, **arguments: Any) -> Any:
        return handler(ctx, **arguments)

    return returns_its_coroutine


def spec(name: str, handler: Callable[..., Any], **options: Any) -> ToolSpec:
    return ToolSpec(name, f"test tool {name}", TEXT_SCHEMA, handler, **options)


def run(runtime: ToolRuntime, call: ToolCall, how: str) -> ToolResult:
    """``call`` through ``runtime.execute``, or ``runtime.aexecute`` on a new loop."""
    if how == "execute":
        return runtime.execute(call)
    return asyncio.run(runtime.aexecute(call))


def run_and_wait(
    runtime: ToolRuntime, call: ToolCall, how: str, stopped: threading.Event
) -> ToolResult:
    """Like ``run``, then wait for ``stopped``; for ``aexecute`` while its loop
    still runs, so the loop's own shutdown (which cancels every task) cannot
    be what stopped the handler."""
    if how == "execute":
        result = runtime.execute(call)
        assert stopped.wait(10)
        return result

    async def main() -> ToolResult:
        result = await runtime.aexecute(call)
        assert await asyncio.to_thread(stopped.wait, 10)
        return result

    return asyncio.run(main())


async def echo(ctx: Any, text: str = "", **arguments: Any) -> Any:
    await asyncio.sleep(0)
    return {"echo": text}


async def prefixed_echo(ctx: Any, prefix: str, text: str = "", **arguments: Any) -> Any:
    await asyncio.sleep(0)
    return {"echo": prefix + text}


class AsyncCallable:
    async def __call__(self, ctx: Any, text: str = "", **arguments: Any) -> Any:
        await asyncio.sleep(0)
        return {"echo": text}


def returns_a_coroutine(ctx: Any, text: str = "", **arguments: Any) -> Any:
    return echo(ctx, text)


HANDLER_SHAPES = {
    "async_def": echo,
    "partial_of_async_def": functools.partial(prefixed_echo, prefix=""),
    "object_with_async_call": AsyncCallable(),
    "sync_def_returning_a_coroutine": returns_a_coroutine,
}


def sleeper(
    stopped: threading.Event, log: list[str], started: threading.Event | None = None
) -> Callable[..., Any]:
    """An async handler that would sleep a minute; it sets ``started``, logs
    its cancellation and sets ``stopped`` as it ends."""

    async def handler(ctx: Any, **arguments: Any) -> Any:
        if started is not None:
            started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        finally:
            stopped.set()
        return {}

    return handler


# -- results ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("shape", sorted(HANDLER_SHAPES))
def test_an_async_handler_answers_ok_with_its_output(toolguard_runtime, how, shape):
    runtime = toolguard_runtime(ToolRegistry([spec("echo", HANDLER_SHAPES[shape])]))

    result = run(runtime, ToolCall("c1", "echo", {"text": "hi"}), how)

    assert (result.code, result.state, result.data) == (
        ErrorCode.OK,
        CallState.SUCCEEDED,
        {"echo": "hi"},
    )
    assert runtime.audit.get("c1").state is CallState.SUCCEEDED


@pytest.mark.parametrize("how", HOW)
def test_an_async_handlers_output_is_checked_against_the_output_schema(toolguard_runtime, how):
    async def miscounts(ctx: Any, **arguments: Any) -> Any:
        return {"count": "three"}

    tool = spec(
        "count",
        miscounts,
        output_schema={"type": "object", "properties": {"count": {"type": "integer"}}},
    )
    runtime = toolguard_runtime(ToolRegistry([tool]))

    result = run(runtime, ToolCall("c1", "count", {}), how)

    assert (result.code, result.state) == (ErrorCode.OUTPUT_INVALID, CallState.FAILED)
    assert "output.count" in result.message


@pytest.mark.parametrize("how", HOW)
def test_an_async_handler_that_raises_answers_execution_error_naming_the_type(
    toolguard_runtime, how
):
    async def fails(ctx: Any, **arguments: Any) -> Any:
        await asyncio.sleep(0)
        raise LookupError("no such record")

    runtime = toolguard_runtime(ToolRegistry([spec("fails", fails)]))

    result = run(runtime, ToolCall("c1", "fails", {}), how)

    assert (result.code, result.state) == (ErrorCode.EXECUTION_ERROR, CallState.FAILED)
    assert "LookupError: no such record" in result.message


@pytest.mark.parametrize("how", HOW)
def test_a_handler_raising_cancelled_error_itself_is_an_execution_error(toolguard_runtime, how):
    async def gives_up(ctx: Any, **arguments: Any) -> Any:
        raise asyncio.CancelledError

    runtime = toolguard_runtime(ToolRegistry([spec("gives_up", gives_up)]))

    result = run(runtime, ToolCall("c1", "gives_up", {}), how)

    assert result.code is ErrorCode.EXECUTION_ERROR
    assert "CancelledError" in result.message


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("shape", sorted(HANDLER_SHAPES))
def test_an_async_handler_leaves_no_never_awaited_warning(toolguard_runtime, how, shape):
    runtime = toolguard_runtime(ToolRegistry([spec("echo", HANDLER_SHAPES[shape])]))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(runtime, ToolCall("c1", "echo", {"text": "hi"}), how)
        gc.collect()  # an unawaited coroutine warns when it is collected

    assert result.code is ErrorCode.OK
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_a_sync_handler_still_answers_through_aexecute(toolguard_runtime):
    def sync_echo(ctx: Any, text: str = "", **arguments: Any) -> Any:
        return {"echo": text, "thread": threading.current_thread().name}

    runtime = toolguard_runtime(ToolRegistry([spec("echo", sync_echo)]))

    result = run(runtime, ToolCall("c1", "echo", {"text": "hi"}), "aexecute")

    assert result.code is ErrorCode.OK
    assert result.data == {"echo": "hi", "thread": "toolguard-worker"}


# -- the deadline ----------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(("mode", "shape"), DEADLINE_MODES)
def test_at_the_deadline_an_async_handler_answers_timeout_and_is_cancelled(
    toolguard_runtime, how, mode, shape
):
    stopped, log = threading.Event(), []
    tool = spec("sleeper", shaped(sleeper(stopped, log), shape), timeout_seconds=0.05)
    runtime = toolguard_runtime(ToolRegistry([tool]), isolation=mode)

    result = run_and_wait(runtime, ToolCall("c1", "sleeper", {}), how, stopped)

    assert (result.code, result.state, result.retryable) == (
        ErrorCode.TIMEOUT,
        CallState.TIMED_OUT,
        True,
    )
    assert log == ["cancelled"]
    assert runtime.audit.get("c1").state is CallState.TIMED_OUT
    assert runtime.close(join_timeout=5) == []


def test_aexecute_answers_timeout_once_the_cancelled_handler_has_stopped(toolguard_runtime):
    stopped, log = threading.Event(), []
    tool = spec("sleeper", sleeper(stopped, log), timeout_seconds=0.05)
    runtime = toolguard_runtime(ToolRegistry([tool]))

    async def main() -> tuple[ToolResult, bool, list[str]]:
        result = await runtime.aexecute(ToolCall("c1", "sleeper", {}))
        return result, stopped.is_set(), runtime.orphaned_handlers()

    result, stopped_before_the_answer, orphans = asyncio.run(main())

    assert result.code is ErrorCode.TIMEOUT
    assert (stopped_before_the_answer, orphans) == (True, [])


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(("mode", "shape"), DEADLINE_MODES)
def test_a_late_write_after_the_deadline_changes_no_file(toolguard_runtime, how, mode, shape):
    stopped = threading.Event()
    outcome: list[BaseException | None] = []

    async def late_writer(ctx: Any, **arguments: Any) -> Any:
        try:
            await asyncio.sleep(60)
        finally:  # the cancelled handler still tries to write
            try:
                ctx.workspace.write_text("late.txt", "written after the deadline")
            except CallCancelled as exc:
                outcome.append(exc)
            else:
                outcome.append(None)
            stopped.set()
        return {}

    tool = spec(
        "late_writer",
        shaped(late_writer, shape),
        risk=Risk.WRITE,
        paths=(PathAccess.write("late.txt"),),
        timeout_seconds=0.05,
    )
    runtime = toolguard_runtime(ToolRegistry([tool]), WRITE_ANYWHERE, isolation=mode)

    result = run_and_wait(runtime, ToolCall("c1", "late_writer", {}), how, stopped)

    assert result.code is ErrorCode.TIMEOUT
    assert len(outcome) == 1 and isinstance(outcome[0], CallCancelled)
    assert not os.path.exists(os.path.join(runtime.workspace.root, "late.txt"))
    assert runtime.close(join_timeout=5) == []


def test_a_coroutine_cancelled_before_its_loop_starts_never_runs():
    runner, ran = CoroutineRunner(), []

    async def body() -> None:
        ran.append("body")

    runner.cancel()  # the deadline passed while the job waited for its worker
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(asyncio.CancelledError):
            runner.run(body())
        gc.collect()

    assert ran == []
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_a_task_a_call_leaves_on_its_loop_is_cancelled_before_the_call_returns():
    """The thread's loop is kept between calls: what one call started and
    left running must end with it, as under ``asyncio.run``, and never run
    inside the next call."""
    started, ended = threading.Event(), []

    async def leaves_a_task() -> str:
        async def background() -> None:
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise

        asyncio.get_running_loop().create_task(background())
        await asyncio.sleep(0)  # it starts
        return "done"

    async def next_call() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    isolation = ThreadIsolation(max_idle=1)
    try:
        first = isolation.run(lambda: CoroutineRunner().run(leaves_a_task()), 10, "first")
        assert started.is_set() and ended == ["cancelled"] and first == "done"
        # The same worker (one idle worker kept) and its loop: nothing left on it.
        assert isolation.run(lambda: CoroutineRunner().run(next_call()), 10, "second") == []
    finally:
        assert isolation.close() == []


def test_a_call_leaving_a_timer_ends_with_its_loop_closed_and_a_clean_one_keeps_it():
    """Beyond tasks: a timer a call left would fire during a later call on
    the same thread, so that call's loop is closed as ``asyncio.run``
    closes it. A call that leaves nothing keeps the loop for the next."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def clean() -> None:
        loops.append(asyncio.get_running_loop())

    async def leaves_a_timer() -> None:
        loops.append(asyncio.get_running_loop())
        asyncio.get_running_loop().call_later(3600, loops.clear)

    isolation = ThreadIsolation(max_idle=1)
    closed_after: list[bool] = []
    try:
        for body in (clean, clean, leaves_a_timer, clean):
            isolation.run(lambda body=body: CoroutineRunner().run(body()), 10, body.__name__)
            closed_after.append(loops[-1].is_closed())
    finally:
        assert isolation.close() == []
    first, again, timer, after = loops
    assert again is first and timer is first  # one worker thread, its loop kept while clean
    assert closed_after == [False, False, True, False]  # closed with the timer on it
    assert after is not timer


def test_a_call_whose_to_thread_work_finished_keeps_its_loop():
    """A handler calling ``asyncio.to_thread`` on every call (the Agents
    SDK's sync function tools) leaves the executor idle: the next call on
    that worker runs on the same loop, its executor's threads kept."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def off_the_loop() -> None:
        await asyncio.to_thread(threading.get_ident)
        loops.append(asyncio.get_running_loop())

    isolation = ThreadIsolation(max_idle=1)
    try:
        for _ in range(3):
            isolation.run(lambda: CoroutineRunner().run(off_the_loop()), 10, "to_thread")
            assert not loops[-1].is_closed()
    finally:
        assert isolation.close() == []
    assert loops[0] is loops[1] is loops[2]
    assert loops[0].is_closed()  # the worker's end closed it, its executor joined


def test_a_loop_whose_executor_still_runs_work_holds_more_until_the_work_finished():
    """Work still running in the default executor (a ``to_thread`` whose
    awaiting task was cancelled) has the loop closed after the call, its
    threads joined: ``holds_more`` says so until the work has finished."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(CountingExecutor(thread_name_prefix="asyncio"))
    release = threading.Event()
    try:
        work = loop.run_in_executor(None, release.wait, 10)
        assert holds_more(loop)
        release.set()
        assert loop.run_until_complete(work) is True
        assert not holds_more(loop)
    finally:
        release.set()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def test_a_coroutine_past_its_grace_is_tracked_until_it_ends():
    isolation = ThreadIsolation(cancel_grace=0.01)
    marks: list[str] = []

    async def main() -> tuple[list[str], list[str]]:
        released, ended = asyncio.Event(), asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await released.wait()  # ignores the cancellation until released
            finally:
                ended.set()  # the task ends in this same step

        with pytest.raises(HandlerTimeout):
            await isolation.run_async(stubborn, 0.01, "stubborn", lambda: marks.append("cancel"))
        orphans = isolation.orphans()
        released.set()
        await ended.wait()
        return orphans, isolation.orphans()

    during, after = asyncio.run(main())

    assert (marks, during, after) == (["cancel"], ["stubborn"], [])
    assert isolation.close(join_timeout=0) == []


def test_close_reports_a_coroutine_that_is_still_running():
    isolation = ThreadIsolation(cancel_grace=0.01)

    async def main() -> list[str]:
        released = asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await released.wait()

        with pytest.raises(HandlerTimeout):
            await isolation.run_async(stubborn, 0.01, "stubborn", lambda: None)
        problems = isolation.close(join_timeout=0.01)  # on its own loop: it cannot end meanwhile
        released.set()
        return problems

    assert asyncio.run(main()) == ["stubborn"]


# -- aexecute and the caller's task ----------------------------------------------------


def test_cancelling_the_callers_task_finishes_the_row_and_propagates(toolguard_runtime):
    started, stopped, log = threading.Event(), threading.Event(), []
    runtime = toolguard_runtime(ToolRegistry([spec("sleeper", sleeper(stopped, log, started))]))

    async def main() -> None:
        task = asyncio.create_task(runtime.aexecute(ToolCall("c1", "sleeper", {})))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(stopped.wait, 10)

    asyncio.run(main())

    row = runtime.audit.get("c1")
    assert (row.state, row.result_code) == (CallState.INTERRUPTED, ErrorCode.EXECUTION_ERROR)
    assert log == ["cancelled"]
    assert runtime.close(join_timeout=5) == []


def test_a_cancelled_callers_idempotency_key_replays_the_interruption(toolguard_runtime):
    started, stopped, log = threading.Event(), threading.Event(), []
    runtime = toolguard_runtime(ToolRegistry([spec("sleeper", sleeper(stopped, log, started))]))
    first = ToolCall("c1", "sleeper", {}, idempotency_key="k")

    async def main() -> ToolResult:
        task = asyncio.create_task(runtime.aexecute(first))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await runtime.aexecute(dataclasses.replace(first, call_id="c2"))

    again = asyncio.run(main())

    # Not DUPLICATE_CALL forever: the key holds the first call's outcome.
    assert (again.code, again.state) == (ErrorCode.EXECUTION_ERROR, CallState.FAILED)
    assert runtime.audit.get("c2").replay_of == "c1"
    assert log == ["cancelled"]


def test_cancelling_the_caller_refuses_a_sync_handlers_later_writes(toolguard_runtime):
    started, release, stopped = threading.Event(), threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def slow_writer(ctx: Any, **arguments: Any) -> Any:
        started.set()
        release.wait(10)
        try:
            ctx.workspace.write_text("late.txt", "written after the caller left")
        except CallCancelled as exc:
            outcome.append(exc)
        else:
            outcome.append(None)
        stopped.set()
        return {}

    tool = spec("slow_writer", slow_writer, risk=Risk.WRITE, paths=(PathAccess.write("late.txt"),))
    runtime = toolguard_runtime(ToolRegistry([tool]), WRITE_ANYWHERE)

    async def main() -> None:
        task = asyncio.create_task(runtime.aexecute(ToolCall("c1", "slow_writer", {})))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        assert await asyncio.to_thread(stopped.wait, 10)

    asyncio.run(main())

    assert runtime.audit.get("c1").state is CallState.INTERRUPTED
    assert len(outcome) == 1 and isinstance(outcome[0], CallCancelled)
    assert not os.path.exists(os.path.join(runtime.workspace.root, "late.txt"))
    assert runtime.close(join_timeout=5) == []


def test_async_handlers_of_concurrent_aexecutes_share_the_loop(toolguard_runtime):
    async def main() -> list[ToolResult]:
        other_ran = asyncio.Event()

        async def waits_for_the_other(ctx: Any, **arguments: Any) -> Any:
            await other_ran.wait()  # only if both run on the loop at once
            return {"waited": True}

        async def sets(ctx: Any, **arguments: Any) -> Any:
            other_ran.set()
            return {"set": True}

        runtime = toolguard_runtime(
            ToolRegistry([spec("waits", waits_for_the_other), spec("sets", sets)])
        )
        return list(
            await asyncio.gather(
                runtime.aexecute(ToolCall("c1", "waits", {})),
                runtime.aexecute(ToolCall("c2", "sets", {})),
            )
        )

    results = asyncio.run(main())

    assert [r.code for r in results] == [ErrorCode.OK, ErrorCode.OK]


def test_aexecute_of_a_sync_handler_does_not_block_the_loop(toolguard_runtime):
    loop_ran = threading.Event()

    def blocks_until_the_loop_runs(ctx: Any, **arguments: Any) -> Any:
        return {"loop_ran": loop_ran.wait(10)}

    runtime = toolguard_runtime(ToolRegistry([spec("blocks", blocks_until_the_loop_runs)]))

    async def set_it() -> None:  # runs only once aexecute is waiting for its handler
        loop_ran.set()

    async def main() -> ToolResult:
        result, _ = await asyncio.gather(runtime.aexecute(ToolCall("c1", "blocks", {})), set_it())
        return result

    result = asyncio.run(main())

    assert (result.code, result.data) == (ErrorCode.OK, {"loop_ran": True})


@pytest.mark.parametrize(
    "bad", [None, "not a call", ToolCall("", "echo", {}), ToolCall("c1", "echo", "{not json")]
)
def test_aexecute_never_raises_for_a_bad_call(toolguard_runtime, bad):
    runtime = toolguard_runtime(ToolRegistry([spec("echo", echo)]))

    result = asyncio.run(runtime.aexecute(bad))

    assert (result.ok, result.code) == (False, ErrorCode.INVALID_REQUEST)


# -- aexecute is execute ---------------------------------------------------------------


def sync_append(ctx: Any, text: str = "", **arguments: Any) -> Any:
    old = ctx.workspace.read_text("log.txt") if ctx.workspace.exists("log.txt") else ""
    ctx.workspace.write_text("log.txt", old + text + "\n")
    return {"lines": (old + text + "\n").count("\n")}


async def async_append(ctx: Any, text: str = "", **arguments: Any) -> Any:
    await asyncio.sleep(0)
    return sync_append(ctx, text)


def sync_fails(ctx: Any, **arguments: Any) -> Any:
    raise ValueError("bad input")


async def async_fails(ctx: Any, **arguments: Any) -> Any:
    raise ValueError("bad input")


async def async_bad_output(ctx: Any, **arguments: Any) -> Any:
    return {"not": float("nan")}


def mixed_registry() -> ToolRegistry:
    write = {"risk": Risk.WRITE, "paths": (PathAccess.write("log.txt"),)}
    return ToolRegistry(
        [
            spec("sync_append", sync_append, **write),
            spec("async_append", async_append, **write),
            spec("sync_fails", sync_fails),
            spec("async_fails", async_fails),
            spec("async_bad_output", async_bad_output),
            spec("async_read", echo, paths=(PathAccess.read("{path}"),)),
        ]
    )


MIXED_CALLS = (
    ToolCall("c1", "sync_append", {"text": "one"}),
    ToolCall("c2", "async_append", {"text": "two"}),
    ToolCall("c3", "async_append", {"text": "three"}, idempotency_key="k"),
    ToolCall("c4", "async_append", {"text": "three"}, idempotency_key="k"),
    ToolCall("c5", "async_append", {"text": "other"}, idempotency_key="k"),
    ToolCall("c6", "async_append", {"text": 5}),
    ToolCall("c7", "async_apend", {"text": "typo"}),
    ToolCall("c8", "async_read", {"path": "../outside.txt"}),
    ToolCall("c9", "sync_fails", {}),
    ToolCall("c10", "async_fails", {}),
    ToolCall("c11", "async_bad_output", {}),
    ToolCall("c12", "async_append", '{"text": "as JSON text"}'),
)


def comparable(result: ToolResult) -> ToolResult:
    return dataclasses.replace(result, duration_ms=0)


def comparable_rows(runtime: ToolRuntime) -> list[Any]:
    return [
        dataclasses.replace(
            row,
            started_at="",
            finished_at="",
            duration_ms=0,
            audit_id=None,
            lease_expires_at=None,
        )
        for row in runtime.audit.rows()
    ]


def test_aexecute_gives_the_same_results_and_audit_rows_as_execute(toolguard_runtime, tmp_path):
    by_execute = toolguard_runtime(mixed_registry(), WRITE_ANYWHERE)
    sync_results = [comparable(by_execute.execute(call)) for call in MIXED_CALLS]
    sync_rows, sync_log = comparable_rows(by_execute), (tmp_path / "workspace/log.txt").read_text()
    (tmp_path / "workspace/log.txt").unlink()
    by_aexecute = toolguard_runtime(mixed_registry(), WRITE_ANYWHERE)

    async def main() -> list[ToolResult]:
        return [comparable(await by_aexecute.aexecute(call)) for call in MIXED_CALLS]

    async_results = asyncio.run(main())

    assert [r.code for r in async_results] == [r.code for r in sync_results]
    assert async_results == sync_results
    assert comparable_rows(by_aexecute) == sync_rows
    assert (
        (tmp_path / "workspace/log.txt").read_text()
        == sync_log
        == "one\ntwo\nthree\nas JSON text\n"
    )


def test_an_idempotency_key_replays_through_aexecute(toolguard_runtime, tmp_path):
    calls: list[str] = []

    async def counted_append(ctx: Any, text: str = "", **arguments: Any) -> Any:
        calls.append(text)
        return await async_append(ctx, text)

    tool = spec("append", counted_append, risk=Risk.WRITE, paths=(PathAccess.write("log.txt"),))
    runtime = toolguard_runtime(ToolRegistry([tool]), WRITE_ANYWHERE)
    first = ToolCall("c1", "append", {"text": "once"}, idempotency_key="order-1")

    async def main() -> tuple[ToolResult, ToolResult]:
        return (
            await runtime.aexecute(first),
            await runtime.aexecute(dataclasses.replace(first, call_id="c2")),
        )

    original, replay = asyncio.run(main())

    assert (original.code, replay.code) == (ErrorCode.OK, ErrorCode.IDEMPOTENT_REPLAY)
    assert replay.data == original.data
    assert calls == ["once"]
    assert (tmp_path / "workspace/log.txt").read_text() == "once\n"


def test_listeners_see_aexecute_calls_as_execute_calls(toolguard_runtime, tmp_path):
    seen: dict[str, list[tuple[ToolCall, ToolResult, Any, Any]]] = {"execute": [], "aexecute": []}
    for how, calls in seen.items():
        runtime = toolguard_runtime(mixed_registry(), WRITE_ANYWHERE)
        runtime.add_listener(
            lambda call, result, data, approval, calls=calls: calls.append(
                (call, comparable(result), data, approval)
            )
        )
        for call in MIXED_CALLS:
            run(runtime, call, how)
        (tmp_path / "workspace/log.txt").unlink()

    assert len(seen["aexecute"]) == len(MIXED_CALLS)
    assert seen["aexecute"] == seen["execute"]


async def peek(ctx: Any, **arguments: Any) -> Any:
    """Reads a file no PathAccess declares: only watch_files tells the recorder."""
    await asyncio.sleep(0)
    return {"notes": ctx.workspace.read_text("notes.txt")}


def test_the_recorder_records_aexecute_calls(toolguard_runtime, tmp_path):
    cassettes = {}
    calls = (*MIXED_CALLS, ToolCall("c13", "peek", {}))
    for how in HOW:
        registry = mixed_registry()
        registry.register(spec("peek", peek))
        runtime = toolguard_runtime(registry, WRITE_ANYWHERE)
        (tmp_path / "workspace/notes.txt").write_text("remember")
        path = tmp_path / f"{how}.yaml"
        with record_session(runtime, path, name="session"):
            for call in calls:
                run(runtime, call, how)
        (tmp_path / "workspace/log.txt").unlink()
        cassettes[how] = load(path)

    assert len(cassettes["aexecute"].interactions) == len(calls)
    assert cassettes["aexecute"].interactions == cassettes["execute"].interactions
    assert cassettes["aexecute"].workspace.files == {"notes.txt": b"remember"}
    assert cassettes["aexecute"].final_files == cassettes["execute"].final_files


# -- process isolation -----------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_process_isolation_runs_an_async_handler_in_the_child(toolguard_runtime, how):
    async def where(ctx: Any, **arguments: Any) -> Any:
        await asyncio.sleep(0)
        return {"pid": os.getpid()}

    runtime = toolguard_runtime(ToolRegistry([spec("where", where)]), isolation="process")

    result = run(runtime, ToolCall("c1", "where", {}), how)

    assert result.code is ErrorCode.OK
    assert result.data["pid"] != os.getpid()


@pytest.mark.parametrize("how", HOW)
def test_process_isolation_kills_an_async_handler_at_the_deadline(toolguard_runtime, how):
    async def sleeps(ctx: Any, **arguments: Any) -> Any:
        await asyncio.sleep(60)
        return {}

    tool = spec("sleeps", sleeps, timeout_seconds=0.2)
    runtime = toolguard_runtime(ToolRegistry([tool]), isolation="process")

    result = run(runtime, ToolCall("c1", "sleeps", {}), how)

    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert runtime.close(join_timeout=5) == []


# -- the spec knows ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "is_async"),
    [
        (echo, True),
        (functools.partial(prefixed_echo, prefix=""), True),
        (AsyncCallable(), True),
        (returns_a_coroutine, False),
        (sync_append, False),
    ],
    ids=["async_def", "partial", "async_call", "sync_returning_coroutine", "sync"],
)
def test_a_tool_spec_knows_whether_its_handler_is_a_coroutine_function(handler, is_async):
    assert spec("t", handler).is_async is is_async
