"""OpenTelemetry: audit rows (and replays) as GenAI ``execute_tool`` spans.

Each audit row becomes one span named ``execute_tool {tool name}``, from
its ``started_at`` to its ``finished_at``, with the GenAI semantic
conventions' attributes (development status): ``gen_ai.operation.name =
"execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.type = "function"``, ``gen_ai.conversation.id`` (the
session), and for a call that did not succeed ``error.type`` (the error
code) with an ERROR status. Ours ride along as ``toolguard.*`` (state,
decision, rule, risk). The arguments and result preview, already redacted
in the row, are added as ``gen_ai.tool.call.arguments`` / ``.result`` only
with ``include_content=True`` (opt-in, as the conventions say).

Needs ``opentelemetry-api`` (``pip install pytest-toolguard[otel]``);
pass a ``TracerProvider`` or the global one is used.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ...audit import AuditRecord
from ...contract import ErrorCode

TRACER_NAME = "pytest_toolguard"


def _nanoseconds(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1_000_000_000)
    except ValueError:
        return None


def span_attributes(row: AuditRecord, *, include_content: bool = False) -> dict[str, Any]:
    """The span attributes of one audit row."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": row.tool_name,
        "gen_ai.tool.call.id": row.call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": row.session_id,
        "toolguard.state": row.state.value,
        "toolguard.decision": row.decision,
        "toolguard.rule": row.rule,
        "toolguard.risk": row.risk,
        "toolguard.actor": row.actor,
    }
    code = row.result_code
    if code is not None and not code.ok:
        attributes["error.type"] = code.value
    elif code is None and row.state.finished:
        attributes["error.type"] = ErrorCode.EXECUTION_ERROR.value
    if include_content:
        attributes["gen_ai.tool.call.arguments"] = row.arguments_json
        if row.result_preview:
            attributes["gen_ai.tool.call.result"] = row.result_preview
    return attributes


def export_audit_rows(
    rows: Iterable[AuditRecord], tracer_provider: Any = None, *, include_content: bool = False
) -> int:
    """Emit one ``execute_tool`` span per row through ``tracer_provider``
    (default: the global one); returns how many. Rows still RUNNING get a
    span ending where they started."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    count = 0
    for row in rows:
        start = _nanoseconds(row.started_at)
        end = _nanoseconds(row.finished_at) or start
        attributes = span_attributes(row, include_content=include_content)
        span = tracer.start_span(
            f"execute_tool {row.tool_name}",
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start,
        )
        if "error.type" in attributes:
            span.set_status(Status(StatusCode.ERROR, row.error_message or attributes["error.type"]))
        span.end(end_time=end)
        count += 1
    return count


def export_replay(
    report: Any, tracer_provider: Any = None, *, include_content: bool = False
) -> int:
    """The spans of a replay: its ``ReplayReport``'s audit rows."""
    return export_audit_rows(report.audit_rows, tracer_provider, include_content=include_content)
