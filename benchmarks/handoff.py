"""What a thread handoff costs: ``ThreadIsolation.run`` of a handler that
does nothing, against the least a handoff to a pre-started worker can cost.

A deadline in thread mode (the default) needs the handler on another thread
than the caller, who waits for it with a timeout. Each call then wakes the
worker and is woken by it; on a machine whose other CPU sleeps, each wake-up
is that CPU's (or the VM's) way out of idle, and that dominates. The
references here are the bare mechanisms, with no pool, no orphan tracking
and no deadline bookkeeping: a worker blocked on a lock its caller releases
(the caller blocked on a second one), and a worker reading a
``queue.SimpleQueue`` that hands back a new lock per call. ``run.py``
prints them beside the runtime's, all timed in alternating blocks.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from timing import Samples, measure

from pytest_toolguard.isolation import ThreadIsolation


def _nothing() -> None:
    return None


class TwoLockWorker:
    """A pre-started worker waiting on a lock: the least a handoff costs."""

    def __init__(self) -> None:
        self._start = threading.Lock()
        self._start.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._fn: Callable[[], object] | None = None
        self._value: object = None
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._start.acquire()
            fn = self._fn
            if fn is None:
                return
            self._value = fn()
            self._done.release()

    def run(self, fn: Callable[[], object], timeout: float) -> object:
        self._fn = fn
        self._start.release()
        if not self._done.acquire(timeout=timeout):
            raise TimeoutError
        return self._value

    def close(self) -> None:
        self._fn = None
        self._start.release()
        self._thread.join()


class QueueWorker:
    """A pre-started worker reading a ``SimpleQueue``; a new lock per call."""

    Job = tuple[Callable[[], object], threading.Lock, list[object]]

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[QueueWorker.Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, done, box = job
            box.append(fn())
            done.release()

    def run(self, fn: Callable[[], object], timeout: float) -> object:
        done, box = threading.Lock(), []
        done.acquire()
        self._jobs.put((fn, done, box))
        if not done.acquire(timeout=timeout):
            raise TimeoutError
        return box[0]

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()


HANDOFFS = (
    ("inline", "none: the no-op called directly"),
    ("isolation", "ThreadIsolation.run (thread mode's handoff)"),
    ("two_locks", "bare worker waiting on a lock (two locks)"),
    ("queue", "bare worker on a SimpleQueue, a lock per call"),
)
"""The handoffs measured, by key, with their labels."""


def handoff_samples(*, warmup: int, blocks: int, per_block: int) -> dict[str, Samples]:
    """Each handoff of ``HANDOFFS`` timed, in alternating blocks."""
    isolation = ThreadIsolation()
    two_locks = TwoLockWorker()
    queued = QueueWorker()
    try:
        return measure(
            {
                "inline": _nothing,
                "isolation": lambda: isolation.run(_nothing, 10.0, "nothing"),
                "two_locks": lambda: two_locks.run(_nothing, 10.0),
                "queue": lambda: queued.run(_nothing, 10.0),
            },
            warmup=warmup,
            blocks=blocks,
            per_block=per_block,
        )
    finally:
        isolation.close()
        two_locks.close()
        queued.close()
