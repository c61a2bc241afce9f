"""LangChain tools imported as ours, and LangGraph's ToolNode guarded by
``wrap_tool_call``: a refusal is a ``ToolMessage(status="error")`` and the
tool never runs. No model, no network: the graph node is invoked with the
model's tool calls as an ``AIMessage``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.prebuilt")

from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel

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
from pytest_toolguard.bridges import from_langchain
from pytest_toolguard.bridges.guards.langgraph import tool_output, toolguard_wrap_tool_call


class NoteArguments(BaseModel):
    path: str
    text: str


def test_structured_tool_with_a_pydantic_schema_runs_its_function(tmp_path: Path) -> None:
    saved: list[str] = []
    save = StructuredTool.from_function(
        func=lambda path, text: saved.append(path) or f"saved {path}",
        name="save_note",
        description="Save a note.",
        args_schema=NoteArguments,
    )
    (spec,) = from_langchain(
        save, paths={"save_note": [PathAccess.write("{path}")]}, risks={"save_note": "write"}
    )
    assert spec.input_schema["required"] == ["path", "text"]
    caps = Capabilities(allowed_risks=frozenset({Risk.WRITE}), write_roots=("notes",))
    with ToolRuntime(ToolRegistry([spec]), tmp_path, caps) as runtime:
        ok = runtime.execute(ToolCall("1", "save_note", {"path": "notes/a", "text": "x"}))
        refused = runtime.execute(ToolCall("2", "save_note", {"path": "src/a", "text": "x"}))
    assert ok.data == "saved notes/a" and refused.code is ErrorCode.PERMISSION_DENIED
    assert saved == ["notes/a"]


def test_a_coroutine_tool_stays_async(tmp_path: Path) -> None:
    @tool
    async def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    (spec,) = from_langchain(shout)
    assert spec.is_async
    with ToolRuntime(ToolRegistry([spec]), tmp_path) as runtime:
        assert runtime.execute(ToolCall("1", "shout", {"text": "hi"})).data == "HI"


def test_a_dict_args_schema_is_taken_as_it_is() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    search = StructuredTool.from_function(
        func=lambda q: q, name="search", description="d", args_schema=schema
    )
    assert from_langchain(search)[0].input_schema == schema


class Guarded:
    def __init__(self, root: Path) -> None:
        self.calls: list[dict[str, Any]] = []

        @tool
        def save_note(path: str, text: str) -> str:
            """Save a note."""
            self.calls.append({"path": path})
            return f"saved {path}"

        specs = from_langchain(
            save_note,
            paths={"save_note": [PathAccess.write("{path}")]},
            risks={"save_note": "write"},
        )
        caps = Capabilities(allowed_risks=frozenset({Risk.WRITE}), write_roots=("notes",))
        self.runtime = ToolRuntime(ToolRegistry(specs), root, caps)
        node = ToolNode([save_note], wrap_tool_call=toolguard_wrap_tool_call(self.runtime))
        graph = StateGraph(MessagesState)
        graph.add_node("tools", node)
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        self.graph = graph.compile()

    def invoke(self, *calls: dict[str, Any]) -> list[Any]:
        """The tool messages answering ``calls`` (as the model's AIMessage)."""
        message = AIMessage(content="", tool_calls=[{**c, "type": "tool_call"} for c in calls])
        return self.graph.invoke({"messages": [message]})["messages"][1:]


def test_wrap_tool_call_runs_an_admitted_call_and_finishes_its_row(tmp_path: Path) -> None:
    guarded = Guarded(tmp_path)
    (message,) = guarded.invoke(
        {"name": "save_note", "args": {"path": "notes/a", "text": "x"}, "id": "c1"}
    )
    row = guarded.runtime.audit.get("c1")
    guarded.runtime.close()
    assert message.status == "success" and message.content == "saved notes/a"
    assert guarded.calls == [{"path": "notes/a"}]
    assert row is not None and row.state is CallState.SUCCEEDED


def test_wrap_tool_call_answers_a_refusal_as_an_error_message_without_the_tool(
    tmp_path: Path,
) -> None:
    guarded = Guarded(tmp_path)
    (message,) = guarded.invoke(
        {"name": "save_note", "args": {"path": "../x", "text": "x"}, "id": "c2"}
    )
    row = guarded.runtime.audit.get("c2")
    guarded.runtime.close()
    assert message.status == "error" and message.tool_call_id == "c2"
    assert "PATH_OUTSIDE_WORKSPACE" in message.content
    assert guarded.calls == []
    assert row is not None and row.state is CallState.DENIED


@pytest.mark.parametrize(
    ("content", "value"),
    [
        ("hello", "hello"),
        ("", ""),
        (' {"a": 1}', ' {"a": 1}'),  # not as LangChain writes a value: text
        ('"quoted"', '"quoted"'),  # a JSON string is text
        ('{"a": 1}', {"a": 1}),
        ("[1, 2]", [1, 2]),
        ("-3", -3),
        ("true", True),
        ("null", None),
        ("Infinity", float("inf")),
        ("nothing", "nothing"),  # starts like null, is text
    ],
)
def test_tool_output_reads_langchains_json_of_a_value_and_keeps_text(
    content: str, value: Any
) -> None:
    assert tool_output(content) == value
