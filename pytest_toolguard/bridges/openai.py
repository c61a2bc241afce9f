"""OpenAI: function tools in, Responses and Chat sessions read, and the
Agents SDK guarded.

``from_openai(definitions)`` reads function tools in the Chat Completions
shape (``{"type": "function", "function": {name, description, parameters,
strict}}``), the Responses shape (``{"type": "function", name, description,
parameters, output_schema}``) and the Agents SDK's ``FunctionTool``
(``params_json_schema``, ``on_invoke_tool``, ``timeout_seconds``,
``needs_approval``: a tool that needs approval is at least WRITE). A
``FunctionTool``'s own ``on_invoke_tool`` becomes the handler.

``read_responses(text)`` and ``read_chat(text)`` read a session's calls:
Responses ``function_call {call_id, name, arguments}`` items matched to
``function_call_output {call_id, output}``; Chat ``tool_calls`` matched to
``{"role": "tool", "tool_call_id"}`` messages. Neither format marks a
failed call: a call's outcome is unknown (never compared with the
re-executed one) unless its output is an observation toolguard wrote
(``ToolResult.to_observation()``), which says it.

The Agents SDK parts (``pip install pytest-toolguard[openai-agents]``):
``guarded_function_tool(runtime, name)`` is a ``FunctionTool`` that runs
the registry's tool through ``ToolRuntime.aexecute``;
``toolguard_input_guardrail(runtime)`` and
``toolguard_output_guardrail(runtime)`` keep the SDK's own tools but let our
policy decide each call first (and finish its audit row afterwards, which
also tells ``record_session`` the call). ``guarded_function_tool`` and the
input guardrail take ``idempotency_key=``, a function of the SDK's
``ToolContext`` giving each call's key. A ``FunctionTool`` the runtime runs
itself (imported with ``from_openai``) gets the call's ``ToolContext`` as
the run's ``context`` when no Runner gave one, and
``pytest_toolguard.current_workspace()`` in any case.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .. import documents
from ..capabilities import Risk
from ..contract import ToolCall
from ..registry import Handler, ToolSpec
from ..runtime import ToolRuntime
from .definitions import (
    BridgeError,
    Idempotent,
    Paths,
    as_list,
    build_spec,
    declared_idempotent,
    handler_for,
)
from .transcript import CallCollector, Transcript, TranscriptResult, json_records

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
    specs = []
    for index, definition in enumerate(as_list(definitions)):
        if hasattr(definition, "params_json_schema") and hasattr(definition, "on_invoke_tool"):
            specs.append(
                _function_tool_spec(definition, handlers, paths, default_risk, risks, idempotent)
            )
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
            build_spec(
                source="OpenAI function",
                name=name,
                description=str(body.get("description") or ""),
                input_schema=body.get("parameters"),
                output_schema=output if isinstance(output, Mapping) else None,
                handler=handler_for(str(name), handlers, lambda: None),
                risk=_risk(str(name), default_risk, risks),
                paths=paths,
                idempotent=declared_idempotent(str(name), idempotent),
                extra=definition,
            )
        )
    return specs


def _risk(name: str, default: Risk | str, risks: Mapping[str, Risk | str] | None) -> Risk:
    return Risk(risks[name]) if risks and name in risks else Risk(default)


def _function_tool_spec(
    tool: Any,
    handlers: Mapping[str, Handler] | None,
    paths: Paths | None,
    default_risk: Risk | str,
    risks: Mapping[str, Risk | str] | None,
    idempotent: Idempotent,
) -> ToolSpec:
    name = str(tool.name)
    risk = _risk(name, default_risk, risks)
    if tool.needs_approval and risk is Risk.READ and not (risks and name in risks):
        risk = Risk.WRITE
    return build_spec(
        source="OpenAI FunctionTool",
        name=name,
        description=str(tool.description or ""),
        input_schema=tool.params_json_schema,
        output_schema=getattr(tool, "output_json_schema", None),
        handler=handler_for(name, handlers, lambda: _invoking(tool)),
        risk=risk,
        paths=paths,
        idempotent=declared_idempotent(name, idempotent),
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
        return output if _is_json(output) else str(output)

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


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


# -- sessions -----------------------------------------------------------------


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


# -- the Agents SDK -----------------------------------------------------------


def guarded_function_tool(
    runtime: ToolRuntime,
    name: str,
    *,
    idempotency_key: Callable[[Any], str | None] | None = None,
) -> Any:
    """An Agents SDK ``FunctionTool`` for the registry's tool ``name`` that
    runs every call through ``runtime.aexecute``: the model sees our
    schema, and gets the data (JSON text) or the refusal's observation.
    ``idempotency_key(tool_context)`` gives each call's idempotency key
    from the SDK's ``ToolContext`` (``lambda ctx: ctx.tool_call_id``: a
    call the SDK runs again, on a resumed run, gets the first one's
    outcome instead of running twice); None: no key."""
    from agents import FunctionTool

    spec = runtime.registry.get(name)
    if spec is None:
        raise BridgeError(f"no tool {name!r} in the runtime's registry")

    async def on_invoke_tool(tool_context: Any, arguments: str) -> str:
        key = idempotency_key(tool_context) if idempotency_key is not None else None
        result = await runtime.aexecute(
            ToolCall(
                call_id=getattr(tool_context, "tool_call_id", "") or "",
                tool_name=name,
                arguments=arguments,
                idempotency_key=key,
                metadata={AGENTS_CONTEXT: tool_context},
            )
        )
        if result.ok:
            data = result.data
            return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        return result.to_observation()

    return FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=dict(spec.input_schema),
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=False,
    )


def toolguard_input_guardrail(
    runtime: ToolRuntime,
    *,
    session_id: str = "default",
    idempotency_key: Callable[[Any], str | None] | None = None,
) -> Any:
    """An Agents SDK tool input guardrail deciding each call with our
    pipeline (schema, policy, hooks) before the SDK runs the tool: a
    refusal becomes ``reject_content(message)`` (for a DANGEROUS tool,
    ``raise_exception()``: the run stops); an admitted call leaves its
    RUNNING audit row, which ``toolguard_output_guardrail`` finishes.
    ``idempotency_key(tool_context)`` gives a call's key (as for
    ``guarded_function_tool``): a call whose key already has an outcome is
    answered it (``reject_content`` with the stored data) and the tool does
    not run."""
    from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

    from .gate import admit

    @tool_input_guardrail
    def toolguard(data: Any) -> Any:
        context = data.context
        refusal = admit(
            runtime,
            ToolCall(
                call_id=context.tool_call_id,
                tool_name=context.tool_name,
                arguments=context.tool_arguments,
                session_id=session_id,
                idempotency_key=idempotency_key(context) if idempotency_key else None,
            ),
        )
        if refusal is None:
            return ToolGuardrailFunctionOutput.allow()
        if refusal.ok:  # the outcome the call's key already holds: the tool does not run
            stored = refusal.data
            return ToolGuardrailFunctionOutput.reject_content(
                stored if isinstance(stored, str) else json.dumps(stored, ensure_ascii=False),
                output_info={"code": refusal.code.value},
            )
        spec = runtime.registry.get(context.tool_name)
        info = {"code": refusal.code.value, "message": refusal.message}
        if spec is not None and spec.risk is Risk.DANGEROUS:
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        return ToolGuardrailFunctionOutput.reject_content(
            f"toolguard refused the call ({refusal.code.value}): {refusal.message}",
            output_info=info,
        )

    return toolguard


def toolguard_output_guardrail(runtime: ToolRuntime) -> Any:
    """The Agents SDK tool output guardrail that finishes the audit row an
    admitted call left (SUCCEEDED, with a preview of the output), stores
    the outcome under the call's idempotency key (as the row keeps it: a
    key the redactor would redact never matches, and later calls with it
    are refused DUPLICATE_CALL, never run twice) and tells the runtime's
    listeners. It never changes the output. A tool the SDK's failure
    formatter answered for is finished SUCCEEDED: the SDK does not tell a
    guardrail that the tool raised."""
    from agents import ToolGuardrailFunctionOutput, tool_output_guardrail

    from .gate import finish_admitted, stored_id

    @tool_output_guardrail
    def toolguard_finish(data: Any) -> Any:
        context = data.context
        row = runtime.audit.get(stored_id(runtime, context.tool_call_id))
        # The key and session as the row keeps them (the input guardrail's
        # own are not passed on): the outcome is stored under that key.
        call = ToolCall(
            call_id=context.tool_call_id,
            tool_name=context.tool_name,
            arguments=context.tool_arguments,
            session_id=row.session_id if row is not None else "default",
            idempotency_key=row.idempotency_key if row is not None else None,
        )
        finish_admitted(runtime, context.tool_call_id, ok=True, data=_plain(data.output), call=call)
        return ToolGuardrailFunctionOutput.allow()

    return toolguard_finish


def _plain(value: Any) -> Any:
    return value if _is_json(value) else str(value)
