"""Forks that never copy a lock held inside the audit store's C library.

``os.fork`` copies the whole memory of a process but only the thread that
forks. A mutex another thread held at that moment (SQLite's, inside a
commit) stays held in the child forever, and a child that needs it (closing
an inherited connection, the garbage collector freeing one, a handler using
SQLite) hangs until it is killed. So the fork waits for a moment when no
thread is inside such code: the audit store runs every operation that enters
SQLite ``inside()`` this module's gate, and process isolation forks only
``while_closed()``: the gate closes to new entries, waits for the threads
inside to leave, forks, and opens again. A fork waiting keeps new entries
out, so a stream of writers never starves it; entries wait at most as long
as one fork takes.

This covers the locks of this package's SQLite store. A lock held by other
code of the process at the fork (a thread of your own inside another C
library) is not seen here: see ``pytest_toolguard.isolation``'s caveats.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["ForkGate", "FORK_GATE"]

T = TypeVar("T")


class ForkGate:
    """Many threads inside at once, or one fork alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._inside = 0
        self._forks_waiting = 0
        self._depth = threading.local()
        self._entry = _Inside(self)

    def inside(self) -> _Inside:
        """A context manager: run the block with no fork under way (it waits
        while one is). Reentrant: a thread already inside passes straight
        in. (A class, not a generator: this is on every audit write's
        path.)"""
        return self._entry

    def _enter(self) -> None:
        local = self._depth
        depth: int = getattr(local, "value", 0)
        local.value = depth + 1
        if depth:
            return
        with self._lock:
            while self._forks_waiting:
                self._changed.wait()
            self._inside += 1

    def _leave(self) -> None:
        local = self._depth
        local.value -= 1
        if local.value:
            return
        with self._lock:
            self._inside -= 1
            if self._forks_waiting and not self._inside:
                self._changed.notify_all()

    def while_closed(self, fork: Callable[[], T], timeout: float) -> T | None:
        """``fork()``'s value, called once no thread is inside; None, without
        calling it, when threads were still inside after ``timeout`` s. In
        the child, the gate is new and open (``after_in_child``)."""
        deadline = time.monotonic() + timeout
        parent = os.getpid()
        with self._lock:
            self._forks_waiting += 1
            forked = False
            try:
                while self._inside:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._changed.wait(remaining)
                value = fork()
                forked = True
                return value
            finally:
                if not forked or os.getpid() == parent:
                    self._forks_waiting -= 1
                    if not self._forks_waiting:
                        self._changed.notify_all()

    def threads_inside(self) -> int:
        """How many threads are inside now (for tests and diagnostics)."""
        with self._lock:
            return self._inside

    def _reset_in_child(self) -> None:
        # The child has one thread, and it was not inside.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._inside = 0
        self._forks_waiting = 0
        self._depth = threading.local()


class _Inside:
    """``ForkGate.inside()``'s context manager."""

    __slots__ = ("_gate",)

    def __init__(self, gate: ForkGate) -> None:
        self._gate = gate

    def __enter__(self) -> None:
        self._gate._enter()

    def __exit__(self, *exc_info: object) -> None:
        self._gate._leave()


FORK_GATE = ForkGate()
"""The process's one gate: the audit store enters it, process isolation
forks through it."""


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=FORK_GATE._reset_in_child)
