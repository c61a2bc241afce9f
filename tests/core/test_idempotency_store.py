"""Idempotency keys: derivation, claim semantics, and an atomic claim under
races. The claim tests run on every audit store backend (``store``: SQLite,
and PostgreSQL on a server the tests start)."""

from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from audit_backends import open_store

from pytest_toolguard.audit import AuditRecord, AuditStore, Outcome
from pytest_toolguard.contract import CallState, ErrorCode
from pytest_toolguard.idempotency import Claim, ClaimOutcome, make_idempotency_key, scope_client_key
from pytest_toolguard.jsondata import canonical_json, json_hash

T0 = "2025-01-02T03:04:05.000Z"
T1 = "2025-01-02T03:04:06.000Z"
ARGS = {"channel": "#ops", "text": "deploy done"}


def running_record(call_id: str, arguments: dict[str, Any] | None = None) -> AuditRecord:
    arguments = ARGS if arguments is None else arguments
    return AuditRecord(
        call_id=call_id,
        session_id="session-1",
        actor="agent",
        tool_name="send_message",
        risk="external",
        arguments_json=canonical_json(arguments),
        arguments_hash=json_hash(arguments),
        decision="allow",
        rule="policy.capabilities",
        state=CallState.RUNNING,
        started_at=T0,
    )


def finish(store: AuditStore, audit_id: int, key: str, result: dict[str, Any]) -> None:
    store.finish(
        audit_id,
        Outcome(
            state=CallState.SUCCEEDED,
            result_code=ErrorCode.OK,
            result_preview="sent",
            error_message=None,
            finished_at=T1,
            duration_ms=1000,
            stored_result=result,
        ),
        claim_key=key,
    )


@pytest.fixture
def store(audit_backend: Any) -> Any:
    """A store of each backend in turn."""
    return audit_backend.open()


KEY = make_idempotency_key("send_message", ARGS, "task-42")


# --- keys -------------------------------------------------------------------------


def test_key_is_sha256_of_scope_tool_and_canonical_arguments() -> None:
    raw = 'task-42\nsend_message\n{"channel":"#ops","text":"deploy done"}'
    expected = hashlib.sha256(raw.encode()).hexdigest()
    assert make_idempotency_key("send_message", ARGS, "task-42") == expected


def test_key_ignores_argument_order() -> None:
    reordered = {"text": "deploy done", "channel": "#ops"}
    assert make_idempotency_key("send_message", reordered, "task-42") == KEY


@pytest.mark.parametrize(
    ("tool", "arguments", "scope"),
    [
        ("send_email", ARGS, "task-42"),
        ("send_message", ARGS, "task-43"),
        ("send_message", {**ARGS, "text": "deploy failed"}, "task-42"),
    ],
)
def test_key_changes_with_tool_scope_or_arguments(
    tool: str, arguments: dict[str, Any], scope: str
) -> None:
    assert make_idempotency_key(tool, arguments, scope) != KEY


def test_key_hashes_non_ascii_as_utf8() -> None:
    key = make_idempotency_key("t", {"text": "日本"}, "s")
    assert key == hashlib.sha256('s\nt\n{"text":"日本"}'.encode()).hexdigest()


def test_key_refuses_a_tool_name_with_a_newline() -> None:
    with pytest.raises(ValueError, match="newline"):
        make_idempotency_key("a\nb", {}, "s")


def test_arguments_hash_is_sha256_of_canonical_json() -> None:
    assert json_hash(ARGS) == hashlib.sha256(canonical_json(ARGS).encode()).hexdigest()


def test_client_key_is_scoped_by_tool_and_scope() -> None:
    base = scope_client_key("order-7", "send_message", "task-42")
    assert base == scope_client_key("order-7", "send_message", "task-42")
    assert base != scope_client_key("order-7", "send_email", "task-42")
    assert base != scope_client_key("order-7", "send_message", "task-43")


