"""The threads a handler's run leaves working (``HandlerProbe``'s
``leftover_threads``): a thread pool's worker counts while it runs the
handler's task, not while it waits for the next one; the runtime's own
workers never count (the runtime reports its late handlers itself)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pytest_toolguard.harness.probes import HandlerProbe
from pytest_toolguard.isolation import ThreadIsolation

BOUND = 30.0
"""Seconds an event is waited for at most (a generous bound)."""


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    """A pool of the handler's own, shut down after the test."""
    executor = ThreadPoolExecutor(max_workers=1)
    yield executor
    executor.shutdown(wait=True)


def leftovers_of(handler: Callable[..., Any]) -> list[str]:
    """``leftover_threads()`` of one run of ``handler`` through a probe."""
    probe = HandlerProbe(handler)
    runs = probe.start_call()
    probe(None)
    return runs.leftover_threads()


def test_a_pool_worker_still_running_the_handlers_task_is_left_over(
    pool: ThreadPoolExecutor,
) -> None:
    running, release = threading.Event(), threading.Event()

    def task() -> None:
        running.set()
        release.wait(BOUND)

    def handler(ctx: Any) -> Any:
        pool.submit(task)  # fire and forget: still running once the handler answered
        assert running.wait(BOUND)
        return {}

    try:
        left = leftovers_of(handler)
    finally:
        release.set()
    assert len(left) == 1 and left[0].startswith("ThreadPoolExecutor-")


def test_a_pool_worker_waiting_for_its_next_task_is_not_left_over(
    pool: ThreadPoolExecutor,
) -> None:
    def handler(ctx: Any) -> Any:
        return {"answer": pool.submit(lambda: 42).result(BOUND)}

    assert leftovers_of(handler) == []


def test_a_thread_left_waiting_is_left_over() -> None:
    release = threading.Event()

    def handler(ctx: Any) -> Any:
        threading.Thread(target=release.wait, args=(BOUND,), name="forgotten").start()
        return {}

    try:
        assert leftovers_of(handler) == ["forgotten"]
    finally:
        release.set()


def test_the_runtimes_own_idle_worker_is_not_left_over() -> None:
    isolation = ThreadIsolation()

    def handler(ctx: Any) -> Any:  # a nested call's worker, idle once it answered
        return {"answer": isolation.run(lambda: 42, BOUND, "nested")}

    try:
        assert leftovers_of(handler) == []
    finally:
        assert isolation.close() == []
