"""Claude Code's built-in tools as ours.

``claude_code_registry()`` holds Claude Code's built-in tools under their
own names and schemas, run in our sandbox: Read, Glob and Grep are READ;
Write, Edit and MultiEdit are WRITE; WebFetch and WebSearch are EXTERNAL,
Bash is DANGEROUS (these three never run here: they need an approval, and
their handlers refuse to reach the network or a shell). An
``mcp__<server>__<tool>`` call is looked up as ``<tool>`` in the registry
given (MCP tools imported with ``from_mcp`` or ``from_mcp_server``).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from ...capabilities import Risk
from ...context import ToolContext
from ...errors import ToolguardError
from ...registry import PathAccess, ToolRegistry, ToolSpec, tool

BUILTIN_RISKS = {
    "Read": Risk.READ,
    "Glob": Risk.READ,
    "Grep": Risk.READ,
    "Write": Risk.WRITE,
    "Edit": Risk.WRITE,
    "MultiEdit": Risk.WRITE,
    "WebFetch": Risk.EXTERNAL,
    "WebSearch": Risk.EXTERNAL,
    "Bash": Risk.DANGEROUS,
}


_FILE_PATH = {"type": "string", "minLength": 1, "description": "The file's path"}


@tool(
    name="Read",
    input_schema={
        "type": "object",
        "properties": {
            "file_path": _FILE_PATH,
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["file_path"],
        "additionalProperties": False,
    },
    risk=Risk.READ,
    paths=[PathAccess.read("{file_path}")],
)
def read(ctx: ToolContext, file_path: str, offset: int = 0, limit: int = 2000) -> str:
    """Read a file: its lines numbered as ``cat -n`` does, from ``offset``."""
    lines = ctx.workspace.read_text(file_path, max_bytes=ctx.max_read_bytes).splitlines()
    start = max(offset - 1, 0) if offset else 0
    return "\n".join(
        f"{number:6}\t{line}" for number, line in enumerate(lines[start : start + limit], start + 1)
    )


@tool(
    name="Write",
    input_schema={
        "type": "object",
        "properties": {"file_path": _FILE_PATH, "content": {"type": "string"}},
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{file_path}", content="content")],
)
def write(ctx: ToolContext, file_path: str, content: str) -> str:
    """Write a file, replacing it."""
    ctx.workspace.write_text(file_path, content)
    return f"File written: {file_path}"


_EDIT = {
    "type": "object",
    "properties": {
        "old_string": {"type": "string"},
        "new_string": {"type": "string"},
        "replace_all": {"type": "boolean"},
    },
    "required": ["old_string", "new_string"],
    "additionalProperties": False,
}


class EditFailed(ToolguardError):
    """An edit's ``old_string`` is missing, or not unique without ``replace_all``."""


def _apply(text: str, edit: Mapping[str, Any]) -> str:
    old, new = edit["old_string"], edit["new_string"]
    count = text.count(old) if old else 0
    if count == 0:
        raise EditFailed("old_string not found in the file")
    if count > 1 and not edit.get("replace_all"):
        raise EditFailed(f"old_string occurs {count} times; give more context or replace_all")
    return text.replace(old, new) if edit.get("replace_all") else text.replace(old, new, 1)


@tool(
    name="Edit",
    input_schema={
        "type": "object",
        "properties": {"file_path": _FILE_PATH, **_EDIT["properties"]},  # type: ignore[dict-item]
        "required": ["file_path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{file_path}")],
)
def edit(
    ctx: ToolContext, file_path: str, old_string: str, new_string: str, replace_all: bool = False
) -> str:
    """Replace ``old_string`` (unique unless ``replace_all``) in a file."""
    text = ctx.workspace.read_text(file_path)
    edit_spec = {"old_string": old_string, "new_string": new_string, "replace_all": replace_all}
    ctx.workspace.write_text(file_path, _apply(text, edit_spec))
    return f"File edited: {file_path}"


