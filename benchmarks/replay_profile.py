"""Where replay's time goes (``replay_bench.py --profile``).

cProfile sees only the thread it runs in, and the runtime runs handlers on
a worker thread, so for the profile only, the runtime ``replay()`` builds
runs handlers inline (its isolation swapped for one that calls the handler
directly): the handler's file operations then show up. Two profiles:

* the per-interaction work: ``replay()`` of the recorded read/write session
  ``calls`` times, with the set-up left in (it is small beside 40 calls);
* the per-cassette set-up: ``replay()`` of the one-call case without its
  call, many times.

Each is summarised by where the own time (tottime) is spent: pyfakefs,
freezegun, this library, PyYAML, jsonschema, sqlite3, the rest of the
standard library and built-ins; then the top entries, and for the first one
how many calls per interaction each faked ``os``/``open`` function gets.
cProfile inflates pure-Python code (pyfakefs is all Python), so read the
shares for the shape and the benchmark's ratios for the cost.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import freezegun
import pyfakefs
from replay_variants import patched

import pytest_toolguard
from pytest_toolguard import ToolRuntime
from pytest_toolguard.harness import session as session_module
from pytest_toolguard.replay import Cassette, replay
from pytest_toolguard.tools import builtin_registry

_AREAS: tuple[tuple[str, str], ...] = (
    ("pyfakefs", os.path.dirname(pyfakefs.__file__)),
    ("freezegun", os.path.dirname(freezegun.__file__)),
    ("pytest_toolguard", os.path.dirname(pytest_toolguard.__file__)),
    ("yaml", "yaml"),
    ("jsonschema", "jsonschema"),
)


class _Inline:
    """An isolation that runs the handler on the calling thread."""

    def run(self, fn: Callable[[], Any], timeout: float, name: str) -> Any:
        return fn()

    def close(self, join_timeout: float = 5.0) -> list[str]:
        return []


class _InlineRuntime(ToolRuntime):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._isolation = self._invocation.isolation = _Inline()


def profile_replay(cassette: Cassette, case: Cassette, *, calls: int, top: int) -> str:
    registry = builtin_registry()
    out = io.StringIO()
    count = len(cassette.interactions)
    with patched(session_module, ToolRuntime=_InlineRuntime):
        replay(cassette, registry)
        stats = _profile(lambda: replay(cassette, registry), calls)
    out.write(
        f"cProfile of {calls} replay() runs of the read/write session ({count} interactions "
        "each), handlers inline\n"
    )
    out.write(_areas(stats))
    out.write(_fake_calls(stats, calls * count))
    _top(stats, out, "tottime", top)

    empty = replace(case, interactions=())
    runs = max(calls * 10, 50)
    stats = _profile(lambda: replay(empty, registry), runs)
    out.write(f"\ncProfile of {runs} replay() runs of the case without its call (the set-up)\n")
    out.write(_areas(stats))
    _top(stats, out, "cumulative", top)
    return out.getvalue()


def _profile(step: Callable[[], object], runs: int) -> pstats.Stats:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        step()
    profiler.disable()
    return pstats.Stats(profiler)


def _area(filename: str) -> str:
    for name, where in _AREAS:
        if filename.startswith(where) or f"{os.sep}{where}{os.sep}" in filename:
            return name
    if "sqlite3" in filename:
        return "sqlite3"
    if filename == "~" or filename.startswith("<"):
        return "built-ins (C)"
    return "standard library, other"


def _areas(stats: pstats.Stats) -> str:
    own: dict[str, float] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        area = _area(filename)
        if area == "built-ins (C)" and "sqlite3" in function:
            area = "sqlite3"
        own[area] = own.get(area, 0.0) + tottime
    total = sum(own.values()) or 1.0
    lines = [f"  own time by area (total {total:.2f} s under the profiler):"]
    for area, seconds in sorted(own.items(), key=lambda item: -item[1]):
        lines.append(f"    {area:<28} {100 * seconds / total:5.1f} %")
    return "\n".join(lines) + "\n"


def _fake_calls(stats: pstats.Stats, interactions: int) -> str:
    fakefs = os.path.dirname(pyfakefs.__file__)
    counts: dict[str, int] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, ncalls, _tt, _ct, _callers) in raw.items():
        base = os.path.basename(filename)
        if filename.startswith(fakefs) and base in ("fake_os.py", "fake_open.py", "fake_path.py"):
            if function.startswith("_") or function in ("wrapped", "__getattr__", "call"):
                continue
            key = f"{base[:-3]}.{function}"
            counts[key] = counts.get(key, 0) + ncalls
    busiest = sorted(counts.items(), key=lambda item: -item[1])[:12]
    shown = ", ".join(f"{name} {count / interactions:.1f}" for name, count in busiest)
    return f"  faked os/open/path calls per interaction: {shown}\n"


def _top(stats: pstats.Stats, out: io.StringIO, key: str, top: int) -> None:
    stats.stream = out  # type: ignore[attr-defined]
    out.write(f"  top {top} by {key}:\n")
    stats.strip_dirs().sort_stats(key).print_stats(top)
