"""A frozen clock for every thread: the time a cassette was recorded at.

The backend is freezegun, with ``threading`` and ``queue`` taken off its
ignore list so that handlers on worker threads see the same frozen clock
(freezegun's default gives them the real one); or, when the optional
time-machine is installed (``pytest-toolguard[fast]``), time-machine, which
patches the clock at the C level for all threads and starts in ~40 us where
freezegun takes ~5 ms (it scans every loaded module: the benchmark measured
it as two thirds of a cassette's set-up). Deadlines stay on the real
monotonic clock: ``Lock.acquire`` with a timeout is C code neither patches.

Start the clock before the fake filesystem (``world.FakeWorld`` does): pyfakefs
unloads modules first imported while it is active, so the clock's backend
must be imported outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

from freezegun import freeze_time

DEFAULT_TIME = "2026-01-01T00:00:00+00:00"
"""The frozen time of a case that gives none."""

_THREAD_MODULES = ("threading", "queue")

_LOOP_MODULES = ("asyncio", "anyio", "selectors")
"""Event loops read ``time.monotonic`` for their timers: frozen, an
``asyncio.sleep`` or an HTTP client's timeout would never end. Their
clock stays real (time-machine leaves ``monotonic`` alone anyway)."""


ClockBackend = Literal["auto", "freezegun", "time-machine"]
"""Which library freezes the clock (``auto``: time-machine when installed)."""


def _time_machine() -> Any:
    try:
        import time_machine
    except ImportError:
        return None
    return time_machine


@contextmanager
def frozen_clock(moment: str | None, backend: ClockBackend = "auto") -> Iterator[None]:
    """Freeze wall-clock time at ``moment`` for every thread. ``auto`` uses
    time-machine when it is installed, else freezegun."""
    time_machine = _time_machine() if backend != "freezegun" else None
    if backend == "time-machine" and time_machine is None:
        raise RuntimeError("the time-machine clock backend needs: pip install time-machine")
    if time_machine is not None:
        destination = datetime.fromisoformat(moment or DEFAULT_TIME)
        with time_machine.travel(destination, tick=False):
            yield
        return
    freezer: Any = freeze_time(moment or DEFAULT_TIME)
    # freezegun captures its ignore list when the freezer is made; without
    # these two, code called from a worker thread's run() sees real time.
    kept = tuple(name for name in freezer.ignore if name not in _THREAD_MODULES)
    freezer.ignore = kept + tuple(name for name in _LOOP_MODULES if name not in kept)
    freezer.start()
    try:
        yield
    finally:
        freezer.stop()


@contextmanager
def stepping_clock(moment: str | None) -> Iterator[Callable[[float], None]]:
    """A frozen clock that moves only when told: yields ``advance(seconds)``,
    which moves ``time.time``, ``time.monotonic``, ``time.perf_counter``
    and ``datetime.now`` forward together, for every thread but an event
    loop's own timers (as ``frozen_clock``). Always freezegun, nested on
    whatever clock is frozen already: time-machine leaves ``monotonic``,
    the clock a tool's time budget reads, alone. Starting it scans the
    loaded modules (a few ms)."""
    freezer: Any = freeze_time(moment or DEFAULT_TIME)
    kept = tuple(name for name in freezer.ignore if name not in _THREAD_MODULES)
    freezer.ignore = kept + tuple(name for name in _LOOP_MODULES if name not in kept)
    factory = freezer.start()
    try:
        yield lambda seconds: factory.tick(seconds)
    finally:
        freezer.stop()
