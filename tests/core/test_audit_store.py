"""The audit store's contract: one durable row per call, fail-closed errors,
leases, no secrets at rest. The tests taking ``store`` or ``audit_backend``
run on every backend (SQLite, and PostgreSQL on a server the tests start);
those taking ``sqlite_store`` or ``db_path`` are about SQLite itself."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from audit_backends import open_store

from pytest_toolguard.audit import AuditRecord, AuditStore, AuditUnavailable, SQLiteAuditStore
from pytest_toolguard.audit.lease import LeaseOwner, current_owner
from pytest_toolguard.audit.row import INTERRUPTED_MESSAGE, Outcome
from pytest_toolguard.audit.schema import SCHEMA_VERSION, SQLITE_MIGRATIONS
from pytest_toolguard.contract import CallState, ErrorCode
from pytest_toolguard.idempotency import ClaimOutcome
from pytest_toolguard.jsondata import canonical_json, json_hash
from pytest_toolguard.redaction import Redactor

CRASHED = {"lease_grace_seconds": 0}
"""Settings of a store standing in for a crashed process: with
``lease_seconds=0``, its rows' leases have ended by the time recover looks."""

T0 = "2025-01-02T03:04:05.000Z"
T1 = "2025-01-02T03:04:05.250Z"


def make_record(call_id: str = "call-1", **overrides: Any) -> AuditRecord:
    arguments = overrides.pop("arguments", {"path": "notes/a.md"})
    fields: dict[str, Any] = {
        "call_id": call_id,
        "session_id": "session-1",
        "actor": "agent",
        "tool_name": "write_file",
        "risk": "write",
        "arguments_json": canonical_json(arguments),
        "arguments_hash": json_hash(arguments),
        "decision": "allow",
        "rule": "policy.write_prefix",
        "reason": "notes/ is writable",
        "state": CallState.RUNNING,
        "started_at": T0,
    }
    fields.update(overrides)
    return AuditRecord(**fields)


def make_denied(call_id: str = "call-1", **overrides: Any) -> AuditRecord:
    fields: dict[str, Any] = {
        "decision": "deny",
        "rule": "policy.forbidden_path",
        "reason": ".env is forbidden",
        "state": CallState.DENIED,
        "result_code": ErrorCode.FORBIDDEN_PATH,
        "error_message": "forbidden path",
        "finished_at": T0,
        "duration_ms": 0,
    }
    fields.update(overrides)
    return make_record(call_id, **fields)


def finish_ok(store: AuditStore, audit_id: int, **overrides: Any) -> None:
    fields: dict[str, Any] = {
        "state": CallState.SUCCEEDED,
        "result_code": ErrorCode.OK,
        "result_preview": '{"written": 5}',
        "error_message": None,
        "finished_at": T1,
        "duration_ms": 250,
    }
    fields.update(overrides)
    claim_key = fields.pop("claim_key", None)
    store.finish(audit_id, Outcome(**fields), claim_key=claim_key)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.db"


@pytest.fixture
def sqlite_store(db_path: Path) -> Any:
    with SQLiteAuditStore(db_path) as opened:
        yield opened


@pytest.fixture
def store(audit_backend: Any) -> Any:
    """A store of each backend in turn."""
    return audit_backend.open()


@pytest.fixture
def crashed(audit_backend: Any) -> Any:
    """A second store on the same database whose rows' leases end at once
    (started with ``lease_seconds=0``): a process that died mid-call."""
    return audit_backend.open(**CRASHED)


# --- round trips ------------------------------------------------------------


def test_record_stores_a_finished_row_with_every_field(store: SQLiteAuditStore) -> None:
    rec = make_denied(replay_of="call-0", idempotency_key="k1", idempotency_outcome="conflict")
    audit_id = store.record(rec)
    assert store.get("call-1") == dataclasses.replace(rec, audit_id=audit_id)


def test_start_then_finish_leaves_one_finished_row(store: SQLiteAuditStore) -> None:
    audit_id, claim = store.start(make_record())
    assert audit_id is not None and claim is None
    finish_ok(store, audit_id)
    [row] = store.rows()
    assert (row.state, row.result_code, row.finished_at, row.duration_ms) == (
        CallState.SUCCEEDED,
        ErrorCode.OK,
        T1,
        250,
    )
    assert row.result_preview == '{"written": 5}'


