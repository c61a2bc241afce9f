"""A minimal MCP server over stdio (newline-delimited JSON-RPC, no SDK):
read_file, write_file and list_dir under the root given as its argument.

``files_server.py ROOT`` confines every path to ROOT: it walks each name
from ROOT's descriptor, refusing ``..``, absolute paths and links, so a
link swapped in later is never followed. ``files_server.py ROOT
--unconfined`` is its twin with a planted bug: it opens ``ROOT/path`` as
given, so ``../x`` or a link leads out. The confined one never serves a
``.env`` file (the fuzzer plants one in the workspace).
"""

from __future__ import annotations

import json
import os
import sys

ROOT = sys.argv[1]
UNCONFINED = "--unconfined" in sys.argv[2:]

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a text file of the workspace.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": "write_file",
        "description": "Write a text file of the workspace.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": False},
    },
]


class Refused(Exception):
    pass


def _parent_fd(path: str) -> tuple[int, str]:
    """The directory holding ``path`` (opened from ROOT name by name, no
    link followed) and the final name."""
    if path.startswith(ROOT.rstrip("/") + "/"):
        path = path[len(ROOT.rstrip("/")) + 1 :]
    if os.path.isabs(path):
        raise Refused(f"{path}: outside the workspace")
    names = [name for name in path.split("/") if name not in ("", ".")]
    if not names or ".." in names:
        raise Refused(f"{path}: outside the workspace")
    if names[-1].lower().startswith(".env"):  # secrets are never served
        raise Refused(f"{path}: a secrets file")
    fd = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names[:-1]:
            next_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, names[-1]


def read_file(path: str) -> str:
    if UNCONFINED:
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            return handle.read()
    parent, name = _parent_fd(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=parent)
    finally:
        os.close(parent)
    with os.fdopen(fd, encoding="utf-8") as handle:
        return handle.read()


def write_file(path: str, content: str) -> str:
    if UNCONFINED:
        with open(os.path.join(ROOT, path), "w", encoding="utf-8") as handle:
            handle.write(content)
        return f"wrote {len(content)} characters"
    # Atomic: a full disk leaves the old file, never a torn one.
    parent, name = _parent_fd(path)
    temporary = f".{name}.{os.getpid()}.tmp"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(temporary, flags, 0o644, dir_fd=parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            os.unlink(temporary, dir_fd=parent)
            raise
    finally:
        os.close(parent)
    return f"wrote {len(content)} characters"


def call(name: str, arguments: dict) -> dict:
    try:
        if name == "read_file":
            text = read_file(arguments["path"])
        elif name == "write_file":
            text = write_file(arguments["path"], arguments["content"])
        else:
            return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}
    except (Refused, OSError, KeyError, TypeError, ValueError) as exc:
        return {"content": [{"type": "text", "text": str(exc)}], "isError": True}
    return {"content": [{"type": "text", "text": text}], "isError": False}


def answer(message: dict) -> dict | None:
    method, key = message.get("method"), message.get("id")
    if key is None:
        return None  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "files", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = message.get("params") or {}
        result = call(params.get("name", ""), params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": key, "error": {"code": -32601, "message": "no method"}}
    return {"jsonrpc": "2.0", "id": key, "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