@tool(
    name="MultiEdit",
    input_schema={
        "type": "object",
        "properties": {
            "file_path": _FILE_PATH,
            "edits": {"type": "array", "items": _EDIT, "minItems": 1},
        },
        "required": ["file_path", "edits"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{file_path}")],
)
def multi_edit(ctx: ToolContext, file_path: str, edits: list[dict[str, Any]]) -> str:
    """Apply several edits to one file, all or none."""
    text = ctx.workspace.read_text(file_path)
    for item in edits:
        text = _apply(text, item)
    ctx.workspace.write_text(file_path, text)
    return f"Applied {len(edits)} edit(s) to {file_path}"


def _files_under(ctx: ToolContext, path: str) -> list[str]:
    """Every regular file beneath ``path``, workspace-relative, sorted."""
    return ctx.workspace.walk(path)


@tool(
    name="Glob",
    input_schema={
        "type": "object",
        "properties": {"pattern": {"type": "string", "minLength": 1}, "path": {"type": "string"}},
        "required": ["pattern"],
        "additionalProperties": False,
    },
    risk=Risk.READ,
    paths=[PathAccess.read("{path}", default=".")],
)
def glob(ctx: ToolContext, pattern: str, path: str = ".") -> str:
    """The files under ``path`` matching a glob pattern (``**/*.py``), one a line."""
    base = ctx.workspace.normalize(path)
    matches = []
    for file in _files_under(ctx, path):
        relative = file if base == "." else file[len(base) + 1 :]
        if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(
            relative, pattern.replace("**/", "")
        ):
            matches.append(file)
    return "\n".join(matches) if matches else "No files found"


@tool(
    name="Grep",
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1},
            "path": {"type": "string"},
            "glob": {"type": "string"},
            "output_mode": {"enum": ["content", "files_with_matches", "count"]},
            "-i": {"type": "boolean"},
            "-n": {"type": "boolean"},
        },
        "required": ["pattern"],
        "additionalProperties": True,
    },
    risk=Risk.READ,
    paths=[PathAccess.read("{path}", default=".")],
)
def grep(ctx: ToolContext, pattern: str, path: str = ".", **options: Any) -> str:
    """Search files for a regular expression (``output_mode``: files_with_matches,
    content or count)."""
    flags = re.IGNORECASE if options.get("-i") else 0
    try:
        expression = re.compile(pattern, flags)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    mode = options.get("output_mode", "files_with_matches")
    wanted = options.get("glob")
    out: list[str] = []
    for file in _files_under(ctx, path):
        if wanted and not fnmatch.fnmatch(posixpath.basename(file), wanted):
            continue
        try:
            lines = ctx.workspace.read_text(file, max_bytes=ctx.max_read_bytes).splitlines()
        except (UnicodeDecodeError, OSError, ValueError):
            continue
        hits = [(number, line) for number, line in enumerate(lines, 1) if expression.search(line)]
        if not hits:
            continue
        if mode == "content":
            out += [f"{file}:{number}:{line}" for number, line in hits]
        elif mode == "count":
            out.append(f"{file}:{len(hits)}")
        else:
            out.append(file)
    return "\n".join(out) if out else "No matches found"


class NotRunHere(ToolguardError):
    """A Claude Code tool that toolguard never runs itself (shell, network)."""


def _refusing(name: str, risk: Risk, schema: Mapping[str, Any], **options: Any) -> ToolSpec:
    def handler(ctx: ToolContext, **arguments: Any) -> Any:
        raise NotRunHere(f"{name} is not run by toolguard (it reaches a shell or the network)")

    return ToolSpec(
        name=name,
        description=f"Claude Code's {name} tool (not run by toolguard)",
        input_schema=schema,
        handler=handler,
        risk=risk,
        **options,
    )


BASH = _refusing(
    "Bash",
    Risk.DANGEROUS,
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1},
            "timeout": {"type": "number"},
            "description": {"type": "string"},
            "run_in_background": {"type": "boolean"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
WEB_FETCH = _refusing(
    "WebFetch",
    Risk.EXTERNAL,
    {
        "type": "object",
        "properties": {"url": {"type": "string"}, "prompt": {"type": "string"}},
        "required": ["url", "prompt"],
        "additionalProperties": False,
    },
    network_host_argument="url",
)
WEB_SEARCH = _refusing(
    "WebSearch",
    Risk.EXTERNAL,
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 2},
            "allowed_domains": {"type": "array", "items": {"type": "string"}},
            "blocked_domains": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

NOT_RUN_HERE: tuple[ToolSpec, ...] = (BASH, WEB_FETCH, WEB_SEARCH)
"""Claude Code's tools whose handlers here only refuse (a shell, the network)."""


def runs_here(spec: ToolSpec) -> bool:
    """Whether ``spec``'s handler does the tool's work here: False for
    ``NOT_RUN_HERE`` (a replay of such a call could only fail)."""
    return all(spec.handler is not other.handler for other in NOT_RUN_HERE)


BUILTIN_TOOLS: tuple[ToolSpec, ...] = (
    read,
    write,
    edit,
    multi_edit,
    glob,
    grep,
    BASH,
    WEB_FETCH,
    WEB_SEARCH,
)


def claude_code_registry(*extra: ToolSpec) -> ToolRegistry:
    """A registry of Claude Code's built-in tools, plus ``extra`` ones
    (MCP tools a session called as ``mcp__<server>__<tool>``)."""
    return ToolRegistry(BUILTIN_TOOLS + tuple(extra))
