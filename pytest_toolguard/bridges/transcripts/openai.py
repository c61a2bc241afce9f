"""OpenAI Responses and Chat sessions read.

``read_responses(text)`` and ``read_chat(text)`` read a session's calls:
Responses ``function_call {call_id, name, arguments}`` items matched to
``function_call_output {call_id, output}``; Chat ``tool_calls`` matched to
``{"role": "tool", "tool_call_id"}`` messages. Neither format marks a
failed call: a call's outcome is unknown (never compared with the
re-executed one) unless its output is an observation toolguard wrote
(``ToolResult.to_observation()``), which says it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import documents
from .transcript import CallCollector, Transcript, TranscriptResult, json_records


def output_result(output: Any) -> TranscriptResult:
    """A tool message's content as a result. Neither OpenAI format says
    whether a call failed, so the outcome is unknown (``ok`` None: never
    compared) unless the content is an observation toolguard wrote
    (``ToolResult.to_observation()``: a JSON object with a boolean
    ``"ok"`` and a string ``"code"``), which says it."""
    parsed = output
    if isinstance(output, str):
        try:
            parsed = documents.parse_json(output)
        except ValueError:  # not JSON, or over a limit (DocumentRefused): a text
            parsed = None
    said = None
    if (
        isinstance(parsed, Mapping)
        and isinstance(parsed.get("ok"), bool)
        and isinstance(parsed.get("code"), str)
    ):
        said = bool(parsed["ok"])
    return TranscriptResult(ok=said, content=output)


def read_responses(text: str) -> Transcript:
    """The calls of an OpenAI Responses session: ``function_call`` items
    and their ``function_call_output`` by ``call_id``. The file is a JSON
    array of items, an object with ``input`` or ``output`` (a request or a
    response), or one item per line."""
    collector = CallCollector("openai-responses")
    for where, item in json_records(text, collector, noun="item", containers=("input", "output")):
        if not isinstance(item, Mapping):
            collector.problem(where, "not an object")
            continue
        kind = item.get("type")
        if kind == "function_call":
            collector.call(where, item.get("call_id"), item.get("name"), item.get("arguments"))
        elif kind == "function_call_output":
            collector.result(where, item.get("call_id"), output_result(item.get("output")))
    return collector.transcript()


def read_chat(text: str) -> Transcript:
    """The calls of an OpenAI Chat Completions conversation: each assistant
    message's ``tool_calls`` and the ``role: tool`` messages answering them.
    The file is a JSON array of messages, ``{"messages": [...]}``, or one
    message per line."""
    collector = CallCollector("openai-chat")
    for where, message in json_records(text, collector, noun="message", containers=("messages",)):
        if not isinstance(message, Mapping):
            collector.problem(where, "not an object")
            continue
        role = message.get("role")
        if role == "assistant":
            for position, call in enumerate(message.get("tool_calls") or (), start=1):
                place = f"{where} tool_calls[{position - 1}]"
                if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
                    collector.problem(place, "not a function tool call: skipped")
                    continue
                function = call["function"]
                collector.call(
                    place, call.get("id"), function.get("name"), function.get("arguments")
                )
        elif role == "tool":
            collector.result(
                where, message.get("tool_call_id"), output_result(message.get("content"))
            )
    return collector.transcript()
