"""Live MCP servers wrapped: an ``MCPServer`` (mcp SDK v2) and a ``fastmcp``
server defined here, called through our pipeline, recorded, replayed and
run through the fault matrix."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver")

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from pytest_toolguard import (
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.bridges.guards.mcp_results import call_tool_outcome, result_wire
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_server, restoring_process_state
from pytest_toolguard.faults import iter_cells, run_cell, select_faults
from pytest_toolguard.replay import load, record_session, replay

PATHS = {
    "read_note": [PathAccess.read("{path}")],
    "write_note": [PathAccess.write("{path}", content="text")],
}
SESSION = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("notes",))


def write_atomically(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def inside(root: Path, path: str) -> Path:
    """Where ``path`` leads, refused when that is outside ``root`` (links followed)."""
    target = (root / path).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ValueError(f"{path} leads outside the notes")
    return target


def read_inside(root: Path, path: str) -> str:
    return inside(root, path).read_text()


def notes_server(
    root: Path, calls: list[str], *, write=write_atomically, read=read_inside
) -> MCPServer:
    """A server as users write them: plain file access under its own root."""
    with restoring_process_state():
        server = MCPServer("notes")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    def read_note(path: str) -> str:
        """Read a note."""
        calls.append("read_note")
        return read(root, path)

    @server.tool(
        annotations=ToolAnnotations(destructiveHint=False, openWorldHint=False, idempotentHint=True)
    )
    def write_note(path: str, text: str) -> dict:
        """Write a note."""
        calls.append("write_note")
        write(inside(root, path), text)
        return {"bytes": len(text.encode())}

    @server.tool()
    def wipe(confirm: bool) -> str:
        """No annotations: dangerous."""
        calls.append("wipe")
        return "wiped"

    return server


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, list[str], ToolRegistry]:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("hello\n")
    calls: list[str] = []
    registry = ToolRegistry(from_mcp_server(notes_server(tmp_path, calls), paths=PATHS))
    return tmp_path, calls, registry


def run(world: Any, *calls: ToolCall) -> list[Any]:
    root, _, registry = world
    with ToolRuntime(registry, root, SESSION) as runtime:
        return [runtime.execute(call) for call in calls]


def test_wrapped_tools_take_risk_and_idempotence_from_annotations(world) -> None:
    registry = world[2]
    assert {spec.name: (spec.risk, spec.idempotent) for spec in registry} == {
        "read_note": (Risk.READ, False),
        "wipe": (Risk.DANGEROUS, False),
        "write_note": (Risk.WRITE, True),
    }


def test_a_call_runs_the_servers_own_tool_after_the_pipeline(world) -> None:
    (result,) = run(world, ToolCall("1", "read_note", {"path": "notes/a.md"}))
    assert result.ok and result.data == {"result": "hello\n"}  # its structuredContent
    assert world[1] == ["read_note"]


def test_a_servers_error_result_is_an_execution_error_with_its_text(world) -> None:
    (result,) = run(world, ToolCall("1", "read_note", {"path": "notes/missing.md"}))
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert "MCPToolError: Error executing tool read_note" in result.message


def test_schema_refusal_never_reaches_the_server(world) -> None:
    (result,) = run(world, ToolCall("1", "write_note", {"path": "notes/b.md"}))
    assert result.code is ErrorCode.INVALID_ARGUMENT and "arguments" in result.message
    assert world[1] == []


def test_declared_path_escaping_the_workspace_never_reaches_the_server(world) -> None:
    (result,) = run(world, ToolCall("1", "read_note", {"path": "../../etc/passwd"}))
    assert result.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert world[1] == []


def test_an_unannotated_tool_needs_an_approval(world) -> None:
    root, calls, registry = world
    session = Capabilities(allowed_risks=frozenset(Risk))
    with ToolRuntime(registry, root, session) as runtime:
        result = runtime.execute(ToolCall("1", "wipe", {"confirm": True}))
    assert result.code is ErrorCode.APPROVAL_REQUIRED and calls == []


def record(world: Any, cassette: Path) -> None:
    root, _, registry = world
    with ToolRuntime(registry, root, SESSION) as runtime, record_session(runtime, cassette):
        runtime.execute(ToolCall("1", "read_note", {"path": "notes/a.md"}))
        runtime.execute(ToolCall("2", "write_note", {"path": "notes/b.md", "text": "new\n"}))
        runtime.execute(ToolCall("3", "read_note", {"path": "notes/b.md"}))


def test_a_recorded_session_of_a_wrapped_server_replays(world, tmp_path: Path) -> None:
    cassette = tmp_path / "notes.yaml"
    record(world, cassette)
    report = replay(load(cassette), world[2])
    assert report.ok, [str(d) for d in report.differences]
    assert [r.code for r in report.results] == [ErrorCode.OK] * 3


def matrix(registry: ToolRegistry, cassette: Path) -> dict[tuple[str, str], str]:
    loaded = load(cassette)
    return {
        (target.label, fault.name): run_cell(fault, target, registry).status
        for target, fault in iter_cells(loaded, registry, "notes.yaml", select_faults("all"))
    }


def test_the_fault_matrix_over_a_wrapped_server_passes(world, tmp_path: Path) -> None:
    cassette = tmp_path / "notes.yaml"
    record(world, cassette)
    statuses = matrix(world[2], cassette)
    # Both tools check where a path leads, then open it by its components:
    # a link swapped in between (symlink_race: before any of the handler's
    # file operations) redirects the write, or the read, outside; real races.
    racy = {
        ("1-read_note", "symlink_race"),
        ("2-write_note", "symlink_race"),
        ("3-read_note", "symlink_race"),
    }
    # hash_seed: the bridge's handler cannot be loaded in a fresh interpreter;
    # concurrent_calls: the server's file operations run on its own loop.
    unable = {"hash_seed", "concurrent_calls"}
    others = {cell: status for cell, status in statuses.items() if cell not in racy}
    assert {status for (_, fault), status in others.items() if fault not in unable} == {"pass"}
    assert {status for (_, fault), status in others.items() if fault in unable} <= {"n/a"}
    assert {statuses[cell] for cell in racy} == {"fail"}
    assert ("2-write_note", "partial_write") in statuses
    assert len(statuses) > 30


def test_the_fault_matrix_catches_a_server_leaving_a_temporary_file(tmp_path: Path) -> None:
    def write_leaving_temporary(target: Path, text: str) -> None:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as file:
            file.write(text)  # ENOSPC here leaves the temporary file behind
        os.replace(temporary, target)

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("hello\n")
    server = notes_server(tmp_path, [], write=write_leaving_temporary)
    registry = ToolRegistry(from_mcp_server(server, paths=PATHS))
    cassette = tmp_path / "notes.yaml"
    record((tmp_path, [], registry), cassette)
    statuses = matrix(registry, cassette)
    assert statuses[("2-write_note", "partial_write")] == "fail"


def test_the_fault_matrix_catches_a_server_following_a_swapped_symlink(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("hello\n")
    server = notes_server(tmp_path, [], read=lambda root, path: (root / path).read_text())
    registry = ToolRegistry(from_mcp_server(server, paths=PATHS))
    cassette = tmp_path / "notes.yaml"
    record((tmp_path, [], registry), cassette)
    statuses = matrix(registry, cassette)
    assert statuses[("1-read_note", "symlink_escape")] == "fail"
    assert statuses[("2-write_note", "symlink_escape")] == "pass"


def test_restoring_process_state_undoes_what_construction_changed() -> None:
    handlers = list(logging.getLogger().handlers)
    with restoring_process_state():
        MCPServer("changes-logging")  # calls logging.basicConfig with a RichHandler
        os.environ["TOOLGUARD_TEST_PROXY"] = "http://proxy"
    assert logging.getLogger().handlers == handlers
    assert "TOOLGUARD_TEST_PROXY" not in os.environ


# -- fastmcp ----------------------------------------------------------------------


def test_a_fastmcp_server_is_wrapped_and_maps_its_errors(tmp_path: Path) -> None:
    fastmcp = pytest.importorskip("fastmcp")
    server = fastmcp.FastMCP("greeter")

    @server.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
    def greet(name: str) -> str:
        """Greet someone."""
        if name == "nobody":
            raise fastmcp.exceptions.ToolError("nobody to greet")
        return f"hello {name}"

    (spec,) = from_mcp_server(server)
    assert spec.risk is Risk.READ
    with ToolRuntime(ToolRegistry([spec]), tmp_path) as runtime:
        ok = runtime.execute(ToolCall("1", "greet", {"name": "ada"}))
        failed = runtime.execute(ToolCall("2", "greet", {"name": "nobody"}))
    assert ok.data == {"result": "hello ada"}
    assert failed.code is ErrorCode.EXECUTION_ERROR and "nobody to greet" in failed.message


# -- the CallToolResult mapping (pure) ---------------------------------------------


def test_is_error_is_not_ok_and_its_text_is_the_message() -> None:
    wire = {
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "isError": True,
    }
    assert call_tool_outcome(wire) == (False, "a\nb", "a\nb")


def test_structured_content_is_the_data_whatever_its_json_type() -> None:
    wire = {"content": [{"type": "text", "text": "[1, 2]"}], "structuredContent": [1, 2]}
    assert call_tool_outcome(wire)[:2] == (True, [1, 2])


def test_content_other_than_text_is_kept_as_blocks() -> None:
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    assert call_tool_outcome({"content": [image]})[1] == [image]


@pytest.mark.parametrize(
    ("returned", "wire"),
    [
        ([{"type": "text", "text": "x"}], {"content": [{"type": "text", "text": "x"}]}),
        ({"n": 1}, {"content": [], "structuredContent": {"n": 1}}),
        (([], {"n": 1}), {"content": [], "structuredContent": {"n": 1}}),
    ],
)
def test_v1_fastmcp_call_tool_returns_are_read_as_results(returned: Any, wire: dict) -> None:
    assert result_wire(returned) == wire