def test_every_call_gets_its_own_row_even_when_call_ids_repeat(store: SQLiteAuditStore) -> None:
    first, _ = store.start(make_record("dup"))
    second, _ = store.start(make_record("dup"))
    store.record(make_denied("dup"))
    assert first is not None and second is not None
    finish_ok(store, first, state=CallState.FAILED, result_code=ErrorCode.EXECUTION_ERROR)
    finish_ok(store, second)
    rows = store.rows()
    assert [(r.audit_id, r.state) for r in rows] == [
        (first, CallState.FAILED),
        (second, CallState.SUCCEEDED),
        (second + 1, CallState.DENIED),
    ]
    assert store.count() == 3


def test_get_returns_the_latest_row_for_a_call_id(store: SQLiteAuditStore) -> None:
    store.record(make_denied("dup", reason="first"))
    store.record(make_denied("dup", reason="second"))
    latest = store.get("dup")
    assert latest is not None and latest.reason == "second"
    assert store.get("never-seen") is None


def test_rows_filters_by_session_in_insertion_order(store: SQLiteAuditStore) -> None:
    for call_id, session in [("a", "s1"), ("b", "s2"), ("c", "s1")]:
        store.record(make_denied(call_id, session_id=session))
    assert [r.call_id for r in store.rows("s1")] == ["a", "c"]
    assert [r.call_id for r in store.rows()] == ["a", "b", "c"]


@pytest.mark.parametrize("claim_key", [None, "k"], ids=["no_key", "claimed_key"])
def test_running_row_is_visible_to_another_store_before_finish(
    store: AuditStore, audit_backend: Any, claim_key: str | None
) -> None:
    audit_id, _ = store.start(make_record(), claim_key=claim_key)
    other = audit_backend.open()
    seen = other.get("call-1")
    _, rival = other.start(make_record("call-2"), claim_key="k")
    assert seen is not None and (seen.audit_id, seen.state) == (audit_id, CallState.RUNNING)
    expected = ClaimOutcome.RUNNING if claim_key else ClaimOutcome.CLAIMED
    assert rival is not None and rival.outcome is expected


def test_record_refuses_an_unfinished_state(store: SQLiteAuditStore) -> None:
    with pytest.raises(ValueError, match="finished"):
        store.record(make_record(state=CallState.RUNNING))
    assert store.count() == 0


def test_start_refuses_a_state_other_than_running(store: SQLiteAuditStore) -> None:
    with pytest.raises(ValueError, match="RUNNING"):
        store.start(make_denied())


def test_finish_of_an_unknown_row_is_audit_unavailable(store: SQLiteAuditStore) -> None:
    with pytest.raises(AuditUnavailable, match="not RUNNING"):
        finish_ok(store, 999)


def test_finish_twice_keeps_the_first_outcome(store: SQLiteAuditStore) -> None:
    audit_id, _ = store.start(make_record())
    assert audit_id is not None
    finish_ok(store, audit_id)
    with pytest.raises(AuditUnavailable):
        finish_ok(store, audit_id, state=CallState.FAILED)
    row = store.get("call-1")
    assert row is not None and row.state is CallState.SUCCEEDED


def test_record_rejects_an_unknown_decision() -> None:
    with pytest.raises(ValueError, match="decision"):
        make_record(decision="maybe")


def test_store_satisfies_the_audit_store_protocol(store: AuditStore) -> None:
    assert isinstance(store, AuditStore)


def test_memory_store_is_one_database_shared_by_threads() -> None:
    with SQLiteAuditStore(":memory:") as memory:
        worker = threading.Thread(target=lambda: memory.record(make_denied("from-thread")))
        worker.start()
        worker.join()
        memory.record(make_denied("from-main"))
        assert [r.call_id for r in memory.rows()] == ["from-thread", "from-main"]


# --- settings and schema -------------------------------------------------------


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_wal_synchronous_and_busy_timeout_are_applied(db_path: Path, synchronous: Any) -> None:
    with SQLiteAuditStore(db_path, synchronous=synchronous, busy_timeout_ms=1234) as store:
        settings = store.settings()
        worker_settings: list[Any] = []
        worker = threading.Thread(target=lambda: worker_settings.append(store.settings()))
        worker.start()
        worker.join()
    assert (settings.journal_mode, settings.synchronous, settings.busy_timeout_ms) == (
        "wal",
        synchronous,
        1234,
    )
    assert worker_settings == [settings]
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        raw.close()


