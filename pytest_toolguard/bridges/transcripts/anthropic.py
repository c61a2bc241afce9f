"""Anthropic Messages sessions read: ``read_messages(text)`` reads a
conversation's calls: ``tool_use {id, name, input}`` blocks of assistant
messages matched to ``tool_result {tool_use_id, content, is_error}`` blocks
of user messages. Claude Code's session files hold the same blocks
(``transcripts.claude_code``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .transcript import CallCollector, Transcript, TranscriptResult, json_records


def tool_result(block: Mapping[str, Any]) -> TranscriptResult:
    """A ``tool_result`` block as a transcript keeps it."""
    return TranscriptResult(ok=not block.get("is_error", False), content=block.get("content"))


def read_blocks(
    collector: CallCollector, where: str, message: Mapping[str, Any], result_data: Any = None
) -> None:
    """The ``tool_use`` and ``tool_result`` blocks of one message.
    ``result_data`` is data the session keeps beside the message (Claude
    Code's ``toolUseResult``): it belongs to the message's result when the
    message holds one ``tool_result`` block, and is dropped otherwise."""
    content = message.get("content")
    if not isinstance(content, list):
        return
    results = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"]
    for position, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        place = f"{where} content[{position}]"
        kind = block.get("type")
        if kind == "tool_use":
            collector.call(place, block.get("id"), block.get("name"), block.get("input"))
        elif kind == "tool_result":
            result = tool_result(block)
            if result_data is not None and len(results) == 1:
                result = replace(result, data=result_data)
            collector.result(place, block.get("tool_use_id"), result)


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
