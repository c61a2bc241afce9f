"""kill -9 in the middle of calls: the audit log stays sound, never misses a
side effect, and a retry after recovery never repeats one.

A forked child opens its own ``SQLiteAuditStore`` and ``ToolRuntime`` and
executes calls in a loop; each handler creates ``effects/<call_id>`` in the
workspace. The child reports its progress through a pipe, one byte per step
(``c`` call begins, ``h`` handler entered, ``e`` effect made, ``d`` call
done), and the parent SIGKILLs it after a random number of those bytes plus
a random busy-wait of under a millisecond, so kills land everywhere: before
the RUNNING row, between row and effect, between effect and finish, after.
Then the parent opens a fresh store on the file and checks it, and recovers
(``recover_calls``, what ``ToolRuntime.recover`` runs): the killed calls are
marked INTERRUPTED and their writes' temporary files are removed.
"""

from __future__ import annotations

import os
import random
import select
import signal
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, Spy, spy_tool

from pytest_toolguard import (
    CallState,
    ErrorCode,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.audit.recovery import recover_calls
from pytest_toolguard.audit.row import INTERRUPTED_MESSAGE
from pytest_toolguard.sandbox import TEMP_PREFIX, Workspace

NOW = "2030-01-01T00:00:00.000+00:00"
SCHEMA = {
    "type": "object",
    "properties": {"origin": {"type": "string"}},
    "required": ["origin"],
    "additionalProperties": False,
}
WAIT = 10.0  # seconds: the bound on any wait for the child


def effect_spec(progress_fd: int, *, hang: bool = False) -> ToolSpec:
    """The child's tool: reports, makes ``effects/<origin>``, reports again;
    with ``hang`` it never returns (the parent kills it there)."""

    def handler(ctx: Any, origin: str) -> Any:
        os.write(progress_fd, b"h")
        ctx.workspace.write_bytes(f"effects/{origin}", ctx.call_id.encode())
        os.write(progress_fd, b"e")
        if hang:
            threading.Event().wait()
        return {"effect": origin}

    return ToolSpec(
        name="effect",
        description="creates effects/<origin>",
        input_schema=SCHEMA,
        handler=handler,
        risk=Risk.WRITE,
    )


def retry_spec(repeats: list[str], description: str) -> ToolSpec:
    """The effect tool as a retry runs it: ``origin`` is appended to
    ``repeats`` when its effect already exists (a repeated effect)."""

    def retry_handler(ctx: Any, origin: str) -> Any:
        if ctx.workspace.exists(f"effects/{origin}"):
            repeats.append(origin)
        ctx.workspace.write_bytes(f"effects/{origin}", ctx.call_id.encode())
        return {"effect": origin}

    return ToolSpec(
        name="effect",
        description=description,
        input_schema=SCHEMA,
        handler=retry_handler,
        risk=Risk.WRITE,
    )


def run_child(body) -> tuple[int, int]:
    """Fork; the child runs ``body(progress_fd)`` and never returns to pytest.
    Returns (pid, read end of the progress pipe)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: whatever happens, it leaves without pytest's cleanup
        code = 1
        try:
            os.close(read_end)
            body(write_end)
            code = 0
        except BaseException:
            traceback.print_exc()  # the parent fails with "died on its own"
        finally:
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def read_progress(fd: int, count: int) -> bytes:
    """At least ``count`` progress bytes (bounded wait); fails if the child
    died or stalled first."""
    seen = b""
    deadline = time.monotonic() + WAIT
    while len(seen) < count:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            pytest.fail(f"the child stalled after {seen!r}")
        chunk = os.read(fd, 4096)
        if not chunk:
            pytest.fail(f"the child died on its own after {seen!r}")
        seen += chunk
    return seen


def kill_and_reap(pid: int, fd: int) -> bytes:
    """SIGKILL the child, reap it, and return the progress bytes still in the pipe."""
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    rest = b""
    while chunk := os.read(fd, 4096):
        rest += chunk
    os.close(fd)
    return rest


def spin(seconds: float) -> None:
    """Busy-wait (not a sleep): moves the kill point by a random sliver."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def effects_on_disk(workspace: Path) -> tuple[set[str], int]:
    """(effect names, temporary files left by writes killed mid-way)."""
    folder = workspace / "effects"
    names = os.listdir(folder) if folder.is_dir() else []
    return (
        {name for name in names if not name.startswith(TEMP_PREFIX)},
        sum(name.startswith(TEMP_PREFIX) for name in names),
    )


def child_loop(db: Path, workspace: Path, round_: int, keyed: bool):
    """The body of a child: calls, one after another, until it is killed."""

    def body(progress_fd: int) -> None:
        store = SQLiteAuditStore(db)
        runtime = ToolRuntime(
            ToolRegistry([effect_spec(progress_fd)]), str(workspace), WRITE_ANYWHERE, store
        )
        for index in range(10_000):
            call_id = f"r{round_}-{index}"
            os.write(progress_fd, b"c")
            runtime.execute(
                ToolCall(
                    call_id,
                    "effect",
                    {"origin": call_id},
                    idempotency_key=call_id if keyed else None,
                )
            )
            os.write(progress_fd, b"d")

    return body


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    SQLiteAuditStore(path).close()  # the schema exists before the first kill
    return path


# --- random kill points -----------------------------------------------------------

ROUNDS = 120
MAX_PROGRESS = 28  # bytes: 4 per call after the first, so kills land in calls 1 to 7


@pytest.mark.slow
def test_kill_9_at_random_points_leaves_a_sound_log_that_covers_every_effect(db, workspace, capsys):
    rng = random.Random(1207)
    stats: Counter[str] = Counter()
    violations: list[str] = []
    unlogged: set[str] = set()  # effects reported already
    started = time.perf_counter()
    for round_ in range(ROUNDS):
        pid, fd = run_child(child_loop(db, workspace, round_, keyed=False))
        read_progress(fd, rng.randint(1, MAX_PROGRESS))
        spin(rng.uniform(0, 0.0008))
        kill_and_reap(pid, fd)

        with SQLiteAuditStore(db) as store, Workspace(workspace) as files:
            integrity = store.integrity_check()
            rows = store.rows()
            logged = {row.call_id for row in rows}
            running = [row.call_id for row in rows if row.state is CallState.RUNNING]
            effects, killed_writes = effects_on_disk(workspace)
            recovery = recover_calls(store, files, NOW)
            recovered = len(recovery.interrupted)
            still_running = [r.call_id for r in store.rows() if r.state is CallState.RUNNING]
            _, temporaries = effects_on_disk(workspace)
        if integrity != "ok":
            violations.append(f"round {round_}: integrity_check: {integrity}")
        violations += [
            f"round {round_}: effect without a row: {name}"
            for name in sorted(effects - logged - unlogged)
        ]
        unlogged |= effects - logged
        if recovered != len(running) or still_running:
            violations.append(f"round {round_}: recover left {still_running} of {running}")
        if temporaries or len(recovery.removed_temporaries) != killed_writes:
            violations.append(
                f"round {round_}: {killed_writes} temporary files of killed writes, "
                f"{len(recovery.removed_temporaries)} removed, {temporaries} left"
            )
        stats["kills landing while a RUNNING row existed"] += bool(running)
        stats["kills between effect and finish"] += bool(set(running) & effects)
        stats["effect files checked (summed over rounds)"] += len(effects)
        stats["distinct effect files"] = len(effects)
        stats["temporary files of killed writes removed by recover"] += killed_writes
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(
            f"\n[crash] {ROUNDS} kill -9 rounds in {elapsed:.1f} s: "
            + "; ".join(f"{name} {count}" for name, count in stats.items())
            + f"; violations {len(violations)}"
        )
    assert violations == []
    assert stats["kills landing while a RUNNING row existed"] > 0  # the kills did land mid-call


KEYED_ROUNDS = 40


@pytest.mark.slow
def test_retry_with_the_key_after_kill_9_and_recover_never_repeats_an_effect(db, workspace, capsys):
    """Every call the killed child began is retried with its key from a new
    runtime: a call whose row exists is answered from it (success, or the
    interrupted failure); only a call killed before its row was committed
    runs, and then for the first time."""
    rng = random.Random(2203)
    repeats: list[str] = []
    answers: Counter[str] = Counter()
    temporaries_left = 0

    retry_tool = retry_spec(repeats, "the same tool, in the restarted process")
    for round_ in range(KEYED_ROUNDS):
        pid, fd = run_child(child_loop(db, workspace, round_, keyed=True))
        seen = read_progress(fd, rng.randint(1, MAX_PROGRESS))
        spin(rng.uniform(0, 0.0008))
        seen += kill_and_reap(pid, fd)
        begun = seen.count(b"c")

        store = SQLiteAuditStore(db)
        runtime = ToolRuntime(ToolRegistry([retry_tool]), str(workspace), WRITE_ANYWHERE, store)
        try:
            runtime.recover(NOW)  # the store's rows, and the killed writes' temporary files
            temporaries_left += effects_on_disk(workspace)[1]
            for index in range(max(0, begun - 2), begun):
                origin = f"r{round_}-{index}"
                had_row = store.get(origin) is not None
                result = runtime.execute(
                    ToolCall(
                        f"retry-{origin}", "effect", {"origin": origin}, idempotency_key=origin
                    )
                )
                if had_row:
                    assert result.code in (ErrorCode.IDEMPOTENT_REPLAY, ErrorCode.EXECUTION_ERROR)
                    assert result.retryable is False
                    answers[result.code.value] += 1
                else:
                    assert result.code is ErrorCode.OK
                    answers["ran (killed before its row)"] += 1
        finally:
            runtime.close()
            store.close()
    with capsys.disabled():
        print(
            f"\n[crash/keyed] {KEYED_ROUNDS} rounds, retries after recover: "
            f"{dict(sorted(answers.items()))}; repeated side effects {len(repeats)}; "
            f"temporary files left after recover {temporaries_left}"
        )
    assert repeats == []
    assert temporaries_left == 0
    assert answers[ErrorCode.EXECUTION_ERROR.value] > 0  # some retries met an interrupted call


# --- one kill inside the handler, after its side effect ------------------------------


@pytest.fixture
def killed_in_handler(db: Path, workspace: Path) -> Path:
    """A child that ran call ``c1`` (key ``order-42``) into its handler, made
    the effect, and was killed there. Returns the workspace."""

    def body(progress_fd: int) -> None:
        store = SQLiteAuditStore(db)
        spec = effect_spec(progress_fd, hang=True)
        runtime = ToolRuntime(ToolRegistry([spec]), str(workspace), WRITE_ANYWHERE, store)
        runtime.execute(ToolCall("c1", "effect", {"origin": "c1"}, idempotency_key="order-42"))

    pid, fd = run_child(body)
    read_progress(fd, 2)  # "h" and "e": the effect is on disk
    kill_and_reap(pid, fd)
    return workspace


@pytest.fixture
def restarted(db: Path, workspace: Path, spy: Spy):
    """The runtime of the restarted process; its handler only counts."""
    store = SQLiteAuditStore(db)
    tool = spy_tool(spy, "effect", risk=Risk.WRITE, schema=SCHEMA)
    runtime = ToolRuntime(ToolRegistry([tool]), str(workspace), WRITE_ANYWHERE, store)
    yield runtime
    runtime.close()
    store.close()


def retry(runtime: ToolRuntime):
    return runtime.execute(ToolCall("c2", "effect", {"origin": "c1"}, idempotency_key="order-42"))


def test_kill_inside_the_handler_leaves_its_row_running_beside_its_effect(killed_in_handler, db):
    with SQLiteAuditStore(db) as store:
        assert store.integrity_check() == "ok"
        row = store.get("c1")
    assert row is not None and row.state is CallState.RUNNING
    assert (killed_in_handler / "effects" / "c1").is_file()


def test_recover_marks_the_killed_call_interrupted(killed_in_handler, db):
    with SQLiteAuditStore(db) as store:
        assert store.recover(NOW) == 1
        row = store.get("c1")
        assert store.recover(NOW) == 0
    assert (row.state, row.result_code, row.error_message, row.finished_at) == (
        CallState.INTERRUPTED,
        ErrorCode.EXECUTION_ERROR,
        INTERRUPTED_MESSAGE,
        NOW,
    )


def test_retry_before_recover_is_a_duplicate_and_does_not_run(killed_in_handler, restarted, spy):
    result = retry(restarted)
    assert (result.code, result.retryable) == (ErrorCode.DUPLICATE_CALL, True)
    assert spy.count == 0


def test_retry_after_recover_replays_the_interrupted_failure_without_running(
    killed_in_handler, restarted, spy
):
    restarted.audit.recover(NOW)
    result = retry(restarted)
    assert (result.ok, result.code, result.retryable) == (False, ErrorCode.EXECUTION_ERROR, False)
    assert "interrupted" in result.message
    assert spy.count == 0
    assert os.listdir(killed_in_handler / "effects") == ["c1"]
    row = restarted.audit.get("c2")
    assert (row.idempotency_outcome, row.replay_of) == ("replay", "c1")
