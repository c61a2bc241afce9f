"""Benchmark of fault-matrix throughput: cells per second, serial (no
xdist) and pinned to one CPU, for the shipped matrix (``cassettes/`` and
``cases/``) and the example project's (``examples/agent_project``), each
in the fake world and in the directory world. Reported, never asserted.

    .venv/bin/python benchmarks/throughput_bench.py            # about 1-2 min
    .venv/bin/python benchmarks/throughput_bench.py --quick    # a check that it runs
    .venv/bin/python benchmarks/throughput_bench.py --cells 0  # every cell (slow)
    make bench                                                 # with the others

A round runs the four (matrix, world) pairs one after the other, the order
rotating from round to round; each is one pytest subprocess
(``--toolguard-replay --toolguard-faults=all --toolguard-world=W -p
no:xdist``, the example project in a copy with its own ``pytest.ini``).
A plugin loaded with ``-p`` keeps only fault cells, at most ``--cells`` of
them spread evenly over the collection order (the output says how many of
how many), and reads the clocks around each cell's
``pytest_runtest_protocol`` (set-up, call, teardown, report): wall time,
and this process's CPU time (every thread). Throughput is the cells run
over the sum of their wall times: pytest's start-up and collection are
left out (``-n 2``'s start-up is ``matrix_bench.py``'s). Printed per pair:
the median over the rounds and the range, in cells per wall second (the
target's figure) and per CPU second (what a loaded machine changes
least).

A run whose cells do not all pass exits 1: its times would mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from matrix_workload import REPO, generate_project, shipped
from summary import record
from timing import in_temp_dir, machine, plural
from variants import BenchmarkSetupError

TARGET = 200.0
"""Cells per second the fake world aims at."""

EXAMPLE = REPO / "examples" / "agent_project"
WORLDS = ("fake", "directory")
PLUGIN_NAME = "toolguard_throughput_timer"

PLUGIN = '''\
"""Keeps only fault cells (at most --throughput-cells, spread evenly) and
times each one (written by benchmarks/throughput_bench.py)."""

import json
import time

import pytest

CLOCK = time.perf_counter  # kept before any frozen clock can replace it
CPU = time.process_time


def pytest_addoption(parser):
    parser.addoption("--throughput-out", default=None)
    parser.addoption("--throughput-cells", type=int, default=0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    cells = [item for item in items if type(item).__name__ == "FaultCell"]
    config._throughput_total = len(cells)
    cap = config.getoption("throughput_cells")
    if cap and len(cells) > cap:
        cells = [cells[index * len(cells) // cap] for index in range(cap)]
    kept = {id(item) for item in cells}
    left = [item for item in items if id(item) not in kept]
    if left:
        config.hook.pytest_deselected(items=left)
    items[:] = cells


class Timer:
    def __init__(self, path):
        self.path = path
        self.times = []

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        wall, cpu = CLOCK(), CPU()
        yield
        self.times.append([item.nodeid, CLOCK() - wall, CPU() - cpu])

    def pytest_sessionfinish(self, session):
        total = getattr(session.config, "_throughput_total", 0)
        with open(self.path, "w", encoding="utf-8") as out:
            json.dump({"total": total, "times": self.times}, out)


def pytest_configure(config):
    path = config.getoption("throughput_out")
    if path:
        config.pluginmanager.register(Timer(path), "throughput-timer")
'''


@dataclass(frozen=True, slots=True)
class Matrix:
    """A project to run, and the paths its matrix is collected from."""

    name: str
    root: Path
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Round:
    """One pytest run of a (matrix, world) pair."""

    cells: int
    total: int
    wall: float
    cpu: float

    @property
    def per_second(self) -> float:
        return self.cells / self.wall

    @property
    def per_cpu_second(self) -> float:
        return self.cells / self.cpu if self.cpu else float("inf")


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("throughput-bench", _parse(argv), _run, catch=BenchmarkSetupError)


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(f"fault-matrix throughput: Python {sys.version.split()[0]}, {machine()}")
    plugins = directory / "plugins"
    plugins.mkdir()
    (plugins / f"{PLUGIN_NAME}.py").write_text(PLUGIN, encoding="utf-8")
    matrices = (
        Matrix("shipped", _shipped_project(directory / "shipped"), ("cassettes", "cases")),
        Matrix("example", _example_project(directory / "example"), ("cassettes",)),
    )
    pairs = [(matrix, world) for matrix in matrices for world in WORLDS]
    cpu = _cpu(options)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    rounds: dict[tuple[str, str], list[Round]] = {(m.name, w): [] for m, w in pairs}
    for index in range(options.rounds):
        shift = index % len(pairs)
        for matrix, world in pairs[shift:] + pairs[:shift]:
            out = directory / f"{matrix.name}-{world}-{index}.json"
            rounds[matrix.name, world].append(_one(matrix, world, out, plugins, options.cells, cpu))
    pinned = f"pinned to CPU {cpu}" if cpu is not None else "not pinned"
    print(
        f"{plural(options.rounds, 'round')} of {len(pairs)} pytest runs (order rotating), "
        f"serial, {pinned}; {time.perf_counter() - started:.1f} s; load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(
        f"{'matrix, world':<22}{'cells run':>14}{'cells/s':>9}{'range':>17}"
        f"{'cells/CPU s':>13}{'range':>17}  target"
    )
    for matrix, world in pairs:
        got = rounds[matrix.name, world]
        first = got[0]
        wall = [one.per_second for one in got]
        per_cpu = [one.per_cpu_second for one in got]
        value = statistics.median(wall)
        target, verdict = "", ""
        if world == "fake":
            target = f">= {TARGET:g}"
            verdict = "PASS" if value >= TARGET else "MISS"
        print(
            f"{matrix.name + ', ' + world:<22}{f'{first.cells} of {first.total}':>14}"
            f"{value:>9.1f}{min(wall):>8.1f} - {max(wall):<6.1f}"
            f"{statistics.median(per_cpu):>13.1f}{min(per_cpu):>8.1f} - {max(per_cpu):<6.1f}"
            f"  {target} {verdict}".rstrip()
        )
        subset = "all" if first.cells == first.total else f"{first.cells} of {first.total}"
        record(
            f"throughput_{matrix.name}_{world}",
            value,
            min(wall),
            max(wall),
            f"{subset} cells; {statistics.median(per_cpu):.0f} cells per CPU s",
        )
    return 0


def _one(
    matrix: Matrix, world: str, out: Path, plugins: Path, cells: int, cpu: int | None
) -> Round:
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(plugins), env.get("PYTHONPATH", "")) if part
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        "-p",
        "no:langsmith_plugin",
        "-p",
        PLUGIN_NAME,
        f"--throughput-out={out}",
        f"--throughput-cells={cells}",
        "--toolguard-replay",
        "--toolguard-faults=all",
        f"--toolguard-world={world}",
        *matrix.paths,
    ]
    done = subprocess.run(
        command,
        cwd=matrix.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None,
    )
    if done.returncode != 0 or not out.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise BenchmarkSetupError(f"{matrix.name}, {world}: exit {done.returncode}\n{tail}")
    kept = json.loads(out.read_text(encoding="utf-8"))
    times = kept["times"]
    if not times:
        raise BenchmarkSetupError(f"{matrix.name}, {world}: no cell ran")
    return Round(
        cells=len(times),
        total=int(kept["total"]),
        wall=sum(entry[1] for entry in times),
        cpu=sum(entry[2] for entry in times),
    )


def _shipped_project(root: Path) -> Path:
    """The shipped cassettes and cases, once, in a project of their own."""
    return generate_project(root, shipped(), 1).root


def _example_project(root: Path) -> Path:
    """A copy of the example project, run as its users run it."""
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return root


def _cpu(options: argparse.Namespace) -> int | None:
    """The CPU the runs are pinned to: the first one this process may use."""
    if options.no_pin or not hasattr(os, "sched_getaffinity"):
        return None
    return min(os.sched_getaffinity(0))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the four runs (default 3)")
    parser.add_argument(
        "--cells",
        type=int,
        default=120,
        help="cells per run, spread evenly over the matrix (default 120; 0: every cell)",
    )
    parser.add_argument("--no-pin", action="store_true", help="let the runs use every CPU")
    parser.add_argument("--quick", action="store_true", help="1 round of 30 cells a run")
    parser.add_argument("--dir", default=None, help="where the temporary directory is made")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    options = parser.parse_args(argv)
    if options.quick:
        options.rounds, options.cells = 1, 30
    if options.rounds < 1 or options.cells < 0:
        parser.error("--rounds must be >= 1 and --cells >= 0")
    return options


if __name__ == "__main__":
    sys.exit(main())
