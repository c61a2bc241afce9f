"""Benchmark of ``ToolRuntime.execute``: measured against its floor and the
seed's naive executor, in one run, and reported, never asserted.

    make bench                                   # the tables, then replay's (replay_bench.py)
    .venv/bin/python benchmarks/run.py --profile # the tables, then where the time goes
    .venv/bin/python benchmarks/run.py --no-replay   # the executor's table alone

Every variant makes one ``read_text`` call of the same 1 KB file per
iteration (see ``variants.py`` and README.md). The variants run in
alternating blocks in this one process, so the ratios compare like with
like; absolute times from other machines or runs do not. A missed target is
printed as MISS and the exit status stays 0; only a variant that does not
work (its check fails) exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from handoff import HANDOFFS, handoff_samples
from profiling import component_costs, profile_main
from summary import record
from timing import Samples, in_temp_dir, measure, ratio
from variants import SAMPLE_BYTES, BenchmarkSetupError, Variant, build_all


@dataclass(frozen=True, slots=True)
class Ratio:
    """One line of the ratio table: ``numerator / denominator`` (variant
    keys), with a target when ``limit`` is set."""

    label: str
    numerator: str
    denominator: str
    limit: float | None = None
    inclusive: bool = True
    """The target is ``<= limit`` when inclusive, else ``< limit``."""

    @property
    def target(self) -> str:
        if self.limit is None:
            return ""
        return f"{'<=' if self.inclusive else '<'} {self.limit:.1f}"

    def verdict(self, value: float) -> str:
        if self.limit is None:
            return ""
        met = value <= self.limit if self.inclusive else value < self.limit
        return "PASS" if met else "MISS"


RATIOS = (
    Ratio("main / (b)  executor over the floor", "main", "b", limit=3.0),
    Ratio("main / (c)  executor over naive", "main", "c", limit=1.0),
    Ratio("main / (a)  executor over the work itself", "main", "a"),
    Ratio("(s) / (b)   audit store over the floor", "s", "b"),
    Ratio("main / (s)  executor over its audit store", "main", "s"),
    Ratio("(t) / main  thread mode (the default) over inline", "t", "main"),
    Ratio("(t) / (b)   thread mode over the floor", "t", "b"),
    Ratio("(t) / (c)   thread mode over naive", "t", "c"),
)

SUMMARY_KEYS = {("main", "c"): "execute_naive", ("main", "b"): "execute_floor"}
"""The ratios that are rows of the summary (``summary.py``)."""


def main(argv: list[str] | None = None) -> int:
    options = _parse(argv)
    status = in_temp_dir("bench", options, _run)
    if options.no_replay:
        return status
    print()
    return max(status, _replay(options))


def _replay(options: argparse.Namespace) -> int:
    """The replay benchmark (``replay_bench.py``), with this run's --dir,
    --keep and --profile."""
    import replay_bench

    argv = ["--dir", options.dir] if options.dir else []
    argv += ["--keep"] if options.keep else []
    argv += ["--profile"] if options.profile else []
    return replay_bench.main(argv)


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(_environment(directory))
    try:
        variants = build_all(directory)
    except BenchmarkSetupError as exc:
        print(f"benchmark not run: {exc}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    try:
        samples = measure(
            {variant.key: variant.call for variant in variants},
            warmup=options.warmup,
            blocks=options.blocks,
            per_block=options.per_block,
        )
    finally:
        for variant in variants:
            variant.close()
    elapsed = time.perf_counter() - started
    print(
        f"read_text of a {SAMPLE_BYTES:,}-byte file; {options.blocks * options.per_block:,} "
        f"calls per variant in {options.blocks} alternating blocks of {options.per_block}, "
        f"after {options.warmup} warm-up calls; {elapsed:.1f} s"
    )
    print()
    print(_variant_table(variants, samples))
    print()
    print(_ratio_table(samples))
    print()
    print(_handoff_table(options))
    if options.profile:
        print()
        _print_profile(directory, options.profile_calls)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks (default 10)")
    parser.add_argument(
        "--per-block", type=int, default=300, help="calls per variant per block (default 300)"
    )
    parser.add_argument("--warmup", type=int, default=300, help="warm-up calls per variant")
    parser.add_argument(
        "--dir", default=None, help="where the workspace and databases go (default: the temp dir)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print cProfile of the main path and the cost of each pipeline step",
    )
    parser.add_argument("--profile-calls", type=int, default=2000, help="calls to profile")
    parser.add_argument(
        "--no-replay",
        action="store_true",
        help="skip the replay benchmark that follows (replay_bench.py, about 45 s)",
    )
    return parser.parse_args(argv)


def _environment(directory: Path) -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return (
        f"env: Python {platform.python_version()} ({platform.python_implementation()}), "
        f"SQLite {sqlite3.sqlite_version}, jsonschema {metadata.version('jsonschema')}, "
        f"{os.cpu_count()} CPUs ({usable} usable), {platform.system()} {platform.machine()}; "
        f"databases in {directory}"
    )


def _variant_table(variants: list[Variant], samples: dict[str, Samples]) -> str:
    lines = [_row("variant", "median µs", "p10 µs", "p90 µs")]
    for variant in variants:
        got = samples[variant.key]
        name = "main" if variant.key == "main" else f"({variant.key})"
        lines.append(
            _row(
                f"{name:<5} {variant.label}",
                f"{got.median_us:.1f}",
                f"{got.percentile_us(0.1):.1f}",
                f"{got.percentile_us(0.9):.1f}",
            )
        )
    return "\n".join(lines)


def _ratio_table(samples: dict[str, Samples]) -> str:
    widths = (10, 15, 9)
    lines = [
        _row(
            "ratio (median of the per-block ratios)",
            "value",
            "block range",
            "target",
            widths=widths,
        )
    ]
    for item in RATIOS:
        value, low, high = ratio(samples[item.numerator], samples[item.denominator])
        spread = f"{low:.2f} - {high:.2f}"
        cells = _row(item.label, f"{value:.2f}", spread, item.target, widths=widths)
        lines.append(f"{cells}  {item.verdict(value)}".rstrip())
        summary_key = SUMMARY_KEYS.get((item.numerator, item.denominator))
        if summary_key is not None:
            record(summary_key, value, low, high)
    return "\n".join(lines)


def _handoff_table(options: argparse.Namespace) -> str:
    """What handing a call to a worker thread costs: the runtime's handoff
    against the bare mechanisms (``handoff.py``), in alternating blocks."""
    samples = handoff_samples(
        warmup=options.warmup, blocks=options.blocks, per_block=options.per_block
    )
    lines = [_row("handoff of a no-op, round trip", "median µs", "p10 µs", "p90 µs")]
    for key, label in HANDOFFS:
        got = samples[key]
        lines.append(
            _row(
                label,
                f"{got.median_us:.1f}",
                f"{got.percentile_us(0.1):.1f}",
                f"{got.percentile_us(0.9):.1f}",
            )
        )
    value, low, high = ratio(samples["isolation"], samples["two_locks"])
    lines.append(
        _row(
            "ThreadIsolation.run / the bare two-lock worker",
            f"{value:.2f}",
            f"{low:.2f} - {high:.2f}",
            widths=(10, 15),
        )
    )
    return "\n".join(lines)


def _print_profile(directory: Path, calls: int) -> None:
    costs = component_costs(directory / "components", calls=calls)
    print(_row("pipeline step, timed alone", "median µs"))
    for name, median in costs:
        print(_row(name, f"{median:.1f}"))
    total = sum(median for _, median in costs)
    print(_row("sum (steps alone; a real call costs more)", f"{total:.1f}"))
    print()
    print(profile_main(directory / "profile", calls=calls, top=25))


def _row(name: str, *cells: str, widths: tuple[int, ...] = (10, 9, 9)) -> str:
    """One table line: the name, then right-aligned cells."""
    widths = widths[: len(cells)]
    aligned = "".join(f" {cell:>{width}}" for cell, width in zip(cells, widths, strict=True))
    return f"{name:<52}{aligned}"


if __name__ == "__main__":
    sys.exit(main())
