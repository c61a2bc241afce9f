"""Benchmark of the fault matrix (``--toolguard-faults=all``): the cost of
one cell against an empty pytest test, and the speed-up of ``-n 2``.
Measured in one run, reported, never asserted.

    .venv/bin/python benchmarks/matrix_bench.py            # the tables, about 2 min
    .venv/bin/python benchmarks/matrix_bench.py --profile  # then where a cell's time goes

The workload is a generated pytest project (``matrix_workload.py``): the
shipped cassettes and cases, copied until the matrix has at least 500
cells, and as many empty test functions.

1. Per cell. One pytest run (a subprocess, ``-p no:randomly -p no:cacheprovider
   -q``) holds the cells, the replay items and the empty tests, the empty
   tests spread evenly among the others so that both kinds share the
   machine's noise. A conftest hook wrapper reads the clock around each
   item's ``pytest_runtest_protocol`` (set-up, call, teardown, reporting).
   Printed: medians per kind, and the ratio cell / empty test as the median
   of the ratios of medians in consecutive blocks of the run, with their
   range. Then the cells' medians by fault and by the target's position
   (a cell first replays the interactions before its target).
2. ``-n 2`` against serial. Whole ``pytest --toolguard-replay
   --toolguard-faults=all`` subprocess runs of the matrix (the replay items
   and the cells, not the empty tests), serial and ``-n 2`` in alternation,
   with the start-ups they include measured the same way: ``--collect-only``
   (serial start-up and collection), and ``-n 2`` with every item
   deselected (the controller, two workers started, each collecting).
   Printed: medians of the rounds with the CPU seconds of each run (user +
   system of the run's processes, from ``RUSAGE_CHILDREN``), and the
   per-round speed-ups, whole and with the start-ups subtracted. Then the
   start-up of each process: a conftest hook notes, when its collection
   has finished, how long ago the process started (``/proc``): the serial
   process, each xdist worker, and from the command's launch to the last
   worker collected; and the same for a ``-n 2`` run with the third-party
   plugins no test uses left out (``-p no:langsmith_plugin``, when
   installed). Every run writes and reads byte code
   (``PYTHONDONTWRITEBYTECODE`` unset), as a CI's pytest commands after its
   first: the untimed warm-up run writes the ``.pyc`` files.
3. What the plugins cost: ``pytest --collect-only`` in an empty directory
   with every ``pytest11`` plugin, without each in turn (``-p no:NAME``),
   and with every plugin module assertion-rewritten again (nothing cached,
   as under ``PYTHONDONTWRITEBYTECODE=1``), in CPU seconds.

``--profile`` then runs about 50 cells in this process with ``run_cell``
(no pytest) as the plugin runs them (in order, one ``FakeFilesystems`` for
all, a ``PrefixCache`` per pass: the interactions before a target are
replayed once per interaction, not once per cell), timing the parts of each
cell without a profiler, and prints cProfile's top entries by cumulative
time for one pass over them.

A missed target prints MISS and the exit status stays 0; a run that does
not pass (its items fail, or their count is wrong) exits 1, since its
timings would mean nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from matrix_workload import REPO, Project, Shipped, generate_project, shipped
from summary import record
from timing import in_temp_dir, machine, package_version, plural
from variants import BenchmarkSetupError

import pytest_toolguard
from pytest_toolguard.faults import Fault, Target, run_cell
from pytest_toolguard.faults import cell as cell_module
from pytest_toolguard.faults import run as run_module
from pytest_toolguard.faults.prefixes import PrefixCache
from pytest_toolguard.harness.fake_filesystem import FakeFilesystems
from pytest_toolguard.harness.world import FakeWorld
from pytest_toolguard.runtime import ToolRuntime
from pytest_toolguard.tools import builtin_registry

CLOCK = time.perf_counter  # kept before any frozen clock could replace it

PYTEST = (sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q")
MATRIX = ("--toolguard-replay", "--toolguard-faults=all")
DESELECT_ALL = ("-k", "matrix_bench_selects_nothing")

CELL_TARGET = 5.0
SPEEDUP_TARGET = 1.7


@dataclass(frozen=True, slots=True)
class Goal:
    """A ratio's target: ``<= limit`` or ``>= limit``."""

    limit: float | None
    at_least: bool = False

    def __str__(self) -> str:
        if self.limit is None:
            return ""
        return f"{'>=' if self.at_least else '<='} {self.limit:.1f}"

    def verdict(self, value: float) -> str:
        if self.limit is None:
            return ""
        met = value >= self.limit if self.at_least else value <= self.limit
        return "ok" if met else "MISS"


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("matrix-bench", _parse(argv), _run, catch=BenchmarkSetupError)


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(_environment(directory))
    started = CLOCK()
    files = shipped()
    copies = options.copies or files.copies_for(options.min_cells)
    project = generate_project(directory / "project", files, copies)
    subset = ""
    if options.cells and options.cells < project.cells:
        subset = f"; only {options.cells} of the {project.cells} cells kept (--cells)"
        project = replace(project, cells=options.cells, keep_cells=options.cells)
    print(
        f"workload: {len(files.files)} shipped cassettes and cases x {copies} copies = "
        f"{project.files} files, {project.cells} cells ({files.cells_per_copy} per copy), "
        f"{project.empty_tests} empty tests; in {project.root}{subset}"
    )
    # Warm-up, not timed: writes the .pyc files every later run reads, a worker's too.
    _pytest(project, "--collect-only", *MATRIX, "cassettes", "cases")
    _pytest(project, *MATRIX, "cassettes", "cases", "-n", "2", *DESELECT_ALL, ok=(0, 5))
    print()
    _per_cell(options, project)
    print()
    _parallel(options, project)
    print()
    _plugin_startup(options, directory)
    print(f"\nmatrix benchmark: {CLOCK() - started:.1f} s in all")
    if options.profile:
        print()
        _profile(files, options.profile_cells, options.top)
    return 0


