"""Audit rows as the OpenAI Agents SDK's trace export (``trace`` and
``trace.span`` items), checked against the SDK's own ``export()``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.audit import AuditRecord
from pytest_toolguard.bridges.exports.openai_trace import trace_items
from pytest_toolguard.cli import main
from pytest_toolguard.tools import builtin_registry


@pytest.fixture
def database(tmp_path: Path) -> Path:
    database = tmp_path / "audit.db"
    (tmp_path / "ws").mkdir()
    with (
        SQLiteAuditStore(database) as store,
        ToolRuntime(builtin_registry(), tmp_path / "ws", audit=store) as runtime,
    ):
        runtime.execute(ToolCall("c1", "list_files", {}, session_id="s1"))
        runtime.execute(
            ToolCall("c2", "write_file", {"path": "a", "content": "x"}, session_id="s1")
        )
        runtime.execute(ToolCall("c3", "list_files", {}, session_id="s2"))
    return database


def rows(database: Path) -> list[AuditRecord]:
    with SQLiteAuditStore(database) as store:
        return store.rows()


def test_each_session_is_a_trace_followed_by_its_spans(database: Path) -> None:
    items = trace_items(rows(database))
    assert [
        (item["object"], item.get("group_id") or item["span_data"]["name"]) for item in items
    ] == [
        ("trace", "s1"),
        ("trace.span", "list_files"),
        ("trace.span", "write_file"),
        ("trace", "s2"),
        ("trace.span", "list_files"),
    ]
    assert {item["trace_id"] for item in items[1:3]} == {items[0]["id"]}


def test_a_refused_call_is_a_span_with_its_code_as_the_error(database: Path) -> None:
    write = trace_items(rows(database))[2]
    assert write["error"]["data"]["code"] == "PERMISSION_DENIED"
    assert trace_items(rows(database))[1]["error"] is None


def test_the_same_rows_export_the_same_ids(database: Path) -> None:
    assert trace_items(rows(database)) == trace_items(rows(database))


def test_without_content_the_spans_carry_no_input_or_output(database: Path) -> None:
    spans = [
        i for i in trace_items(rows(database), include_content=False) if i["object"] == "trace.span"
    ]
    assert {(s["span_data"]["input"], s["span_data"]["output"]) for s in spans} == {(None, None)}


def test_items_have_the_shape_the_agents_sdk_exports(database: Path) -> None:
    tracing = pytest.importorskip("agents.tracing")
    from agents.tracing.span_data import FunctionSpanData
    from agents.tracing.spans import SpanImpl
    from agents.tracing.traces import TraceImpl

    items = trace_items(rows(database))
    trace, span = items[0], items[1]
    sdk_trace = TraceImpl("toolguard audit", trace["id"], "s1", {"source": "x"}, processor=None)  # type: ignore[arg-type]
    sdk_span = SpanImpl(
        span["trace_id"],
        span["id"],
        None,
        None,
        FunctionSpanData("list_files", "{}", "[]"),
        None,  # type: ignore[arg-type]
    )
    assert set(trace) == set(sdk_trace.export() or {})
    exported = sdk_span.export() or {}
    assert set(span) == set(exported)
    assert set(span["span_data"]) == set(exported["span_data"])
    assert span["span_data"]["type"] == exported["span_data"]["type"] == "function"
    assert tracing.util.gen_span_id().startswith("span_") and len(span["id"]) == len(
        tracing.util.gen_span_id()
    )
    assert len(trace["id"]) == len(tracing.util.gen_trace_id())


def test_toolguard_audit_prints_the_ingest_body(database: Path, capsys) -> None:
    assert main(["audit", str(database), "--session", "s2", "--openai-trace"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [item["object"] for item in body["data"]] == ["trace", "trace.span"]
