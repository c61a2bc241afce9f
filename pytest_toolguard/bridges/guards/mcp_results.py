"""A tool call's result as MCP servers give it: ``result_wire`` makes any
SDK's result a ``CallToolResult`` wire dict, ``call_tool_outcome`` maps it
(``isError`` is a failure whose message is the text blocks,
``structuredContent`` is the data, else the text, else the content
blocks), ``MCPToolError`` is a handler's failure. Every live server
(in-process, stdio, HTTP) answers through these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ToolguardError
from ..definitions.mcp import wire_dict
from ..errors import BridgeError
from ..transcripts.transcript import text_of


class MCPToolError(ToolguardError):
    """An MCP tool answered ``isError: true``; the message is its text."""


def result_wire(value: Any) -> dict[str, Any]:
    """What a server's ``call_tool`` returned, as a ``CallToolResult`` wire
    dict: an ``mcp`` ``CallToolResult``, a ``fastmcp`` ``ToolResult`` (its
    ``is_error``, ``content``, ``structured_content``), v1 ``FastMCP``'s
    content list, structured dict or ``(content, structured)`` pair."""
    if isinstance(value, Mapping) and ("content" in value or "isError" in value):
        return dict(value)
    dumped = wire_dict(value)  # an SDK's model whose wire form is a CallToolResult's (v1's, v2's)
    if (
        dumped is not value
        and isinstance(dumped, Mapping)
        and {"content", "isError"} <= set(dumped)
    ):
        return dict(dumped)
    if hasattr(value, "is_error") and hasattr(value, "content"):
        body: dict[str, Any] = {
            "content": [wire_dict(block) for block in value.content or ()],
            "isError": bool(value.is_error),
        }
        structured = getattr(value, "structured_content", None)
        if structured is not None:
            body["structuredContent"] = structured
        return body
    if isinstance(value, tuple) and len(value) == 2:
        content, structured = value
        return {"content": [wire_dict(b) for b in content], "structuredContent": structured}
    if isinstance(value, Mapping):
        return {"content": [], "structuredContent": dict(value)}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return {"content": [wire_dict(block) for block in value]}
    raise BridgeError(f"call_tool returned {type(value).__name__}, not a CallToolResult")


def call_tool_outcome(wire: Mapping[str, Any]) -> tuple[bool, Any, str]:
    """``(ok, data, message)`` of a ``CallToolResult`` wire dict:
    ``isError`` means not ok; the data is ``structuredContent``, else the
    text of the text blocks when there are only those, else the blocks;
    the message is the text."""
    content = wire.get("content") or []
    text = text_of(content)
    if wire.get("structuredContent") is not None:
        data = wire["structuredContent"]
    elif all(isinstance(b, Mapping) and b.get("type") == "text" for b in content):
        data = text
    else:
        data = list(content)
    return not wire.get("isError", False), data, text


# -- live servers -------------------------------------------------------------
