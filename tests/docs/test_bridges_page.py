"""The bridge examples of docs/bridges.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_toolguard import Capabilities, Risk, ToolCall, ToolRegistry, ToolRuntime

PAGE = Path(__file__).resolve().parents[2] / "docs" / "bridges.md"
WRITE = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def block(heading: str) -> str:
    section = PAGE.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    assert match, f"the {heading} section has a python block"
    return match.group(1)


def test_the_mcp_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    monkeypatch.chdir(tmp_path)
    exec(compile(block("MCP"), "docs/bridges.md", "exec"), {})  # it asserts its own result


def test_the_stdio_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the suite's node file server as the page's ``server.js``."""
    pytest.importorskip("mcp")
    server = Path(__file__).resolve().parents[1] / "mcp_servers" / "files_server.js"
    (tmp_path / "server.js").write_bytes(server.read_bytes())
    monkeypatch.chdir(tmp_path)
    exec(compile(block("MCP servers over stdio, in any language"), "docs/bridges.md", "exec"), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.js"]


def test_the_typed_function_example_takes_its_schema_from_the_signature(tmp_path: Path) -> None:
    namespace: dict[str, object] = {}
    exec(compile(block("Typed Python functions"), "docs/bridges.md", "exec"), namespace)
    save = namespace["save"]
    with ToolRuntime(ToolRegistry([save]), tmp_path, WRITE) as runtime:  # type: ignore[list-item]
        bad = runtime.execute(
            ToolCall("1", "save", {"path": "a.md", "text": "x", "mode": "prepend"})
        )
        runtime.execute(ToolCall("2", "save", {"path": "a.md", "text": "x"}))
        runtime.execute(ToolCall("3", "save", {"path": "a.md", "text": "y", "mode": "append"}))
    assert bad.code.value == "INVALID_ARGUMENT"
    assert (tmp_path / "a.md").read_text() == "xy"
