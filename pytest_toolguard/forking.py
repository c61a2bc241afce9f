"""Forks that never copy a lock held inside the audit store's C library.

``os.fork`` copies the whole memory of a process but only the thread that
forks. A mutex another thread held at that moment (SQLite's, inside a
commit) stays held in the child forever, and a child that needs it (closing
an inherited connection, the garbage collector freeing one, a handler using
SQLite) hangs until it is killed. So the fork waits for a moment when no
thread is inside such code: the audit store runs every operation that enters
SQLite ``inside()`` this module's gate, and process isolation forks only
``while_closed()``: the gate closes to new entries, waits for the threads
inside to leave, forks, and opens again.

The bounds of each wait: a fork waits at most its ``timeout`` for the
threads inside to leave (then gives up without forking). A fork waiting
keeps entries that come later out, so a stream of writers never starves
it; an entry waits only for the forks that were already waiting when it
came, each at most until it forked or its own timeout passed, never for a
fork that came after it (a stream of forks cannot starve the writers
either).

What the garbage collector would otherwise close outside the gate (an audit
store its owner never closed) is handed to ``close_later``: the next thread
that enters closes it, inside.

This covers the locks of this package's SQLite store. A lock held by other
code of the process at the fork (a thread of your own inside another C
library) is not seen here: see ``pytest_toolguard.isolation``'s caveats.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


class ForkGate:
    """Many threads inside at once, or one fork alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._inside = 0
        self._tickets = 0
        """Forks that ever started waiting: the next one's number."""
        self._forking: set[int] = set()
        """The numbers of the forks waiting (or forking) now."""
        self._depth = threading.local()
        self._later: list[Callable[[], object]] = []
        self._inherited: list[Callable[[], object]] = []
        """In a child: what the parent was to close, kept unclosed (closing it
        may need a lock the fork copied held)."""
        self._entry = _Inside(self)

    def inside(self) -> _Inside:
        """A context manager: run the block with no fork under way (it waits
        for the forks already waiting). Reentrant: a thread already inside
        passes straight in. (A class, not a generator: this is on every
        audit write's path.)"""
        return self._entry

    def close_later(self, closes: Iterable[Callable[[], object]]) -> None:
        """Have the next thread that enters call each of ``closes`` (say,
        ``connection.close``) inside the gate. For a garbage collector's
        finalizer, which may run in any thread at any moment, a fork's
        included: this takes no lock and never blocks."""
        self._later.extend(closes)

    def _enter(self) -> None:
        local = self._depth
        depth: int = getattr(local, "value", 0)
        if depth:
            local.value = depth + 1
            return
        # The depth changes with the count, under the lock and after the wait:
        # an asynchronous exception (Ctrl-C) during the wait changes neither.
        entered = False
        try:
            with self._lock:
                came = self._tickets
                while self._forking and min(self._forking) < came:
                    self._changed.wait()
                self._inside += 1
                local.value = 1
                entered = True
            if self._later:
                self._close_later()
        except BaseException:
            if entered:  # raised as the lock was let go: the entry is undone
                self._leave()
            raise

    def _close_later(self) -> None:
        later = self._later
        while later:
            try:
                close = later.pop()
            except IndexError:  # another thread took the last one
                return
            try:
                close()
            except Exception:  # noqa: BLE001,S112 - closing what nobody uses any more
                continue

    def _leave(self) -> None:
        local = self._depth
        depth: int = local.value
        if depth > 1:
            local.value = depth - 1
            return
        # Count and depth change together under the lock; an asynchronous
        # exception while the lock is taken does not skip the leaving: it is
        # raised once the thread is out.
        left = False
        interrupted: BaseException | None = None
        while not left:
            try:
                with self._lock:
                    self._inside -= 1
                    local.value = 0
                    left = True
                    if self._forking and not self._inside:
                        self._changed.notify_all()
            except BaseException as exc:  # noqa: BLE001 - raised below
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def while_closed(self, fork: Callable[[], T], timeout: float) -> T | None:
        """``fork()``'s value, called once no thread is inside; None, without
        calling it, when threads were still inside after ``timeout`` s. In
        the child, the gate is new and open (``after_in_child``)."""
        deadline = time.monotonic() + timeout
        parent = os.getpid()
        with self._lock:
            ticket = self._tickets
            self._tickets += 1
            self._forking.add(ticket)
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
                    self._forking.discard(ticket)
                    self._changed.notify_all()  # the entries that waited for this fork

    def threads_inside(self) -> int:
        """How many threads are inside now (for tests and diagnostics)."""
        with self._lock:
            return self._inside

    def _reset_in_child(self) -> None:
        # The child has one thread, and it was not inside.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._inside = 0
        self._tickets = 0
        self._forking = set()
        self._depth = threading.local()
        self._inherited.extend(self._later)
        self._later = []


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
