"""The tools of a small agent project, written as a user writes them.

- ``save_note``: a write tool (one path argument, declared);
- ``grep_file``: a read tool with a path and a regular expression;
- ``word_count``: an ``async def`` tool, as MCP servers write them;
- ``fetch_status``: an external tool that makes an HTTP GET (needs an approval);
- ``copy_file``: a tool with two path arguments.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from typing import Any

from pytest_toolguard import PathAccess, Risk, ToolRegistry, tool

PATH = {"type": "string", "minLength": 1, "maxLength": 200}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "text": {"type": "string", "maxLength": 10_000}},
        "required": ["path", "text"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"bytes": {"type": "integer", "minimum": 0}},
        "required": ["bytes"],
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="text")],
)
def save_note(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Save a note in the workspace."""
    ctx.workspace.write_text(path, text)
    return {"bytes": len(text.encode("utf-8"))}


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "path": PATH,
            "pattern": {"type": "string", "minLength": 1, "maxLength": 100},
            "max_matches": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
        },
        "required": ["path", "pattern"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "matches": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"line": {"type": "integer"}, "text": {"type": "string"}},
                    "required": ["line", "text"],
                },
            },
            "error": {"type": "string"},
        },
        "required": ["matches"],
    },
    paths=[PathAccess.read("{path}")],
)
def grep_file(ctx: Any, path: str, pattern: str, max_matches: int = 20) -> dict[str, Any]:
    """Lines of a text file matching a regular expression."""
    try:
        expression = re.compile(pattern)
    except re.error as exc:
        return {"matches": [], "error": f"bad pattern: {exc}"}
    text = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    matches = [
        {"line": number, "text": line[:200]}
        for number, line in enumerate(text.splitlines(), 1)
        if expression.search(line)
    ]
    return {"matches": matches[:max_matches]}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"words": {"type": "integer", "minimum": 0}},
        "required": ["words"],
    },
    paths=[PathAccess.read("{path}")],
)
async def word_count(ctx: Any, path: str) -> dict[str, Any]:
    """Count the words of a text file (an async handler)."""
    text = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    await asyncio.sleep(0)  # where a real tool would await I/O
    return {"words": len(text.split())}


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx raises ``HTTPError``: the policy judged the host of the URL
    argument, and a redirect could lead anywhere."""

    def redirect_request(self, *args: Any) -> None:
        return None


_NO_REDIRECTS = urllib.request.build_opener(_RefuseRedirects)


@tool(
    input_schema={
        "type": "object",
        "properties": {"url": {"type": "string", "pattern": "^https?://", "maxLength": 300}},
        "required": ["url"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"status": {"type": "integer"}, "body": {}},
        "required": ["status", "body"],
    },
    risk=Risk.EXTERNAL,
    network_host_argument="url",
    timeout_seconds=5,
)
def fetch_status(ctx: Any, url: str) -> dict[str, Any]:
    """GET a status document from a service and return its JSON; a
    redirect is not followed (it fails the call)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with _NO_REDIRECTS.open(request, timeout=3) as response:
        return {"status": response.status, "body": json.loads(response.read().decode("utf-8"))}


@tool(
    input_schema={
        "type": "object",
        "properties": {"source": PATH, "destination": PATH},
        "required": ["source", "destination"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"bytes": {"type": "integer", "minimum": 0}},
        "required": ["bytes"],
    },
    risk=Risk.WRITE,
    paths=[PathAccess.read("{source}"), PathAccess.write("{destination}")],
)
def copy_file(ctx: Any, source: str, destination: str) -> dict[str, Any]:
    """Copy a file to another path of the workspace."""
    data = ctx.workspace.read_bytes(source, max_bytes=ctx.max_read_bytes)
    ctx.workspace.write_bytes(destination, data)
    return {"bytes": len(data)}


def registry() -> ToolRegistry:
    """The project's tools, fresh for each caller."""
    return ToolRegistry([save_note, grep_file, word_count, fetch_status, copy_file])
