"""A gate's reported outcome is written through the runtime's audit log.

The gate in front of another program's tools (``bridges.guards.gate``: the Claude
Code hook, the Agents SDK guardrail, LangChain) finishes the RUNNING row
``admit`` left once the other program reports the outcome. That write goes
through ``AuditLog`` like every write of the runtime: a store that is down
gets it queued and retried, so the row is finished once the store is back,
never lost and never raised at the other program.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_toolguard import CallState, Capabilities, ErrorCode, Risk, ToolCall
from pytest_toolguard.audit import SQLiteAuditStore
from pytest_toolguard.bridges.guards.gate import admit, finish_admitted, finish_admitted_row
from pytest_toolguard.harness.failing_store import FailingStore
from pytest_toolguard.runtime import ToolRuntime
from pytest_toolguard.tools import builtin_registry

READ_ONLY = Capabilities(allowed_risks=frozenset({Risk.READ}))


def gate_runtime(tmp_path: Path) -> tuple[ToolRuntime, FailingStore]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    store = FailingStore(SQLiteAuditStore(tmp_path / "audit.db"))
    return ToolRuntime(builtin_registry(), str(workspace), READ_ONLY, store), store


def test_a_reported_outcome_is_queued_while_the_store_is_down_and_written_after(
    tmp_path: Path,
) -> None:
    runtime, store = gate_runtime(tmp_path)
    call = ToolCall(call_id="c1", tool_name="list_files", arguments={})
    try:
        assert admit(runtime, call) is None
        with store.failing("finish"), pytest.warns(RuntimeWarning, match="queued for retry"):
            assert finish_admitted(runtime, "c1", ok=True, data={"files": ["a.txt"]}, call=call)
            row = store.store.get("c1")
            assert row is not None and row.state is CallState.RUNNING
            assert runtime.flush_audit() == 1  # still down: kept
        assert runtime.flush_audit() == 0
        row = store.store.get("c1")
        assert row is not None
        assert (row.state, row.result_code) == (CallState.SUCCEEDED, ErrorCode.OK)
        assert row.result_preview == '{"files": ["a.txt"]}'
    finally:
        runtime.close()


def test_a_reported_failure_keeps_its_redacted_message_as_the_row_error(tmp_path: Path) -> None:
    runtime, store = gate_runtime(tmp_path)
    call = ToolCall(call_id="c2", tool_name="list_files", arguments={})
    try:
        assert admit(runtime, call) is None
        assert finish_admitted(runtime, "c2", ok=False, message="it broke", call=call)
        row = store.store.get("c2")
        assert row is not None
        assert (row.state, row.result_code) == (CallState.FAILED, ErrorCode.EXECUTION_ERROR)
        assert row.error_message == "it broke"
    finally:
        runtime.close()


def test_a_row_finished_meanwhile_by_another_process_is_not_finished_again_nor_queued(
    tmp_path: Path,
) -> None:
    """Two hook processes race (PostToolUse and Stop), or recovery marked
    the row INTERRUPTED: the store is up, so this is no outage to queue,
    and the gate says the row was not its to finish."""
    runtime, store = gate_runtime(tmp_path)
    call = ToolCall(call_id="c3", tool_name="list_files", arguments={})
    try:
        assert admit(runtime, call) is None
        row = store.store.get("c3")
        assert row is not None
        other = ToolRuntime(builtin_registry(), runtime.workspace.root, READ_ONLY, store.store)
        try:  # another process's runtime on the same database finishes it first
            assert finish_admitted(other, "c3", ok=False, message="closed by Stop")
        finally:
            other.close()
        finished = finish_admitted_row(
            runtime, row, state=CallState.SUCCEEDED, code=ErrorCode.OK, data={"files": []}
        )
        assert finished is False
        assert runtime.flush_audit() == 0  # nothing queued
        again = store.store.get("c3")
        assert again is not None and again.error_message == "closed by Stop"
    finally:
        runtime.close()
