"""An MCP server over Streamable HTTP on 127.0.0.1: ``http_server.py ROOT
--port PORT``. ``read_note``/``write_note`` keep to ``ROOT`` (paths walked
from a descriptor of it, never following a link; writes atomic);
``hello`` and ``pid`` answer at once, ``stall`` never returns (a blocking
sleep), ``die`` ends the process mid-call. Runs with mcp 2.x (``MCPServer``)
or 1.x (``FastMCP``)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
from mcp.types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("root")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--path", default="/mcp", help="where it answers")
options = parser.parse_args()
ROOT = os.open(options.root, os.O_RDONLY | os.O_DIRECTORY)

server = MCPServer("http-notes")
READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
WRITE = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)


def _parent(path: str) -> tuple[int, str]:
    """A descriptor of ``path``'s directory under ROOT (no link followed) and its last part."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or path.startswith("/"):
        raise ValueError(f"{path!r} is not a path inside the workspace")
    fd = os.dup(ROOT)
    for part in parts[:-1]:
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd, parts[-1]


@server.tool(annotations=READ)
def read_note(path: str) -> str:
    """The text of a note in the workspace."""
    fd, name = _parent(path)
    try:
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(handle, encoding="utf-8") as note:
        return note.read()


@server.tool(annotations=WRITE)
def write_note(path: str, text: str) -> str:
    """Writes a note in the workspace (atomically)."""
    fd, name = _parent(path)
    part = f".{name}.part"
    try:
        handle = os.open(
            part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd
        )
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as note:
                note.write(text)
            os.rename(part, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(part, dir_fd=fd)
            raise
    finally:
        os.close(fd)
    return f"wrote {len(text)} characters"


@server.tool(annotations=READ)
def hello(name: str) -> str:
    """Greets."""
    return f"hello {name}"


@server.tool(annotations=READ)
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool(annotations=READ)
def stall(seconds: float) -> str:
    """Sleeps, blocking."""
    time.sleep(seconds)
    return "woke"


@server.tool(annotations=READ)
def die(code: int) -> str:
    """Ends the server's process during the call."""
    os._exit(code)


if __name__ == "__main__":
    try:
        server.run(
            transport="streamable-http",
            host="127.0.0.1",
            port=options.port,
            streamable_http_path=options.path,
        )
    except TypeError:  # mcp 1.x: these are settings
        settings: Any = server.settings
        settings.host, settings.port = "127.0.0.1", options.port
        settings.streamable_http_path = options.path
        server.run(transport="streamable-http")
