"""The world a cassette replays in: a fake filesystem and a frozen clock.

The filesystem is pyfakefs, with the recorded workspace rebuilt at its
recorded root (and any recorded files outside it, so an escape would meet
something). The clock is frozen at the recorded time for every thread. The
backend is freezegun, with ``threading`` and ``queue`` taken off its ignore
list so that handlers on worker threads see the same frozen clock
(freezegun's default gives them the real one); or, when the optional
time-machine is installed (``pytest-toolguard[fast]``), time-machine, which
patches the clock at the C level for all threads and starts in ~40 us where
freezegun takes ~5 ms (it scans every loaded module: the benchmark measured
it as two thirds of a cassette's set-up). Deadlines stay on the real
monotonic clock: ``Lock.acquire`` with a timeout is C code neither patches.

sqlite3 never sees pyfakefs: the audit store used in replay is in memory.
Handlers run in thread isolation only; a forked process would not share the
fake filesystem.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

from freezegun import freeze_time
from pyfakefs.fake_filesystem_unittest import Patcher

from .cassette import Cassette

DEFAULT_TIME = "2026-01-01T00:00:00+00:00"
"""The frozen time of a case that gives none."""

_THREAD_MODULES = ("threading", "queue")


ClockBackend = Literal["auto", "freezegun", "time-machine"]


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
    freezer.ignore = tuple(name for name in freezer.ignore if name not in _THREAD_MODULES)
    freezer.start()
    try:
        yield
    finally:
        freezer.stop()


@contextmanager
def fake_filesystem(cassette: Cassette) -> Iterator[Any]:
    """A pyfakefs filesystem holding the cassette's workspace as it was
    before the first call; yields the fake filesystem object."""
    with Patcher() as patcher:
        fs = patcher.fs
        assert fs is not None  # set by Patcher.__enter__
        state = cassette.workspace
        fs.create_dir(state.root)
        for directory in state.directories:
            fs.create_dir(posixpath.join(state.root, directory))
        for path, content in state.files.items():
            fs.create_file(posixpath.join(state.root, path), contents=content)
        for path, content in state.outside_files.items():
            fs.create_file(path, contents=content)
        for link, target in state.symlinks.items():
            fs.create_symlink(posixpath.join(state.root, link), target)
        yield fs


def read_tree(root: str) -> dict[str, bytes]:
    """Every regular file beneath ``root`` (never following links), by
    POSIX path relative to it. Works in the fake filesystem and the real one."""
    files: dict[str, bytes] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                files[os.path.relpath(path, root).replace(os.sep, "/")] = handle.read()
    return files


def read_files(paths: Mapping[str, bytes]) -> dict[str, bytes | None]:
    """The current bytes of each absolute path (None when missing)."""
    current: dict[str, bytes | None] = {}
    for path in paths:
        try:
            with open(path, "rb") as handle:
                current[path] = handle.read()
        except OSError:
            current[path] = None
    return current
