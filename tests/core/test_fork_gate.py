"""The fork gate (``pytest_toolguard.forking``): stays balanced when a thread
waiting at it is interrupted, keeps the bound it states on an entry's wait,
and an audit store never closed by its owner closes its connections inside
it, not while a fork holds it closed."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CONDITION_BOUND, wait_for

from pytest_toolguard import SQLiteAuditStore
from pytest_toolguard.forking import FORK_GATE, ForkGate


def waiting(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked in a ``threading.Condition.wait``."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wait" and code.co_filename == threading.__file__:
            return True
        frame = frame.f_back
    return False


def started(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def interrupt(thread: threading.Thread) -> None:
    """Raise ``KeyboardInterrupt`` in ``thread`` as soon as it runs Python
    code again (an asynchronous exception, as a signal handler's would be)."""
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    ident, exception = ctypes.c_ulong(thread.ident or 0), ctypes.py_object(KeyboardInterrupt)
    assert set_async_exc(ident, exception) == 1


class Holder:
    """A thread inside ``gate`` until ``release()``."""

    def __init__(self, gate: ForkGate) -> None:
        self._release = threading.Event()

        def hold() -> None:
            with gate.inside():
                self._release.wait(CONDITION_BOUND)

        self.thread = started(hold)
        wait_for(lambda: gate.threads_inside() == 1)

    def release(self) -> None:
        self._release.set()
        self.thread.join(CONDITION_BOUND)


def test_an_entry_interrupted_while_a_fork_waits_leaves_the_gate_balanced() -> None:
    gate = ForkGate()
    holder = Holder(gate)
    forker = started(lambda: gate.while_closed(lambda: "forked", timeout=CONDITION_BOUND))
    wait_for(lambda: waiting(forker))
    outcomes: list[str] = []
    counted: list[int] = []

    def entrant() -> None:
        try:
            with gate.inside():
                outcomes.append("entered")
        except KeyboardInterrupt:
            outcomes.append("interrupted")
        with gate.inside():  # Ctrl-C handled, the thread goes on using the store
            counted.append(gate.threads_inside())

    thread = started(entrant)
    wait_for(lambda: waiting(thread))
    interrupt(thread)  # raised once the fork is done and the wait ends
    holder.release()
    forker.join(CONDITION_BOUND)
    thread.join(CONDITION_BOUND)
    assert outcomes == ["interrupted"]
    assert counted == [1]  # counted inside: no fork can copy its SQLite locks
    assert gate.threads_inside() == 0


def test_an_entry_waits_only_for_the_forks_already_waiting_when_it_came() -> None:
    gate = ForkGate()
    holder = Holder(gate)
    first = started(lambda: gate.while_closed(lambda: "forked", timeout=1.0))
    wait_for(lambda: waiting(first))
    entered = threading.Event()

    def entrant() -> None:
        with gate.inside():
            entered.set()

    thread = started(entrant)
    wait_for(lambda: waiting(thread))
    later = started(lambda: gate.while_closed(lambda: "forked", timeout=CONDITION_BOUND))
    wait_for(lambda: waiting(later))
    # The first fork gives up (the holder stays inside); the later one still
    # waits, and must not keep the entry out.
    first.join(CONDITION_BOUND)
    assert entered.wait(10)
    holder.release()
    later.join(CONDITION_BOUND)
    thread.join(CONDITION_BOUND)
    assert gate.threads_inside() == 0


def descriptors_of(path: Path) -> list[str]:
    """The open descriptors of this process naming ``path`` (or its -wal,
    -shm files)."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
    return [name for name in names if name.startswith(str(path))]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists descriptors through /proc")
def test_a_store_never_closed_closes_its_connections_inside_the_gate(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    stores = [SQLiteAuditStore(path)]
    stores[0].count()  # this thread's connection, open
    assert descriptors_of(path)

    def at_the_fork() -> list[str]:
        # While a fork holds the gate closed, the store's last reference goes:
        # SQLite must not be entered (its connections closed) now.
        stores.clear()
        gc.collect()
        return descriptors_of(path)

    during_the_fork = FORK_GATE.while_closed(at_the_fork, timeout=CONDITION_BOUND)
    with FORK_GATE.inside():  # the next thread inside closes them
        pass
    assert during_the_fork
    assert descriptors_of(path) == []
