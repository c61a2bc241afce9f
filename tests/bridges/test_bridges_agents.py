"""The OpenAI Agents SDK guarded: a FunctionTool running our tool through
the runtime, a FunctionTool imported as ours, and the input/output
guardrails deciding the SDK's own tools. Each runs a real ``Runner`` with
the SDK's ``ScriptedModel``: no model, no network."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    CallState,
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.bridges import from_openai
from pytest_toolguard.bridges.guards.openai_agents import (
    guarded_function_tool,
    toolguard_input_guardrail,
    toolguard_output_guardrail,
)
from pytest_toolguard.tools import builtin_registry

agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.exceptions import ToolInputGuardrailTripwireTriggered  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

WRITE_NOTES = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("notes",))


def run_agent(tools: list[Any], *steps: list[Any]) -> tuple[Any, ScriptedModel]:
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agent = Agent(name="tester", instructions="use the tools", tools=tools, model=model)
    result = asyncio.run(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
    return result, model


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """The function_call_output items the model was sent last."""
    items = model.last_call.input if model.last_call else []
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


# -- our tools as FunctionTools ------------------------------------------------------


def test_guarded_function_tool_runs_our_tool_through_the_runtime(tmp_path: Path) -> None:
    runtime = ToolRuntime(builtin_registry(), tmp_path, WRITE_NOTES)
    tool = guarded_function_tool(runtime, "write_file")
    call = function_call("write_file", {"path": "notes/a.md", "content": "hi"}, call_id="c1")
    run_agent([tool], [call])
    assert (tmp_path / "notes" / "a.md").read_text() == "hi"
    row = runtime.audit.get("c1")
    runtime.close()
    assert row is not None and row.state is CallState.SUCCEEDED


def test_guarded_function_tool_answers_a_refusal_to_the_model(tmp_path: Path) -> None:
    runtime = ToolRuntime(builtin_registry(), tmp_path, WRITE_NOTES)
    tool = guarded_function_tool(runtime, "write_file")
    call = function_call("write_file", {"path": "../escape.md", "content": "x"}, call_id="c1")
    _, model = run_agent([tool], [call])
    runtime.close()
    observation = json.loads(tool_outputs(model)["c1"])
    assert observation["code"] == ErrorCode.PATH_OUTSIDE_WORKSPACE.value
    assert not (tmp_path.parent / "escape.md").exists()


def test_a_function_tool_imported_as_ours_runs_its_own_function(tmp_path: Path) -> None:
    @function_tool
    def shout(text: str) -> str:
        """Shout it."""
        return text.upper()

    (spec,) = from_openai(shout)
    assert spec.input_schema["required"] == ["text"]
    with ToolRuntime(ToolRegistry([spec]), tmp_path) as runtime:
        result = runtime.execute(ToolCall("1", "shout", {"text": "hi"}))
    assert result.data == "HI"


def test_a_function_tool_that_needs_approval_is_at_least_write() -> None:
    @function_tool(needs_approval=True)
    def archive(name: str) -> str:
        """Archive."""
        return name

    (spec,) = from_openai(archive)
    assert spec.risk is Risk.WRITE


# -- guardrails around the SDK's own tools -----------------------------------------------


class Notes:
    """An SDK tool writing notes itself, and the registry that judges it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.written: list[str] = []

        @function_tool
        def save_note(path: str, text: str) -> str:
            """Save a note."""
            self.written.append(path)
            return f"saved {path}"

        @function_tool
        def delete_all(confirm: bool) -> str:
            """Delete every note."""
            self.written.append("*deleted*")
            return "deleted"

        self.save_note, self.delete_all = save_note, delete_all
        specs = from_openai(
            [save_note, delete_all],
            paths={"save_note": [PathAccess.write("{path}", content="text")]},
            risks={"save_note": "write", "delete_all": "dangerous"},
        )
        self.runtime = ToolRuntime(ToolRegistry(specs), root, WRITE_NOTES)
        for tool in (save_note, delete_all):
            tool.tool_input_guardrails = [toolguard_input_guardrail(self.runtime)]
            tool.tool_output_guardrails = [toolguard_output_guardrail(self.runtime)]


def test_input_guardrail_lets_an_allowed_call_run_and_finishes_its_row(tmp_path: Path) -> None:
    notes = Notes(tmp_path)
    call = function_call("save_note", {"path": "notes/a.md", "text": "hi"}, call_id="c1")
    run_agent([notes.save_note], [call])
    row = notes.runtime.audit.get("c1")
    notes.runtime.close()
    assert notes.written == ["notes/a.md"]
    assert (
        row is not None
        and row.state is CallState.SUCCEEDED
        and "saved" in (row.result_preview or "")
    )


def test_input_guardrail_rejects_a_refused_call_without_running_the_tool(tmp_path: Path) -> None:
    notes = Notes(tmp_path)
    call = function_call("save_note", {"path": "src/a.py", "text": "x"}, call_id="c1")
    _, model = run_agent([notes.save_note], [call])
    row = notes.runtime.audit.get("c1")
    notes.runtime.close()
    assert notes.written == []
    assert "PERMISSION_DENIED" in tool_outputs(model)["c1"]
    assert row is not None and row.state is CallState.DENIED


def test_input_guardrail_stops_the_run_for_a_refused_dangerous_tool(tmp_path: Path) -> None:
    notes = Notes(tmp_path)
    call = function_call("delete_all", {"confirm": True}, call_id="c1")
    with pytest.raises(ToolInputGuardrailTripwireTriggered):
        run_agent([notes.delete_all], [call])
    notes.runtime.close()
    assert notes.written == []
