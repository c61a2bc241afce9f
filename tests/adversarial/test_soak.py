"""Soak: many threads, many mixed calls, nothing leaks.

Eight threads make 20,000 calls through one runtime: reads, writes,
refusals (policy, schema, unknown tool), keyed calls sent twice (by the same
thread, and by two threads at once) and calls that time out. Afterwards
every call has its one audit row, no idempotency key had two effects, the
process holds the descriptors and memory it held before, and SQLite's
``integrity_check`` is ok.

Then the disk under the audit database fills mid-run (a small tmpfs filled
to the last byte): calls answer AUDIT_UNAVAILABLE, the handlers of all but
READ tools never run, a READ call's data never leaves unrecorded (its one
row is written after its handler), and once there is space again
everything recovers.

Each test prints its figures (calls, rows, descriptors, RSS, time).
"""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    Capabilities,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.contract import ErrorCode
from pytest_toolguard.registry import PathAccess

THREADS = 8
CALLS = 20_000
WARM_UP = 50
"""Calls per thread before the baseline: every thread has its connection,
every cache and lazy import is filled."""
TOLERANCE = 0.05
DEADLINE = 0.02
"""Seconds the timing-out tool gets (it waits for its cancellation)."""
BOUND = 60.0
"""Seconds a thread waits for the others at a phase's end (a bound)."""

CAPS = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("out", "effects")
)
ANY_TEXT = {"type": "string"}


def _read(ctx: Any, name: str) -> Any:
    return {"text": ctx.workspace.read_text(name)}


def _write(ctx: Any, name: str, text: str) -> Any:
    ctx.workspace.write_text(name, text)
    return {"written": len(text)}


def _slow(ctx: Any, n: int) -> Any:
    ctx.cancelled.wait(BOUND)  # set at the deadline: the worker ends right after
    return {"n": n}


class Ran:
    """The ids of the calls whose handler ran, every tool's."""

    def __init__(self) -> None:
        self.call_ids: list[str] = []
        self._lock = threading.Lock()

    def tracked(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        def run(ctx: Any, **arguments: Any) -> Any:
            with self._lock:
                self.call_ids.append(ctx.call_id)
            return handler(ctx, **arguments)

        return run


def _effect(ctx: Any, key: str) -> Any:
    """The keyed tool's side effect: one file per run, named for its key."""
    ctx.workspace.write_text(f"effects/{key}.{ctx.call_id}", ctx.call_id)
    return {"key": key}


def _tools(ran: Ran) -> ToolRegistry:
    def spec(name: str, handler: Any, properties: dict[str, Any], **options: Any) -> ToolSpec:
        return ToolSpec(
            name=name,
            description=name,
            input_schema={
                "type": "object",
                "properties": properties,
                "required": sorted(properties),
                "additionalProperties": False,
            },
            handler=ran.tracked(handler),
            **options,
        )

    return ToolRegistry(
        [
            spec("read_note", _read, {"name": ANY_TEXT}, paths=(PathAccess.read("{name}"),)),
            spec(
                "write_note",
                _write,
                {"name": ANY_TEXT, "text": ANY_TEXT},
                risk=Risk.WRITE,
                paths=(PathAccess.write("{name}"),),
            ),
            spec("effect", _effect, {"key": ANY_TEXT}, risk=Risk.WRITE),
            spec("slow", _slow, {"n": {"type": "integer"}}, timeout_seconds=DEADLINE),
        ]
    )


READ_TOOLS = frozenset({"read_note", "slow"})
"""The READ tools of ``_tools``."""

OK = {ErrorCode.OK}
KEYED = {ErrorCode.OK, ErrorCode.IDEMPOTENT_REPLAY, ErrorCode.DUPLICATE_CALL}
EXPECTED: dict[str, set[ErrorCode]] = {
    "read": OK,
    "write": OK,
    "policy refusal": {ErrorCode.PERMISSION_DENIED},
    "schema refusal": {ErrorCode.INVALID_ARGUMENT},
    "unknown tool": {ErrorCode.TOOL_NOT_FOUND},
    "keyed": KEYED,
    "keyed, shared": KEYED,
    "timeout": {ErrorCode.TIMEOUT},
}


def mixed_call(thread: int, index: int) -> tuple[str, ToolCall]:
    """Call ``index`` of ``thread``: its kind and the call. Of every 20:
    7 reads, 4 writes, 2 policy refusals, 1 schema refusal, 1 unknown tool,
    2 keyed calls (each key sent twice in a row by this thread), 2 keyed
    calls whose key the partner thread sends too, at about the same time,
    and 1 call that times out."""
    call_id = f"t{thread}-{index}"
    slot, turn = index % 20, index // 20

    def call(tool: str, arguments: dict[str, Any], key: str | None = None) -> ToolCall:
        return ToolCall(call_id, tool, arguments, idempotency_key=key)

    if slot < 7:
        return "read", call("read_note", {"name": f"notes/{index % 10}.txt"})
    if slot < 11:
        return "write", call("write_note", {"name": f"out/{call_id}.txt", "text": call_id})
    if slot < 13:
        return "policy refusal", call("write_note", {"name": "notes/0.txt", "text": "x"})
    if slot == 13:
        return "schema refusal", call("read_note", {"nom": "notes/0.txt"})
    if slot == 14:
        return "unknown tool", call("delete_everything", {})
    if slot < 17:  # 15 and 16: the same key, one after the other
        key = f"own-{thread}-{turn}"
        return "keyed", call("effect", {"key": key}, key)
    if slot < 19:  # 17 and 18: a key the partner thread sends in the same slots
        key = f"shared-{thread // 2}-{turn}-{slot}"
        return "keyed, shared", call("effect", {"key": key}, key)
    return "timeout", call("slow", {"n": index})


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "notes").mkdir(parents=True)
    for number in range(10):
        (root / "notes" / f"{number}.txt").write_text(f"note {number}\n")
    (root / "out").mkdir()
    (root / "effects").mkdir()
    return root


