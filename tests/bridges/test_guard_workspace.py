"""A bridged tool knows the workspace of the call it runs in:
``current_workspace()`` while the runtime runs its handler (and while a
LangGraph guard lets the ToolNode run it), and, for an Agents SDK
``FunctionTool`` the runtime runs itself, the ``ToolContext.context`` the
SDK passes. A tool reading a file by that root works when recorded and when
its cassette is replayed in a world whose root is another directory."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    Capabilities,
    PathAccess,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    tool,
)
from pytest_toolguard.context import current_workspace
from pytest_toolguard.replay import load, record_session, replay

with contextlib.suppress(ImportError):  # the tests that need it skip
    from agents import RunContextWrapper  # resolved by name in a tool's annotations

READ = Capabilities(allowed_risks=frozenset({Risk.READ}))
PATHS = [PathAccess.read("{path}")]


SEEN_ROOTS: list[str] = []
"""The roots ``read_by_root`` was given, in this process."""


def read_by_root(path: str) -> str:
    """What a framework's tool does: open a file under the world's root."""
    workspace = current_workspace()
    assert workspace is not None, "called outside a call"
    SEEN_ROOTS.append(workspace.root)
    return (Path(workspace.root) / path).read_text(encoding="utf-8")


def openai_tool() -> list[Any]:
    pytest.importorskip("agents")
    from agents import function_tool

    from pytest_toolguard.bridges import from_openai

    @function_tool
    def read_note(path: str) -> str:
        """Read a note."""
        return read_by_root(path)

    return from_openai(read_note, paths={"read_note": PATHS})


def openai_async_tool() -> list[Any]:
    pytest.importorskip("agents")
    from agents import function_tool

    from pytest_toolguard.bridges import from_openai

    @function_tool
    async def read_note(path: str) -> str:
        """Read a note."""
        await asyncio.sleep(0)
        return read_by_root(path)

    return from_openai(read_note, paths={"read_note": PATHS})


def openai_tool_by_context() -> list[Any]:
    """The SDK's own way: the run's context, which is the call's ``ToolContext``."""
    pytest.importorskip("agents")
    from agents import function_tool

    from pytest_toolguard.bridges import from_openai

    @function_tool
    def read_note(wrapper: RunContextWrapper[Any], path: str) -> str:
        """Read a note."""
        SEEN_ROOTS.append(wrapper.context.workspace.root)
        return (Path(wrapper.context.workspace.root) / path).read_text(encoding="utf-8")

    return from_openai(read_note, paths={"read_note": PATHS})


def langchain_tool() -> list[Any]:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool as langchain

    from pytest_toolguard.bridges import from_langchain

    @langchain
    def read_note(path: str) -> str:
        """Read a note."""
        return read_by_root(path)

    return from_langchain(read_note, paths={"read_note": PATHS})


def langchain_async_tool() -> list[Any]:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import StructuredTool

    from pytest_toolguard.bridges import from_langchain

    async def read_note(path: str) -> str:
        """Read a note."""
        return read_by_root(path)

    return from_langchain(
        StructuredTool.from_function(coroutine=read_note, name="read_note"),
        paths={"read_note": PATHS},
    )


def plain_function() -> list[Any]:
    from pytest_toolguard.bridges import from_function

    def read_note(path: str) -> str:
        """Read a note."""
        return read_by_root(path)

    return [from_function(read_note, risk="read", paths=PATHS)]


TOOLS = {
    "Agents SDK function tool": openai_tool,
    "Agents SDK async function tool": openai_async_tool,
    "Agents SDK tool reading its context": openai_tool_by_context,
    "LangChain tool": langchain_tool,
    "LangChain coroutine tool": langchain_async_tool,
    "plain function": plain_function,
}
CASES = {
    **{f"{name}, thread": (make, "thread") for name, make in TOOLS.items()},
    # Each other place a handler runs: the main thread, a forked child.
    "Agents SDK function tool, inline": (openai_tool, "inline"),
    "Agents SDK async function tool, inline": (openai_async_tool, "inline"),
    "LangChain tool, process": (langchain_tool, "process"),
}


