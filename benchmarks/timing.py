"""Timing in alternating blocks, so machine noise hits every variant alike.

Each block runs every variant for ``per_block`` calls, one variant after the
other, and the order rotates from block to block (no variant always runs
right after the same neighbour). Every call is timed on its own with
``perf_counter_ns``; the garbage collector stays on, as in real use.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass
class Samples:
    """The call times of one variant, in nanoseconds."""

    times_ns: list[int] = field(default_factory=list)
    block_medians_ns: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.times_ns) / 1000

    def percentile_us(self, fraction: float) -> float:
        ordered = sorted(self.times_ns)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1000


def measure(
    calls: Mapping[str, Callable[[], object]],
    *,
    warmup: int,
    blocks: int,
    per_block: int,
) -> dict[str, Samples]:
    """Warm every variant up, then time ``blocks * per_block`` calls of each."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    samples = {key: Samples() for key in calls}
    order = list(calls)
    for block in range(blocks):
        shift = block % len(order)
        for key in order[shift:] + order[:shift]:
            times = _time_calls(calls[key], per_block)
            samples[key].times_ns.extend(times)
            samples[key].block_medians_ns.append(statistics.median(times))
    return samples


def _time_calls(call: Callable[[], object], count: int) -> list[int]:
    clock = time.perf_counter_ns
    times = []
    for _ in range(count):
        start = clock()
        call()
        times.append(clock() - start)
    return times


def ratio(numerator: Samples, denominator: Samples) -> tuple[float, float, float]:
    """The ratio of the two variants' medians taken block by block (both ran
    in the same stretch of time), as (median over the blocks, lowest, highest)."""
    pairs = zip(numerator.block_medians_ns, denominator.block_medians_ns, strict=True)
    per_block = [top / bottom for top, bottom in pairs]
    return statistics.median(per_block), min(per_block), max(per_block)


def package_version(name: str) -> str:
    """An installed distribution's version, or "absent"."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def plural(number: int, noun: str) -> str:
    """``1 cell``, ``2 cells``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def machine() -> str:
    """``2 CPUs (2 usable), Linux x86_64``."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return f"{os.cpu_count()} CPUs ({usable} usable), {platform.system()} {platform.machine()}"


def in_temp_dir(
    name: str,
    options: Any,
    run: Callable[[Any, Path], int],
    *,
    catch: type[Exception] | None = None,
) -> int:
    """``run(options, directory)`` in a new temporary directory (under
    ``options.dir``), removed afterwards unless ``options.keep``. A ``catch``
    exception (a variant whose start-up check failed) prints why and gives
    status 1."""
    directory = Path(tempfile.mkdtemp(prefix=f"toolguard-{name}-", dir=options.dir))
    try:
        return run(options, directory)
    except Exception as exc:
        if catch is None or not isinstance(exc, catch):
            raise
        print(f"{name} not run: {exc}", file=sys.stderr)
        return 1
    finally:
        if options.keep:
            print(f"\nfiles kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
