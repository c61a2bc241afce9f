"""OpenAI function tools in.

``from_openai(definitions)`` reads function tools in the Chat Completions
shape (``{"type": "function", "function": {name, description, parameters,
strict}}``), the Responses shape (``{"type": "function", name, description,
parameters, output_schema}``) and the Agents SDK's ``FunctionTool``
(``params_json_schema``, ``on_invoke_tool``, ``timeout_seconds``,
``needs_approval``: a tool that needs approval is at least WRITE). A
``FunctionTool``'s own ``on_invoke_tool`` becomes the handler.
A ``FunctionTool`` the runtime runs
itself gets the call's ``ToolContext`` as the run's ``context`` when no
Runner gave one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...capabilities import Risk
from ...registry import Handler, ToolSpec
from ..errors import BridgeError
from .spec import Declared, Idempotent, Paths, as_list

AGENTS_CONTEXT = "openai_agents_tool_context"
"""The ``ToolCall.metadata`` key carrying the Agents SDK ``ToolContext`` to
a wrapped ``FunctionTool``'s handler."""


def from_openai(
    definitions: Any,
    *,
    handlers: Mapping[str, Handler] | None = None,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.READ,
    risks: Mapping[str, Risk | str] | None = None,
    idempotent: Idempotent = False,
) -> list[ToolSpec]:
    """``ToolSpec``s from OpenAI function tools (Chat or Responses dicts,
    or Agents SDK ``FunctionTool`` objects; one or a list). OpenAI tools
    carry no risk: each gets ``risks[name]``, else ``default_risk``
    (raised to WRITE for a ``FunctionTool`` with ``needs_approval``).
    ``idempotent`` declares tools idempotent (``ToolSpec.idempotent``):
    all (True) or those named. ``handlers`` and ``paths`` as for
    ``from_mcp``. A ``FunctionTool`` that raises fails the call
    (EXECUTION_ERROR), whatever its ``failure_error_function``."""
    declared = Declared(handlers, paths, default_risk, risks, idempotent)
    specs = []
    for index, definition in enumerate(as_list(definitions)):
        if hasattr(definition, "params_json_schema") and hasattr(definition, "on_invoke_tool"):
            specs.append(_function_tool_spec(definition, declared))
            continue
        if not isinstance(definition, Mapping):
            raise BridgeError(
                f"OpenAI tool {index + 1}: not a function tool ({type(definition).__name__})"
            )
        if definition.get("type", "function") != "function":
            raise BridgeError(
                f"OpenAI tool {index + 1}: type {definition.get('type')!r} is not a function tool"
            )
        function = definition.get("function")
        body = function if isinstance(function, Mapping) else definition
        name = body.get("name")
        output = body.get("output_schema")
        specs.append(
            declared.spec(
                source="OpenAI function",
                name=name,
                description=str(body.get("description") or ""),
                input_schema=body.get("parameters"),
                output_schema=output if isinstance(output, Mapping) else None,
                extra=definition,
            )
        )
    return specs


def _function_tool_spec(tool: Any, declared: Declared) -> ToolSpec:
    name = str(tool.name)
    risk = declared.risk(name)
    if (
        tool.needs_approval
        and risk is Risk.READ
        and not (declared.risks and name in declared.risks)
    ):
        risk = Risk.WRITE
    return declared.spec(
        source="OpenAI FunctionTool",
        name=name,
        description=str(tool.description or ""),
        input_schema=tool.params_json_schema,
        output_schema=getattr(tool, "output_json_schema", None),
        handler=lambda: _invoking(tool),
        risk=risk,
        timeout_seconds=tool.timeout_seconds,
    )


def _invoking(function_tool: Any) -> Handler:
    """A handler calling a ``FunctionTool``'s ``on_invoke_tool`` with the
    SDK's ``ToolContext`` (from the call's metadata, or a fresh one). The
    tool's exception is raised (the call fails with EXECUTION_ERROR), never
    turned into text by the tool's ``failure_error_function``: that text
    would be an OK result with the failure hidden in its data."""
    tool = _raising(function_tool)

    async def invoke_function_tool(ctx: Any, **arguments: Any) -> Any:
        text = json.dumps(arguments, ensure_ascii=False)
        tool_context = ctx.metadata.get(AGENTS_CONTEXT)
        if tool_context is None:
            from agents.tool_context import ToolContext

            # Run by the runtime, not by a Runner: the run's context is ours.
            tool_context = ToolContext(
                context=ctx, tool_name=tool.name, tool_call_id=ctx.call_id, tool_arguments=text
            )
        output = await tool.on_invoke_tool(tool_context, text)
        return output if is_json(output) else str(output)

    invoke_function_tool.__name__ = f"function_tool_{tool.name}"
    return invoke_function_tool


def _raising(tool: Any) -> Any:
    """A copy of ``tool`` whose failure formatter raises the tool's own
    exception again (the SDK's ``set_function_tool_failure_error_function``;
    a copy made with ``copy.copy`` rebinds its invoker to the copy). A tool
    the SDK cannot copy or re-format is used as it is."""
    import copy

    try:
        from agents.tool import set_function_tool_failure_error_function
    except ImportError:  # an SDK without it, or a FunctionTool-like object
        return tool
    try:
        return set_function_tool_failure_error_function(copy.copy(tool), _raise_again)
    except Exception:  # noqa: BLE001 - not a FunctionTool the SDK knows: used as given
        return tool


def _raise_again(context: Any, error: Exception) -> str:
    raise error


def is_json(value: Any) -> bool:
    """Whether ``json.dumps`` takes ``value`` (NaN and infinities refused)."""
    if type(value) is str:  # what a FunctionTool gives most: always dumped
        return True
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
