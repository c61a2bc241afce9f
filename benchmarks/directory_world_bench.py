"""Benchmark of the directory world: replay per interaction in a fresh real
directory against replay per interaction in the fake filesystem, measured
in one run (alternating blocks), reported, never asserted.

    .venv/bin/python benchmarks/directory_world_bench.py     # about 30 s
    make bench                                                # with the others

The session is replay's benchmark session (``replay_workload``: 20
``read_text`` and 20 ``write_file`` calls on 20 small modules), recorded
once; the same cassette is replayed with ``world="fake"`` and with
``world="directory"`` (its tools work in both). A replay's time divided by
its interactions is the per-interaction time; the ratio is the median of
the per-block ratios. Each directory-world replay makes its directory,
rebuilds 20 files and 4 decoys, runs the calls, reads the tree and the
decoys back and removes it all.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from replay_workload import record_session_workload
from summary import record
from timing import in_temp_dir, machine, measure, ratio
from variants import BenchmarkSetupError

from pytest_toolguard.harness.directory_world import world_directories
from pytest_toolguard.replay import replay
from pytest_toolguard.tools import builtin_registry

WORLDS = ("fake", "directory")


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("directory-world-bench", _parse(argv), _run, catch=BenchmarkSetupError)


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(f"directory world benchmark: Python {sys.version.split()[0]}, {machine()}")
    started = time.perf_counter()
    session = record_session_workload(directory / "session")
    cassette, registry = session.cassette, builtin_registry()
    for world in WORLDS:  # a replay that does not work is no measurement
        report = replay(cassette, registry, world=world)
        if not report.ok:
            first = report.differences[0]
            raise BenchmarkSetupError(f"{world} world: {first.where} {first.field} differs")
    left_before = set(world_directories())
    samples = measure(
        {world: (lambda world=world: replay(cassette, registry, world=world)) for world in WORLDS},
        warmup=options.warmup,
        blocks=options.blocks,
        per_block=options.per_block,
    )
    count = len(cassette.interactions)
    print(
        f"{count} interactions a replay; {options.blocks} alternating blocks of "
        f"{options.per_block} replays per world; {time.perf_counter() - started:.1f} s"
    )
    print(f"{'world':<12}{'µs / interaction':>18}{'p10':>10}{'p90':>10}")
    for world in WORLDS:
        got = samples[world]
        print(
            f"{world:<12}{got.median_us / count:>18.1f}"
            f"{got.percentile_us(0.1) / count:>10.1f}{got.percentile_us(0.9) / count:>10.1f}"
        )
    value, low, high = ratio(samples["directory"], samples["fake"])
    print(
        f"directory-world replay per interaction / fake-world replay per interaction: "
        f"{value:.2f} (blocks {low:.2f} - {high:.2f})"
    )
    record("directory_fake_replay", value, low, high)
    if set(world_directories()) != left_before:
        print("a directory world was left behind")
        return 1
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--per-block", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the temporary directory goes")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
