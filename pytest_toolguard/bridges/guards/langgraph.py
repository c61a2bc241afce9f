"""The executor as LangGraph's tool-call guard.

``toolguard_wrap_tool_call(runtime)`` is the ``wrap_tool_call(request,
handler)`` function LangGraph's ``ToolNode`` (and LangChain's agent
middleware) calls around every tool call: a call our pipeline refuses
becomes ``ToolMessage(status="error")`` and the tool never runs; an
admitted one runs through the ``handler`` LangGraph gives, and its audit
row is finished with the outcome (``pip install pytest-toolguard[langchain]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ... import documents
from ...context import workspace_of_call
from ...contract import ToolCall
from ...runtime import ToolRuntime

_NOT_TEXT_STARTS = frozenset("{[-0123456789tfnNI")
"""The first characters of the JSON LangChain writes for a value that is
not text (``NaN`` and ``Infinity`` included); any other content, a JSON
string's included, is the text itself."""


def tool_output(content: Any) -> Any:
    """What a tool returned, from the ``ToolMessage`` content LangChain made
    of it: LangChain writes a value that is not text as its JSON
    (``json.dumps(value, ensure_ascii=False)``), so content that is exactly
    that JSON of an object, array, number, boolean or null is taken as the
    value (what the tool's handler gives again on replay). A tool that
    returned such JSON text itself is read as the value too: its replay
    then reports the data as different, never as equal by mistake."""
    if not isinstance(content, str):
        return content
    if not content or content[0] not in _NOT_TEXT_STARTS:  # text as it is: no parse
        return content
    try:
        value = documents.parse_json(content)
    except ValueError:  # not JSON, or over a limit: the text itself
        return content
    if isinstance(value, str) or json.dumps(value, ensure_ascii=False) != content:
        return content
    return value


def toolguard_wrap_tool_call(
    runtime: ToolRuntime,
    *,
    session_id: str = "default",
    idempotency_key: Callable[[Any], str | None] | None = None,
) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """LangGraph's ``wrap_tool_call``: our pipeline decides each call
    (``ToolNode(tools, wrap_tool_call=toolguard_wrap_tool_call(runtime))``).
    The registry must hold a spec of each tool's name (``from_langchain``
    makes them). While the tool runs, ``current_workspace()`` is the
    runtime's workspace. ``idempotency_key(request)`` gives a call's key
    (``lambda request: request.tool_call["id"]``): a call whose key has an
    outcome already gets it back without the tool running."""
    from langchain_core.messages import ToolMessage

    from .gate import admit, finish_admitted

    def wrap_tool_call(request: Any, handler: Callable[[Any], Any]) -> Any:
        tool_call = request.tool_call
        call_id = str(tool_call.get("id") or "")
        call = ToolCall(
            call_id=call_id,
            tool_name=str(tool_call.get("name") or ""),
            arguments=tool_call.get("args") or {},
            session_id=session_id,
            idempotency_key=idempotency_key(request) if idempotency_key is not None else None,
        )
        answer = admit(runtime, call)
        if answer is not None:
            if answer.ok:  # the outcome the call's key already holds
                data = answer.data
                return ToolMessage(
                    content=data if isinstance(data, str) else json.dumps(data),
                    tool_call_id=call_id,
                    name=tool_call.get("name"),
                )
            return ToolMessage(
                content=f"toolguard refused the call ({answer.code.value}): {answer.message}",
                tool_call_id=call_id,
                name=tool_call.get("name"),
                status="error",
            )
        try:
            with workspace_of_call(runtime.workspace):
                outcome = handler(request)
        except Exception as exc:
            finish_admitted(
                runtime, call_id, ok=False, message=f"{type(exc).__name__}: {exc}", call=call
            )
            raise
        status = getattr(outcome, "status", "success")
        content = getattr(outcome, "content", None)
        finish_admitted(
            runtime,
            call_id,
            ok=status != "error",
            data=tool_output(content) if isinstance(content, (str, list, dict)) else None,
            message=str(content) if status == "error" else "",
            call=call,
        )
        return outcome

    return wrap_tool_call