class Phases:
    """``THREADS`` threads making calls in phases; the main thread acts
    between phases (``between``), while every caller waits. Only a tally of
    each phase's results is kept (keeping 20,000 results would be the
    memory growth measured), and the calls answered AUDIT_UNAVAILABLE, each
    with the data of its result."""

    def __init__(self, runtime: ToolRuntime, calls_per_phase: list[int]) -> None:
        self.runtime = runtime
        self.calls_per_phase = calls_per_phase
        self.tallies: list[Counter[tuple[str, ErrorCode]]] = [Counter() for _ in calls_per_phase]
        self.audit_unavailable: list[list[tuple[ToolCall, Any]]] = [[] for _ in calls_per_phase]
        self._barrier = threading.Barrier(THREADS + 1, timeout=BOUND)
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def run(self, between: Callable[[int], None]) -> None:
        threads = [threading.Thread(target=self._caller, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        try:
            for phase in range(len(self.calls_per_phase)):
                self._barrier.wait()  # the phase starts
                self._barrier.wait()  # every thread ended it
                between(phase)
        finally:
            for thread in threads:
                thread.join(BOUND)
        assert self._errors == []

    def _caller(self, thread: int) -> None:
        index = 0
        try:
            for phase, count in enumerate(self.calls_per_phase):
                self._barrier.wait()
                tally: Counter[tuple[str, ErrorCode]] = Counter()
                refused = []
                for _ in range(count):
                    kind, call = mixed_call(thread, index)
                    result = self.runtime.execute(call)
                    tally[kind, result.code] += 1
                    if result.code is ErrorCode.AUDIT_UNAVAILABLE:
                        refused.append((call, result.data))
                    index += 1
                with self._lock:
                    self.tallies[phase].update(tally)
                    self.audit_unavailable[phase].extend(refused)
                self._barrier.wait()
        except BaseException as exc:
            self._errors.append(exc)
            self._barrier.abort()


def unexpected(
    tally: Counter[tuple[str, ErrorCode]], expected: dict[str, set[ErrorCode]] = EXPECTED
) -> Counter[str]:
    return Counter(
        {
            f"{kind}: {code.value}": n
            for (kind, code), n in tally.items()
            if code not in expected[kind]
        }
    )


def effects_per_key(workspace: Path) -> Counter[str]:
    return Counter(name.rsplit(".", 2)[0] for name in os.listdir(workspace / "effects"))


@pytest.mark.slow
def test_soak_of_mixed_calls_on_eight_threads_leaks_nothing(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    store = SQLiteAuditStore(tmp_path / "audit.db")
    runtime = ToolRuntime(_tools(Ran()), workspace, CAPS, store)
    per_thread = CALLS // THREADS
    phases = Phases(runtime, [WARM_UP, per_thread])
    marks: dict[str, float] = {}

    def between(phase: int) -> None:
        gc.collect()
        when = "before" if phase == 0 else "after"
        marks[f"fds {when}"] = open_descriptors()
        marks[f"rss {when}"] = resident_bytes()
        marks[f"time {when}"] = time.perf_counter()

    phases.run(between)
    soaked = phases.tallies[1]
    made = THREADS * (WARM_UP + per_thread)
    rows = store.count()
    kinds: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    for (kind, code), n in soaked.items():
        kinds[kind] += n
        codes[code.value] += n
    two_effects = {key: n for key, n in effects_per_key(workspace).items() if n > 1}
    assert runtime.close() == []
    integrity = store.integrity_check()
    store.close()
    seconds = marks["time after"] - marks["time before"]
    print(
        f"\n[soak] {soaked.total()} calls on {THREADS} threads in {seconds:.1f} s "
        f"({soaked.total() / seconds:.0f} calls/s; {dict(kinds)}; {dict(codes)}); "
        f"audit rows {rows} for "
        f"{made} calls (warm-up included); keys with two effects {len(two_effects)}; "
        f"open fds {marks['fds before']:.0f} -> {marks['fds after']:.0f}; "
        f"RSS {marks['rss before'] / 2**20:.1f} -> {marks['rss after'] / 2**20:.1f} MiB; "
        f"integrity_check {integrity}"
    )
    assert soaked.total() == CALLS
    assert unexpected(soaked) == Counter()
    assert rows == made
    assert two_effects == {}
    assert abs(marks["fds after"] - marks["fds before"]) <= TOLERANCE * marks["fds before"]
    assert abs(marks["rss after"] - marks["rss before"]) <= TOLERANCE * marks["rss before"]
    assert integrity == "ok"


# --- the audit database's disk fills mid-run ------------------------------------------


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of this test's own (root only: CI runs as root, so
    there a mount that fails is an error, elsewhere the test skips)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = f"cannot mount a small tmpfs: {done.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(filesystem: Path) -> Path:
    """Write a file until the filesystem has no byte left."""
    filler = filesystem / "filler"
    with open(filler, "wb", buffering=0) as out:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return filler


DISK_PHASE_CALLS = 100
"""Calls per thread in each of the three phases (space, full, space again)."""


@pytest.mark.slow
def test_audit_disk_filling_mid_run_fails_closed_and_recovers(
    tmp_path: Path, small_filesystem: Path
) -> None:
    workspace = _workspace(tmp_path)
    store = SQLiteAuditStore(small_filesystem / "audit.db")
    ran = Ran()
    runtime = ToolRuntime(_tools(ran), workspace, CAPS, store)
    phases = Phases(runtime, [DISK_PHASE_CALLS] * 3)
    filler: list[Path] = []

    def between(phase: int) -> None:
        if phase == 0:
            filler.append(fill(small_filesystem))
        elif phase == 1:
            filler[0].unlink()

    with warnings.catch_warnings():  # every write the full disk refused warns
        warnings.simplefilter("ignore", RuntimeWarning)
        phases.run(between)
        pending = runtime.flush_audit()
    before, full, after = phases.tallies
    refused = phases.audit_unavailable[1]
    audit_rows = {row.call_id: row for row in store.rows()}
    ran_unaudited = [call_id for call_id in ran.call_ids if call_id not in audit_rows]
    made = THREADS * DISK_PHASE_CALLS * 3
    print(
        f"\n[disk full] {made} calls on {THREADS} threads: {len(refused)} of {full.total()} "
        f"answered AUDIT_UNAVAILABLE while the disk was full; audit rows {len(audit_rows)}; "
        f"pending writes after recovery {pending}; handlers run unaudited {len(ran_unaudited)}"
    )
    assert unexpected(before) == Counter() and unexpected(after) == Counter()
    assert refused  # the full disk did refuse writes
    full_disk = {kind: codes | {ErrorCode.AUDIT_UNAVAILABLE} for kind, codes in EXPECTED.items()}
    assert unexpected(full, full_disk) == Counter()
    # A READ call's handler may have run (its row is written after it), but
    # no refused call carries data; no other tool's handler ran.
    assert [call.call_id for call, data in refused if data is not None] == []
    not_reads = {call.call_id for call, _ in refused if call.tool_name not in READ_TOOLS}
    assert not not_reads & set(ran.call_ids)
    assert ran_unaudited == []
    assert pending == 0 and len(audit_rows) == made  # every queued row landed
    assert all(row.state.finished for row in audit_rows.values())
    assert runtime.close() == []
    assert store.integrity_check() == "ok"
    store.close()
