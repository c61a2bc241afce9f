"""Every guard records every call it sees: run under ``record_session``, the
cassette holds one interaction per audit row, admitted calls as well as
refused ones, each with its row's outcome.

One test per guard entry point of ``pytest_toolguard.bridges``: LangGraph's
``ToolNode(wrap_tool_call=...)``, the Agents SDK's tool input/output
guardrails around the SDK's own tools, ``guarded_function_tool`` and the
Claude Code hook's PreToolUse/PostToolUse answers. Each runs a table of call
sequences (all admitted, all refused, mixed, a tool that fails)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    Capabilities,
    PathAccess,
    Risk,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.replay import load, record_session, replay

WRITE_NOTES = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("notes",))

ADMITTED = "notes/a.md"
ALSO_ADMITTED = "notes/b.md"
OUTSIDE_ROOTS = "src/a.py"
OUTSIDE = "../escape.md"
FAILS = "notes/boom.md"
"""A path the test tools raise on: admitted, then failed by the tool."""

SEQUENCES = {
    "admitted only": [ADMITTED, ALSO_ADMITTED],
    "refused only": [OUTSIDE_ROOTS, OUTSIDE],
    "mixed": [ADMITTED, OUTSIDE_ROOTS, ALSO_ADMITTED, OUTSIDE],
    "refused first": [OUTSIDE, ADMITTED],
}
WITH_FAILURE = {**SEQUENCES, "a tool that fails": [ADMITTED, FAILS, OUTSIDE_ROOTS]}


def save(written: list[str], path: str) -> str:
    if "boom" in path:
        raise RuntimeError("the disk said no")
    written.append(path)
    return f"saved {path}"


def recorded_against_rows(
    cassette_path: Path, runtime: ToolRuntime, *, replays: bool = True
) -> None:
    """The cassette's calls are the audit rows' calls, outcome for outcome,
    and (``replays``) it replays through the registry's handlers."""
    cassette = load(cassette_path)
    recorded = [
        (i.call.call_id, i.result.code, i.result.state, i.audit.state)
        for i in cassette.interactions
    ]
    rows = [
        (row.call_id, row.result_code.value if row.result_code else None, row.state.value)
        for row in runtime.audit.rows()
    ]
    assert [(call_id, code, state) for call_id, code, state, _ in recorded] == rows
    assert [audit for *_, audit in recorded] == [state for *_, state in rows]
    if replays:
        report = replay(cassette, runtime.registry, world="directory")  # no fake filesystem: fast
        assert report.ok, [str(d) for d in report.differences]


def call_ids(paths: list[str]) -> list[str]:
    return [f"c{index}" for index in range(len(paths))]


# -- LangGraph's ToolNode -----------------------------------------------------------------


@pytest.mark.parametrize("paths", list(WITH_FAILURE.values()), ids=list(WITH_FAILURE))
def test_langgraph_wrap_tool_call_records_every_call(tmp_path: Path, paths: list[str]) -> None:
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from pytest_toolguard.bridges import from_langchain
    from pytest_toolguard.bridges.guards.langgraph import toolguard_wrap_tool_call

    written: list[str] = []

    @tool
    def save_note(path: str, text: str) -> dict[str, str]:
        """Save a note."""
        return {"saved": save(written, path)}  # not text: the ToolMessage holds its JSON

    specs = from_langchain(
        save_note, paths={"save_note": [PathAccess.write("{path}")]}, risks={"save_note": "write"}
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    cassette = tmp_path / "langgraph.yaml"
    with ToolRuntime(ToolRegistry(specs), workspace, WRITE_NOTES) as runtime:
        node = ToolNode(
            [save_note],
            wrap_tool_call=toolguard_wrap_tool_call(runtime),
            handle_tool_errors=True,
        )
        graph = StateGraph(MessagesState)
        graph.add_node("tools", node)
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        compiled = graph.compile()
        calls = [
            {"name": "save_note", "args": {"path": p, "text": "x"}, "id": i, "type": "tool_call"}
            for i, p in zip(call_ids(paths), paths, strict=True)
        ]
        with record_session(runtime, cassette):
            for call in calls:  # one at a time: the rows' order is the calls' order
                compiled.invoke({"messages": [AIMessage(content="", tool_calls=[call])]})
        assert written == [p for p in paths if p in (ADMITTED, ALSO_ADMITTED)]
        recorded_against_rows(cassette, runtime)


# -- the Agents SDK -----------------------------------------------------------------------


def run_agent(tools: list[Any], calls: list[Any]) -> None:
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message

    model = ScriptedModel([[call] for call in calls] + [[assistant_message("done")]])
    agent = Agent(name="tester", instructions="use the tools", tools=tools, model=model)
    asyncio.run(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))


