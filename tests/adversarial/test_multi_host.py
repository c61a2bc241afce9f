"""Several machines on one PostgreSQL audit store: one key, one effect.

* **Multi-host simulation:** 8 processes in 2 groups ("hosts", each group
  with its own workspace copy; each process with its own runtime and
  store), 50 rounds, one shared idempotency key per round: exactly one
  effect per key, every other call answered DUPLICATE_CALL or
  IDEMPOTENT_REPLAY.
* **kill -9 mid-call**, then the lease's expiry and a retry with the same
  key from the other host: no effect repeated.
* **The server stopped mid-run** (``pg_ctl stop -m immediate``): calls of a
  WRITE tool answer AUDIT_UNAVAILABLE and run no handler; no handler runs
  unaudited; no row is lost: after a restart calls succeed and the queued
  rows are written.

Every figure is printed (``-s`` or the CI log), and asserted.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, Spy, spy_tool
from test_crash import (
    SCHEMA,
    effect_spec,
    kill_and_reap,
    read_progress,
    retry_spec,
    run_child,
    spin,
)

from pytest_toolguard import (
    CallState,
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.audit.postgres import PostgresAuditStore

WAIT = 120.0  # seconds: the bound on every wait for a child
HOSTS = ("host-a", "host-b")
PER_HOST = 4
ROUNDS = 50


# --- 8 processes, 2 hosts, 50 shared keys ---------------------------------------------


def _charge_tool() -> ToolSpec:
    def charge(ctx: Any, order: int) -> Any:
        # The effect: a file in this host's workspace, named for the order
        # and the process that made it.
        ctx.workspace.write_text(f"charges/{order}-{os.getpid()}", ctx.call_id)
        return {"charged": order}

    return ToolSpec(
        name="charge",
        description="charges an order once",
        input_schema={
            "type": "object",
            "properties": {"order": {"type": "integer"}},
            "required": ["order"],
        },
        handler=charge,
        risk=Risk.WRITE,
    )


def _fleet_worker(url: str, host: str, workspace: str, index: int, rounds: Any, out: Any) -> None:
    store = PostgresAuditStore(url, host=host)
    runtime = ToolRuntime(
        ToolRegistry([_charge_tool()]),
        workspace,
        WRITE_ANYWHERE,
        store,
        idempotency_scope="orders",  # the same action whichever worker is asked
    )
    answers = []
    try:
        for round_ in range(ROUNDS):
            rounds.wait(WAIT)
            result = runtime.execute(
                ToolCall(
                    f"r{round_}-{host}-{index}",
                    "charge",
                    {"order": round_},
                    session_id=f"{host}-{index}",
                    idempotency_key=f"order-{round_}",
                )
            )
            answers.append((round_, result.code.value))
    finally:
        out.put((host, index, answers))
        runtime.close()
        store.close()


@pytest.mark.slow
def test_eight_processes_on_two_hosts_make_one_effect_per_key(
    postgres_server: Any, tmp_path: Path, capsys: Any
) -> None:
    url = postgres_server.new_schema()
    PostgresAuditStore(url).close()  # the schema exists before the race
    original = tmp_path / "original"
    (original / "charges").mkdir(parents=True)
    workspaces = {}
    for host in HOSTS:
        workspaces[host] = tmp_path / host / "workspace"
        shutil.copytree(original, workspaces[host])
    context = multiprocessing.get_context("spawn")
    rounds, out = context.Barrier(len(HOSTS) * PER_HOST), context.Queue()
    processes = [
        context.Process(
            target=_fleet_worker, args=(url, host, str(workspaces[host]), index, rounds, out)
        )
        for host in HOSTS
        for index in range(PER_HOST)
    ]
    started = time.perf_counter()
    for process in processes:
        process.start()
    try:
        reports = [out.get(timeout=WAIT) for _ in processes]
        for process in processes:
            process.join(WAIT)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    elapsed = time.perf_counter() - started
    assert [p.exitcode for p in processes] == [0] * len(processes)

    by_round: dict[int, Counter[str]] = {r: Counter() for r in range(ROUNDS)}
    for _, _, answers in reports:
        for round_, code in answers:
            by_round[round_][code] += 1
    effects: Counter[int] = Counter()
    for host in HOSTS:
        for name in os.listdir(workspaces[host] / "charges"):
            effects[int(name.split("-")[0])] += 1
    with PostgresAuditStore(url) as store:
        rows = store.rows()
    claimed = Counter(
        int(r.call_id[1:].split("-")[0]) for r in rows if r.idempotency_outcome == "claimed"
    )
    totals = sum(by_round.values(), Counter())
    with capsys.disabled():
        print(
            f"\n[multi-host] {len(processes)} processes on {len(HOSTS)} hosts, {ROUNDS} rounds"
            f" of one shared key, {elapsed:.1f} s: answers {dict(sorted(totals.items()))};"
            f" effects per key {sorted(Counter(effects.values()).items())};"
            f" audit rows {len(rows)}"
        )
    assert effects == Counter({r: 1 for r in range(ROUNDS)})
    for round_, codes in by_round.items():
        assert codes["OK"] == 1, (round_, codes)
        assert set(codes) <= {"OK", "DUPLICATE_CALL", "IDEMPOTENT_REPLAY"}, (round_, codes)
        assert sum(codes.values()) == len(processes)
    assert len(rows) == ROUNDS * len(processes)
    assert claimed == Counter({r: 1 for r in range(ROUNDS)})
    assert {r.state for r in rows} <= {CallState.SUCCEEDED, CallState.DENIED}


# --- kill -9, lease expiry, retry from the other host -----------------------------------

LEASE = 3.0  # seconds: the killed host's deadline; its store's grace is 0
KILLS = 12
MAX_PROGRESS = 28  # bytes: 4 per call after the first, so kills land in calls 1 to 7


def _killed_host_loop(url: str, workspace: Path, round_: int) -> Any:
    def body(progress_fd: int) -> None:
        store = PostgresAuditStore(url, host="host-a", lease_grace_seconds=0)
        runtime = ToolRuntime(
            ToolRegistry([effect_spec(progress_fd)]),
            str(workspace),
            WRITE_ANYWHERE,
            store,
            timeouts={"effect": LEASE},
            idempotency_scope="fleet",
        )
        for index in range(10_000):
            call_id = f"r{round_}-{index}"
            os.write(progress_fd, b"c")
            runtime.execute(
                ToolCall(call_id, "effect", {"origin": call_id}, idempotency_key=call_id)
            )
            os.write(progress_fd, b"d")

    return body


def _wait_for_leases_to_expire(runtime: ToolRuntime) -> int:
    """Recover from the other host until no RUNNING row is left (its leases
    expire by the server's clock); how many rows it took over."""
    taken = 0
    deadline = time.monotonic() + LEASE + 60
    while True:
        taken += len(runtime.recover())
        if not any(r.state is CallState.RUNNING for r in runtime.audit.rows()):
            return taken
        if time.monotonic() > deadline:
            pytest.fail("RUNNING rows outlived their leases")
        threading.Event().wait(0.1)  # polling the server's clock, with a bound


@pytest.mark.slow
def test_kill_9_then_lease_expiry_then_a_retry_from_another_host_repeats_no_effect(
    postgres_server: Any, tmp_path: Path, capsys: Any
) -> None:
    url = postgres_server.new_schema()
    PostgresAuditStore(url).close()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    rng = random.Random(1403)
    begun: dict[int, int] = {}
    for round_ in range(KILLS):
        pid, fd = run_child(_killed_host_loop(url, workspace, round_))
        seen = read_progress(fd, rng.randint(1, MAX_PROGRESS))
        spin(rng.uniform(0, 0.0008))
        seen += kill_and_reap(pid, fd)
        begun[round_] = seen.count(b"c")

    repeats: list[str] = []

    retry_tool = retry_spec(repeats, "the same tool, on the other host")
    store = PostgresAuditStore(url, host="host-b")
    runtime = ToolRuntime(
        ToolRegistry([retry_tool]),
        str(workspace),
        WRITE_ANYWHERE,
        store,
        idempotency_scope="fleet",
    )
    answers: Counter[str] = Counter()
    try:
        running = sum(r.state is CallState.RUNNING for r in store.rows())
        taken = _wait_for_leases_to_expire(runtime)
        for round_, count in begun.items():
            for index in range(max(0, count - 2), count):
                origin = f"r{round_}-{index}"
                had_row = store.get(origin) is not None
                result = runtime.execute(
                    ToolCall(
                        f"retry-{origin}", "effect", {"origin": origin}, idempotency_key=origin
                    )
                )
                if had_row:
                    assert result.code in (ErrorCode.IDEMPOTENT_REPLAY, ErrorCode.EXECUTION_ERROR)
                    answers[result.code.value] += 1
                else:
                    assert result.code is ErrorCode.OK
                    answers["ran (killed before its row)"] += 1
        left = [r.call_id for r in store.rows() if r.state is CallState.RUNNING]
    finally:
        runtime.close()
        store.close()
    with capsys.disabled():
        print(
            f"\n[multi-host/kill] {KILLS} kill -9 on host-a; RUNNING rows left {running},"
            f" taken over by host-b after their {LEASE:g} s leases expired {taken};"
            f" retries {dict(sorted(answers.items()))}; repeated effects {len(repeats)}"
        )
    assert repeats == []
    assert taken == running > 0  # the kills did land mid-call, and every lease ended
    assert left == []
    assert answers[ErrorCode.EXECUTION_ERROR.value] > 0


def test_another_host_cannot_take_over_a_dead_call_before_its_lease_expires(
    postgres_server: Any, tmp_path: Path, spy: Spy
) -> None:
    """host-a's process died in its handler. host-b cannot tell a dead pid of
    host-a from a live one: its retry is DUPLICATE_CALL and its recover takes
    nothing until the lease expires. host-a itself sees the owner is dead."""
    url = postgres_server.new_schema()
    PostgresAuditStore(url).close()
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    def body(progress_fd: int) -> None:
        store = PostgresAuditStore(url, host="host-a")
        runtime = ToolRuntime(
            ToolRegistry([effect_spec(progress_fd, hang=True)]),
            str(workspace),
            WRITE_ANYWHERE,
            store,
            idempotency_scope="fleet",
        )
        runtime.execute(ToolCall("c1", "effect", {"origin": "c1"}, idempotency_key="order-42"))

    pid, fd = run_child(body)
    read_progress(fd, 2)  # "h" and "e": the effect is on disk
    kill_and_reap(pid, fd)

    tool = spy_tool(spy, "effect", risk=Risk.WRITE, schema=SCHEMA)
    retry = ToolCall("c2", "effect", {"origin": "c1"}, idempotency_key="order-42")
    results = {}
    for host in ("host-b", "host-a"):
        store = PostgresAuditStore(url, host=host)
        runtime = ToolRuntime(
            ToolRegistry([tool]), str(workspace), WRITE_ANYWHERE, store, idempotency_scope="fleet"
        )
        taken = len(runtime.recover())
        results[host] = (taken, runtime.execute(retry).code)
        runtime.close()
        store.close()
    assert results == {
        "host-b": (0, ErrorCode.DUPLICATE_CALL),
        "host-a": (1, ErrorCode.EXECUTION_ERROR),  # the interrupted failure, replayed
    }
    assert spy.count == 0
    assert os.listdir(workspace / "effects") == ["c1"]


# --- the server stopped mid-run ---------------------------------------------------------

DOWN_CALLS = 5


@pytest.mark.slow
def test_server_stopped_mid_run_fails_closed_and_loses_no_row(
    own_postgres_server: Any, tmp_path: Path, spy: Spy, capsys: Any
) -> None:
    server = own_postgres_server
    url = server.url()
    store = PostgresAuditStore(url, timeout=2)
    # A WRITE tool: the in-flight call's side effect is real, so its result
    # stands (a READ call's result would be withheld, AUDIT_UNAVAILABLE, its
    # one row not committed: tests/core/test_audit_read_calls.py).
    tool = spy_tool(spy, risk=Risk.WRITE)
    runtime = ToolRuntime(ToolRegistry([tool]), str(tmp_path), WRITE_ANYWHERE, store)
    before = [runtime.execute(ToolCall(f"before-{i}", "spy", {})) for i in range(3)]

    # A call whose handler runs while the server dies: its side effect is
    # real, so its result stands, and its finishing update is queued.
    spy.block()
    spy.started.clear()  # set by the calls before: wait for this call's handler
    inflight: list[Any] = []
    worker = threading.Thread(
        target=lambda: inflight.append(runtime.execute(ToolCall("inflight", "spy", {})))
    )
    worker.start()
    assert spy.started.wait(WAIT)
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        server.stop("immediate")
        spy.release()
        worker.join(WAIT)

    ran_before_down = spy.count
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        down = [runtime.execute(ToolCall(f"down-{i}", "spy", {})) for i in range(DOWN_CALLS)]
    ran_while_down = spy.count - ran_before_down
    pending_while_down = runtime.flush_audit()

    server.start()
    after = [runtime.execute(ToolCall(f"after-{i}", "spy", {})) for i in range(3)]
    pending_after = runtime.flush_audit()
    rows = store.rows()
    runtime.close()
    store.close()

    states = {row.call_id: (row.state, row.result_code) for row in rows}
    with capsys.disabled():
        print(
            f"\n[server stop] pg_ctl stop -m immediate with 1 handler running:"
            f" {DOWN_CALLS} calls while down answered"
            f" {sorted({r.code.value for r in down})}, handlers run while down"
            f" {ran_while_down}, writes queued {pending_while_down}, after restart"
            f" {sorted({r.code.value for r in after})}, still queued {pending_after},"
            f" rows {len(rows)} for {len(states)} calls"
        )
    assert [r.code for r in before + inflight + after] == [ErrorCode.OK] * 7
    assert {r.code for r in down} == {ErrorCode.AUDIT_UNAVAILABLE}
    assert ran_while_down == 0
    assert pending_while_down == DOWN_CALLS + 1  # each refusal's row, and the in-flight finish
    assert pending_after == 0
    assert len(rows) == len(states) == 3 + 1 + DOWN_CALLS + 3  # one row per call, none lost
    assert states["inflight"] == (CallState.SUCCEEDED, ErrorCode.OK)
    assert {states[f"down-{i}"] for i in range(DOWN_CALLS)} == {
        (CallState.DENIED, ErrorCode.AUDIT_UNAVAILABLE)
    }
    # No handler ran unaudited: every call that ran has its finished row.
    ran = {row.call_id for row in rows if row.state is CallState.SUCCEEDED}
    assert len(ran) == spy.count == 7
