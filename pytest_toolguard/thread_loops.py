"""Each thread's kept event loop, for ``isolation.CoroutineRunner``.

A worker thread (or a process child) that runs coroutines keeps one event
loop between calls: making and closing one per call, as ``asyncio.run``
does, costs about ten times running on an open one. The loop is kept only
while a call leaves nothing on it: ``holds_more`` says when one did, and
``CoroutineRunner`` then closes it as ``asyncio.run`` would.

The loop's default executor (what ``asyncio.to_thread`` and
``run_in_executor(None, ...)`` use) is a ``CountingExecutor``: asyncio's
own thread pool, counting the work it was given that has not finished. A
call whose ``to_thread`` work all finished leaves the pool's threads
waiting for the next call's work, as they wait on any loop kept open;
work still running (a ``to_thread`` whose awaiting task was cancelled)
has the loop closed, its threads joined within the call.

Imported only once a coroutine runs (it needs ``asyncio`` and
``concurrent.futures``, about 20 ms to import).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_thread_loops = threading.local()
"""Each thread's event loop for ``CoroutineRunner`` (``loop``), made on first
use, with the process it was made in (``pid``)."""


class CountingExecutor(ThreadPoolExecutor):
    """asyncio's default executor (``ThreadPoolExecutor(thread_name_prefix=
    "asyncio")``) counting the work given to it that has not finished
    (``unfinished``). The count drops before the work's future is set, so
    the coroutine that awaited the work already sees it finished; work
    never started (its future cancelled first) keeps the count above zero,
    which only ever closes a loop that could have been kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()
        self.unfinished = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._count_lock:
            self.unfinished += 1

        def counted() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                with self._count_lock:
                    self.unfinished -= 1

        try:
            return super().submit(counted)
        except BaseException:  # refused (shut down): nothing will run
            with self._count_lock:
                self.unfinished -= 1
            raise


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop, made (with a ``CountingExecutor``) on first use,
    after the last one was closed, and in a forked child."""
    loop: asyncio.AbstractEventLoop | None = getattr(_thread_loops, "loop", None)
    # A forked child has its parent's loop object, sharing its selector's
    # descriptors: it gets one of its own (the parent's is left alone).
    if loop is None or loop.is_closed() or getattr(_thread_loops, "pid", None) != os.getpid():
        loop = _thread_loops.loop = asyncio.new_event_loop()
        loop.set_default_executor(CountingExecutor(thread_name_prefix="asyncio"))
        _thread_loops.pid = os.getpid()
    return loop


def holds_more(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` still holds work of the call that ran on it: a
    callback or timer not cancelled, an async generator, work its default
    executor has not finished (or a default executor it did not make). A
    loop of another kind than asyncio's own is judged to."""
    try:
        ready, scheduled = loop._ready, loop._scheduled  # type: ignore[attr-defined]
        generators, executor = loop._asyncgens, loop._default_executor  # type: ignore[attr-defined]
    except AttributeError:
        return True
    return (
        any(not handle.cancelled() for handle in (*ready, *scheduled))
        or bool(generators)
        or (
            executor is not None
            and not (isinstance(executor, CountingExecutor) and executor.unfinished == 0)
        )
    )


def cancel_left_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what a call left on ``loop`` and let it end, as ``asyncio.run``
    does before closing its loop: nothing of one call runs in the next."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def close_thread_loop() -> None:
    """Close this thread's loop, if it made one, as ``asyncio.run`` closes
    its own (its default executor's threads joined)."""
    loop = getattr(_thread_loops, "loop", None)
    if loop is None or loop.is_closed():
        return
    try:
        cancel_left_tasks(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        _thread_loops.loop = None
        loop.close()
