"""Per-cassette cost of replay, against an empty pytest test.

The set-up is what ``replay()`` does once per cassette whatever the
cassette holds: enter the fake filesystem (pyfakefs) with the recorded
files, start the frozen clock (time-machine or freezegun), make the in-memory audit store
and the runtime, then, after the last call, close them, compare the files
and the audit rows and leave the world. It is timed as ``replay()`` of the
one-call case with its call taken out, in this process, after the pytest
runs below have loaded pytest and its plugins (freezegun and pyfakefs scan
every loaded module when they start, so the count matters; it is printed).
Each part is also timed alone. The fake filesystem is the process's shared
``FakeFilesystems``: its pyfakefs patcher is started once, then resumed with an
emptied filesystem per cassette and paused after it; a reference times the
way it was before, a new ``Patcher`` per cassette.

The empty test is timed in pytest, in this process (``pytest.main``), the
way a user runs it: a generated directory with a ``pytest.ini``, ``-q``,
``-p no:cacheprovider``, ``--import-mode=importlib``, output thrown away. A
run has a start-up (configuration, plugins, collecting the directory) that
does not grow with the items, so the cost of one item is the slope between
a run with ``low`` items and one with ``high``:
``(T(high) - T(low)) / (high - low)``. Three kinds of item:

* ``empty``: ``def test_N(): pass``, all in one module;
* ``empty_files``: one such test per module (a cassette is one file, so
  this one pays the same per-file collection);
* ``replay``: one ``--toolguard-replay`` item per copy of the one-call case
  (collect, load and validate, set-up, the call, the checks, teardown).

Generated modules are removed from ``sys.modules`` after each run, so the
module count (and with it freezegun's start) does not grow run after run.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from pyfakefs.fake_filesystem_unittest import Patcher
from replay_workload import ONE_CALL_CASE
from variants import BenchmarkSetupError

from pytest_toolguard import Redactor, SQLiteAuditStore, ToolRuntime
from pytest_toolguard.harness.clock import DEFAULT_TIME, frozen_clock
from pytest_toolguard.harness.fake_filesystem import process_fake_filesystems
from pytest_toolguard.harness.files import read_tree
from pytest_toolguard.replay import Cassette, loads, replay
from pytest_toolguard.tools import builtin_registry

CLOCK: tuple[Callable[[], int]] = (time.perf_counter_ns,)

KINDS = ("empty", "empty_files", "replay")


@dataclass(frozen=True, slots=True)
class Sizes:
    """Items in the low and the high run of each kind."""

    empty: tuple[int, int] = (100, 600)
    empty_files: tuple[int, int] = (20, 120)
    replay: tuple[int, int] = (5, 45)

    def of(self, kind: str) -> tuple[int, int]:
        sizes: tuple[int, int] = getattr(self, kind)
        return sizes


@dataclass
class PytestRuns:
    """Generates item directories and runs pytest on them."""

    directory: Path
    sizes: Sizes = field(default_factory=Sizes)
    _count: int = 0

    def per_item_ms(self, kind: str) -> float:
        """One slope: ms per item of ``kind``."""
        low, high = self.sizes.of(kind)
        t_low = self.run(kind, low)
        t_high = self.run(kind, high)
        return (t_high - t_low) / (high - low) * 1000

    def run(self, kind: str, items: int) -> float:
        """Seconds of one ``pytest.main`` over ``items`` generated items."""
        self._count += 1
        root = self.directory / f"{kind}-{items}-{self._count}"
        tag = f"{self._count}"
        _generate(root, kind, items, tag)
        args = [
            str(root),
            "-c",
            str(root / "pytest.ini"),
            "--rootdir",
            str(root),
            "-q",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
        ]
        if kind == "replay":
            args.append("--toolguard-replay")
        before = set(sys.modules)
        out = io.StringIO()
        clock = CLOCK[0]
        start = clock()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            status = pytest.main(args)
        elapsed = (clock() - start) / 1e9
        for name in set(sys.modules) - before:
            module = sys.modules.get(name)
            if str(getattr(module, "__file__", "") or "").startswith(str(self.directory)):
                del sys.modules[name]
        expected = f"{items} passed"
        if status != pytest.ExitCode.OK or expected not in out.getvalue():
            tail = "\n".join(out.getvalue().splitlines()[-15:])
            raise BenchmarkSetupError(f"pytest on {items} {kind} items: exit {status}\n{tail}")
        return elapsed


def _generate(root: Path, kind: str, items: int, tag: str) -> None:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    if kind == "empty":
        body = "".join(f"def test_{index}():\n    pass\n\n\n" for index in range(items))
        (root / f"test_empty_{tag}.py").write_text(body, encoding="utf-8")
    elif kind == "empty_files":
        for index in range(items):
            (root / f"test_empty_{tag}_{index:04d}.py").write_text(
                "def test_empty():\n    pass\n", encoding="utf-8"
            )
    elif kind == "replay":
        (root / "cases").mkdir()
        for index in range(items):
            (root / "cases" / f"case_{index:04d}.yaml").write_text(ONE_CALL_CASE, encoding="utf-8")
    else:
        raise ValueError(kind)


# -- the set-up, in this process ------------------------------------------------


STEPS = (
    "fake filesystem (shared pyfakefs, the case's file): enter + exit",
    "frozen clock (time-machine if installed, else freezegun): start + stop",
    "audit store + runtime: make + close (in the world)",
    "read the workspace back (read_tree, in the world)",
)


def setup_steps(case: Cassette) -> list[Callable[[], object]]:
    """The parts of the set-up, each alone, in ``STEPS`` order; the steps
    that need the world enter it once, untimed (``ExitStack`` kept open by
    the caller through ``world``)."""
    registry = builtin_registry()
    session = case.session
    root = case.workspace.root

    def filesystem() -> object:
        with process_fake_filesystems().filesystem(case.workspace):
            return None

    def clock() -> object:
        with frozen_clock(case.recorded_at):
            return None

    def runtime() -> object:
        store = SQLiteAuditStore(":memory:")
        made = ToolRuntime(
            registry,
            root,
            session.capabilities,
            store,
            redactor=Redactor(),
            variables=session.variables,
            idempotency_scope=session.idempotency_scope,
        )
        made.close()
        store.close()
        return made

    def tree() -> object:
        return read_tree(root)

    return [filesystem, clock, runtime, tree]


REFERENCES = (
    "reference: freezegun move_to, the clock started once",
    "reference: a new pyfakefs Patcher per cassette (before): enter + exit",
)
"""What a part of the world would cost per cassette made another way: a
running freezer moved to each cassette's time (the clock made once per
session); the fake filesystem as it was made before ``FakeFilesystems``, a new
``Patcher`` started and torn down per cassette, filled with pyfakefs's own
``create_*`` (timed in turn with the shared one). The freezer is timed after
the rest, so no freezer is nested."""


@dataclass(frozen=True, slots=True)
class SetupTimes:
    """Medians in ms."""

    set_up: float
    """``replay()`` of the case without its call."""
    one_call: float
    """``replay()`` of the case."""
    steps: tuple[float, ...]
    """``STEPS``, each alone."""
    references: tuple[float, ...]
    """``REFERENCES``."""
    load: float
    """``loads`` of the case's YAML (a replay item does it before ``replay()``)."""


