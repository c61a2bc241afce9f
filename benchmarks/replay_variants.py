"""Per-interaction cost of replay, and of ``runtime.execute`` alone.

Every replay variant calls the library's real ``replay()`` on the recorded
read/write session (``replay_workload``) and times each interaction inside
it. To see inside, the module that builds ``replay()``'s runtime
(``harness.session``) gets, for the duration of one batch, a
``ToolRuntime`` subclass that stamps the clock around ``execute`` and at
``close``: an interaction costs from the start of its ``execute`` to
the start of the next one (the last: to ``close``), which is exactly what
replay does per call (send the call, execute it, compare the result) and
none of what it does once per cassette (build the world, the runtime and
the store before the first call; tear them down and compare files and
audit rows after the last). ``execute`` alone is the first part of it.

The world is the other thing a variant changes. ``replay()`` runs in a
``harness.world.FakeWorld``, which looks up ``frozen_clock`` in its module when it
starts and takes the ``FakeFilesystems`` to run in as an argument of ``replay()``,
so a variant can swap either for a stand-in: no frozen clock (a null
context), or no fake filesystem (a ``FakeFilesystems`` stand-in leaving the real
workspace, put back as it was before the first call). ``plain`` does not
use ``replay()`` at all: a ``ToolRuntime`` on the real workspace with an
in-memory audit store, as replay's is, making the same calls in the same
order.

The clock: freezegun replaces ``time.perf_counter_ns`` (and the same
function held in any module's globals) while it runs, so the stamps use the
real function kept in a tuple, which freezegun does not look into.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from replay_workload import Session
from timing import Samples
from variants import BenchmarkSetupError

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRegistry, ToolResult, ToolRuntime
from pytest_toolguard.harness import session as session_module
from pytest_toolguard.harness import world as world_module
from pytest_toolguard.replay import ReplayReport, WorkspaceState, replay
from pytest_toolguard.tools import builtin_registry

CLOCK: tuple[Callable[[], int]] = (time.perf_counter_ns,)
"""The real ``perf_counter_ns``, out of freezegun's reach (it patches module
globals, not the inside of a tuple)."""

Batch = Callable[[], Mapping[str, list[int]]]
"""One batch of a variant: the ns of each interaction, by series name."""


@dataclass
class _Stamps:
    calls: list[tuple[int, int]] = field(default_factory=list)
    """(start, end) of each ``execute``."""
    closed: int = 0
    """When ``close`` was called (after the last interaction's checks)."""


def _timed_runtime(stamps: _Stamps) -> type[ToolRuntime]:
    class TimedRuntime(ToolRuntime):
        def execute(self, call: ToolCall) -> ToolResult:
            clock = CLOCK[0]
            start = clock()
            result = super().execute(call)
            stamps.calls.append((start, clock()))
            return result

        def close(self, join_timeout: float = 5.0) -> list[str]:
            stamps.closed = CLOCK[0]()
            return super().close(join_timeout)

    return TimedRuntime


@contextmanager
def patched(module: ModuleType, **names: Any) -> Iterator[None]:
    """Replace names in ``module`` for the block."""
    missing = [name for name in names if not hasattr(module, name)]
    if missing:
        raise BenchmarkSetupError(
            f"{module.__name__} no longer has {', '.join(missing)}: update the replay benchmark"
        )
    old = {name: getattr(module, name) for name in names}
    for name, value in names.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(module, name, value)


class _NoFilesystem:
    """What the world's access log wraps when nothing is faked: each of its
    methods does nothing (no fake system call ever reaches it)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class _RealWorkspace:
    """A ``FakeFilesystems`` stand-in that fakes nothing: the world is the real
    workspace, with no real directory mapped in."""

    real_paths: tuple[str, ...] = ()

    @contextmanager
    def filesystem(self, state: WorkspaceState) -> Iterator[Any]:
        yield _NoFilesystem()

    def map_real_paths(self, fs: Any, root: str) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class ReplayRun:
    report: ReplayReport
    per_interaction: list[int]
    """Start of an execute to the start of the next (the last: to close)."""
    execute: list[int]
    """The execute alone."""


def timed_replay(
    session: Session, registry: ToolRegistry, *, fake_fs: bool = True, frozen: bool = True
) -> ReplayRun:
    """``replay()`` of the session's cassette with each interaction timed;
    without the fake filesystem (the real workspace) or without the frozen
    clock when asked. The real workspace is put back first either way."""
    cassette = session.cassette
    session.reset()
    stamps = _Stamps()
    clock: dict[str, Any] = {} if frozen else {"frozen_clock": lambda moment: nullcontext()}
    with (
        patched(session_module, ToolRuntime=_timed_runtime(stamps)),
        patched(world_module, **clock),
    ):
        report = replay(cassette, registry, fake_filesystems=None if fake_fs else _RealWorkspace())
    starts = [start for start, _ in stamps.calls] + [stamps.closed]
    per_interaction = [
        following - start for start, following in zip(starts, starts[1:], strict=False)
    ]
    return ReplayRun(report, per_interaction, [end - start for start, end in stamps.calls])


def check_run(name: str, run: ReplayRun, session: Session, *, fake_fs: bool, frozen: bool) -> None:
    """The run replayed cleanly, every interaction was timed, and it ran in
    the world it claims (fake filesystem: the real files untouched; frozen
    clock: the audit rows carry the recorded time)."""
    count = len(session.cassette.interactions)
    if not run.report.ok:
        first = run.report.differences[0]
        raise BenchmarkSetupError(
            f"{name}: replay found {len(run.report.differences)} difference(s), first: "
            f"{first.where} {first.field}: {first.recorded!r} != {first.replayed!r}"
        )
    if len(run.execute) != count or len(run.per_interaction) != count:
        raise BenchmarkSetupError(
            f"{name}: timed {len(run.execute)} of {count} interactions: replay() no longer "
            "builds its runtime as replay_variants.py expects"
        )
    changed = session.changed()
    if fake_fs and changed:
        raise BenchmarkSetupError(f"{name}: the real workspace changed ({changed[0]})")
    if not fake_fs and len(changed) != len(session.initial):
        raise BenchmarkSetupError(f"{name}: the writes did not reach the real workspace")
    recorded = (session.cassette.recorded_at or "")[:19]
    stamped = run.report.audit_rows[0].started_at[:19] if run.report.audit_rows else ""
    if frozen != (stamped == recorded):
        raise BenchmarkSetupError(
            f"{name}: audit time {stamped!r} with the recorded time {recorded!r}: the clock "
            f"was {'not ' if frozen else ''}frozen"
        )


def plain_batch(session: Session) -> list[int]:
    """The session's calls through a fresh plain ``ToolRuntime`` on the real
    workspace (in-memory audit store), each timed; the workspace is put back
    first. Checks every result against the cassette's."""
    session.reset()
    store = SQLiteAuditStore(":memory:")
    runtime = ToolRuntime(builtin_registry(), str(session.root), session.capabilities, store)
    clock = CLOCK[0]
    times = []
    results = []
    try:
        for call in session.calls:
            start = clock()
            result = runtime.execute(call)
            times.append(clock() - start)
            results.append(result)
    finally:
        runtime.close()
        store.close()
    for interaction, result in zip(session.cassette.interactions, results, strict=True):
        if (result.ok, result.code.value) != (interaction.result.ok, interaction.result.code):
            raise BenchmarkSetupError(
                f"plain: {interaction.call.call_id} answered {result.code}: {result.message}"
            )
    return times


SERIES: dict[str, str] = {
    "replay": "replay(): execute + checks, fake fs + frozen clock",
    "world": "  of which runtime.execute",
    "fakefs": "runtime.execute in replay(), fake fs only",
    "clock": "runtime.execute in replay(), frozen clock only",
    "bare": "replay(): execute + checks, real fs and clock",
    "plain": "runtime.execute, plain ToolRuntime, real fs",
}
"""Every series the per-interaction table shows, in order, with its label."""


def build_batches(session: Session) -> dict[str, Batch]:
    """Each variant as one batch (one replay of the session, or one pass of
    its calls), checked once before it is timed."""
    registry = builtin_registry()

    def full() -> Mapping[str, list[int]]:
        run = timed_replay(session, registry)
        check_run("replay", run, session, fake_fs=True, frozen=True)
        return {"replay": run.per_interaction, "world": run.execute}

    def fakefs() -> Mapping[str, list[int]]:
        run = timed_replay(session, registry, frozen=False)
        check_run("fake fs only", run, session, fake_fs=True, frozen=False)
        return {"fakefs": run.execute}

    def clock() -> Mapping[str, list[int]]:
        run = timed_replay(session, registry, fake_fs=False)
        check_run("frozen clock only", run, session, fake_fs=False, frozen=True)
        return {"clock": run.execute}

    def bare() -> Mapping[str, list[int]]:
        run = timed_replay(session, registry, fake_fs=False, frozen=False)
        check_run("neither", run, session, fake_fs=False, frozen=False)
        return {"bare": run.per_interaction}

    def plain() -> Mapping[str, list[int]]:
        return {"plain": plain_batch(session)}

    batches: dict[str, Batch] = {
        "replay": full,
        "fakefs": fakefs,
        "clock": clock,
        "bare": bare,
        "plain": plain,
    }
    for batch in batches.values():
        batch()  # the checks, and a first warm-up
    return batches


def measure_batches(
    batches: Mapping[str, Batch], *, warmup: int, blocks: int, per_block: int
) -> dict[str, Samples]:
    """Like ``timing.measure``, with batches: every variant runs
    ``per_block`` batches per block, the order rotating from block to block;
    each series gets one median per block (for ``timing.ratio``)."""
    for batch in batches.values():
        for _ in range(warmup):
            batch()
    samples: dict[str, Samples] = {}
    order = list(batches)
    for block in range(blocks):
        shift = block % len(order)
        for key in order[shift:] + order[:shift]:
            collected: dict[str, list[int]] = {}
            for _ in range(per_block):
                for series, times in batches[key]().items():
                    collected.setdefault(series, []).extend(times)
            for series, times in collected.items():
                got = samples.setdefault(series, Samples())
                got.times_ns.extend(times)
                got.block_medians_ns.append(statistics.median(times))
    return samples
