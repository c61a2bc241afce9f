"""A correct MCP file server over stdio: notes under the root it is given
(argv[1]), every path walked one directory at a time with O_NOFOLLOW from
a descriptor of the root, so no link and no ``..`` leads outside; writes
are atomic (a temporary file renamed) and leave nothing behind on failure."""

from __future__ import annotations

import contextlib
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

ROOT = sys.argv[1]
LEAKY = "--leaky" in sys.argv[2:]
"""The twin with a planted bug: ``read_note`` joins the path to the root
and opens it, following ``..`` and links wherever they lead."""
server = MCPServer("files")


def _parent_fd(path: str) -> tuple[int, str]:
    """A descriptor of the directory holding ``path`` (inside ROOT) and its name."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or path.startswith("/"):
        raise ValueError(f"{path}: not a path inside the notes")
    fd = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def read_note(path: str) -> str:
    """Read a note (a path relative to the notes' root)."""
    if LEAKY:
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as stream:
            return stream.read()
    fd, name = _parent_fd(path)
    try:
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(handle, "rb") as stream:
        return stream.read(1_000_000).decode("utf-8", "replace")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def read_at(path: str) -> str:
    """Read a note named by its absolute path (inside the notes' root)."""
    prefix = ROOT.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path}: not inside {ROOT}")
    return read_note(path[len(prefix) :])


@server.tool(
    annotations=ToolAnnotations(destructiveHint=False, openWorldHint=False, idempotentHint=True)
)
def write_note(path: str, text: str) -> dict:
    """Write a note (atomically)."""
    fd, name = _parent_fd(path)
    temporary = f".{name}.part"
    try:
        handle = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd
        )
        try:
            data = text.encode()
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view) :]
            os.fsync(handle)
        finally:
            os.close(handle)
        os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        return {"bytes": len(data)}
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=fd)
        raise
    finally:
        os.close(fd)


if __name__ == "__main__":
    server.run()
