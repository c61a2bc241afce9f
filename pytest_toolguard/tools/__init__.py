"""Built-in workspace tools, from the seed articles.

``builtin_registry()`` returns a fresh registry holding all of them. The run
tools need ``ToolRuntime(variables={"run_id": ...})``.
"""

from __future__ import annotations

from ..registry import ToolRegistry, ToolSpec
from .files import list_files, read_text, search_text, wait_for_file, write_file
from .runs import list_run_files, read_csv, write_json_file, write_markdown_file

__toolguard_owned__ = False  # tools' code: an inline deadline may interrupt it (runtime/inline.py)

BUILTIN_TOOLS: tuple[ToolSpec, ...] = (
    read_text,
    write_file,
    list_files,
    search_text,
    read_csv,
    write_json_file,
    write_markdown_file,
    list_run_files,
    wait_for_file,
)


def builtin_registry() -> ToolRegistry:
    """A new registry with every built-in tool."""
    return ToolRegistry(BUILTIN_TOOLS)


__all__ = [
    "BUILTIN_TOOLS",
    "builtin_registry",
    "list_files",
    "list_run_files",
    "read_csv",
    "read_text",
    "search_text",
    "wait_for_file",
    "write_file",
    "write_json_file",
    "write_markdown_file",
]
