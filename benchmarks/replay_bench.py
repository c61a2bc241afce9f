"""Benchmark of replay: per interaction against ``runtime.execute``, per
cassette against an empty pytest test, and a 10,000-interaction cassette's
load and dump. Measured in one run, reported, never asserted.

    .venv/bin/python benchmarks/replay_bench.py            # the tables, about 40 s
    .venv/bin/python benchmarks/replay_bench.py --profile  # then where the time goes
    make bench                                             # the executor's tables, then these

Everything is compared within this run (alternating blocks, medians of
per-block ratios), never with another machine. A missed target prints MISS
and the exit status stays 0; only a variant that does not work (its check
fails) exits 1. See README.md for what each line measures.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from replay_load import LOADS, PARTS, LoadTimes, time_load
from replay_setup import KINDS, REFERENCES, STEPS, PytestRuns, SetupTimes, Sizes, time_setup
from replay_variants import SERIES, build_batches, measure_batches
from replay_workload import (
    MODULES,
    Session,
    big_cassette,
    one_call_case,
    record_session_workload,
    shipped_interactions,
)
from summary import record
from timing import in_temp_dir, machine, package_version, plural, ratio
from variants import BenchmarkSetupError

from pytest_toolguard.replay import Cassette


@dataclass(frozen=True, slots=True)
class Ratio:
    """``numerator / denominator`` (series keys), with a target when
    ``limit`` is set (``<= limit``)."""

    label: str
    numerator: str
    denominator: str
    limit: float | None = None

    @property
    def target(self) -> str:
        return "" if self.limit is None else f"<= {self.limit:.1f}"

    def verdict(self, value: float) -> str:
        if self.limit is None:
            return ""
        return "PASS" if value <= self.limit else "MISS"


INTERACTION_RATIOS = (
    Ratio("replay / plain   replay per interaction over execute", "replay", "plain", 2.0),
    Ratio("world / plain    execute in replay's world (fs + clock)", "world", "plain"),
    Ratio("fakefs / plain   execute under pyfakefs alone", "fakefs", "plain"),
    Ratio("clock / plain    execute under freezegun alone", "clock", "plain"),
    Ratio("replay / world   replay's checks, same world", "replay", "world"),
    Ratio("bare / plain     replay without its world", "bare", "plain"),
)

CASSETTE_RATIOS = (
    Ratio("set-up / empty test", "set_up", "empty", 3.0),
    Ratio("set-up / empty test, one module each", "set_up", "empty_files"),
    Ratio("replay item / empty test", "replay", "empty"),
    Ratio("replay item / empty test, one module each", "replay", "empty_files"),
)

KIND_LABELS = {
    "empty": "empty test, all in one module",
    "empty_files": "empty test, one module each",
    "replay": "--toolguard-replay item of the one-call case",
}


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("replay-bench", _parse(argv), _run, catch=BenchmarkSetupError)


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(_environment(directory))
    started = time.perf_counter()
    session = record_session_workload(directory / "session")
    case = one_call_case()
    print()
    _per_interaction(options, session)
    print()
    _per_cassette(options, directory / "pytest", case)
    print()
    _load(options, session)
    print(f"\nreplay benchmark: {time.perf_counter() - started:.1f} s in all")
    if options.profile:
        from replay_profile import profile_replay

        print()
        print(profile_replay(session.cassette, case, calls=options.profile_calls, top=20))
    return 0


# -- 1. per interaction -----------------------------------------------------------


def _per_interaction(options: argparse.Namespace, session: Session) -> None:
    started = time.perf_counter()
    batches = build_batches(session)
    samples = measure_batches(
        batches, warmup=options.warmup, blocks=options.blocks, per_block=options.per_block
    )
    elapsed = time.perf_counter() - started
    count = len(session.cassette.interactions)
    depth = len(Path(session.cassette.workspace.root).parts) - 1
    size = statistics.mean(len(content) for content in session.initial.values())
    print(
        f"1. Per interaction. The recorded session: {count} interactions ({MODULES} read_text + "
        f"{MODULES} write_file of {size:,.0f}-byte files; workspace root {depth} levels deep). "
        f"{len(batches)} variants in {options.blocks} alternating blocks of {options.per_block} "
        f"replays ({options.per_block * count} interactions) each; {elapsed:.1f} s"
    )
    print(_row("series", "median µs", "p10 µs", "p90 µs"))
    for key, label in SERIES.items():
        got = samples[key]
        print(
            _row(
                f"{key:<7}{label}",
                f"{got.median_us:.1f}",
                f"{got.percentile_us(0.1):.1f}",
                f"{got.percentile_us(0.9):.1f}",
            )
        )
    print()
    print(_ratio_header("ratio (median of the per-block ratios)", "block range"))
    for item in INTERACTION_RATIOS:
        value, low, high = ratio(samples[item.numerator], samples[item.denominator])
        print(_ratio_row(item, value, low, high))
        if (item.numerator, item.denominator) == ("replay", "plain"):
            record("replay_plain", value, low, high)


# -- 2. per cassette --------------------------------------------------------------


def _per_cassette(options: argparse.Namespace, directory: Path, case: Cassette) -> None:
    started = time.perf_counter()
    runs = PytestRuns(directory, Sizes())
    for kind in KINDS:  # the first run imports pytest's plugins: not timed
        runs.run(kind, runs.sizes.of(kind)[0])
    per_item: dict[str, list[float]] = {kind: [] for kind in KINDS}
    setups: list[SetupTimes] = []
    for round_ in range(options.rounds):
        shift = round_ % len(KINDS)
        for kind in KINDS[shift:] + KINDS[:shift]:
            per_item[kind].append(runs.per_item_ms(kind))
        setups.append(time_setup(case, options.setup_repeats))
    elapsed = time.perf_counter() - started
    modules = len(sys.modules)
    print(
        "2. Per cassette. The one-call case (1 file, 1 read_text); "
        f"{plural(options.rounds, 'round')}, each: the pytest runs, then "
        f"{options.setup_repeats} set-ups; {modules} modules loaded; {elapsed:.1f} s"
    )
    print(_row("in this process (median of the rounds' medians)", "ms", widths=(10,)))
    set_up = [times.set_up for times in setups]
    print(_row("replay() of the case without its call: the set-up", _ms(set_up), widths=(10,)))
    for index, step in enumerate(STEPS):
        print(_row(f"  {step}", _ms([times.steps[index] for times in setups]), widths=(10,)))
    rest = [times.set_up - sum(times.steps) for times in setups]
    print(_row("  the rest (checks, redactor, ...)", _ms(rest), widths=(10,)))
    one_call = [times.one_call for times in setups]
    print(_row("replay() of the case, with its call", _ms(one_call), widths=(10,)))
    load = [times.load for times in setups]
    print(_row("loads() of the case's YAML (an item's, before replay())", _ms(load), widths=(10,)))
    for index, reference in enumerate(REFERENCES):
        print(_row(reference, _ms([times.references[index] for times in setups]), widths=(10,)))
    print()
    print(_row("pytest, per item (slope between two runs)", "ms", "round range", widths=(10, 15)))
    for kind in KINDS:
        low, high = runs.sizes.of(kind)
        values = per_item[kind]
        print(
            _row(
                f"{KIND_LABELS[kind]} ({low} vs {high})",
                _ms(values),
                f"{min(values):.3f} - {max(values):.3f}",
                widths=(10, 15),
            )
        )
    print()
    rounds: dict[str, list[float]] = {"set_up": set_up, **per_item}
    print(_ratio_header("ratio (median of the per-round ratios)", "round range"))
    for item in CASSETTE_RATIOS:
        values = [
            top / bottom
            for top, bottom in zip(rounds[item.numerator], rounds[item.denominator], strict=True)
        ]
        print(_ratio_row(item, statistics.median(values), min(values), max(values)))
        if (item.numerator, item.denominator) == ("set_up", "empty"):
            record("setup_empty", statistics.median(values), min(values), max(values))


# -- 3. a 10,000-interaction cassette ------------------------------------------


def _load(options: argparse.Namespace, session: Session) -> None:
    started = time.perf_counter()
    # Without their amplified variants: the 6 MB this row has always measured (72 MB with them).
    shipped = tuple(replace(item, variants=()) for item in shipped_interactions())
    big = big_cassette(session.cassette, shipped, options.interactions)
    times: LoadTimes = time_load(big, options.load_rounds)
    elapsed = time.perf_counter() - started
    per = times.size_bytes / times.interactions
    print(
        f"3. A {times.interactions:,}-interaction cassette ({times.size_bytes / 1e6:.1f} MB, "
        f"{per:,.0f} bytes per interaction as JSON: the shipped cassettes' {len(shipped)} "
        f"interactions cycled, without their variants); YAML loader {times.loader}; "
        f"median of {plural(options.load_rounds, 'round')}; {elapsed:.1f} s"
    )
    widths = (10, 17, 15)
    print(_row("part", "s", "µs / interaction", "round range", widths=widths))
    for part in PARTS:
        if part not in times.seconds:
            print(_row(part, "n/a", "", "", widths=widths))
            continue
        values = times.seconds[part]
        seconds = statistics.median(values)
        if part == LOADS:
            record("load_10k", seconds, min(values), max(values))
        spread = f"{min(values):.3f} - {max(values):.3f}" if len(values) > 1 else ""
        print(
            _row(
                part,
                f"{seconds:.3f}",
                f"{seconds / times.interactions * 1e6:.1f}",
                spread,
                widths=widths,
            )
        )


# -- output -------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks (default 6)")
    parser.add_argument(
        "--per-block", type=int, default=2, help="replays per variant per block (default 2)"
    )
    parser.add_argument("--warmup", type=int, default=1, help="warm-up replays per variant")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of pytest runs and set-ups (default 3)"
    )
    parser.add_argument(
        "--setup-repeats", type=int, default=15, help="set-ups timed per round (default 15)"
    )
    parser.add_argument(
        "--interactions", type=int, default=10_000, help="interactions of the big cassette"
    )
    parser.add_argument(
        "--load-rounds", type=int, default=2, help="loads and dumps of it (default 2)"
    )
    parser.add_argument("--dir", default=None, help="where the files go (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the files afterwards")
    parser.add_argument(
        "--profile", action="store_true", help="also print where replay's time goes (cProfile)"
    )
    parser.add_argument(
        "--profile-calls", type=int, default=5, help="replays of the session to profile"
    )
    return parser.parse_args(argv)


def _environment(directory: Path) -> str:
    libyaml = "libyaml" if getattr(yaml, "__with_libyaml__", False) else "no libyaml"
    versions = ", ".join(
        f"{name} {package_version(name)}"
        for name in ("pytest", "pyfakefs", "freezegun", "jsonschema", "jsonschema-rs")
    )
    return (
        f"replay env: Python {platform.python_version()}, {versions}, PyYAML "
        f"{yaml.__version__} ({libyaml}); {machine()}; files in {directory}"
    )


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}"


def _ratio_header(title: str, spread: str) -> str:
    return _row(title, "value", spread, "target", widths=(10, 15, 9))


def _ratio_row(item: Ratio, value: float, low: float, high: float) -> str:
    cells = _row(
        item.label, f"{value:.2f}", f"{low:.2f} - {high:.2f}", item.target, widths=(10, 15, 9)
    )
    return f"{cells}  {item.verdict(value)}".rstrip()


def _row(name: str, *cells: str, widths: tuple[int, ...] = (10, 9, 9)) -> str:
    """One table line: the name, then right-aligned cells."""
    widths = widths[: len(cells)]
    aligned = "".join(f" {cell:>{width}}" for cell, width in zip(cells, widths, strict=True))
    return f"{name:<60}{aligned}".rstrip()


if __name__ == "__main__":
    sys.exit(main())
