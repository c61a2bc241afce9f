"""An ``mcp`` SDK v1 ``FastMCP`` server wrapped. mcp 2.x has no FastMCP
(the [test] extra installs 2.x, so this skips there); CI runs it in an
environment of its own with ``mcp<2`` (``.ci/mcp-v1-check``, which fails if
it skips; checked with mcp 1.30)."""

from __future__ import annotations

from pathlib import Path

import pytest

fastmcp_v1 = pytest.importorskip("mcp.server.fastmcp")

from mcp.types import ToolAnnotations  # noqa: E402

from pytest_toolguard import ErrorCode, Risk, ToolCall, ToolRegistry, ToolRuntime  # noqa: E402
from pytest_toolguard.bridges.mcp import from_mcp_server, restoring_process_state  # noqa: E402


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