@pytest.mark.parametrize(("make", "isolation"), list(CASES.values()), ids=list(CASES))
def test_a_bridged_tool_reads_by_the_root_recorded_and_replayed_elsewhere(
    tmp_path: Path, make: Any, isolation: Any
) -> None:
    registry = ToolRegistry(make())
    SEEN_ROOTS.clear()
    recorded_root = tmp_path / "recorded"
    (recorded_root / "notes").mkdir(parents=True)
    (recorded_root / "notes" / "a.md").write_text("hello\n", encoding="utf-8")
    cassette = tmp_path / "notes.yaml"
    with (
        ToolRuntime(registry, recorded_root, READ, isolation=isolation) as runtime,
        record_session(runtime, cassette),
    ):
        result = runtime.execute(ToolCall("c1", "read_note", {"path": "notes/a.md"}))
    assert result.ok, result.message
    assert result.data == "hello\n"

    # The directory world replays in a directory of its own: another root.
    report = replay(load(cassette), registry, world="directory")
    assert report.ok, [str(d) for d in report.differences]
    assert [r.data for r in report.results] == ["hello\n"]
    # The replay's root (the last seen: a forked child's are not seen here).
    assert SEEN_ROOTS and SEEN_ROOTS[-1] != str(recorded_root)


def test_no_workspace_outside_a_call_nor_after_one(tmp_path: Path) -> None:
    seen: list[Any] = []

    @tool(risk="read")
    def look(ctx: Any) -> str:
        seen.append(current_workspace())
        return "seen"

    @tool(risk="read")
    async def look_async(ctx: Any) -> str:
        await asyncio.sleep(0)
        seen.append(current_workspace())
        return "seen"

    async def on_a_loop(runtime: ToolRuntime) -> None:
        await runtime.aexecute(ToolCall("c2", "look", {}))  # a thread of the loop's executor
        await runtime.aexecute(ToolCall("c3", "look_async", {}))  # a task on the loop
        seen.append(current_workspace())  # the caller's task, after the call

    assert current_workspace() is None
    with ToolRuntime(ToolRegistry([look, look_async]), tmp_path) as runtime:
        runtime.execute(ToolCall("c1", "look", {}))
        runtime.execute(ToolCall("c4", "look_async", {}))  # a loop of the worker thread
        asyncio.run(on_a_loop(runtime))
    assert current_workspace() is None
    # c1, c4, c2, c3 saw the workspace; the caller's task after them does not.
    assert [w.root if w else None for w in seen] == [str(tmp_path)] * 4 + [None]


def test_two_threads_see_their_own_call_workspace(tmp_path: Path) -> None:
    roots = [tmp_path / "one", tmp_path / "two"]
    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    @tool(risk="read")
    def look(ctx: Any) -> str:
        barrier.wait(timeout=10)  # both calls are running at once
        workspace = current_workspace()
        seen[ctx.call_id] = workspace.root if workspace else ""
        return "seen"

    def run(root: Path) -> None:
        root.mkdir()
        with ToolRuntime(ToolRegistry([look]), root) as runtime:
            runtime.execute(ToolCall(root.name, "look", {}))

    threads = [threading.Thread(target=run, args=(root,)) for root in roots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert seen == {root.name: str(root) for root in roots}


def test_langgraph_guard_gives_its_tool_the_workspace(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool as langchain
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from pytest_toolguard.bridges import from_langchain
    from pytest_toolguard.bridges.guards.langgraph import toolguard_wrap_tool_call

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("hello\n", encoding="utf-8")

    @langchain
    def read_note(path: str) -> str:
        """Read a note."""
        return read_by_root(path)

    registry = ToolRegistry(from_langchain(read_note, paths={"read_note": PATHS}))
    with ToolRuntime(registry, tmp_path, READ) as runtime:
        graph = StateGraph(MessagesState)
        graph.add_node(
            "tools", ToolNode([read_note], wrap_tool_call=toolguard_wrap_tool_call(runtime))
        )
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        call = {
            "name": "read_note",
            "args": {"path": "notes/a.md"},
            "id": "c1",
            "type": "tool_call",
        }
        messages = graph.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})
    (message,) = messages["messages"][1:]
    assert message.status == "success" and message.content == "hello\n"