def time_setup(case: Cassette, repeats: int) -> SetupTimes:
    """Medians of ``repeats`` runs, in alternation: the set-up, the one-call
    replay, then each step alone (the world ones inside one world). The
    fake filesystem and its reference, a new ``Patcher``, take turns going
    first, so neither always runs after the YAML load (with colder caches)."""
    registry = builtin_registry()
    empty = replace(case, interactions=())
    for cassette in (empty, case):
        report = replay(cassette, registry)
        if not report.ok:
            raise BenchmarkSetupError(f"the one-call case does not replay: {report.differences}")
    filesystem, clock, runtime, tree = setup_steps(case)
    times: dict[str, list[int]] = {}
    timer = CLOCK[0]

    def timed(name: str, step: Callable[[], object]) -> None:
        start = timer()
        step()
        times.setdefault(name, []).append(timer() - start)

    own_patcher = (REFERENCES[1], lambda: _own_patcher(case))
    for index in range(repeats):
        timed("set_up", lambda: replay(empty, registry))
        timed("one_call", lambda: replay(case, registry))
        timed("load", lambda: loads(ONE_CALL_CASE, source="<case>"))
        pair = [(STEPS[0], filesystem), own_patcher]
        for name, step in pair if index % 2 else reversed(pair):
            timed(name, step)
        timed(STEPS[1], clock)
        with ExitStack() as world:
            world.enter_context(process_fake_filesystems().filesystem(case.workspace))
            world.enter_context(frozen_clock(case.recorded_at))
            timed(STEPS[2], runtime)
            timed(STEPS[3], tree)

    freezer: Any = freeze_time(DEFAULT_TIME)
    factory = freezer.start()
    try:
        moment = case.recorded_at or DEFAULT_TIME
        for _ in range(repeats):
            timed(REFERENCES[0], lambda: factory.move_to(moment))
    finally:
        freezer.stop()

    def median_ms(name: str) -> float:
        return statistics.median(times[name]) / 1e6

    return SetupTimes(
        median_ms("set_up"),
        median_ms("one_call"),
        tuple(median_ms(step) for step in STEPS),
        tuple(median_ms(reference) for reference in REFERENCES),
        median_ms("load"),
    )


def _own_patcher(case: Cassette) -> None:
    """The fake filesystem as replay made it before
    ``FakeFilesystems``: a new ``Patcher``, filled with pyfakefs's ``create_*``."""
    with Patcher() as patcher:
        fs: Any = patcher.fs
        state = case.workspace
        fs.create_dir(state.root)
        for directory in state.directories:
            fs.create_dir(posixpath.join(state.root, directory))
        for path, content in state.files.items():
            fs.create_file(posixpath.join(state.root, path), contents=content)