def test_client_key_scope_cannot_be_forged_with_newlines() -> None:
    assert scope_client_key("k", "t", "s1\neffect") != scope_client_key("effect\nk", "t", "s1")
    assert scope_client_key("a\nt2\nb", "t", "s") != scope_client_key("b", "t2", "s\nt\na")


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (ClaimOutcome.CLAIMED, None),
        (ClaimOutcome.REPLAY, ErrorCode.IDEMPOTENT_REPLAY),
        (ClaimOutcome.RUNNING, ErrorCode.DUPLICATE_CALL),
        (ClaimOutcome.CONFLICT, ErrorCode.IDEMPOTENCY_CONFLICT),
    ],
)
def test_claim_outcome_maps_to_its_error_code(outcome: ClaimOutcome, code: Any) -> None:
    assert Claim(outcome, "k").error_code is code


# --- claim semantics ------------------------------------------------------------------


def test_first_start_claims_the_key_and_marks_its_row(store: AuditStore) -> None:
    audit_id, claim = store.start(running_record("c1"), claim_key=KEY)
    assert claim == Claim(ClaimOutcome.CLAIMED, KEY)
    row = store.get("c1")
    assert row is not None
    assert (row.audit_id, row.idempotency_key, row.idempotency_outcome) == (
        audit_id,
        KEY,
        "claimed",
    )


def test_same_key_while_running_is_running_and_stores_no_row(store: AuditStore) -> None:
    store.start(running_record("c1"), claim_key=KEY)
    audit_id, claim = store.start(running_record("c2"), claim_key=KEY)
    assert audit_id is None
    assert claim == Claim(ClaimOutcome.RUNNING, KEY, "c1", None)
    assert claim.error_code is ErrorCode.DUPLICATE_CALL
    assert store.count() == 1


def test_same_key_after_finish_replays_the_stored_result(store: AuditStore) -> None:
    audit_id, _ = store.start(running_record("c1"), claim_key=KEY)
    assert audit_id is not None
    finish(store, audit_id, KEY, {"ok": True, "code": "OK", "data": {"message_id": 7}})
    again, claim = store.start(running_record("c2"), claim_key=KEY)
    assert again is None
    assert claim == Claim(
        ClaimOutcome.REPLAY, KEY, "c1", {"ok": True, "code": "OK", "data": {"message_id": 7}}
    )


def test_a_failed_first_outcome_is_replayed_too(store: AuditStore) -> None:
    audit_id, _ = store.start(running_record("c1"), claim_key=KEY)
    assert audit_id is not None
    store.finish(
        audit_id,
        Outcome(
            state=CallState.TIMED_OUT,
            result_code=ErrorCode.TIMEOUT,
            result_preview=None,
            error_message="deadline 1s",
            finished_at=T1,
            duration_ms=1000,
            stored_result={"ok": False, "code": "TIMEOUT"},
        ),
        claim_key=KEY,
    )
    _, claim = store.start(running_record("c2"), claim_key=KEY)
    assert claim is not None and claim.outcome is ClaimOutcome.REPLAY
    assert claim.stored_result == {"ok": False, "code": "TIMEOUT"}


def test_same_key_with_other_arguments_conflicts_running_or_done(store: AuditStore) -> None:
    other = {"channel": "#ops", "text": "something else"}
    audit_id, _ = store.start(running_record("c1"), claim_key=KEY)
    assert audit_id is not None
    _, while_running = store.start(running_record("c2", other), claim_key=KEY)
    finish(store, audit_id, KEY, {"ok": True})
    _, after_done = store.start(running_record("c3", other), claim_key=KEY)
    assert while_running == Claim(ClaimOutcome.CONFLICT, KEY, "c1", None)
    assert after_done == Claim(ClaimOutcome.CONFLICT, KEY, "c1", None)
    assert store.count() == 1


def test_release_frees_a_key_whose_handler_never_ran(store: AuditStore) -> None:
    audit_id, _ = store.start(running_record("c1"), claim_key=KEY)
    assert audit_id is not None
    store.release(KEY)
    _, claim = store.start(running_record("c2"), claim_key=KEY)
    assert claim is not None and claim.outcome is ClaimOutcome.CLAIMED


