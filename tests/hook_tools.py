"""A registry for the Claude Code hook's tests: Claude Code's tools and
``remove``, a DANGEROUS tool that runs here (so a call the user approved
at the prompt replays), as an MCP server's tool would be."""

from __future__ import annotations

from pytest_toolguard import PathAccess, Risk, ToolContext, ToolRegistry, tool
from pytest_toolguard.bridges.definitions.claude_code import claude_code_registry


@tool(
    name="remove",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string", "minLength": 1}},
        "required": ["path"],
        "additionalProperties": False,
    },
    risk=Risk.DANGEROUS,
    paths=[PathAccess.write("{path}")],
)
def remove(ctx: ToolContext, path: str) -> str:
    """Delete a file."""
    ctx.workspace.delete(path)
    return f"removed {path}"


def registry() -> ToolRegistry:
    return claude_code_registry(remove)