# -- running pytest -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    seconds: float
    """Wall time."""
    cpu_seconds: float
    """User + system time of the process and its children (xdist's workers)."""
    output: str
    launched: float = 0.0
    """``time.time()`` when the command was started."""
    collected: tuple[tuple[str, float | None, float, float], ...] = ()
    """Each process that collected (``main``, or an xdist worker ``gwN``):
    its age when its collection finished (seconds since it started; None
    where /proc is missing), the ``time.time()`` of that moment and the
    CPU seconds it had used by then."""

    def ages(self, workers: bool) -> list[float]:
        """Start-up seconds of the serial process, or of each xdist worker."""
        return [
            age
            for name, age, _at, _cpu in self.collected
            if age is not None and workers == (name != "main")
        ]

    def cpus(self, workers: bool) -> list[float]:
        """CPU seconds of the same start-ups."""
        return [cpu for name, _age, _at, cpu in self.collected if workers == (name != "main")]

    def until_all_collected(self) -> float:
        """Seconds from the launch until the last process had collected."""
        latest = max((at for _n, _a, at, _c in self.collected), default=self.launched)
        return latest - self.launched


def _pytest(
    project: Project, *args: str, passed: int | None = None, ok: Sequence[int] = (0,)
) -> Run:
    """One pytest subprocess in the project; its wall time, start-up included.
    Raises ``BenchmarkSetupError`` on an unexpected exit status, or when
    ``passed`` is given and the summary does not say so."""
    env = _pytest_env()
    startup = project.root / "startup.jsonl"
    startup.unlink(missing_ok=True)
    used = _children_cpu()
    launched = time.time()
    start = CLOCK()
    done = subprocess.run(
        [*PYTEST, f"--matrix-startup={startup}", f"--matrix-cells={project.keep_cells}", *args],
        cwd=project.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    seconds = CLOCK() - start
    cpu_seconds = _children_cpu() - used
    wanted = f"{passed} passed" if passed is not None else ""
    if done.returncode not in ok or wanted not in done.stdout:
        tail = "\n".join(done.stdout.splitlines()[-15:])
        shown = " ".join(args)
        raise BenchmarkSetupError(
            f"pytest {shown}: exit {done.returncode}, expected {wanted or 'success'}\n{tail}"
        )
    lines = startup.read_text(encoding="utf-8").splitlines() if startup.exists() else []
    collected = tuple(
        (str(line["process"]), line["age"], float(line["at"]), float(line["cpu"]))
        for line in map(json.loads, lines)
    )
    return Run(seconds, cpu_seconds, done.stdout, launched, collected)


def _pytest_env(*, bytecode: bool = True) -> dict[str, str]:
    """This process's environment less ``PYTEST_ADDOPTS``. With ``bytecode``,
    ``PYTHONDONTWRITEBYTECODE`` is unset, as in a CI whose first pytest
    command wrote the ``.pyc`` files (pytest's assertion-rewritten ones of
    every plugin's modules and ``conftest.py`` included) and whose later
    commands read them; the untimed warm-up run is that first command."""
    drop = {"PYTEST_ADDOPTS", *(("PYTHONDONTWRITEBYTECODE",) if bytecode else ())}
    return {key: value for key, value in os.environ.items() if key not in drop}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- 1. per cell ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timed:
    """One item of the timed run, in run order."""

    nodeid: str
    kind: str
    seconds: float


def _per_cell(options: argparse.Namespace, project: Project) -> None:
    timings = project.root / "timings.json"
    items = project.cells + project.files + project.variants + project.empty_tests
    run = _pytest(
        project,
        *MATRIX,
        f"--matrix-timings={timings}",
        "--matrix-interleave",
        "tests",
        "cassettes",
        "cases",
        passed=items,
    )
    timed = [Timed(*entry) for entry in json.loads(timings.read_text(encoding="utf-8"))]
    by_kind: dict[str, list[float]] = defaultdict(list)
    for item in timed:
        by_kind[item.kind].append(item.seconds * 1000)
    expected = {"cell": project.cells, "empty": project.empty_tests, "replay": project.files}
    counted = {kind: len(by_kind[kind]) for kind in expected}
    if counted != expected:
        raise BenchmarkSetupError(f"timed items {counted}, expected {expected}")
    print(
        f"1. Per cell. {project.cells} cells, {project.files} replay items and "
        f"{project.empty_tests} empty tests spread among them, in one pytest run "
        f"(subprocess, {' '.join(PYTEST[3:])}); one item: its pytest_runtest_protocol "
        f"(set-up, call, teardown, report); {run.seconds:.1f} s"
    )
    widths = (6, 10, 9, 9)
    print(_row("item", "count", "median ms", "p10 ms", "p90 ms", widths=widths))
    labels = {
        "cell": "fault cell (--toolguard-faults=all)",
        "empty": "empty test (def test_N(): pass)",
        "replay": "replay item (a whole cassette or case)",
    }
    for kind, label in labels.items():
        values = by_kind[kind]
        print(
            _row(
                label,
                str(len(values)),
                f"{statistics.median(values):.3f}",
                f"{_percentile(values, 0.1):.3f}",
                f"{_percentile(values, 0.9):.3f}",
                widths=widths,
            )
        )
    print()
    blocks = _block_ratios(timed, "cell", "empty", options.blocks)
    print(_ratio_header(f"ratio (median of {options.blocks} blocks' ratios of medians)"))
    print(
        _ratio_row(
            "cell / empty test",
            statistics.median(blocks),
            min(blocks),
            max(blocks),
            Goal(CELL_TARGET),
        )
    )
    record(
        "cell_empty",
        statistics.median(blocks),
        min(blocks),
        max(blocks),
        f"{project.cells} cells",
    )
    print()
    _cells_by(timed)


def _block_ratios(timed: list[Timed], top: str, bottom: str, blocks: int) -> list[float]:
    """For each of ``blocks`` consecutive slices of the run, the median of
    ``top`` items over the median of ``bottom`` items in it."""
    size = -(-len(timed) // blocks)
    ratios = []
    for start in range(0, len(timed), size):
        chunk = timed[start : start + size]
        upper = [item.seconds for item in chunk if item.kind == top]
        lower = [item.seconds for item in chunk if item.kind == bottom]
        if upper and lower:
            ratios.append(statistics.median(upper) / statistics.median(lower))
    return ratios


POSITIONS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, 4), (5, 8), (9, None))


