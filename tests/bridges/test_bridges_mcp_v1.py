"""``mcp`` SDK v1 servers wrapped: ``FastMCP``, and the low-level
``Server`` whose tools are registered through decorators. mcp 2.x has no FastMCP
(the [test] extra installs 2.x, so this skips there); CI runs it in an
environment of its own with ``mcp<2`` (``.ci/mcp-v1-check``, which fails if
it skips; checked with mcp 1.30)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

fastmcp_v1 = pytest.importorskip("mcp.server.fastmcp")

from mcp import types  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.types import ToolAnnotations  # noqa: E402

from pytest_toolguard import (  # noqa: E402
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.bridges import BridgeError  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_results import call_tool_outcome, result_wire  # noqa: E402
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_server, restoring_process_state  # noqa: E402


def test_a_v1_fastmcp_server_is_wrapped_with_its_results_mapped(tmp_path: Path) -> None:
    with restoring_process_state():
        server = fastmcp_v1.FastMCP("calc")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    def fail(x: str) -> str:
        raise ValueError("bad x")

    specs = from_mcp_server(server)
    assert {spec.name: spec.risk for spec in specs} == {"add": Risk.READ, "fail": Risk.READ}
    with ToolRuntime(ToolRegistry(specs), tmp_path) as runtime:
        ok = runtime.execute(ToolCall("1", "add", {"a": 2, "b": 3}))
        failed = runtime.execute(ToolCall("2", "fail", {"x": "1"}))
    assert ok.data == {"result": 5}
    assert failed.code is ErrorCode.EXECUTION_ERROR and "bad x" in failed.message


def _low_level_server() -> Any:
    """A v1 low-level ``Server``: tools registered through its decorators."""
    with restoring_process_state():
        server = Server("low")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(
                name="echo",
                description="Echo a word.",
                inputSchema={
                    "type": "object",
                    "properties": {"word": {"type": "string"}},
                    "required": ["word"],
                },
                annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            ),
            types.Tool(name="fail", description="Fails.", inputSchema={"type": "object"}),
            types.Tool(
                name="flagged", description="isError: true.", inputSchema={"type": "object"}
            ),
        ]

    @server.call_tool()
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        if name == "echo":
            return [types.TextContent(type="text", text=arguments["word"])]
        if name == "flagged":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="not found")], isError=True
            )
        raise ValueError("it broke")

    return server


def test_a_v1_low_level_server_is_wrapped_through_its_registered_handlers(tmp_path: Path) -> None:
    specs = from_mcp_server(_low_level_server())
    assert {spec.name: spec.risk for spec in specs} == {
        "echo": Risk.READ,
        "fail": Risk.DANGEROUS,
        "flagged": Risk.DANGEROUS,
    }
    specs = from_mcp_server(_low_level_server(), risks={"fail": "read", "flagged": "read"})
    with ToolRuntime(ToolRegistry(specs), tmp_path) as runtime:
        ok = runtime.execute(ToolCall("1", "echo", {"word": "hi"}))
        raised = runtime.execute(ToolCall("2", "fail", {}))
        flagged = runtime.execute(ToolCall("3", "flagged", {}))
    assert ok.ok and ok.data == "hi"
    assert raised.code is ErrorCode.EXECUTION_ERROR and "it broke" in raised.message
    assert flagged.code is ErrorCode.EXECUTION_ERROR and "not found" in flagged.message


def test_a_v1_low_level_server_without_tools_is_a_bridge_error() -> None:
    with restoring_process_state():
        server = Server("empty")
    with pytest.raises(BridgeError, match="list_tools"):
        from_mcp_server(server)


@pytest.mark.parametrize("is_error", [False, True])
def test_a_v1_fastmcp_tool_returning_a_call_tool_result_is_read(
    tmp_path: Path, is_error: bool
) -> None:
    with restoring_process_state():
        server = fastmcp_v1.FastMCP("results")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    def lookup(key: str) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"value of {key}")],
            structuredContent=None if is_error else {"key": key},
            isError=is_error,
        )

    with ToolRuntime(ToolRegistry(from_mcp_server(server)), tmp_path) as runtime:
        result = runtime.execute(ToolCall("1", "lookup", {"key": "k"}))
    if is_error:
        assert result.code is ErrorCode.EXECUTION_ERROR and "value of k" in result.message
    else:
        assert result.ok and result.data == {"key": "k"}


@pytest.mark.parametrize("is_error", [False, True])
def test_a_v1_call_tool_result_is_read_by_its_is_error(is_error: bool) -> None:
    returned = types.CallToolResult(
        content=[types.TextContent(type="text", text="t")], isError=is_error
    )
    wire = result_wire(returned)
    assert wire["isError"] is is_error
    assert call_tool_outcome(wire) == (not is_error, "t", "t")
