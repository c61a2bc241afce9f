"""Anthropic: tools in, Messages sessions read.

``from_anthropic(tools)`` reads Messages API tools (``{name, description,
input_schema}``). ``read_messages(text)`` reads a conversation's calls:
``tool_use {id, name, input}`` blocks of assistant messages matched to
``tool_result {tool_use_id, content, is_error}`` blocks of user messages.
Claude Code's session files hold the same blocks (``claude_code``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..capabilities import Risk
from ..registry import Handler, ToolSpec
from .definitions import BridgeError, Paths, as_list, build_spec, handler_for
from .transcript import CallCollector, Transcript, TranscriptResult, json_records


def from_anthropic(
    tools: Any,
    *,
    handlers: Mapping[str, Handler] | None = None,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.READ,
    risks: Mapping[str, Risk | str] | None = None,
) -> list[ToolSpec]:
    """``ToolSpec``s from Anthropic tool definitions (one or a list).
    Anthropic tools carry no risk: ``risks[name]``, else ``default_risk``.
    Server tools (``{"type": "web_search_20250305", ...}``) have no schema
    to run and raise ``BridgeError``."""
    specs = []
    for index, definition in enumerate(as_list(tools)):
        if not isinstance(definition, Mapping):
            raise BridgeError(f"Anthropic tool {index + 1}: not an object")
        kind = definition.get("type")
        if kind not in (None, "custom") and "input_schema" not in definition:
            raise BridgeError(
                f"Anthropic tool {definition.get('name', index + 1)}: {kind!r} is a server or "
                "client tool of Anthropic's, with no input_schema to import"
            )
        name = definition.get("name")
        specs.append(
            build_spec(
                source="Anthropic tool",
                name=name,
                description=str(definition.get("description") or ""),
                input_schema=definition.get("input_schema"),
                handler=handler_for(str(name), handlers, lambda: None),
                risk=Risk(risks[str(name)]) if risks and name in risks else Risk(default_risk),
                paths=paths,
                extra=definition,
            )
        )
    return specs


def tool_result(block: Mapping[str, Any]) -> TranscriptResult:
    """A ``tool_result`` block as a transcript keeps it."""
    return TranscriptResult(ok=not block.get("is_error", False), content=block.get("content"))


def read_blocks(collector: CallCollector, where: str, message: Mapping[str, Any]) -> None:
    """The ``tool_use`` and ``tool_result`` blocks of one message."""
    content = message.get("content")
    if not isinstance(content, list):
        return
    for position, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        place = f"{where} content[{position}]"
        kind = block.get("type")
        if kind == "tool_use":
            collector.call(place, block.get("id"), block.get("name"), block.get("input"))
        elif kind == "tool_result":
            collector.result(place, block.get("tool_use_id"), tool_result(block))


def read_messages(text: str) -> Transcript:
    """The calls of an Anthropic Messages conversation: a JSON array of
    messages, ``{"messages": [...]}`` (a request body), or one message per
    line."""
    collector = CallCollector("anthropic")
    for where, message in json_records(text, collector, noun="message", containers=("messages",)):
        if not isinstance(message, Mapping):
            collector.problem(where, "not an object")
            continue
        read_blocks(collector, where, message)
    return collector.transcript()
