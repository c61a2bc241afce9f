"""The fault matrix's workload: a generated pytest project, and the cells.

``generate_project`` writes, into a new directory:

* ``cassettes/`` and ``cases/``: the shipped ``cassettes/*.yaml`` and
  ``cases/*.yaml``, ``copies`` times each under other names
  (``c01_feedback_analysis.yaml``, ...), so that
  ``--toolguard-faults=all`` collects at least the wanted number of cells;
* ``tests/test_empty.py``: as many ``def test_N(): pass`` as there are
  cells;
* ``conftest.py``: the timer (``TIMER_CONFTEST``), inert unless
  ``--matrix-timings=PATH`` is given;
* ``pytest.ini``: empty, so the project is its own rootdir.

The cells are counted in this process, as the plugin collects them: every
(interaction, fault) pair of the catalogue that applies with the built-in
registry (``iter_cells``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pytest_toolguard.faults import BUILTIN_FAULTS, Fault, Target, iter_cells
from pytest_toolguard.replay.cassette import Cassette, load
from pytest_toolguard.tools import builtin_registry

REPO = Path(__file__).resolve().parent.parent
SHIPPED_DIRS = ("cassettes", "cases")

TIMER_CONFTEST = '''\
"""Times every item of the run (written by benchmarks/matrix_workload.py).

With --matrix-timings=PATH: a hook wrapper, outermost, reads the clock
around pytest_runtest_protocol (set-up, call, teardown and reporting of one
item) and the list goes to PATH as JSON, in run order. With
--matrix-interleave the empty tests are spread evenly among the other
items, so both kinds share the machine's noise. With --matrix-cells=N only N
fault cells are kept, spread evenly over the collection order (a short
check). With --matrix-startup=PATH,
each process (the serial one, or each xdist worker) appends to PATH, when its
collection has finished, one JSON line: its name, its age (seconds since the
process started, from /proc), the wall-clock time and its CPU seconds.
"""

import json
import os
import time

import pytest

CLOCK = time.perf_counter  # kept before any frozen clock can replace it


def pytest_addoption(parser):
    parser.addoption("--matrix-timings", default=None, metavar="PATH")
    parser.addoption("--matrix-interleave", action="store_true", default=False)
    parser.addoption("--matrix-startup", default=None, metavar="PATH")
    parser.addoption("--matrix-cells", type=int, default=0, metavar="N")


def pytest_collection_finish(session):
    path = session.config.getoption("matrix_startup")
    if not path:
        return
    line = {
        "process": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "age": _age(),
        "at": time.time(),
        "cpu": time.process_time(),
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\\n")


def _age():
    """Seconds since this process started (Linux), else None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as uptime:
            now = float(uptime.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return now - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def pytest_configure(config):
    path = config.getoption("matrix_timings")
    if path:
        config.pluginmanager.register(Timer(path), "matrix-timer")


def pytest_collection_modifyitems(config, items):
    cap = config.getoption("matrix_cells")
    cells = [item for item in items if _kind(item) == "cell"]
    if cap and len(cells) > cap:
        kept = {id(cells[index * len(cells) // cap]) for index in range(cap)}
        left = [item for item in cells if id(item) not in kept]
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if _kind(item) != "cell" or id(item) in kept]
    if not config.getoption("matrix_interleave"):
        return
    empty = [item for item in items if _kind(item) == "empty"]
    other = [item for item in items if _kind(item) != "empty"]
    spread = [((index + 0.5) / len(group), rank, item)
              for rank, group in enumerate((other, empty)) if group
              for index, item in enumerate(group)]
    items[:] = [item for _, _, item in sorted(spread, key=lambda entry: entry[:2])]


def _kind(item):
    name = type(item).__name__
    if name == "FaultCell":
        return "cell"
    if name == "ReplayItem":
        return "replay"
    return "empty" if item.nodeid.startswith("tests/test_empty.py::") else "other"


class Timer:
    def __init__(self, path):
        self.path = path
        self.times = []

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        start = CLOCK()
        yield
        self.times.append([item.nodeid, _kind(item), CLOCK() - start])

    def pytest_sessionfinish(self, session):
        with open(self.path, "w", encoding="utf-8") as out:
            json.dump(self.times, out)
'''


@dataclass(frozen=True, slots=True)
class Shipped:
    """The shipped cassettes and cases, loaded, with their cells."""

    files: tuple[tuple[str, str, Cassette], ...]
    """(directory, file name, cassette) of every shipped file."""
    cells: tuple[tuple[Target, Fault], ...]
    """Every cell of one copy, in collection order."""

    @property
    def cells_per_copy(self) -> int:
        return len(self.cells)

    def copies_for(self, cells: int) -> int:
        """The fewest copies that give at least ``cells`` cells."""
        return max(1, math.ceil(cells / self.cells_per_copy))


@dataclass(frozen=True, slots=True)
class Project:
    """A generated project."""

    root: Path
    copies: int
    files: int
    """Cassette and case files (each also a ``replay`` item)."""
    cells: int
    empty_tests: int
    variants: int = 0
    """``variants`` items: one per file holding amplified variants."""
    keep_cells: int = 0
    """Fault cells each run keeps (``--matrix-cells``); 0: every one."""


def shipped() -> Shipped:
    """Load the repository's ``cassettes/*.yaml`` and ``cases/*.yaml``."""
    registry = builtin_registry()
    faults = BUILTIN_FAULTS
    files = []
    cells: list[tuple[Target, Fault]] = []
    for directory in SHIPPED_DIRS:
        for path in sorted((REPO / directory).glob("*.yaml")):
            source = f"{directory}/{path.name}"
            cassette = load(path, source=source)
            files.append((directory, path.name, cassette))
            cells.extend(iter_cells(cassette, registry, source, faults))
    return Shipped(tuple(files), tuple(cells))


def generate_project(root: Path, shipped_files: Shipped, copies: int) -> Project:
    """Write the project (see the module's docstring) under ``root``."""
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "conftest.py").write_text(TIMER_CONFTEST, encoding="utf-8")
    for directory in SHIPPED_DIRS:
        (root / directory).mkdir()
    for copy in range(copies):
        for directory, name, _cassette in shipped_files.files:
            text = (REPO / directory / name).read_text(encoding="utf-8")
            (root / directory / f"c{copy:02d}_{name}").write_text(text, encoding="utf-8")
    cells = shipped_files.cells_per_copy * copies
    (root / "tests").mkdir()
    body = "".join(f"def test_{index}():\n    pass\n\n\n" for index in range(cells))
    (root / "tests" / "test_empty.py").write_text(body, encoding="utf-8")
    amplified = sum(
        1
        for _d, _n, cassette in shipped_files.files
        if any(i.variants for i in cassette.interactions)
    )
    return Project(
        root, copies, len(shipped_files.files) * copies, cells, cells, amplified * copies
    )