def _cells_by(timed: list[Timed]) -> None:
    """The cells' medians by fault, and by the target's position."""
    by_fault: dict[str, list[float]] = defaultdict(list)
    by_position: dict[int, list[float]] = defaultdict(list)
    for item in timed:
        if item.kind != "cell":
            continue
        _file, interaction, fault = item.nodeid.split("::")
        by_fault[fault].append(item.seconds * 1000)
        by_position[int(interaction.split("-", 1)[0])].append(item.seconds * 1000)
    widths = (6, 10, 10)
    print(_row("cells by fault (slowest first)", "cells", "median ms", "sum s", widths=widths))
    for fault, values in sorted(by_fault.items(), key=lambda entry: -statistics.median(entry[1])):
        print(
            _row(
                f"  {fault}",
                str(len(values)),
                f"{statistics.median(values):.2f}",
                f"{sum(values) / 1000:.2f}",
                widths=widths,
            )
        )
    print(
        _row(
            "cells by the target's position (interactions replayed first)",
            "cells",
            "median ms",
            widths=widths,
        )
    )
    for low, high in POSITIONS:
        values = [
            time
            for position, times in by_position.items()
            if low <= position and (high is None or position <= high)
            for time in times
        ]
        if values:
            before = _span(low - 1, None if high is None else high - 1)
            print(
                _row(
                    f"  interaction {_span(low, high)} ({before} replayed before it)",
                    str(len(values)),
                    f"{statistics.median(values):.2f}",
                    widths=widths,
                )
            )


