"""An Agents SDK function tool's failure is a failure: imported with
``from_openai`` (run by ``execute``, or by a Runner through
``guarded_function_tool``), a tool that raises gives EXECUTION_ERROR and a
FAILED row, whatever its ``failure_error_function`` would have turned the
exception into. And the ecosystem options: ``idempotent=`` on the
importers, an idempotency key through every guard."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    CallState,
    Capabilities,
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)

agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from pytest_toolguard.bridges import from_langchain, from_openai  # noqa: E402
from pytest_toolguard.bridges.guards.openai_agents import (  # noqa: E402
    guarded_function_tool,
    toolguard_input_guardrail,
    toolguard_output_guardrail,
)

DEFAULT_TEXT = "An error occurred while running the tool. Please try again."


class QuotaExceeded(Exception):
    pass


def raising_sync() -> Any:
    @function_tool
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        raise ValueError(f"no ticket {ticket}")

    return close_ticket


def raising_async() -> Any:
    @function_tool
    async def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        await asyncio.sleep(0)
        raise RuntimeError("the desk is down")

    return close_ticket


def raising_own_exception() -> Any:
    @function_tool
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        raise QuotaExceeded("quota")

    return close_ticket


def raising_with_own_formatter() -> Any:
    @function_tool(failure_error_function=lambda ctx, error: "sorry, try later")
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        raise ValueError("boom")

    return close_ticket


def raising_without_formatter() -> Any:
    @function_tool(failure_error_function=None)
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        raise ValueError("boom")

    return close_ticket


FAILING = {
    "sync, default formatter": raising_sync,
    "async, default formatter": raising_async,
    "an exception of its own": raising_own_exception,
    "a formatter of its own": raising_with_own_formatter,
    "no formatter": raising_without_formatter,
}


@pytest.mark.parametrize("make", list(FAILING.values()), ids=list(FAILING))
def test_a_failing_function_tool_fails_the_call(tmp_path: Path, make: Callable[[], Any]) -> None:
    with ToolRuntime(ToolRegistry(from_openai(make())), tmp_path) as runtime:
        result = runtime.execute(ToolCall("c1", "close_ticket", {"ticket": "T-1"}))
        row = runtime.audit.get("c1")
    assert (result.ok, result.code, result.state) == (
        False,
        ErrorCode.EXECUTION_ERROR,
        CallState.FAILED,
    )
    assert result.data is None
    assert row is not None and row.state is CallState.FAILED
    assert row.result_code is ErrorCode.EXECUTION_ERROR


def run_agent(tools: list[Any], *steps: list[Any]) -> ScriptedModel:
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agent = Agent(name="tester", instructions="use the tools", tools=tools, model=model)
    asyncio.run(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
    return model


def outputs(model: ScriptedModel) -> dict[str, str]:
    items = model.last_call.input if model.last_call else []
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


@pytest.mark.parametrize("make", list(FAILING.values()), ids=list(FAILING))
def test_a_failing_function_tool_fails_through_guarded_function_tool(
    tmp_path: Path, make: Callable[[], Any]
) -> None:
    with ToolRuntime(ToolRegistry(from_openai(make())), tmp_path) as runtime:
        guarded = guarded_function_tool(runtime, "close_ticket")
        model = run_agent(
            [guarded], [function_call("close_ticket", {"ticket": "T-1"}, call_id="c1")]
        )
        row = runtime.audit.get("c1")
    assert json.loads(outputs(model)["c1"])["code"] == ErrorCode.EXECUTION_ERROR.value
    assert row is not None and row.state is CallState.FAILED


def test_a_tool_that_returns_the_sdk_error_text_is_not_judged_by_its_text(tmp_path: Path) -> None:
    @function_tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    with ToolRuntime(ToolRegistry(from_openai(echo)), tmp_path) as runtime:
        result = runtime.execute(ToolCall("c1", "echo", {"text": DEFAULT_TEXT}))
    assert result.ok and result.data == DEFAULT_TEXT


# -- idempotent= ----------------------------------------------------------------------------

IDEMPOTENT = {
    "default": ({}, {"close_ticket": False, "list_tickets": False}),
    "all": ({"idempotent": True}, {"close_ticket": True, "list_tickets": True}),
    "none": ({"idempotent": False}, {"close_ticket": False, "list_tickets": False}),
    "named": ({"idempotent": {"list_tickets"}}, {"close_ticket": False, "list_tickets": True}),
    "one name": ({"idempotent": "close_ticket"}, {"close_ticket": True, "list_tickets": False}),
    "a list": ({"idempotent": ["close_ticket"]}, {"close_ticket": True, "list_tickets": False}),
}


def openai_tools() -> list[Any]:
    @function_tool
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        return ticket

    return [close_ticket, {"type": "function", "function": {"name": "list_tickets"}}]


def langchain_tools() -> list[Any]:
    from langchain_core.tools import tool

    @tool
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        return ticket

    @tool
    def list_tickets() -> str:
        """List tickets."""
        return ""

    return [close_ticket, list_tickets]


IMPORTERS = {
    "from_openai": (from_openai, openai_tools),
    "from_langchain": (from_langchain, langchain_tools),
}


@pytest.mark.parametrize(("options", "expected"), list(IDEMPOTENT.values()), ids=list(IDEMPOTENT))
@pytest.mark.parametrize(("importer", "tools"), list(IMPORTERS.values()), ids=list(IMPORTERS))
def test_importers_declare_idempotent_tools(
    importer: Any, tools: Any, options: dict[str, Any], expected: dict[str, bool]
) -> None:
    if importer is from_langchain:
        pytest.importorskip("langchain_core")
    specs = importer(tools(), **options)
    assert {spec.name: spec.idempotent for spec in specs} == expected


# -- an idempotency key through each guard ------------------------------------------------------

WRITE = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("tickets",))


def ticket_calls(tickets: list[str], first: int = 0) -> list[Any]:
    """The model's close_ticket calls, ``c<n>`` from ``first`` on."""
    return [
        function_call("close_ticket", {"ticket": t}, call_id=f"c{i}")
        for i, t in enumerate(tickets, start=first)
    ]


