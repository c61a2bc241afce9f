"""The audit log as the runtime uses it: fail closed before the handler,
never lose a row after it.

The tool here is a WRITE tool: its call commits a RUNNING row before its
handler and finishes it after, as every call but a READ one does (READ
calls commit one row, after the handler: ``test_audit_read_calls.py``)."""

from __future__ import annotations

import pytest
from conftest import WRITE_ANYWHERE, spy_tool

from pytest_toolguard import CallState, ErrorCode, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.harness.failing_store import FailingStore


def writer(spy, **options):
    """The spy as a WRITE tool (two commits: RUNNING, then finished)."""
    return spy_tool(spy, risk=Risk.WRITE, **options)


def call(call_id="c1", tool_name="spy", **arguments):
    return ToolCall(call_id=call_id, tool_name=tool_name, arguments=arguments)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "audit.db"


@pytest.fixture
def store(db):
    """The store on ``db``, behind a ``FailingStore`` the tests switch off."""
    store = FailingStore(SQLiteAuditStore(db))
    yield store
    store.close()


def test_running_row_is_committed_before_a_write_handler_starts(
    toolguard_runtime, registry_of, spy, db, store
):
    seen = []

    def look(ctx, **arguments):
        # Another connection (another store object) sees the row already.
        other = SQLiteAuditStore(db)
        try:
            row = other.get(ctx.call_id)
            seen.append(row.state if row else None)
        finally:
            other.close()
        return {}

    runtime = toolguard_runtime(registry_of(writer(spy, result=look)), WRITE_ANYWHERE, audit=store)
    assert runtime.execute(call()).ok
    assert seen == [CallState.RUNNING]
    assert store.get("c1").state is CallState.SUCCEEDED


def test_store_down_at_start_answers_audit_unavailable_and_the_handler_never_runs(
    toolguard_runtime, registry_of, spy, store
):
    runtime = toolguard_runtime(registry_of(writer(spy)), WRITE_ANYWHERE, audit=store)
    store.fail("start", "record")
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        result = runtime.execute(call())
    assert (result.code, result.retryable, result.ok) == (ErrorCode.AUDIT_UNAVAILABLE, True, False)
    assert spy.count == 0
    # The refusal's own row is queued, and written once the store is back.
    store.heal()
    assert runtime.flush_audit() == 0
    row = store.get("c1")
    assert (row.state, row.result_code, row.rule) == (
        CallState.DENIED,
        ErrorCode.AUDIT_UNAVAILABLE,
        "audit.unavailable",
    )


@pytest.mark.parametrize("how", ["closed", "read-only"])
def test_a_store_that_stays_down_is_reported_by_close(registry_of, spy, db, workspace_dir, how):
    if how == "closed":
        store = SQLiteAuditStore(db)
        store.close()
    else:
        SQLiteAuditStore(db).close()  # create the schema
        store = SQLiteAuditStore(f"file:{db}?mode=ro", uri=True)
    runtime = ToolRuntime(registry_of(writer(spy)), str(workspace_dir), WRITE_ANYWHERE, store)
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        assert runtime.execute(call()).code is ErrorCode.AUDIT_UNAVAILABLE
    assert spy.count == 0
    with pytest.warns(RuntimeWarning, match="could not be stored"):
        assert runtime.close() == ["1 audit write(s) could not be stored"]
    store.close()


def test_store_down_at_finish_keeps_the_result_and_queues_the_row(
    toolguard_runtime, registry_of, spy, store
):
    runtime = toolguard_runtime(registry_of(writer(spy)), WRITE_ANYWHERE, audit=store)
    store.fail("finish")
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        result = runtime.execute(call())
    # The side effect happened: answering AUDIT_UNAVAILABLE would invite a second one.
    assert result.ok and spy.count == 1
    assert store.get("c1").state is CallState.RUNNING
    assert runtime.flush_audit() == 1  # still down
    store.heal()
    assert runtime.flush_audit() == 0
    row = store.get("c1")
    assert (row.state, row.result_code) == (CallState.SUCCEEDED, ErrorCode.OK)


def test_queued_rows_are_written_by_the_next_call(toolguard_runtime, registry_of, spy, store):
    runtime = toolguard_runtime(registry_of(writer(spy)), WRITE_ANYWHERE, audit=store)
    store.fail("record")
    with pytest.warns(RuntimeWarning):
        refused = runtime.execute(call(tool_name="nope"))
    assert refused.code is ErrorCode.TOOL_NOT_FOUND  # the refusal is still the answer
    assert store.count() == 0
    store.heal()
    runtime.execute(call("c2"))
    assert [row.call_id for row in store.rows()] == ["c1", "c2"]


def test_close_reports_rows_it_could_not_store(toolguard_runtime, registry_of, spy, store):
    runtime = toolguard_runtime(registry_of(writer(spy)), WRITE_ANYWHERE, audit=store)
    store.fail("finish")
    with pytest.warns(RuntimeWarning):
        runtime.execute(call())
    with pytest.warns(RuntimeWarning, match="1 audit write"):
        assert runtime.close() == ["1 audit write(s) could not be stored"]
    store.heal()
    assert runtime.close() == []


def test_recover_marks_rows_left_running_by_a_crash(db, store):
    from pytest_toolguard import AuditRecord

    crashed = SQLiteAuditStore(db, lease_grace_seconds=0)  # its leases end at once
    crashed.start(
        AuditRecord(
            call_id="dead",
            session_id="s",
            actor="a",
            tool_name="t",
            risk="write",
            arguments_json="{}",
            arguments_hash="",
            state=CallState.RUNNING,
            started_at="2026-01-01T00:00:00Z",
        ),
        lease_seconds=0,
    )
    crashed.close()
    assert store.recover("2026-01-01T00:01:00Z") == 1
    row = store.get("dead")
    assert (row.state, row.result_code) == (CallState.INTERRUPTED, ErrorCode.EXECUTION_ERROR)


def test_synchronous_full_is_selectable(tmp_path):
    store = SQLiteAuditStore(tmp_path / "full.db", synchronous="FULL")
    settings = store.settings()
    assert (settings.journal_mode, settings.synchronous) == ("wal", "FULL")
    store.close()