def _span(low: int, high: int | None) -> str:
    if high is None:
        return f"{low}+"
    return f"{low}" if low == high else f"{low}-{high}"


# -- 2. -n 2 against serial --------------------------------------------------------------


LEAN_OUT = tuple(
    name
    for name in ("langsmith_plugin",)
    if any(entry.name == name for entry in entry_points(group="pytest11"))
)
"""Third-party plugins a user of the matrix can leave out with ``-p no:NAME``
(no test of theirs uses them), where installed: the ``xdist_lean`` run."""
LEAN = tuple(arg for name in LEAN_OUT for arg in ("-p", f"no:{name}"))

RUNS = ("serial", "xdist", "xdist_load", "collect", "xdist_start") + (
    ("xdist_lean",) if LEAN_OUT else ()
)

RUN_LABELS = {
    "serial": "serial",
    "xdist": "-n 2 (xdist's default: --dist load)",
    "xdist_load": "-n 2 --dist loadgroup (one worker per file's cells)",
    "collect": "--collect-only (start-up + collection)",
    "xdist_start": "-n 2, every item deselected (xdist start-up + collection)",
    "xdist_lean": f"the same, {' '.join(LEAN)}",
}


def _parallel(options: argparse.Namespace, project: Project) -> None:
    items = project.cells + project.files + project.variants
    matrix = (*MATRIX, "cassettes", "cases")
    commands: dict[str, Callable[[], Run]] = {
        "serial": lambda: _pytest(project, *matrix, passed=items),
        "xdist": lambda: _pytest(project, *matrix, "-n", "2", passed=items),
        "xdist_load": lambda: _pytest(
            project, *matrix, "-n", "2", "--dist", "loadgroup", passed=items
        ),
        "collect": lambda: _pytest(project, *matrix, "--collect-only"),
        "xdist_start": lambda: _pytest(project, *matrix, "-n", "2", *DESELECT_ALL, ok=(0, 5)),
        "xdist_lean": lambda: _pytest(project, *matrix, "-n", "2", *DESELECT_ALL, *LEAN, ok=(0, 5)),
    }
    load_before = os.getloadavg()[0]
    started = CLOCK()
    runs: dict[str, list[Run]] = {name: [] for name in RUNS}
    for round_ in range(options.rounds):
        shift = round_ % len(RUNS)
        for name in RUNS[shift:] + RUNS[:shift]:
            runs[name].append(commands[name]())
    elapsed = CLOCK() - started
    print(
        f"2. -n 2 against serial. Whole pytest runs ({' '.join(MATRIX)} cassettes cases: "
        f"{project.files} replay items + {project.cells} cells), subprocesses, "
        f"{plural(options.rounds, 'round')} of the {len(RUNS)} (order rotating); {elapsed:.1f} s; "
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(_how_started())
    widths = (10, 15, 10)
    print(_row("run (start-up included)", "median s", "round range", "CPU s", widths=widths))
    for name in RUNS:
        wall = [run.seconds for run in runs[name]]
        print(
            _row(
                RUN_LABELS[name],
                f"{statistics.median(wall):.2f}",
                f"{min(wall):.2f} - {max(wall):.2f}",
                f"{statistics.median(run.cpu_seconds for run in runs[name]):.2f}",
                widths=widths,
            )
        )
    print()
    per_round = [dict(zip(RUNS, one, strict=True)) for one in zip(*runs.values(), strict=True)]
    speedup = Goal(SPEEDUP_TARGET, at_least=True)
    ratios: tuple[tuple[str, Callable[[dict[str, Run]], float], Goal], ...] = (
        ("serial / -n 2, whole runs", lambda r: _wall(r, "serial") / _wall(r, "xdist"), speedup),
        (
            "serial / -n 2 --dist loadgroup, whole runs",
            lambda r: _wall(r, "serial") / _wall(r, "xdist_load"),
            Goal(None),
        ),
        (
            "serial / -n 2, --collect-only subtracted from both",
            lambda r: _wall(r, "serial", "collect") / _wall(r, "xdist", "collect"),
            speedup,
        ),
        (
            "(serial - collect-only) / (-n 2 - its deselected run)",
            lambda r: _wall(r, "serial", "collect") / _wall(r, "xdist", "xdist_start"),
            Goal(None),
        ),
        (
            "CPU s: -n 2 / serial (best speed-up on 2 free CPUs: 2 / this)",
            lambda r: r["xdist"].cpu_seconds / r["serial"].cpu_seconds,
            Goal(None),
        ),
    )
    print(_ratio_header("speed-up (median of the per-round ratios)"))
    for label, formula, goal in ratios:
        values = [formula(one) for one in per_round]
        print(_ratio_row(label, statistics.median(values), min(values), max(values), goal))
        if label == "serial / -n 2, whole runs":
            cpu = {name: statistics.median(run.cpu_seconds for run in runs[name]) for name in RUNS}
            note = f"CPU s: serial {cpu['serial']:.1f}, -n 2 {cpu['xdist']:.1f}"
            record("xdist_speedup", statistics.median(values), min(values), max(values), note)
        if label.startswith("CPU s: -n 2 / serial"):
            record("xdist_cpu", statistics.median(values), min(values), max(values))
    print()
    _startup(runs)


def _startup(runs: dict[str, list[Run]]) -> None:
    """How long each process took from its start to its collection
    finished (every run of the rounds that has that kind of process), in
    wall and in CPU seconds."""
    serial_runs = [run for name in ("serial", "collect") for run in runs[name]]
    worker_runs = [run for name in ("xdist", "xdist_load", "xdist_start") for run in runs[name]]
    cpu = {
        "serial_startup": [seconds for run in serial_runs for seconds in run.cpus(False)],
        "xdist_worker_startup": [seconds for run in worker_runs for seconds in run.cpus(True)],
    }
    print(_ratio_header("start-up, s (process start to its collection finished)"))
    rows = (
        (
            "serial pytest process",
            [age for run in serial_runs for age in run.ages(False)],
            Goal(None),
            "serial_startup",
        ),
        (
            "-n 2 worker (each worker of every -n 2 run)",
            [age for run in worker_runs for age in run.ages(True)],
            Goal(2.0),
            "xdist_worker_startup",
        ),
        (
            "-n 2: command launched to the last worker collected",
            [run.until_all_collected() for run in worker_runs if run.ages(True)],
            Goal(None),
            "",
        ),
        ("serial pytest process, CPU s", cpu["serial_startup"], Goal(None), ""),
        ("-n 2 worker, CPU s", cpu["xdist_worker_startup"], Goal(None), ""),
    )
    lean = runs.get("xdist_lean", [])
    if lean:
        rows += (
            (
                f"-n 2 worker, {' '.join(LEAN)}",
                [age for run in lean for age in run.ages(True)],
                Goal(2.0),
                "",
            ),
            (
                f"-n 2 worker, {' '.join(LEAN)}, CPU s",
                [seconds for run in lean for seconds in run.cpus(True)],
                Goal(None),
                "",
            ),
        )
    for label, values, goal, key in rows:
        if not values:
            print(f"{label}: not measured (no /proc?)")
            continue
        value = statistics.median(values)
        print(_ratio_row(label, value, min(values), max(values), goal))
        if key:
            used = statistics.median(cpu[key]) if cpu[key] else float("nan")
            note = f"{len(values)} processes, {used:.1f} CPU s each"
            record(key, value, min(values), max(values), note)


def _how_started() -> str:
    """How the runs start, as the tables below measure them."""
    was_set = " (set here, unset for the runs)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""
    names = ", ".join(sorted({entry.name for entry in entry_points(group="pytest11")}))
    return (
        f"start-up measured as a CI's later pytest commands find it: byte code written and read, "
        f"PYTHONDONTWRITEBYTECODE unset{was_set}, the .pyc files (pytest's rewritten ones "
        f"of the plugins and conftest.py included) written by the untimed warm-up run; "
        f"every pytest11 plugin installed is loaded ({names}) but randomly and cacheprovider"
    )


COLD_REWRITE = """\
\"\"\"Loaded with -p by matrix_bench.py: pytest finds no rewritten .pyc, as in a
CI that sets PYTHONDONTWRITEBYTECODE=1 and keeps no cache between runs.\"\"\"
from _pytest.assertion import rewrite

rewrite._read_pyc = lambda *args, **kwargs: None
"""

COLD = "every plugin, rewritten again (PYTHONDONTWRITEBYTECODE=1, no cache)"


def _plugin_startup(options: argparse.Namespace, directory: Path) -> None:
    """CPU seconds of ``pytest --collect-only`` in an empty directory: with
    every ``pytest11`` plugin of the environment, without each in turn
    (``-p no:NAME``, what a user can do), and with every plugin's modules
    assertion-rewritten again (pytest rewrites every module of a
    distribution that declares a ``pytest11`` entry point, and caches the
    result only where byte code is written)."""
    empty = directory / "empty"
    empty.mkdir()
    (empty / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (empty / "matrix_cold_rewrite.py").write_text(COLD_REWRITE, encoding="utf-8")
    names = sorted({entry.name for entry in entry_points(group="pytest11")})
    variants: dict[str, tuple[str, ...]] = {"every plugin": ()}
    variants.update({f"-p no:{name}": ("-p", f"no:{name}") for name in names})
    variants[COLD] = ("-p", "matrix_cold_rewrite")
    cpu: dict[str, list[float]] = {label: [] for label in variants}
    labels = list(variants)
    started = CLOCK()
    for round_ in range(options.rounds):
        shift = round_ % len(labels)
        for label in labels[shift:] + labels[:shift]:
            used = _children_cpu()
            done = subprocess.run(
                [*PYTEST, "--collect-only", *variants[label]],
                cwd=empty,
                env=_pytest_env(bytecode=label != COLD),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
            cpu[label].append(_children_cpu() - used)
            if done.returncode != 5:  # no tests collected
                tail = "\n".join(done.stdout.splitlines()[-10:])
                raise BenchmarkSetupError(
                    f"pytest --collect-only {label}: {done.returncode}\n{tail}"
                )
    print(
        f"3. What the plugins cost a pytest process: CPU s (user + system) of pytest "
        f"--collect-only in an empty directory, {len(names)} pytest11 plugins installed, "
        f"{plural(options.rounds, 'round')} (order rotating); {CLOCK() - started:.1f} s"
    )
    every = statistics.median(cpu["every plugin"])
    widths = (10, 15, 12)
    print(_row("run", "median CPU s", "round range", "vs every", widths=widths))
    for label in labels:
        value = statistics.median(cpu[label])
        change = "" if label == "every plugin" else f"{value - every:+.2f}"
        spread = f"{min(cpu[label]):.2f} - {max(cpu[label]):.2f}"
        print(_row(label, f"{value:.2f}", spread, change, widths=widths))


def _wall(runs: dict[str, Run], name: str, minus: str = "") -> float:
    """Wall seconds of ``runs[name]``, less those of ``runs[minus]``."""
    return runs[name].seconds - (runs[minus].seconds if minus else 0.0)


# -- --profile ------------------------------------------------------------------------------


PARTS = (
    "the rest: the world (frozen clock, fake filesystem) in and out",
    "Cell(): counting registry + the session's runtime",
    "plant decoys outside the workspace",
    "replay the interactions before the target",
    "snapshot outside the workspace (twice)",
    "the fault's inject (its calls and checks)",
    "finish: close runtimes (join workers), audit rows",
)


def _profile(files: Shipped, count: int, top: int) -> None:
    """``count`` cells spread over one copy of the matrix, run in this process."""
    registry = builtin_registry()
    step = max(1, files.cells_per_copy // count)
    cells = list(files.cells[::step])[:count]
    fake_filesystems = FakeFilesystems()

    def one_pass() -> list[Any]:
        """The cells in order, as the plugin runs them: one cache per pass."""
        prefixes = PrefixCache()
        return [
            run_cell(fault, target, registry, prefixes=prefixes, fake_filesystems=fake_filesystems)
            for target, fault in cells
        ]

    try:
        _profile_passes(cells, one_pass, top)
    finally:
        fake_filesystems.close()


def _profile_passes(
    cells: Sequence[tuple[Target, Fault]], one_pass: Callable[[], list[Any]], top: int
) -> None:
    """A checked warm-up pass, a timed one by parts, a profiled one."""
    for outcome in one_pass():  # warm-up, and a check
        if outcome.status != "pass":
            raise BenchmarkSetupError(f"{outcome.nodeid}: {outcome.problems}")
    with _timed_parts() as parts:
        start = CLOCK()
        one_pass()
        total = CLOCK() - start
    print(
        f"Where a cell's time goes: {len(cells)} cells (spread over one copy), run with "
        f"run_cell in this process as the plugin runs them, no pytest; "
        f"{parts['calls']:.0f} calls through the executor, {parts['replayed']:.0f} of them "
        "replaying interactions before a target"
    )
    widths = (12, 8)
    print(
        _row(
            "part (no profiler; sum over the cells / cells)", "ms per cell", "share", widths=widths
        )
    )
    world = total - sum(parts[part] for part in PARTS[1:])
    for part in PARTS:
        value = world if part == PARTS[0] else parts[part]
        print(
            _row(
                part,
                f"{value / len(cells) * 1000:.2f}",
                f"{value / total:.0%}",
                widths=widths,
            )
        )
    print(_row("a whole cell", f"{total / len(cells) * 1000:.2f}", "100%", widths=widths))
    if parts["replayed"]:
        each = parts[PARTS[3]] / parts["replayed"] * 1000
        print(f"one replayed interaction: {each:.2f} ms")
    print()
    profiler = cProfile.Profile()
    profiler.enable()
    one_pass()
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(
        f"cProfile of the same {len(cells)} cells, top {top} by cumulative time (the profiler "
        "inflates pure Python, and sees only this thread: a handler's work on its worker "
        "thread shows as this thread's acquire of the job's lock)"
    )
    print(_top(stats, top, len(cells)))


@contextmanager
def _timed_parts() -> Iterator[dict[str, float]]:
    """For the block's duration, the parts of a cell are timed into
    the yielded dict (seconds summed over the cells, by ``PARTS``; "calls":
    the executor's calls; "replayed": the interactions replayed before a
    target)."""
    parts: dict[str, float] = defaultdict(float)

    def timing(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = CLOCK()
            try:
                return function(*args, **kwargs)
            finally:
                parts[name] += CLOCK() - start

        return timed

    def counting(function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            parts["calls"] += 1
            return function(*args, **kwargs)

        return counted

    originals: list[tuple[Any, str, Any]] = []

    def swap(owner: Any, name: str, new: Any) -> None:
        originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    cell = cell_module.Cell
    swap(cell, "__init__", timing(PARTS[1], cell.__init__))
    swap(FakeWorld, "plant", timing(PARTS[2], FakeWorld.plant))
    replay_before = timing(PARTS[3], cell.replay_before)

    def replaying(self: Any, first: int = 0) -> None:
        parts["replayed"] += self.target.index - first
        replay_before(self, first)

    swap(cell, "replay_before", replaying)
    swap(FakeWorld, "outside", timing(PARTS[4], FakeWorld.outside))
    swap(cell, "finish", timing(PARTS[6], cell.finish))
    swap(ToolRuntime, "execute", counting(ToolRuntime.execute))
    original_run = run_module._run

    def run(fault: Fault, target: Target, *args: Any) -> Any:
        timed_fault: Any = _TimedInject(fault, timing(PARTS[5], fault.inject))
        return original_run(timed_fault, target, *args)

    swap(run_module, "_run", run)
    try:
        yield parts
    finally:
        for owner, name, value in reversed(originals):
            setattr(owner, name, value)


class _TimedInject:
    """A fault whose ``inject`` is timed; everything else is the fault's."""

    def __init__(self, fault: Fault, inject: Callable[..., Any]) -> None:
        self._fault = fault
        self.inject = inject

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fault, name)


def _top(stats: pstats.Stats, top: int, cells: int) -> str:
    entries: Any = stats.stats  # type: ignore[attr-defined]
    ordered = sorted(entries.items(), key=lambda entry: -entry[1][3])[:top]
    out = io.StringIO()
    out.write(f"{'calls':>8} {'own s':>7} {'cum s':>7} {'cum ms/cell':>11}  function\n")
    for (filename, line, function), (_prim, calls, own, cumulative, _callers) in ordered:
        out.write(
            f"{calls:>8} {own:>7.3f} {cumulative:>7.3f} {cumulative / cells * 1000:>11.2f}  "
            f"{_where(filename)}:{line}({function})\n"
        )
    return out.getvalue().rstrip()


def _where(filename: str) -> str:
    package = os.path.dirname(os.path.dirname(pytest_toolguard.__file__))
    for prefix in (package, os.path.dirname(os.__file__), *sys.path):
        if prefix and filename.startswith(prefix + os.sep):
            return os.path.relpath(filename, prefix)
    return filename


# -- output ---------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0].replace("\n", " "),
    )
    parser.add_argument(
        "--min-cells",
        type=int,
        default=500,
        help="copy the shipped files until this many cells (default 500)",
    )
    parser.add_argument(
        "--copies", type=int, default=0, help="copies of the shipped files (0: from --min-cells)"
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=10,
        help="blocks of the per-cell run, for the ratio's range (default 10)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of serial, -n 2 and start-up runs (default 3)"
    )
    parser.add_argument("--dir", default=None, help="where the files go (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated project afterwards")
    parser.add_argument(
        "--profile", action="store_true", help="also print where a cell's time goes"
    )
    parser.add_argument(
        "--profile-cells", type=int, default=50, help="cells to profile (default 50)"
    )
    parser.add_argument("--top", type=int, default=15, help="cProfile entries printed (default 15)")
    parser.add_argument(
        "--cells",
        type=int,
        default=0,
        help="keep only this many cells, spread over the matrix (default 0: all)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a check that it runs: one copy, one round, 2 blocks, 40 cells",
    )
    options = parser.parse_args(argv)
    if options.quick:
        options.copies, options.rounds, options.blocks, options.cells = 1, 1, 2, 40
    if options.cells < 0:
        parser.error("--cells must be >= 0")
    if options.copies < 0 or options.rounds < 1 or options.blocks < 1:
        parser.error("--copies must be >= 0, --rounds and --blocks >= 1")
    return options


def _environment(directory: Path) -> str:
    versions = ", ".join(
        f"{name} {package_version(name)}"
        for name in ("pytest", "pytest-xdist", "pyfakefs", "time-machine", "freezegun")
    )
    return (
        f"matrix env: Python {platform.python_version()}, {versions}; {machine()}; repo {REPO}; "
        f"files in {directory}"
    )


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _ratio_header(title: str) -> str:
    return _row(title, "value", "range", "target", widths=(10, 15, 9))


def _ratio_row(label: str, value: float, low: float, high: float, target: Goal) -> str:
    cells = _row(label, f"{value:.2f}", f"{low:.2f} - {high:.2f}", str(target), widths=(10, 15, 9))
    return f"{cells}  {target.verdict(value)}".rstrip()


def _row(name: str, *cells: str, widths: tuple[int, ...] = (10, 9, 9)) -> str:
    """One table line: the name, then right-aligned cells."""
    widths = widths[: len(cells)]
    aligned = "".join(f" {cell:>{width}}" for cell, width in zip(cells, widths, strict=True))
    return f"{name:<66}{aligned}".rstrip()


if __name__ == "__main__":
    sys.exit(main())
