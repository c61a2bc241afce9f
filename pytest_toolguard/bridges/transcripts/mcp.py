"""MCP JSON-RPC logs read: ``read_jsonrpc_log(text)`` reads a log (one
message per line, or a JSON array): ``tools/call`` requests and their
responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .transcript import CallCollector, Transcript, TranscriptResult, json_records


def transcript_result(wire: Mapping[str, Any]) -> TranscriptResult:
    """A ``CallToolResult`` wire dict as a transcript keeps it."""
    return TranscriptResult(
        ok=not wire.get("isError", False),
        content=wire.get("content"),
        data=wire.get("structuredContent"),
    )


def read_jsonrpc_log(text: str) -> Transcript:
    """The ``tools/call`` requests of an MCP JSON-RPC log and their
    responses (``result``: a ``CallToolResult``; ``error``: a failure).
    One message per line, a JSON array of messages, or lines wrapping one
    in ``{"message": {...}}``. Unreadable lines and responses to no request
    are problems naming the line; responses to other methods are ignored."""
    collector = CallCollector("mcp")
    other_requests: set[str] = set()
    for where, message in json_records(text, collector, noun="item"):
        if isinstance(message, Mapping) and isinstance(message.get("message"), Mapping):
            message = message["message"]
        if not isinstance(message, Mapping):
            collector.problem(where, "not a JSON-RPC message object")
            continue
        key = _id(message.get("id"))
        method = message.get("method")
        if method is not None:
            if method != "tools/call":
                if key is not None:
                    other_requests.add(key)
                continue
            params = message.get("params")
            if not isinstance(params, Mapping):
                collector.problem(where, f"tools/call {key} without params: skipped")
                continue
            collector.call(where, key, params.get("name"), params.get("arguments"))
        elif "result" in message or "error" in message:
            if key in other_requests:
                continue
            if "error" in message:
                error = message.get("error") or {}
                detail = error.get("message", "") if isinstance(error, Mapping) else str(error)
                collector.result(where, key, TranscriptResult(ok=False, content=detail))
            elif isinstance(message.get("result"), Mapping):
                collector.result(where, key, transcript_result(message["result"]))
            else:
                collector.problem(where, f"response {key} has a result that is not an object")
        else:
            collector.problem(where, "neither a request nor a response")
    return collector.transcript()


def _id(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    return str(value) if isinstance(value, (str, int)) else None
