"""LangChain and LangGraph: tools in, and the executor as LangGraph's
tool-call guard.

``from_langchain(tools)`` reads ``BaseTool`` / ``StructuredTool`` objects
(``name``, ``description``, ``args_schema`` as a Pydantic model or a JSON
Schema dict; ``func`` / ``coroutine``, else the tool's own ``invoke``)
without importing LangChain. ``toolguard_wrap_tool_call(runtime)`` is the
``wrap_tool_call(request, handler)`` function LangGraph's ``ToolNode``
(and LangChain's agent middleware) calls around every tool call: a call
our pipeline refuses becomes ``ToolMessage(status="error")`` and the tool
never runs; an admitted one runs through the ``handler`` LangGraph gives,
and its audit row is finished with the outcome
(``pip install pytest-toolguard[langchain]``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from .. import documents
from ..capabilities import Risk
from ..context import workspace_of_call
from ..contract import ToolCall
from ..registry import Handler, ToolSpec
from ..runtime import ToolRuntime
from .definitions import BridgeError, Idempotent, Paths, as_list, build_spec, declared_idempotent


def tool_schema(tool: Any) -> dict[str, Any]:
    """A LangChain tool's input schema: its ``args_schema`` (a JSON Schema
    dict, or a Pydantic model's ``model_json_schema()``), else
    ``tool_call_schema``; ``{"type": "object"}`` when it has neither."""
    schema = getattr(tool, "args_schema", None)
    if isinstance(schema, Mapping):
        return dict(schema)
    for candidate in (schema, getattr(tool, "tool_call_schema", None)):
        produce = getattr(candidate, "model_json_schema", None)
        if callable(produce):
            return dict(produce())
    return {"type": "object"}


def _handler(tool: Any) -> Handler:
    function = getattr(tool, "func", None)
    coroutine = getattr(tool, "coroutine", None)
    if coroutine is not None:

        async def run_coroutine(ctx: Any, **arguments: Any) -> Any:
            return await coroutine(**arguments)

        return run_coroutine
    if function is not None:

        def run_function(ctx: Any, **arguments: Any) -> Any:
            return function(**arguments)

        return run_function
    ainvoke = getattr(tool, "ainvoke", None)
    if ainvoke is not None and inspect.iscoroutinefunction(ainvoke):

        async def run_tool(ctx: Any, **arguments: Any) -> Any:
            return await ainvoke(arguments)

        return run_tool
    raise BridgeError(f"LangChain tool {getattr(tool, 'name', tool)!r} has nothing to run")


def from_langchain(
    tools: Any,
    *,
    handlers: Mapping[str, Handler] | None = None,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.READ,
    risks: Mapping[str, Risk | str] | None = None,
    idempotent: Idempotent = False,
) -> list[ToolSpec]:
    """``ToolSpec``s from LangChain tools (one or a list), each running the
    tool's own function. ``risks``, ``default_risk``, ``idempotent``,
    ``handlers`` and ``paths`` as for ``from_openai``."""
    specs = []
    for definition in as_list(tools):
        name = getattr(definition, "name", None)
        if not isinstance(name, str):
            raise BridgeError(f"{type(definition).__name__} is not a LangChain tool (no name)")
        specs.append(
            build_spec(
                source="LangChain tool",
                name=name,
                description=str(getattr(definition, "description", "") or ""),
                input_schema=tool_schema(definition),
                handler=handlers[name] if handlers and name in handlers else _handler(definition),
                risk=Risk(risks[name]) if risks and name in risks else Risk(default_risk),
                paths=paths,
                idempotent=declared_idempotent(name, idempotent),
            )
        )
    return specs


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