def test_release_never_frees_a_finished_key(store: AuditStore) -> None:
    audit_id, _ = store.start(running_record("c1"), claim_key=KEY)
    assert audit_id is not None
    finish(store, audit_id, KEY, {"ok": True})
    store.release(KEY)
    _, claim = store.start(running_record("c2"), claim_key=KEY)
    assert claim is not None and claim.outcome is ClaimOutcome.REPLAY


def test_starts_without_a_key_never_claim(store: AuditStore) -> None:
    first, claim_one = store.start(running_record("c1"))
    second, claim_two = store.start(running_record("c1"))
    assert (claim_one, claim_two) == (None, None)
    assert first is not None and second is not None and first != second


def test_retry_after_a_crash_replays_the_interrupted_outcome(audit_backend: Any) -> None:
    crashed = audit_backend.open(lease_grace_seconds=0)
    crashed.start(running_record("c1"), claim_key=KEY, lease_seconds=0)  # process dies here
    crashed.close()
    restarted = audit_backend.open()
    assert restarted.recover(T1) == 1
    _, claim = restarted.start(running_record("c2"), claim_key=KEY)
    assert claim is not None and claim.outcome is ClaimOutcome.REPLAY
    assert claim.stored_result is not None
    assert claim.stored_result["state"] == CallState.INTERRUPTED.value


# --- races ----------------------------------------------------------------------------


def test_sixteen_threads_starting_one_key_claim_it_exactly_once(store: AuditStore) -> None:
    barrier = threading.Barrier(16)
    outcomes: list[ClaimOutcome] = []
    lock = threading.Lock()

    def attempt(index: int) -> None:
        barrier.wait(timeout=30)
        _, claim = store.start(running_record(f"c{index}"), claim_key=KEY)
        assert claim is not None
        with lock:
            outcomes.append(claim.outcome)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == sorted([ClaimOutcome.CLAIMED] + [ClaimOutcome.RUNNING] * 15)
    assert store.count() == 1


def _claim_in_process(
    spec: tuple[str, str], ready: Any, tried: Any, index: int, results: Any
) -> None:
    with open_store(spec) as store:
        ready.wait(timeout=30)
        audit_id, claim = store.start(running_record(f"p{index}"), claim_key=KEY)
        assert claim is not None
        results.put(claim.outcome.value)
        tried.wait(timeout=30)  # the owner finishes once every process has tried
        if audit_id is not None:
            finish(store, audit_id, KEY, {"ok": True, "by": index})


def test_four_processes_starting_one_key_claim_it_exactly_once(audit_backend: Any) -> None:
    audit_backend.open().close()  # schema made before the race
    context = multiprocessing.get_context("spawn")
    ready, tried = context.Barrier(4), context.Barrier(4)
    results = context.Queue()
    spec = audit_backend.spec
    processes = [
        context.Process(target=_claim_in_process, args=(spec, ready, tried, i, results))
        for i in range(4)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = sorted(results.get(timeout=60) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    assert outcomes == ["claimed", "running", "running", "running"]
    store = audit_backend.open()
    assert store.count() == 1
    _, later = store.start(running_record("later"), claim_key=KEY)
    assert later is not None and later.outcome is ClaimOutcome.REPLAY


def test_naive_select_then_insert_claim_runs_twice_when_checks_interleave(
    tmp_path: Path,
) -> None:
    """Why the store claims inside ``BEGIN IMMEDIATE``: a SELECT followed by
    an INSERT lets two calls both see "no key". The barrier between the two
    statements forces the interleaving that threads hit by chance."""
    path = tmp_path / "naive.db"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE keys (key TEXT, call_id TEXT)")
    setup.commit()
    setup.close()
    between = threading.Barrier(2)
    ran: list[str] = []

    def naive_claim(call_id: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5)
        try:
            seen = conn.execute("SELECT 1 FROM keys WHERE key = ?", (KEY,)).fetchone()
            between.wait()
            if seen is None:
                conn.execute("INSERT INTO keys VALUES (?, ?)", (KEY, call_id))
                ran.append(call_id)  # the side effect
        finally:
            conn.close()

    threads = [threading.Thread(target=naive_claim, args=(f"c{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ran) == ["c0", "c1"]
