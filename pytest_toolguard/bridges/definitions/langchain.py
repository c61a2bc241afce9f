"""LangChain tools in: ``from_langchain(tools)`` reads ``BaseTool`` /
``StructuredTool`` objects (``name``, ``description``, ``args_schema`` as a
Pydantic model or a JSON Schema dict; ``func`` / ``coroutine``, else the
tool's own ``invoke``) without importing LangChain.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from ...capabilities import Risk
from ...registry import Handler, ToolSpec
from ..errors import BridgeError
from .spec import Declared, Idempotent, Paths, as_list


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
    declared = Declared(handlers, paths, default_risk, risks, idempotent)
    specs = []
    for definition in as_list(tools):
        name = getattr(definition, "name", None)
        if not isinstance(name, str):
            raise BridgeError(f"{type(definition).__name__} is not a LangChain tool (no name)")
        specs.append(
            declared.spec(
                source="LangChain tool",
                name=name,
                description=str(getattr(definition, "description", "") or ""),
                input_schema=tool_schema(definition),
                handler=functools.partial(_handler, definition),
            )
        )
    return specs
