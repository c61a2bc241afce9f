"""The failing store: the harness's "audit down" seam in front of a real store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_toolguard.audit import AuditRecord, AuditUnavailable, Outcome, SQLiteAuditStore
from pytest_toolguard.contract import CallState, ErrorCode
from pytest_toolguard.harness.failing_store import OPERATIONS, FailingStore
from pytest_toolguard.idempotency import ClaimOutcome

T1 = "2025-01-02T03:04:05.250Z"


def record(call_id: str = "call-1", state: CallState = CallState.RUNNING) -> AuditRecord:
    return AuditRecord(
        call_id=call_id,
        session_id="s",
        actor="agent",
        tool_name="t",
        risk="read",
        arguments_json="{}",
        arguments_hash="h",
        state=state,
        started_at=T1,
    )


def finish(store: Any, audit_id: int) -> None:
    store.finish(
        audit_id,
        Outcome(
            state=CallState.SUCCEEDED,
            result_code=ErrorCode.OK,
            result_preview="",
            error_message="",
            finished_at=T1,
            duration_ms=1,
        ),
    )


OPERATION_CALLS: dict[str, Callable[[Any], object]] = {
    "record": lambda s: s.record(record(state=CallState.DENIED)),
    "start": lambda s: s.start(record()),
    "finish": lambda s: finish(s, 1),
    "release": lambda s: s.release("k"),
    "get": lambda s: s.get("call-1"),
    "rows": lambda s: s.rows(),
    "count": lambda s: s.count(),
    "recover": lambda s: s.recover(T1),
    "interrupt_expired": lambda s: s.interrupt_expired(T1),
}


@pytest.fixture
def store() -> Iterator[FailingStore]:
    failing = FailingStore(SQLiteAuditStore(":memory:"))
    yield failing
    failing.close()


def test_every_operation_the_protocol_has_can_fail() -> None:
    assert set(OPERATION_CALLS) == OPERATIONS


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_failing_operation_raises_audit_unavailable_naming_it(
    store: FailingStore, operation: str
) -> None:
    store.fail(operation)
    with pytest.raises(AuditUnavailable) as caught:
        OPERATION_CALLS[operation](store)
    assert caught.value.operation == operation
    assert str(caught.value) == f"audit store failed to {operation}: disk I/O error (injected)"


def test_fail_without_names_fails_every_operation(store: FailingStore) -> None:
    store.fail()
    for operation, call in OPERATION_CALLS.items():
        with pytest.raises(AuditUnavailable):
            call(store)
        assert operation in OPERATIONS


def test_a_failing_start_stores_nothing_and_holds_no_key(store: FailingStore) -> None:
    with store.failing("start"), pytest.raises(AuditUnavailable):
        store.start(record(), claim_key="k")
    assert store.count() == 0
    _, claim = store.start(record(), claim_key="k")
    assert claim is not None and claim.outcome is ClaimOutcome.CLAIMED


def test_a_failing_finish_leaves_the_row_running(store: FailingStore) -> None:
    audit_id, _ = store.start(record())
    assert audit_id is not None
    store.fail("finish")
    with pytest.raises(AuditUnavailable) as caught:
        finish(store, audit_id)
    assert caught.value.operation == "finish"
    store.heal()
    row = store.get("call-1")
    assert row is not None and row.state is CallState.RUNNING


def test_only_the_named_operations_fail(store: FailingStore) -> None:
    store.fail("finish")
    audit_id, _ = store.start(record())
    assert audit_id is not None and store.count() == 1


def test_fail_rejects_unknown_operations(store: FailingStore) -> None:
    with pytest.raises(ValueError, match="unknown"):
        store.fail("drop_table")
