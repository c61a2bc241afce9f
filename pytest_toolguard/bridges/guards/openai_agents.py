"""The OpenAI Agents SDK guarded.

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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...capabilities import Risk
from ...contract import ToolCall
from ...runtime import ToolRuntime
from ..definitions.openai import AGENTS_CONTEXT, is_json
from ..errors import BridgeError


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
    return value if is_json(value) else str(value)
