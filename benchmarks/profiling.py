"""Where the time of ``ToolRuntime.execute`` goes (``run.py --profile``).

Two views. ``cProfile`` over the main path shows the call tree, but it
inflates pure-Python steps several times over and says nothing of the time a
thread spends waiting to be woken. The component costs time each step of the
pipeline on its own, without the profiler; a step in a tight loop runs with
warm caches, so their sum falls short of a real call: the gap is what the
steps cost each other (cache misses, the worker thread's wake-ups).

Named ``profiling`` and not ``profile``: this folder comes first on
``sys.path`` and ``cProfile`` imports the standard ``profile`` module.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from variants import ARGUMENTS, SAMPLE_FILE, Variant, make_workspace, runtime_execute, store_only

from pytest_toolguard import Capabilities, Redactor, ToolContext, Workspace
from pytest_toolguard.isolation import ThreadIsolation
from pytest_toolguard.policy import authorize
from pytest_toolguard.tools import read_text


def profile_main(directory: Path, *, calls: int, top: int) -> str:
    """The cProfile report of ``calls`` main-path calls: the ``top`` entries
    by cumulative time, then by own time."""
    directory.mkdir()
    root, content = make_workspace(directory)
    variant = runtime_execute(root, directory / "profile-audit.db", content)
    try:
        for _ in range(200):
            variant.call()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            variant.call()
        profiler.disable()
    finally:
        variant.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write(f"cProfile of {calls} calls of ToolRuntime.execute(read_text), by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(top)
    out.write("by own time (tottime)\n")
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def component_costs(directory: Path, *, calls: int) -> list[tuple[str, float]]:
    """Median µs of each pipeline step, timed alone, in pipeline order."""
    directory.mkdir()
    root, content = make_workspace(directory)
    workspace = Workspace(root)
    capabilities = Capabilities()
    ctx = ToolContext(
        call_id="component",
        session_id="default",
        actor="agent",
        workspace=workspace,
        capabilities=capabilities,
        variables={},
    )
    output = read_text.handler(ctx, path=SAMPLE_FILE)
    redactor = Redactor()
    isolation = ThreadIsolation()
    store: Variant = store_only(directory / "component-audit.db", content)

    def json_round_trip() -> object:
        return json.loads(json.dumps(output, ensure_ascii=False, sort_keys=True, allow_nan=False))

    def timestamp() -> str:
        return datetime.now(timezone.utc).isoformat(timespec="milliseconds")

    output_validator = read_text.output_validator
    assert output_validator is not None  # read_text declares an output schema
    steps: list[tuple[str, Callable[[], object]]] = [
        ("timestamp (taken twice per call)", timestamp),
        ("input schema (compiled validator)", lambda: read_text.input_validator.errors(ARGUMENTS)),
        (
            "policy: authorize (resolve + size the path)",
            lambda: authorize(read_text, ARGUMENTS, capabilities, workspace, {}),
        ),
        ("redact the arguments", lambda: redactor.redact(ARGUMENTS)),
        ("audit store: start + finish", store.call),
        ("thread handoff of a no-op handler", lambda: isolation.run(lambda: None, 10.0, "noop")),
        ("read_text handler (a)", lambda: read_text.handler(ctx, path=SAMPLE_FILE)),
        ("output: JSON dumps + loads", json_round_trip),
        ("output schema (compiled validator)", lambda: output_validator.errors(output)),
        ("redact the output (for the preview)", lambda: redactor.redact(output)),
    ]
    try:
        return [(name, _median_us(step, calls)) for name, step in steps]
    finally:
        isolation.close()
        store.close()
        workspace.close()


def _median_us(step: Callable[[], object], calls: int) -> float:
    for _ in range(calls // 10):
        step()
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        step()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000
