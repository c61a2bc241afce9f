"""Benchmark of fault cells in the directory world: a directory-world cell
against an empty pytest test, and against the same cell in the fake world.
Measured in one run, reported, never asserted.

    .venv/bin/python benchmarks/directory_cell_bench.py     # about 1-2 min
    make bench                                               # with the others

The workload is a generated pytest project: the built-in file tools
twice, as they are (the fake world) and renamed ``<tool>_in_directory``
with ``world="directory"``; one recorded session of 3 calls (read a file,
write one, read it back) for each, copied ``--copies`` times; as many
empty test functions as cells. One pytest run (a subprocess,
``--toolguard-replay --toolguard-faults=all``) holds them all, the copies
of the two worlds alternating and the empty tests spread evenly among
them; a conftest hook wrapper reads the clock around each item's
``pytest_runtest_protocol`` (``matrix_workload.TIMER_CONFTEST``). A
directory-world cell makes its directory, rebuilds the workspace and the
decoys, replays the calls before its target, injects, checks the real
tree and removes it all. The ratios are the medians of the ratios of
medians in consecutive blocks of the run, with their range.

A run whose items do not all pass exits 1 (its timings would mean
nothing); a missed target prints MISS, the status stays 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from matrix_workload import TIMER_CONFTEST
from summary import record
from timing import in_temp_dir, machine
from variants import BenchmarkSetupError

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.harness.directory_world import world_directories
from pytest_toolguard.replay import record_session

EMPTY_TARGET = 10.0
FAKE_TARGET = 2.0
"""The aims: a directory-world cell at most this many empty tests, and
at most this many times the same cell in the fake world."""

PYTEST = (sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q")
CLOCK = time.perf_counter

TOOLS = '''\
"""The built-in tools, and the same tools declaring world="directory"."""
from dataclasses import replace

from pytest_toolguard.registry import ToolRegistry
from pytest_toolguard.tools import builtin_registry

SUFFIX = "_in_directory"


def registry():
    base = list(builtin_registry())
    return ToolRegistry(base + [replace(s, name=s.name + SUFFIX, world="directory") for s in base])
'''

INI = "[pytest]\npythonpath = .\ntoolguard_registry = bench_tools:registry\n"

CALLS = (
    ("read_text", {"path": "notes/a.txt"}),
    ("write_file", {"path": "notes/b.txt", "content": "beta\n" * 20}),
    ("read_text", {"path": "notes/b.txt"}),
)


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("directory-cell-bench", _parse(argv), _run, catch=BenchmarkSetupError)


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(f"directory-world cell benchmark: Python {sys.version.split()[0]}, {machine()}")
    project = directory / "project"
    cells = _generate(project, options.copies)
    left_before = set(world_directories())
    timings = project / "timings.json"
    started = CLOCK()
    done = subprocess.run(
        [
            *PYTEST,
            "--toolguard-replay",
            "--toolguard-faults=all",
            f"--matrix-timings={timings}",
            "--matrix-interleave",
            "-p",
            "no:xdist",
            "cassettes",
            "tests",
        ],
        cwd=project,
        env={key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"},
        capture_output=True,
        text=True,
    )
    seconds = CLOCK() - started
    if done.returncode != 0:
        raise BenchmarkSetupError(f"the run did not pass:\n{done.stdout[-3000:]}")
    by_kind: dict[str, list[float]] = defaultdict(list)
    timed = [(kind, seconds * 1000) for _nodeid, kind, seconds in json.loads(timings.read_text())]
    for kind, ms in timed:
        by_kind[kind].append(ms)
    print(
        f"{len(by_kind['cell-directory'])} directory-world cells, {len(by_kind['cell-fake'])} "
        f"fake-world cells ({cells} a copy), {len(by_kind['empty'])} empty tests, in one "
        f"pytest run; one item: its pytest_runtest_protocol; {seconds:.1f} s"
    )
    print(f"{'item':<34}{'count':>7}{'median ms':>11}{'p10 ms':>9}{'p90 ms':>9}")
    for kind, label in (
        ("cell-directory", "directory-world cell"),
        ("cell-fake", "fake-world cell"),
        ("empty", "empty test (def test_N(): pass)"),
    ):
        values = sorted(by_kind[kind])
        print(
            f"{label:<34}{len(values):>7}{statistics.median(values):>11.3f}"
            f"{values[len(values) // 10]:>9.3f}{values[len(values) * 9 // 10]:>9.3f}"
        )
    print()
    for key, bottom, what, target in (
        ("directory_cell_empty", "empty", "directory-world cell / empty pytest test", EMPTY_TARGET),
        ("directory_fake_cell", "cell-fake", "directory-world cell / fake-world cell", FAKE_TARGET),
    ):
        blocks = _block_ratios(timed, "cell-directory", bottom, options.blocks)
        value = statistics.median(blocks)
        verdict = "ok" if value <= target else "MISS"
        print(
            f"{what}: {value:.2f} (blocks {min(blocks):.2f} - {max(blocks):.2f}; "
            f"aim <= {target:g}: {verdict})"
        )
        record(key, value, min(blocks), max(blocks), f"{len(by_kind['cell-directory'])} cells")
    print()
    _by_fault(timed, json.loads(timings.read_text()))
    if set(world_directories()) != left_before:
        print("a directory world was left behind")
        return 1
    return 0


def _generate(project: Path, copies: int) -> int:
    """The project: the tools, ``copies`` cassettes of each world
    (alternating in collection order) and as many empty tests as cells;
    returns the cells a cassette has."""
    (project / "cassettes").mkdir(parents=True)
    (project / "tests").mkdir()
    (project / "bench_tools.py").write_text(TOOLS)
    (project / "pytest.ini").write_text(INI)
    conftest = TIMER_CONFTEST.replace(
        '        return "cell"\n',
        '        return "cell-directory" if "directory.yaml" in item.nodeid else "cell-fake"\n',
    )
    (project / "conftest.py").write_text(conftest)
    sys.path.insert(0, str(project))
    try:
        from bench_tools import SUFFIX, registry  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(project))
    tools = registry()
    caps = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
    recorded: dict[str, str] = {}
    for world, suffix in (("fake", ""), ("directory", SUFFIX)):
        workspace = project / "recorded" / world / "proj"
        (workspace / "notes").mkdir(parents=True)
        (workspace / "notes" / "a.txt").write_text("alpha\n" * 20)
        runtime = ToolRuntime(tools, str(workspace), caps, SQLiteAuditStore(":memory:"))
        path = project / f"{world}.yaml"
        with record_session(runtime, path):
            for index, (name, arguments) in enumerate(CALLS):
                call = ToolCall(call_id=f"c{index}", tool_name=name + suffix, arguments=arguments)
                result = runtime.execute(call)
                if not result.ok:
                    raise BenchmarkSetupError(f"recording {name + suffix}: {result.message}")
        runtime.close()
        recorded[world] = path.read_text()
        path.unlink()
    for copy in range(copies):
        for world, text in recorded.items():
            (project / "cassettes" / f"c{copy:02d}-{world}.yaml").write_text(text)
    cells = _cells_per_cassette(project)
    empties = "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(cells * copies))
    (project / "tests" / "test_empty.py").write_text(empties)
    return cells


def _cells_per_cassette(project: Path) -> int:
    done = subprocess.run(
        [
            *PYTEST,
            "--collect-only",
            "--toolguard-replay",
            "--toolguard-faults=all",
            "-p",
            "no:xdist",
            "cassettes/c00-fake.yaml",
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )
    cells = sum(1 for line in done.stdout.splitlines() if line.count("::") == 2)
    if done.returncode != 0 or not cells:
        raise BenchmarkSetupError(f"collecting the cells failed:\n{done.stdout[-2000:]}")
    return cells


def _block_ratios(
    timed: list[tuple[str, float]], top: str, bottom: str, blocks: int
) -> list[float]:
    """For each of ``blocks`` consecutive slices of the run, the median of
    ``top`` items over the median of ``bottom`` items in it."""
    size = -(-len(timed) // blocks)
    ratios = []
    for start in range(0, len(timed), size):
        block = timed[start : start + size]
        tops = [ms for kind, ms in block if kind == top]
        bottoms = [ms for kind, ms in block if kind == bottom]
        if tops and bottoms:
            ratios.append(statistics.median(tops) / statistics.median(bottoms))
    if not ratios:
        raise BenchmarkSetupError(f"no block holds both {top} and {bottom} items")
    return ratios


def _by_fault(timed: list[tuple[str, float]], entries: list[list[object]]) -> None:
    """Median ms per fault, in each world."""
    medians: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (kind, ms), (nodeid, *_rest) in zip(timed, entries, strict=True):
        if kind.startswith("cell-"):
            medians[str(nodeid).rsplit("::", 1)[-1]][kind].append(ms)
    print(f"{'fault':<24}{'directory ms':>14}{'fake ms':>10}{'ratio':>8}")
    for fault, kinds in sorted(medians.items()):
        directory = statistics.median(kinds["cell-directory"] or [0.0])
        fake = statistics.median(kinds["cell-fake"] or [0.0])
        shown = f"{directory / fake:.2f}" if fake else "-"
        print(f"{fault:<24}{directory:>14.1f}{fake:>10.1f}{shown:>8}")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=6, help="cassettes of each world")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--dir", default=None, help="where the temporary directory goes")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