class Desk:
    """A close_ticket tool that counts how often it really ran."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    def close(self, ticket: str) -> str:
        self.closed.append(ticket)
        return f"closed {ticket} ({len(self.closed)})"


def through_guarded_function_tool(
    root: Path, desk: Desk, key: Callable[[str, str], str | None], tickets: list[str]
) -> tuple[ToolRuntime, list[str]]:
    from pytest_toolguard import tool

    @tool(risk="write")
    def close_ticket(ctx: Any, ticket: str) -> str:
        return desk.close(ticket)

    runtime = ToolRuntime(ToolRegistry([close_ticket]), root, WRITE)
    guarded = guarded_function_tool(
        runtime,
        "close_ticket",
        idempotency_key=lambda ctx: key(ctx.tool_call_id, json.loads(ctx.tool_arguments)["ticket"]),
    )
    calls = [
        function_call("close_ticket", {"ticket": t}, call_id=f"c{i}") for i, t in enumerate(tickets)
    ]
    model = run_agent([guarded], *([c] for c in calls))
    answers = outputs(model)
    return runtime, [answers[f"c{i}"] for i in range(len(tickets))]


def through_guardrails(
    root: Path, desk: Desk, key: Callable[[str, str], str | None], tickets: list[str]
) -> tuple[ToolRuntime, list[str]]:
    @function_tool
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        return desk.close(ticket)

    runtime = ToolRuntime(
        ToolRegistry(from_openai(close_ticket, risks={"close_ticket": "write"})), root, WRITE
    )
    close_ticket.tool_input_guardrails = [
        toolguard_input_guardrail(
            runtime,
            idempotency_key=lambda ctx: key(
                ctx.tool_call_id, json.loads(ctx.tool_arguments)["ticket"]
            ),
        )
    ]
    close_ticket.tool_output_guardrails = [toolguard_output_guardrail(runtime)]
    calls = [
        function_call("close_ticket", {"ticket": t}, call_id=f"c{i}") for i, t in enumerate(tickets)
    ]
    model = run_agent([close_ticket], *([c] for c in calls))
    answers = outputs(model)
    return runtime, [answers[f"c{i}"] for i in range(len(tickets))]


def through_langgraph(
    root: Path, desk: Desk, key: Callable[[str, str], str | None], tickets: list[str]
) -> tuple[ToolRuntime, list[str]]:
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from pytest_toolguard.bridges.guards.langgraph import toolguard_wrap_tool_call

    @tool
    def close_ticket(ticket: str) -> str:
        """Close a ticket."""
        return desk.close(ticket)

    runtime = ToolRuntime(
        ToolRegistry(from_langchain(close_ticket, risks={"close_ticket": "write"})), root, WRITE
    )
    wrap = toolguard_wrap_tool_call(
        runtime,
        idempotency_key=lambda request: key(
            request.tool_call["id"], request.tool_call["args"]["ticket"]
        ),
    )
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([close_ticket], wrap_tool_call=wrap))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    compiled = graph.compile()
    answers = []
    for index, ticket in enumerate(tickets):
        call = {"name": "close_ticket", "args": {"ticket": ticket}, "id": f"c{index}"}
        message = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        (answer,) = compiled.invoke({"messages": [message]})["messages"][1:]
        answers.append(str(answer.content))
    return runtime, answers


GUARDS = {
    "guarded_function_tool": through_guarded_function_tool,
    "input/output guardrails": through_guardrails,
    "LangGraph wrap_tool_call": through_langgraph,
}

KEYS: dict[str, tuple[Callable[[str, str], str | None], list[str], list[str], list[str | None]]] = {
    # key function, tickets, tickets really closed, each row's idempotency outcome
    "one key for the same ticket": (
        lambda call_id, ticket: f"close-{ticket}",
        ["T-1", "T-1", "T-2"],
        ["T-1", "T-2"],
        ["claimed", "replay", "claimed"],
    ),
    "a key per call": (
        lambda call_id, ticket: call_id,
        ["T-1", "T-1"],
        ["T-1", "T-1"],
        ["claimed", "claimed"],
    ),
    "no key": (lambda call_id, ticket: None, ["T-1", "T-1"], ["T-1", "T-1"], [None, None]),
}


@pytest.mark.parametrize(
    ("key", "tickets", "closed", "outcomes"), list(KEYS.values()), ids=list(KEYS)
)
@pytest.mark.parametrize("guard", list(GUARDS.values()), ids=list(GUARDS))
def test_an_idempotency_key_passes_through_each_guard(
    tmp_path: Path,
    guard: Any,
    key: Callable[[str, str], str | None],
    tickets: list[str],
    closed: list[str],
    outcomes: list[str | None],
) -> None:
    desk = Desk()
    runtime, answers = guard(tmp_path, desk, key, tickets)
    rows = runtime.audit.rows()
    runtime.close()
    assert desk.closed == closed
    assert [row.idempotency_outcome for row in rows] == outcomes
    assert all(row.state is CallState.SUCCEEDED for row in rows)
    # A replayed call gets the first call's answer.
    first: dict[str, str] = {}
    for ticket, answer, outcome in zip(tickets, answers, outcomes, strict=True):
        if outcome == "replay":
            assert first[ticket] in answer
        first.setdefault(ticket, answer)
