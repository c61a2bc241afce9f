"""What ``from_mcp_server`` accepts, without any MCP SDK: an object that is
not a server it can wrap is one ``BridgeError``, never Python's
``TypeError``; a result model spelled as v1 spells it (``isError``) is read
like v2's. The real v1 SDK's objects are in test_bridges_mcp_v1.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from pytest_toolguard.bridges import BridgeError, BridgeWarning
from pytest_toolguard.bridges.guards.mcp_results import result_wire
from pytest_toolguard.bridges.guards.mcp_server import afrom_mcp_server, from_mcp_server


class SyncLister:
    """list_tools and call_tool exist but are plain functions."""

    def list_tools(self) -> list[dict[str, Any]]:
        return [{"name": "t"}]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": []}


class DecoratorFactories:
    """A v1 low-level server's shape without its handler table: list_tools
    and call_tool return decorators."""

    def list_tools(self) -> Any:
        return lambda function: function

    def call_tool(self, *, validate_input: bool = True) -> Any:
        return lambda function: function


class WantsArguments:
    async def list_tools(self, cursor: str) -> list[Any]:
        return []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": []}


class ListsNumbers:
    async def list_tools(self) -> Any:
        return 42

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": []}


class ListsStrings:
    async def list_tools(self) -> Any:
        return ["t"]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": []}


class EmptyHandlerTable:
    """A low-level server with nothing registered."""

    request_handlers: dict[type, Any] = {}

    def list_tools(self) -> Any:
        return lambda function: function

    def call_tool(self, *, validate_input: bool = True) -> Any:
        return lambda function: function


class AsyncServer:
    async def list_tools(self) -> list[dict[str, Any]]:
        return [{"name": "t", "inputSchema": {"type": "object"}}]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": [{"type": "text", "text": "ok"}]}


@pytest.mark.parametrize(
    "server",
    [
        None,
        42,
        "server",
        object(),
        SyncLister(),
        DecoratorFactories(),
        WantsArguments(),
        ListsNumbers(),
        ListsStrings(),
        EmptyHandlerTable(),
        AsyncServer,  # the class, not an instance
    ],
    ids=lambda server: type(server).__name__ if not isinstance(server, type) else "a class",
)
def test_an_object_that_is_no_server_is_one_bridge_error(server: Any) -> None:
    with pytest.raises(BridgeError):
        from_mcp_server(server)
    with pytest.raises(BridgeError):
        asyncio.run(afrom_mcp_server(server))


def test_an_async_server_of_any_class_is_wrapped() -> None:
    assert [spec.name for spec in from_mcp_server(AsyncServer())] == ["t"]


class TextBlock(BaseModel):
    type: str = "text"
    text: str


class CamelResult(BaseModel):
    """A result model spelled as the v1 SDK spells it."""

    content: list[TextBlock]
    structuredContent: dict[str, Any] | None = None
    isError: bool = False


@pytest.mark.parametrize(
    ("result", "wire"),
    [
        (
            CamelResult(content=[TextBlock(text="x")]),
            {"content": [{"type": "text", "text": "x"}], "isError": False},
        ),
        (
            CamelResult(content=[TextBlock(text="no")], isError=True),
            {"content": [{"type": "text", "text": "no"}], "isError": True},
        ),
        (
            CamelResult(content=[], structuredContent={"n": 1}),
            {"content": [], "structuredContent": {"n": 1}, "isError": False},
        ),
    ],
)
def test_a_result_model_with_is_error_is_read_by_its_wire_form(result: Any, wire: Any) -> None:
    assert result_wire(result) == wire


class PathServer:
    async def list_tools(self) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        return [{"name": "read", "inputSchema": schema}]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": []}


def test_a_warning_about_a_listed_tool_points_at_the_callers_line() -> None:
    with pytest.warns(BridgeWarning, match="'path' looks like a path") as said:
        from_mcp_server(PathServer())
    assert [(warning.filename, warning.lineno) for warning in said] == [
        (
            __file__,
            test_a_warning_about_a_listed_tool_points_at_the_callers_line.__code__.co_firstlineno
            + 2,
        )
    ]


@pytest.mark.parametrize("world", [None, "fake", "directory"])
def test_the_world_a_servers_tools_need_is_given_to_each(world: Any) -> None:
    specs = from_mcp_server(AsyncServer(), world=world)
    assert [spec.world for spec in specs] == [world]
    assert [spec.world for spec in asyncio.run(afrom_mcp_server(AsyncServer(), world=world))] == [
        world
    ]


@pytest.mark.parametrize("world", ["real", "", "Directory"])
def test_an_unknown_world_is_refused_before_the_server_is_asked(world: str) -> None:
    with pytest.raises(ValueError, match="unknown world"):
        from_mcp_server(AsyncServer(), world=world)


class Echo:
    async def list_tools(self) -> list[dict[str, Any]]:
        return [{"name": "echo", "inputSchema": {"type": "object"}}]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return {"content": [{"type": "text", "text": "hi"}]}


def test_a_wrapped_servers_handler_is_known_to_the_faults_as_relaying() -> None:
    # The faults leave a relaying handler's own clock and loop alone: the
    # live servers' handlers must stay where faults.target looks for them.
    from pytest_toolguard.faults.target import relays_to_a_server

    [spec] = from_mcp_server(Echo())
    assert relays_to_a_server(spec.handler)


def test_a_definition_only_handler_of_the_bridges_is_not_relaying() -> None:
    # The control: the bridges' own handler of a tool imported from its
    # definition alone (it refuses every call) relays to no server.
    from pytest_toolguard.bridges import from_mcp
    from pytest_toolguard.faults.target import relays_to_a_server

    [spec] = from_mcp({"name": "echo"})
    assert spec.handler.__module__.startswith("pytest_toolguard.bridges.")
    assert not relays_to_a_server(spec.handler)
