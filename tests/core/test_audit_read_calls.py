"""READ calls: one audit commit, the row written once with its outcome.

A READ tool's handler changes nothing, so a call of it (run in this
process, without an idempotency key) commits one finished row after the
handler instead of a RUNNING row before it and its update after. Fail
closed still holds, in this form: no data leaves the
executor unless the call's row is committed. When that commit fails the
result is withheld (AUDIT_UNAVAILABLE, no data), even though the handler
ran. A READ handler that writes anyway gets its RUNNING row committed
before its first change, and its row finished as any other. Each test runs
on SQLite and PostgreSQL (``audit_backend``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from audit_backends import open_store
from conftest import WRITE_ANYWHERE, Spy, spy_tool

from pytest_toolguard import (
    CallState,
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.harness.failing_store import FailingStore

MARKER = "read-data-7f3c91"
"""What the READ handler returns: never in a withheld result."""

WAIT = 60.0


def call(call_id: str = "c1", tool_name: str = "spy", **arguments: Any) -> ToolCall:
    return ToolCall(call_id=call_id, tool_name=tool_name, arguments=arguments)


def _runtime(spec: ToolSpec, workspace: Path, store: Any) -> ToolRuntime:
    return ToolRuntime(ToolRegistry([spec]), str(workspace), WRITE_ANYWHERE, store)


def test_a_read_call_commits_one_finished_row_after_its_handler(
    audit_backend: Any, workspace_dir: Path, spy: Spy
) -> None:
    store = audit_backend.open()
    other = audit_backend.open()  # another connection: what a second process sees
    seen = []

    def look(ctx: Any, **arguments: Any) -> Any:
        seen.append(other.get(ctx.call_id))
        return {"found": MARKER}

    runtime = _runtime(spy_tool(spy, result=look), workspace_dir, store)
    result = runtime.execute(call(text="hello"))
    runtime.close()
    assert result.ok and seen == [None]
    [row] = other.rows()
    assert (row.call_id, row.state, row.result_code, row.risk) == (
        "c1",
        CallState.SUCCEEDED,
        ErrorCode.OK,
        "read",
    )
    assert MARKER in row.result_preview
    assert row.arguments_json == '{"text":"hello"}'
    assert row.finished_at is not None and row.duration_ms is not None


def test_an_awaited_read_call_commits_one_finished_row_after_its_handler(
    audit_backend: Any, workspace_dir: Path, spy: Spy
) -> None:
    import asyncio

    store = audit_backend.open()
    other = audit_backend.open()
    seen = []

    async def look(ctx: Any, **arguments: Any) -> Any:
        seen.append(other.get(ctx.call_id))
        return {"found": MARKER}

    tool = ToolSpec(name="spy", description="reads", input_schema={"type": "object"}, handler=look)
    runtime = _runtime(tool, workspace_dir, store)
    result = asyncio.run(runtime.aexecute(call()))
    runtime.close()
    assert result.ok and seen == [None]
    [row] = other.rows()
    assert (row.state, row.result_code) == (CallState.SUCCEEDED, ErrorCode.OK)


def test_a_read_call_whose_row_cannot_be_committed_answers_audit_unavailable_without_its_data(
    audit_backend: Any, workspace_dir: Path, spy: Spy
) -> None:
    store = FailingStore(audit_backend.open())
    runtime = _runtime(
        spy_tool(spy, result=lambda ctx, **a: {"found": MARKER}), workspace_dir, store
    )
    store.fail("start", "record")
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        result = runtime.execute(call())
    assert (result.code, result.ok, result.retryable, result.data) == (
        ErrorCode.AUDIT_UNAVAILABLE,
        False,
        True,
        None,
    )
    assert MARKER not in result.message
    assert spy.count == 1  # the handler ran; what it read never left
    store.heal()
    assert runtime.flush_audit() == 0
    runtime.close()
    [row] = store.rows()
    assert (row.state, row.result_code) == (CallState.FAILED, ErrorCode.AUDIT_UNAVAILABLE)
    assert MARKER not in (row.result_preview or "") + (row.error_message or "")


def test_a_read_handler_that_writes_gets_its_running_row_committed_first(
    audit_backend: Any, workspace_dir: Path, spy: Spy
) -> None:
    store = audit_backend.open()
    other = audit_backend.open()
    seen = []

    def write_anyway(ctx: Any, **arguments: Any) -> Any:
        seen.append(other.get(ctx.call_id))
        ctx.workspace.write_text("note.txt", "written by a READ tool")
        seen.append(other.get(ctx.call_id))
        return {}

    runtime = _runtime(spy_tool(spy, result=write_anyway), workspace_dir, store)
    result = runtime.execute(call())
    runtime.close()
    assert result.ok
    assert seen[0] is None
    assert seen[1] is not None and seen[1].state is CallState.RUNNING
    [row] = other.rows()
    assert (row.state, row.result_code) == (CallState.SUCCEEDED, ErrorCode.OK)
    assert (workspace_dir / "note.txt").read_text() == "written by a READ tool"


def test_a_read_handler_cannot_write_while_the_store_is_down(
    audit_backend: Any, workspace_dir: Path, spy: Spy
) -> None:
    store = FailingStore(audit_backend.open())

    def write_anyway(ctx: Any, **arguments: Any) -> Any:
        ctx.workspace.write_text("note.txt", MARKER)
        return {"wrote": MARKER}

    runtime = _runtime(spy_tool(spy, result=write_anyway), workspace_dir, store)
    store.fail("start", "record")
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        result = runtime.execute(call())
    store.heal()
    runtime.close()
    assert (result.code, result.data) == (ErrorCode.AUDIT_UNAVAILABLE, None)
    assert not (workspace_dir / "note.txt").exists()


def test_a_keyed_read_call_commits_its_running_row_before_its_handler(
    audit_backend: Any, workspace_dir: Path, spy: Spy
) -> None:
    # The idempotency claim is made with the RUNNING row: a keyed READ call
    # keeps both commits.
    store = audit_backend.open()
    other = audit_backend.open()
    seen = []

    def look(ctx: Any, **arguments: Any) -> Any:
        seen.append(other.get(ctx.call_id))
        return {}

    runtime = _runtime(spy_tool(spy, result=look), workspace_dir, store)
    keyed = ToolCall(call_id="c1", tool_name="spy", arguments={}, idempotency_key="k1")
    assert runtime.execute(keyed).ok
    runtime.close()
    assert seen[0] is not None and seen[0].state is CallState.RUNNING


def _killed_mid_read(spec: tuple[str, str], workspace: str) -> None:
    """A process whose READ handler kills it (SIGKILL) before it returns."""

    def handler(ctx: Any, **arguments: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)

    tool = ToolSpec(
        name="reads",
        description="dies mid-read",
        input_schema={"type": "object"},
        handler=handler,
        risk=Risk.READ,
    )
    store = open_store(spec)
    ToolRuntime(ToolRegistry([tool]), workspace, WRITE_ANYWHERE, store).execute(
        ToolCall("killed", "reads", {})
    )


@pytest.mark.slow
def test_a_process_killed_mid_read_leaves_no_row_and_nothing_to_recover(
    audit_backend: Any, workspace_dir: Path
) -> None:
    import multiprocessing

    audit_backend.open().close()  # the schema exists before the process starts
    context = multiprocessing.get_context("spawn")
    process = context.Process(
        target=_killed_mid_read, args=(audit_backend.spec, str(workspace_dir))
    )
    process.start()
    process.join(WAIT)
    assert process.exitcode == -signal.SIGKILL
    store = audit_backend.open()
    runtime = ToolRuntime(ToolRegistry([]), str(workspace_dir), WRITE_ANYWHERE, store)
    recovery = runtime.recover()
    runtime.close()
    assert store.get("killed") is None
    assert recovery.interrupted == ()