def test_invalid_settings_are_refused(db_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteAuditStore(db_path, synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_timeout_ms"):
        SQLiteAuditStore(db_path, busy_timeout_ms=-1)


def test_database_from_a_newer_schema_is_refused(db_path: Path) -> None:
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(AuditUnavailable, match="schema version"):
        SQLiteAuditStore(db_path)


def test_schema_has_one_secondary_index_and_no_autoincrement(
    sqlite_store: SQLiteAuditStore, db_path: Path
) -> None:
    """Every index is written by every call's INSERT: only get() has one."""
    raw = sqlite3.connect(db_path)
    try:
        indexes = raw.execute(
            "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
        plan = raw.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM tool_call_audit WHERE call_id = ?"
            " ORDER BY audit_id DESC LIMIT 1",
            ("c",),
        ).fetchall()
    finally:
        raw.close()
    assert indexes == [("tool_call_audit", "idx_audit_call")]
    assert "sqlite_sequence" not in tables  # made only by AUTOINCREMENT
    assert any("idx_audit_call" in str(step) for step in plan)


PRE_RELEASE_INDEXES = (
    "CREATE INDEX idx_audit_session ON tool_call_audit (session_id, started_at)",
    "CREATE INDEX idx_audit_idempotency ON tool_call_audit (idempotency_key)",
    "CREATE INDEX idx_audit_running ON tool_call_audit (state) WHERE state = 'RUNNING'",
    "CREATE INDEX idx_keys_audit ON idempotency_keys (audit_id)",
)


def test_database_of_the_pre_release_shape_is_read_and_written(db_path: Path) -> None:
    """Schema version 1 once had AUTOINCREMENT and four more indexes; such a
    file reads and writes the same (only its inserts cost more)."""
    table, *_ = SQLITE_MIGRATIONS[0]
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:
        old_table = table.replace("INTEGER PRIMARY KEY,", "INTEGER PRIMARY KEY AUTOINCREMENT,")
        assert old_table != table
        raw.execute(old_table)
        for statement in SQLITE_MIGRATIONS[0][1:]:
            raw.execute(statement)
        for statement in PRE_RELEASE_INDEXES:
            raw.execute(statement)
        raw.execute("PRAGMA user_version = 1")  # the shape was version 1; opening migrates it
    finally:
        raw.close()
    with SQLiteAuditStore(db_path, **CRASHED) as old:
        denied = old.record(make_denied("denied"))
        finished, _ = old.start(make_record("finished"), claim_key="k1")
        crashed, _ = old.start(make_record("crashed"), claim_key="k2", lease_seconds=0)
        assert finished is not None and crashed is not None
        finish_ok(old, finished, claim_key="k1", stored_result={"code": "OK"})
        assert old.recover(T1) == 1
        assert [(r.call_id, r.audit_id, r.state) for r in old.rows("session-1")] == [
            ("denied", denied, CallState.DENIED),
            ("finished", finished, CallState.SUCCEEDED),
            ("crashed", crashed, CallState.INTERRUPTED),
        ]
        _, retry = old.start(make_record("retry"), claim_key="k2")
        assert old.integrity_check() == "ok"
    assert retry is not None and retry.outcome is ClaimOutcome.REPLAY


def test_reopening_keeps_rows_and_schema(audit_backend: Any) -> None:
    first = audit_backend.open()
    first.record(make_denied())
    first.close()
    second = audit_backend.open()
    assert second.count() == 1
    assert second.get("call-1") is not None


def test_sqlite_database_stays_sound_when_reopened(db_path: Path) -> None:
    with SQLiteAuditStore(db_path) as first:
        first.record(make_denied())
    with SQLiteAuditStore(db_path) as second:
        assert second.integrity_check() == "ok"


def test_sqlite_database_of_schema_version_1_gains_leases_and_keeps_its_rows(
    db_path: Path,
) -> None:
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:
        for statement in SQLITE_MIGRATIONS[0]:
            raw.execute(statement)
        raw.execute("PRAGMA user_version = 1")
        raw.execute(
            "INSERT INTO tool_call_audit (call_id, session_id, actor, tool_name, risk,"
            " arguments_json, arguments_hash, decision, state, started_at)"
            " VALUES ('old', 's', 'a', 't', 'read', '{}', 'h', 'allow', 'RUNNING', 'T0')"
        )
    finally:
        raw.close()
    with SQLiteAuditStore(db_path) as store:
        assert store.settings().schema_version == SCHEMA_VERSION == 4
        old = store.get("old")
        assert old is not None and (old.lease_owner, old.lease_expires_at) == (None, None)
        assert store.recover(T1) == 1  # a RUNNING row without a lease counts as expired


def test_close_closes_the_connections_of_every_thread(db_path: Path) -> None:
    store = SQLiteAuditStore(db_path)
    done = threading.Barrier(4)
    release = threading.Event()

    def use_store() -> None:
        store.record(make_denied(threading.current_thread().name))
        done.wait()
        release.wait()

    workers = [threading.Thread(target=use_store) for _ in range(3)]
    for worker in workers:
        worker.start()
    done.wait()  # three live threads, each with its own connection
    wal = Path(f"{db_path}-wal")
    assert wal.exists()
    store.close()
    release.set()
    for worker in workers:
        worker.join()
    # SQLite removes the -wal file when the last connection to the database closes.
    assert not wal.exists()


# --- fail closed ----------------------------------------------------------------

ALL_OPERATIONS = [
    ("record", lambda s: s.record(make_denied())),
    ("start", lambda s: s.start(make_record())),
    ("start_with_key", lambda s: s.start(make_record(), claim_key="k")),
    ("finish", lambda s: finish_ok(s, 1)),
    ("release", lambda s: s.release("k")),
    ("get", lambda s: s.get("call-1")),
    ("rows", lambda s: s.rows()),
    ("count", lambda s: s.count()),
    ("recover", lambda s: s.recover(T1)),
]


@pytest.mark.parametrize(("name", "operation"), ALL_OPERATIONS, ids=[n for n, _ in ALL_OPERATIONS])
def test_closed_store_raises_audit_unavailable(
    audit_backend: Any, name: str, operation: Any
) -> None:
    store = audit_backend.open()
    store.close()
    with pytest.raises(AuditUnavailable) as caught:
        operation(store)
    assert not isinstance(caught.value, sqlite3.Error)
    assert caught.value.operation == name.removesuffix("_with_key")


@pytest.mark.parametrize(("name", "operation"), ALL_OPERATIONS, ids=[n for n, _ in ALL_OPERATIONS])
def test_an_operational_error_of_sqlite_raises_audit_unavailable(
    sqlite_store: SQLiteAuditStore, db_path: Path, name: str, operation: Any
) -> None:
    # Another process drops the tables: every operation meets "no such table".
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:
        raw.execute("DROP TABLE idempotency_keys")
        raw.execute("DROP TABLE tool_call_audit")
    finally:
        raw.close()
    with pytest.raises(AuditUnavailable) as caught:
        operation(sqlite_store)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_claim_failing_after_its_row_was_inserted_stores_neither(
    store: AuditStore, audit_backend: Any
) -> None:
    """A trigger fails the claim's second write after the first succeeded:
    the fault a full disk can cause."""
    audit_backend.fail_writes_to("idempotency_keys", "INSERT")
    with pytest.raises(AuditUnavailable, match="disk is full") as caught:
        store.start(make_record(), claim_key="k")
    assert caught.value.operation == "start"
    assert store.count() == 0
    store.start(make_record("plain"))  # the store still works for calls without a key
    assert [r.call_id for r in store.rows()] == ["plain"]


def test_finish_failing_on_its_key_leaves_row_and_key_running(
    store: AuditStore, audit_backend: Any
) -> None:
    audit_id, _ = store.start(make_record(), claim_key="k")
    assert audit_id is not None
    audit_backend.fail_writes_to("idempotency_keys", "UPDATE")
    with pytest.raises(AuditUnavailable, match="disk is full"):
        finish_ok(store, audit_id, claim_key="k", stored_result={"code": "OK"})
    row = store.get("call-1")
    assert row is not None and row.state is CallState.RUNNING
    _, claim = store.start(make_record("call-2"), claim_key="k")
    assert claim is not None and claim.outcome is ClaimOutcome.RUNNING


def test_read_only_database_refuses_writes_with_audit_unavailable(
    db_path: Path,
) -> None:
    store = SQLiteAuditStore(db_path, **CRASHED)
    store.record(make_denied("before"))
    store.start(make_record("running"), lease_seconds=0)  # so recover has to write
    with SQLiteAuditStore(f"file:{db_path}?mode=ro", uri=True) as read_only:
        assert [r.call_id for r in read_only.rows()] == ["before", "running"]
        for write in (
            lambda: read_only.record(make_denied("after")),
            lambda: read_only.start(make_record("after"), claim_key="k"),
            lambda: read_only.recover(T1),
        ):
            with pytest.raises(AuditUnavailable, match="readonly") as caught:
                write()
            assert not isinstance(caught.value, sqlite3.Error)
    assert [(r.call_id, r.state) for r in store.rows()] == [
        ("before", CallState.DENIED),
        ("running", CallState.RUNNING),
    ]
    store.close()


def test_audit_unavailable_message_names_no_host_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "audit.db"
    with pytest.raises(AuditUnavailable) as caught:
        SQLiteAuditStore(missing)
    assert str(tmp_path) not in str(caught.value)


def _use_inherited_store(store: AuditStore, results: Any) -> None:
    try:
        store.count()
        results.put("worked")
    except AuditUnavailable:
        results.put("unavailable")


def test_store_inherited_through_fork_is_unavailable_in_the_child(store: AuditStore) -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork is not available on this platform")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_use_inherited_store, args=(store, results))
    child.start()
    outcome = results.get(timeout=30)
    child.join(timeout=30)
    assert outcome == "unavailable"
    assert store.count() == 0  # the parent's store still works


def _open_store_in_child(spec: tuple[str, str], results: Any) -> None:
    try:
        fresh = open_store(spec)
        try:
            fresh.record(make_denied("from-child"))
        finally:
            fresh.close()
        results.put("worked")
    except AuditUnavailable as exc:
        results.put(f"unavailable: {exc}")


def test_store_opened_in_a_forked_child_works(store: AuditStore, audit_backend: Any) -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork is not available on this platform")
    store.record(make_denied("from-parent"))
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_open_store_in_child, args=(audit_backend.spec, results))
    child.start()
    outcome = results.get(timeout=30)
    child.join(timeout=30)
    assert outcome == "worked"
    assert [r.call_id for r in store.rows()] == ["from-parent", "from-child"]


# --- concurrent writers ------------------------------------------------------------


def _start_and_finish(store: AuditStore, prefix: str, calls: int) -> None:
    for index in range(calls):
        audit_id, _ = store.start(make_record(f"{prefix}-{index}"))
        assert audit_id is not None
        finish_ok(store, audit_id)


def test_writes_from_eight_threads_all_commit(store: AuditStore) -> None:
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            _start_and_finish(store, name, 50)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = store.rows()
    assert len(rows) == 400
    assert {r.state for r in rows} == {CallState.SUCCEEDED}
    assert len({r.audit_id for r in rows}) == 400


def _write_in_process(spec: tuple[str, str], ready: Any, name: str) -> None:
    store = open_store(spec)
    try:
        ready.wait(timeout=30)
        _start_and_finish(store, name, 100)
    finally:
        store.close()


def test_writes_from_four_processes_all_commit(audit_backend: Any) -> None:
    audit_backend.open().close()  # schema made before the race
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(4)
    processes = [
        context.Process(target=_write_in_process, args=(audit_backend.spec, ready, f"p{i}"))
        for i in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        if process.is_alive():
            process.kill()
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    store = audit_backend.open()
    rows = store.rows()
    if isinstance(store, SQLiteAuditStore):
        assert store.integrity_check() == "ok"
    assert len(rows) == 400
    assert {r.state for r in rows} == {CallState.SUCCEEDED}


# --- recovery -----------------------------------------------------------------------


def test_recover_marks_running_rows_interrupted_and_their_keys_done(
    store: AuditStore, crashed: AuditStore
) -> None:
    plain, _ = crashed.start(make_record("plain"), lease_seconds=0)
    keyed, _ = crashed.start(make_record("keyed"), claim_key="k", lease_seconds=0)
    finished, _ = crashed.start(make_record("finished"), lease_seconds=0)
    assert plain is not None and keyed is not None and finished is not None
    finish_ok(crashed, finished)

    assert store.recover(T1) == 2

    for call_id in ("plain", "keyed"):
        row = store.get(call_id)
        assert row is not None
        assert (row.state, row.result_code, row.error_message, row.finished_at) == (
            CallState.INTERRUPTED,
            ErrorCode.EXECUTION_ERROR,
            INTERRUPTED_MESSAGE,
            T1,
        )
    untouched = store.get("finished")
    assert untouched is not None and untouched.state is CallState.SUCCEEDED
    _, claim = store.start(make_record("retry"), claim_key="k")
    assert claim is not None and claim.outcome is ClaimOutcome.REPLAY
    assert claim.original_call_id == "keyed"
    assert claim.stored_result is not None
    assert (claim.stored_result["code"], claim.stored_result["state"]) == (
        "EXECUTION_ERROR",
        "INTERRUPTED",
    )
    assert store.recover(T1) == 0


def test_finish_after_recover_is_refused_and_keeps_interrupted(
    store: AuditStore, crashed: AuditStore
) -> None:
    audit_id, _ = crashed.start(make_record(), claim_key="k", lease_seconds=0)
    assert audit_id is not None
    store.recover(T1)
    with pytest.raises(AuditUnavailable, match="not RUNNING"):
        finish_ok(crashed, audit_id, claim_key="k", stored_result={"code": "OK"})
    row = store.get("call-1")
    assert row is not None and row.state is CallState.INTERRUPTED
    _, retry = store.start(make_record("retry"), claim_key="k")
    assert retry is not None and retry.stored_result is not None
    assert retry.stored_result["state"] == "INTERRUPTED"


def test_recover_finds_crashed_calls_and_their_keys_among_many_finished(
    store: AuditStore, crashed: AuditStore
) -> None:
    for index in range(300):
        audit_id, _ = store.start(make_record(f"done-{index}"), claim_key=f"done-{index}")
        assert audit_id is not None
        finish_ok(store, audit_id, claim_key=f"done-{index}", stored_result={"code": "OK"})
    crashed.start(make_record("crashed-keyed"), claim_key="crashed", lease_seconds=0)
    crashed.start(make_record("crashed-plain"), lease_seconds=0)
    crashed.start(make_record("held"), claim_key="held", lease_seconds=0)
    crashed.release("held")  # a key freed before its handler ran is not anyone's outcome

    assert store.recover(T1) == 3

    states = {r.call_id: r.state for r in store.rows()}
    assert [c for c, s in states.items() if s is not CallState.SUCCEEDED] == [
        "crashed-keyed",
        "crashed-plain",
        "held",
    ]
    _, crashed_key = store.start(make_record("retry"), claim_key="crashed")
    _, done = store.start(make_record("retry"), claim_key="done-7")
    _, freed = store.start(make_record("retry"), claim_key="held")
    assert crashed_key is not None and crashed_key.stored_result is not None
    assert (crashed_key.outcome, crashed_key.stored_result["state"]) == (
        ClaimOutcome.REPLAY,
        "INTERRUPTED",
    )
    assert done is not None and done.stored_result == {"code": "OK"}
    assert freed is not None and freed.outcome is ClaimOutcome.CLAIMED


def test_recover_leaves_the_running_rows_of_a_live_process_alone(store: AuditStore) -> None:
    """This process is alive and its leases last: recover, from this store
    or any other, takes none of its calls over."""
    store.start(make_record("live"), claim_key="k")
    assert store.recover(T1) == 0
    row = store.get("live")
    assert row is not None and row.state is CallState.RUNNING
    _, rival = store.start(make_record("rival"), claim_key="k")
    assert rival is not None and rival.outcome is ClaimOutcome.RUNNING


def test_running_row_names_its_owner_and_lease(store: AuditStore) -> None:
    store.start(make_record(), lease_seconds=60)
    row = store.get("call-1")
    assert row is not None
    owner = LeaseOwner.parse(row.lease_owner)
    assert owner is not None and owner == current_owner()
    assert owner.pid == os.getpid()
    assert row.lease_expires_at is not None and row.lease_expires_at.endswith("Z")


def test_interrupt_expired_answers_the_rows_it_marked(
    store: AuditStore, crashed: AuditStore
) -> None:
    audit_id, _ = crashed.start(make_record("gone"), lease_seconds=0)
    store.start(make_record("live"))
    [marked] = store.interrupt_expired(T1)
    assert (marked.audit_id, marked.call_id, marked.state) == (
        audit_id,
        "gone",
        CallState.INTERRUPTED,
    )
    assert marked == store.get("gone")


def test_negative_lease_is_refused(store: AuditStore) -> None:
    with pytest.raises(ValueError, match="lease"):
        store.start(make_record(), lease_seconds=-1)
    assert store.count() == 0


# --- secrets at rest --------------------------------------------------------------

SECRETS = {
    "aws": "AKIAQWERTYUIOPASDFGH",
    "github": "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
    "slack": "xoxb-220011223344-5566778899001-QwErTyUiOpAsDfGhJkLzXcVb",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEtbG92ZWxhY2UifQ.c2lnbmF0dXJlLXZhbHVlLTEyMzQ",
    "pem": "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu",
    "url": "hunter2pass",
    "password": "correct-h0rse-battery",
}


def _secret_arguments() -> dict[str, Any]:
    return {
        "path": "notes/deploy.md",
        "password": SECRETS["password"],
        "content": (
            f"aws {SECRETS['aws']}\n"
            f"gh {SECRETS['github']}\n"
            f"slack {SECRETS['slack']}\n"
            f"jwt {SECRETS['jwt']}\n"
            f"-----BEGIN PRIVATE KEY-----\n{SECRETS['pem']}\n-----END PRIVATE KEY-----\n"
            f"db postgres://u:{SECRETS['url']}@h/db\n"
        ),
    }


def _raw_bytes(db_path: Path) -> dict[str, bytes]:
    files = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{db_path}{suffix}")
        if path.exists():
            files[path.name] = path.read_bytes()
    return files


def _leaks(files: dict[str, bytes]) -> list[tuple[str, str]]:
    return [
        (name, label)
        for name, data in files.items()
        for label, secret in SECRETS.items()
        if secret.encode() in data
    ]


def test_redacted_records_leave_no_secret_bytes_at_rest(
    store: AuditStore, audit_backend: Any
) -> None:
    """SQLite: the .db, -wal and -shm before close (the -wal still holds
    every page written). PostgreSQL: every file of the data directory
    (heap, WAL) after a CHECKPOINT."""
    redactor = Redactor()
    arguments = _secret_arguments()
    redacted = redactor.redact(arguments)
    preview = redactor.redact_text(json.dumps({"echo": arguments["content"]}))
    audit_id, _ = store.start(
        make_record(
            "secret-call",
            arguments_json=canonical_json(redacted),
            arguments_hash=json_hash(arguments),
        ),
        claim_key="key-1",
    )
    assert audit_id is not None
    finish_ok(
        store,
        audit_id,
        result_preview=preview,
        stored_result=redactor.redact({"data": arguments}),
        claim_key="key-1",
    )
    store.record(
        make_denied("refused", arguments_json=canonical_json(redacted), error_message=preview)
    )

    files = audit_backend.stored_bytes()
    written = [name for name, data in files.items() if b"<redacted:password>" in data]
    assert written  # the rows did reach the bytes scanned
    if audit_backend.name == "sqlite":
        assert written == ["audit.db-wal"]
    assert _leaks(files) == []


def test_update_redacting_after_insert_leaves_the_secret_in_the_wal(
    sqlite_store: SQLiteAuditStore, db_path: Path
) -> None:
    """The trap the store's docstring warns of: redact before the INSERT."""
    arguments = _secret_arguments()
    sqlite_store.record(make_denied("leaky", arguments_json=canonical_json(arguments)))
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:
        redacted = canonical_json(Redactor().redact(arguments))
        raw.execute(
            "UPDATE tool_call_audit SET arguments_json = ? WHERE call_id = 'leaky'", (redacted,)
        )
        assert raw.execute("SELECT arguments_json FROM tool_call_audit").fetchone()[0] == redacted
    finally:
        raw.close()
    files = _raw_bytes(db_path)
    if f"{db_path.name}-wal" not in files:
        pytest.xfail("the -wal was checkpointed away before it could be read")
    assert ("audit.db-wal", "password") in _leaks(files)