@pytest.mark.parametrize("paths", list(SEQUENCES.values()), ids=list(SEQUENCES))
def test_agents_sdk_guardrails_record_every_call(tmp_path: Path, paths: list[str]) -> None:
    pytest.importorskip("agents")
    from agents import function_tool
    from agents.testing import function_call

    from pytest_toolguard.bridges import from_openai
    from pytest_toolguard.bridges.guards.openai_agents import (
        toolguard_input_guardrail,
        toolguard_output_guardrail,
    )

    written: list[str] = []

    @function_tool
    def save_note(path: str, text: str) -> str:
        """Save a note."""
        return save(written, path)

    specs = from_openai(
        save_note, paths={"save_note": [PathAccess.write("{path}")]}, risks={"save_note": "write"}
    )
    cassette = tmp_path / "agents.yaml"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with ToolRuntime(ToolRegistry(specs), workspace, WRITE_NOTES) as runtime:
        save_note.tool_input_guardrails = [toolguard_input_guardrail(runtime)]
        save_note.tool_output_guardrails = [toolguard_output_guardrail(runtime)]
        calls = [
            function_call("save_note", {"path": p, "text": "x"}, call_id=i)
            for i, p in zip(call_ids(paths), paths, strict=True)
        ]
        with record_session(runtime, cassette):
            run_agent([save_note], calls)
        assert written == [p for p in paths if p in (ADMITTED, ALSO_ADMITTED)]
        recorded_against_rows(cassette, runtime)


@pytest.mark.parametrize("paths", list(WITH_FAILURE.values()), ids=list(WITH_FAILURE))
def test_guarded_function_tool_records_every_call(tmp_path: Path, paths: list[str]) -> None:
    pytest.importorskip("agents")
    from agents.testing import function_call

    from pytest_toolguard import tool
    from pytest_toolguard.bridges.guards.openai_agents import guarded_function_tool

    written: list[str] = []

    @tool(risk="write", paths=[PathAccess.write("{path}")])
    def save_note(ctx: Any, path: str, text: str) -> str:
        """Save a note."""
        return save(written, path)

    cassette = tmp_path / "guarded.yaml"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with ToolRuntime(ToolRegistry([save_note]), workspace, WRITE_NOTES) as runtime:
        calls = [
            function_call("save_note", {"path": p, "text": "x"}, call_id=i)
            for i, p in zip(call_ids(paths), paths, strict=True)
        ]
        with record_session(runtime, cassette):
            run_agent([guarded_function_tool(runtime, "save_note")], calls)
        recorded_against_rows(cassette, runtime)


# -- the Claude Code hook ---------------------------------------------------------------------


@pytest.mark.parametrize("paths", list(WITH_FAILURE.values()), ids=list(WITH_FAILURE))
def test_claude_code_hook_records_every_call(tmp_path: Path, paths: list[str]) -> None:
    from pytest_toolguard.bridges.definitions.claude_code import claude_code_registry
    from pytest_toolguard.bridges.guards.claude_code_hook import answer

    workspace = tmp_path / "ws"
    workspace.mkdir()
    cassette = tmp_path / "hook.yaml"

    def event(name: str, call_id: str, path: str, **extra: Any) -> dict[str, Any]:
        return {
            "session_id": "s1",
            "cwd": str(workspace),
            "hook_event_name": name,
            "tool_name": "Write",
            "tool_input": {"file_path": path, "content": "x"},
            "tool_use_id": call_id,
            **extra,
        }

    with ToolRuntime(claude_code_registry(), workspace, WRITE_NOTES) as runtime:
        with record_session(runtime, cassette):
            for call_id, path in zip(call_ids(paths), paths, strict=True):
                decided = answer("pre-tool-use", event("PreToolUse", call_id, path), runtime)
                assert decided is not None
                if decided["hookSpecificOutput"]["permissionDecision"] != "allow":
                    continue
                if "boom" in path:
                    outcome = event("PostToolUseFailure", call_id, path, error="disk full")
                else:
                    outcome = event("PostToolUse", call_id, path, tool_response={"ok": 1})
                answer("post-tool-use", outcome, runtime)
        # Claude Code's tool did not really run here: nothing to replay.
        recorded_against_rows(cassette, runtime, replays=False)
