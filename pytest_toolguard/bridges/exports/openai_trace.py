"""Audit rows as the OpenAI Agents SDK exports its traces.

``trace_items(rows)`` gives, for each session, one trace item (``{"object":
"trace", id, workflow_name, group_id, metadata}``) followed by one function
span per audit row of that session, in the shape the SDK's
``SpanImpl.export()`` writes (``{"object": "trace.span", id, trace_id,
parent_id, started_at, ended_at, span_data: {"type": "function", name,
input, output, mcp_data}, error}``). ``{"data": trace_items(rows)}`` is the
body the SDK's backend exporter sends to the traces ingest endpoint; this
module sends nothing anywhere and needs no SDK.

Ids are derived from the session and the row (``trace_`` + 32 and
``span_`` + 24 hex digits, as the SDK's own), so exporting the same rows
twice gives the same ids. The span's ``input`` is the row's arguments and
its ``output`` the result preview, both redacted when the row was written;
``include_content=False`` leaves them out (the SDK's
``trace_include_sensitive_data=False``). A call that did not succeed has
``error: {"message", "data": {"code", "state", "rule"}}``; a row still
RUNNING has ``ended_at: null``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from ...audit import AuditRecord

WORKFLOW_NAME = "toolguard audit"


def _hex(*parts: object, length: int) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode("utf-8")).hexdigest()[:length]


def trace_id(session_id: str) -> str:
    """The trace id of a session's rows."""
    return f"trace_{_hex('trace', session_id, length=32)}"


def span_item(row: AuditRecord, *, include_content: bool = True) -> dict[str, Any]:
    """One audit row as an Agents SDK function span."""
    code = row.result_code
    failed = (code is not None and not code.ok) or (code is None and row.state.finished)
    error: dict[str, Any] | None = None
    if failed:
        error = {
            "message": row.error_message or (code.value if code else row.state.value),
            "data": {
                "code": code.value if code else None,
                "state": row.state.value,
                "rule": row.rule,
            },
        }
    identity = row.audit_id if row.audit_id is not None else f"{row.call_id}@{row.started_at}"
    return {
        "object": "trace.span",
        "id": f"span_{_hex('span', row.session_id, identity, length=24)}",
        "trace_id": trace_id(row.session_id),
        "parent_id": None,
        "started_at": row.started_at,
        "ended_at": row.finished_at,
        "span_data": {
            "type": "function",
            "name": row.tool_name,
            "input": row.arguments_json if include_content else None,
            "output": (row.result_preview or None) if include_content else None,
            "mcp_data": None,
        },
        "error": error,
    }


def trace_items(
    rows: Iterable[AuditRecord],
    *,
    workflow_name: str = WORKFLOW_NAME,
    include_content: bool = True,
) -> list[dict[str, Any]]:
    """Each session's trace item, then its rows' spans in row order;
    sessions in the order their first row comes."""
    by_session: dict[str, list[AuditRecord]] = {}
    for row in rows:
        by_session.setdefault(row.session_id, []).append(row)
    items: list[dict[str, Any]] = []
    for session_id, session_rows in by_session.items():
        items.append(
            {
                "object": "trace",
                "id": trace_id(session_id),
                "workflow_name": workflow_name,
                "group_id": session_id,
                "metadata": {"source": "pytest-toolguard"},
            }
        )
        items += [span_item(row, include_content=include_content) for row in session_rows]
    return items
