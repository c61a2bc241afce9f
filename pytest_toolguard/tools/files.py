"""General workspace tools: read, write, list and search files.

Every path goes through ``ctx.workspace``, as the call gave it: the
workspace then reaches what the policy checked, without resolving the path
a second time. Handlers never open host paths.
"""

from __future__ import annotations

import contextlib
import errno
import math
from typing import Any

from ..capabilities import Risk
from ..context import ToolContext
from ..registry import PathAccess, tool
from ..sandbox import CallCancelled, show_path

PATH = {"type": "string", "minLength": 1, "maxLength": 300}


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "path": PATH,
            "max_chars": {"type": "integer", "minimum": 1, "maximum": 20000, "default": 4000},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "truncated": {"type": "boolean"},
            "total_chars": {"type": "integer", "minimum": 0},
        },
        "required": ["path", "content", "truncated", "total_chars"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}")],
    result_limit=24000,
)
def read_text(ctx: ToolContext, path: str, max_chars: int = 4000) -> dict[str, Any]:
    """Read a UTF-8 text file of the workspace, at most max_chars characters."""
    content = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    return {
        "path": ctx.workspace.resolve(path),
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "bytes_written": {"type": "integer", "minimum": 0},
            "created": {"type": "boolean"},
        },
        "required": ["path", "bytes_written", "created"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_file(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Write a UTF-8 text file (atomically: old or new content, never torn)."""
    data = content.encode("utf-8")
    # The path as given: the workspace reaches the directory the policy
    # checked (see sandbox.Location), not the path resolved a second time.
    created = ctx.workspace.write_bytes(path, data)
    return {
        "path": ctx.workspace.resolve_write(path),
        "bytes_written": len(data),
        "created": created,
    }


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "path": {**PATH, "default": "."},
            "recursive": {"type": "boolean", "default": False},
        },
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "type": {"enum": ["file", "dir", "symlink"]},
                        "size": {"type": ["integer", "null"]},
                    },
                    "required": ["path", "type", "size"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["path", "entries"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}", default=".")],
)
def list_files(ctx: ToolContext, path: str = ".", recursive: bool = False) -> dict[str, Any]:
    """List a directory of the workspace (recursive: every file beneath it)."""
    listed = ctx.workspace.walk_entries(path) if recursive else ctx.workspace.list_dir(path)
    entries = [
        {
            "path": entry.path,
            "type": "symlink" if entry.is_symlink else "dir" if entry.is_dir else "file",
            "size": entry.size,
        }
        for entry in listed
    ]
    return {"path": ctx.workspace.resolve(path), "entries": entries}


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 200},
            "path": {**PATH, "default": "."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
            "case_sensitive": {"type": "boolean", "default": True},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "matches": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "line": {"type": "integer", "minimum": 1},
                        "text": {"type": "string"},
                    },
                    "required": ["path", "line", "text"],
                    "additionalProperties": False,
                },
            },
            "files_searched": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
        },
        "required": ["matches", "files_searched", "truncated"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}", default=".")],
)
def search_text(
    ctx: ToolContext,
    query: str,
    path: str = ".",
    max_results: int = 50,
    case_sensitive: bool = True,
) -> dict[str, Any]:
    """Find lines containing query in the UTF-8 text files beneath path."""
    needle = query if case_sensitive else query.lower()
    matches: list[dict[str, Any]] = []
    searched = 0
    # Each file is read from the directory the walk opened, never by its
    # path again: a name is not re-parsed, and nothing swapped in is followed.
    # Files too large or refused (hard links) are skipped by read_tree.
    with contextlib.closing(ctx.workspace.read_tree(path, max_bytes=ctx.max_read_bytes)) as files:
        for file, content in files:
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError:
                continue  # binary: not searchable
            searched += 1
            for number, line in enumerate(text.splitlines(), start=1):
                if needle in (line if case_sensitive else line.lower()):
                    if len(matches) == max_results:
                        return {"matches": matches, "files_searched": searched, "truncated": True}
                    matches.append({"path": file, "line": number, "text": line[:300]})
    return {"matches": matches, "files_searched": searched, "truncated": False}


WAIT_POLL_SECONDS = 0.05
"""How often ``wait_for_file`` looks for its file."""


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "path": PATH,
            "wait_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
        },
        "required": ["path", "wait_seconds"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "bytes": {"type": "integer", "minimum": 0},
        },
        "required": ["path", "bytes"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}")],
    timeout_seconds=310.0,
)
def wait_for_file(ctx: ToolContext, path: str, wait_seconds: float) -> dict[str, Any]:
    """Wait up to wait_seconds for a regular file to appear at path (written
    by a build or a job outside the agent), then give its size."""
    # Counted polls, not clock reads: a frozen clock in replay must not
    # stretch or end the wait. The deadline stops it through ctx.cancelled.
    for _ in range(max(1, math.ceil(wait_seconds / WAIT_POLL_SECONDS))):
        size = ctx.workspace.size(path)
        if size is not None:
            return {"path": ctx.workspace.resolve(path), "bytes": size}
        if ctx.cancelled.wait(WAIT_POLL_SECONDS):
            raise CallCancelled(f"stopped waiting for {show_path(path)}: the call timed out", path)
    # The path as the error's filename, not in its text: the runtime redacts
    # it before it is quoted.
    raise TimeoutError(errno.ETIMEDOUT, f"no file appeared in {wait_seconds:g} s", path)
