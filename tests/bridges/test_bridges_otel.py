"""Audit rows and replays exported as OpenTelemetry GenAI execute_tool spans."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from pytest_toolguard import ToolCall, ToolRuntime
from pytest_toolguard.bridges.exports.otel import export_audit_rows, export_replay
from pytest_toolguard.replay import load, replay
from pytest_toolguard.tools import builtin_registry

ROOT = Path(__file__).parents[2]


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def rows(tmp_path: Path) -> list:
    with ToolRuntime(builtin_registry(), tmp_path) as runtime:
        runtime.execute(ToolCall("c1", "list_files", {}, session_id="s1"))
        runtime.execute(
            ToolCall("c2", "write_file", {"path": "a", "content": "token=x"}, session_id="s1")
        )
        return runtime.audit.rows()


def test_each_row_is_an_execute_tool_span_with_genai_attributes(spans, tmp_path: Path) -> None:
    provider, exporter = spans
    assert export_audit_rows(rows(tmp_path), provider) == 2
    first, second = exporter.get_finished_spans()
    assert first.name == "execute_tool list_files"
    assert first.attributes["gen_ai.operation.name"] == "execute_tool"
    assert first.attributes["gen_ai.tool.call.id"] == "c1"
    assert first.attributes["gen_ai.conversation.id"] == "s1"
    assert "error.type" not in first.attributes
    assert first.status.status_code is not StatusCode.ERROR
    assert second.attributes["error.type"] == "PERMISSION_DENIED"
    assert second.status.status_code is StatusCode.ERROR


def test_arguments_are_exported_only_when_asked_and_redacted(spans, tmp_path: Path) -> None:
    provider, exporter = spans
    export_audit_rows(rows(tmp_path), provider)
    assert "gen_ai.tool.call.arguments" not in exporter.get_finished_spans()[1].attributes
    exporter.clear()
    export_audit_rows(rows(tmp_path), provider, include_content=True)
    arguments = exporter.get_finished_spans()[1].attributes["gen_ai.tool.call.arguments"]
    assert arguments == '{"content":"token=<redacted:token>","path":"a"}'  # as the row keeps them


def test_span_times_are_the_rows_times(spans, tmp_path: Path) -> None:
    provider, exporter = spans
    export_audit_rows(rows(tmp_path), provider)
    (span, _) = exporter.get_finished_spans()
    assert span.start_time is not None and span.end_time is not None
    assert span.end_time >= span.start_time


def test_a_replay_exports_a_span_per_interaction(spans) -> None:
    provider, exporter = spans
    cassette = load(ROOT / "cassettes" / "code_editing.yaml")
    report = replay(cassette, builtin_registry())
    assert export_replay(report, provider) == len(cassette.interactions)
    assert {span.name for span in exporter.get_finished_spans()} >= {"execute_tool write_file"}
