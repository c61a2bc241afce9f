"""A timed-out call is cancelled: ``ctx.cancelled`` is set, the workspace
refuses the late handler's writes, and ``wait_for_file`` stops at once. In
each mode that leaves a late handler running: thread mode (it runs on) and
inline mode (the handler swallows ``DeadlinePassed`` and goes on)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE

from pytest_toolguard import CallState, ErrorCode, ToolCall, ToolRegistry, ToolSpec
from pytest_toolguard.sandbox import CallCancelled
from pytest_toolguard.tools import builtin_registry

LATE_MODES = ["inline", "thread"]
"""The modes in which a handler can still act after its deadline."""


def _late(released: threading.Event, act: Callable[[], Any]) -> Any:
    """Wait until released (swallowing the inline deadline, as a careless
    handler would), then ``act()``: again after each repetition of the alarm
    that lands outside the workspace's operation."""
    with contextlib.suppress(BaseException):  # what the test is about
        released.wait(10)
    while True:
        try:
            return act()
        except CallCancelled:
            raise
        except BaseException:  # noqa: BLE001,S112 - the alarm's repetition, swallowed again
            continue


@pytest.mark.parametrize("mode", LATE_MODES)
def test_a_late_write_through_the_workspace_is_refused(toolguard_runtime, mode) -> None:
    released = threading.Event()
    outcome: list[BaseException | None] = []
    seen_cancelled: list[bool] = []

    def write() -> None:
        if outcome:  # already done: an alarm's repetition landed after it
            return
        if not seen_cancelled:
            seen_cancelled.append(cancelled.is_set())
        try:
            workspace.write_text("late.txt", "written after the deadline")
        except CallCancelled as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    def slow_writer(ctx: Any, **arguments: Any) -> Any:
        nonlocal cancelled, workspace
        cancelled, workspace = ctx.cancelled, ctx.workspace
        _late(released, write)
        return {}

    cancelled: Any = None
    workspace: Any = None
    spec = ToolSpec("slow_writer", "writes late", {"type": "object"}, slow_writer)
    runtime = toolguard_runtime(
        ToolRegistry([spec]), WRITE_ANYWHERE, timeouts={"slow_writer": 0.01}, isolation=mode
    )
    result = runtime.execute(ToolCall("c1", "slow_writer", {}))
    released.set()
    assert (result.code, result.state) == (ErrorCode.TIMEOUT, CallState.TIMED_OUT)
    assert runtime.close(join_timeout=5) == []
    assert seen_cancelled == [True]
    assert len(outcome) == 1 and isinstance(outcome[0], CallCancelled)
    assert outcome[0].code is ErrorCode.TIMEOUT
    assert not os.path.exists(os.path.join(runtime.workspace.root, "late.txt"))


def test_wait_for_file_answers_once_the_file_appears(toolguard_runtime) -> None:
    runtime = toolguard_runtime(builtin_registry())
    root = runtime.workspace.root

    def build() -> None:  # whole at once: the tool may look while it is written
        Path(root, "done.tmp").write_text("built")
        os.replace(Path(root, "done.tmp"), Path(root, "done.txt"))

    write = threading.Timer(0.1, build)
    write.start()
    result = runtime.execute(
        ToolCall("c1", "wait_for_file", {"path": "done.txt", "wait_seconds": 10})
    )
    write.join()
    assert result.code is ErrorCode.OK
    assert result.data == {"path": "done.txt", "bytes": 5}


def test_wait_for_file_gives_up_after_its_wait(toolguard_runtime) -> None:
    runtime = toolguard_runtime(builtin_registry())
    result = runtime.execute(
        ToolCall("c1", "wait_for_file", {"path": "never.txt", "wait_seconds": 0.1})
    )
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert result.message.startswith("handler raised TimeoutError: ")
    assert result.message.endswith("no file appeared in 0.1 s: 'never.txt'")


@pytest.mark.parametrize("mode", LATE_MODES)
def test_wait_for_file_stops_when_the_deadline_passes(toolguard_runtime, mode) -> None:
    runtime = toolguard_runtime(
        builtin_registry(), timeouts={"wait_for_file": 0.05}, isolation=mode
    )
    result = runtime.execute(
        ToolCall("c1", "wait_for_file", {"path": "never.txt", "wait_seconds": 300})
    )
    assert (result.code, result.state, result.retryable) == (
        ErrorCode.TIMEOUT,
        CallState.TIMED_OUT,
        True,
    )
    # The handler saw ctx.cancelled within one poll: nothing is left running.
    assert runtime.close(join_timeout=2) == []


@pytest.mark.parametrize("mode", LATE_MODES)
def test_a_late_write_makes_no_parent_directory(toolguard_runtime, mode) -> None:
    released = threading.Event()

    def late_deep_writer(ctx: Any, **arguments: Any) -> Any:
        _late(released, lambda: ctx.workspace.write_text("new/deep/late.txt", "late"))
        return {}

    spec = ToolSpec("late_deep_writer", "writes late", {"type": "object"}, late_deep_writer)
    runtime = toolguard_runtime(
        ToolRegistry([spec]),
        WRITE_ANYWHERE,
        timeouts={"late_deep_writer": 0.01},
        isolation=mode,
    )
    result = runtime.execute(ToolCall("c1", "late_deep_writer", {}))
    released.set()
    assert result.code is ErrorCode.TIMEOUT
    assert runtime.close(join_timeout=5) == []
    assert not os.path.exists(os.path.join(runtime.workspace.root, "new"))
