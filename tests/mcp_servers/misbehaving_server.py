"""An MCP server over stdio that misbehaves on request: ``stall`` never
returns (a blocking sleep: its loop cannot even see the cancellation),
``die`` ends the process mid-call, ``spawn`` starts children (one in a
session of its own, double-forked) and returns their pids; ``pid`` and
``hello`` answer at once."""

from __future__ import annotations

import os
import subprocess
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("misbehaving")
READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)


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
    """Blocks the server for ``seconds``."""
    time.sleep(seconds)
    return "late"


@server.tool(annotations=READ)
def die(code: int) -> str:
    """Ends the server's process in the middle of the call."""
    os._exit(code)


@server.tool(annotations=READ)
def spawn() -> list[int]:
    """Starts a child, and a grandchild in a session of its own; their pids."""
    child = subprocess.Popen(["sleep", "300"])
    script = "sleep 300 >/dev/null 2>&1 & echo $!"
    grandchild = subprocess.run(
        ["setsid", "sh", "-c", script], capture_output=True, text=True, check=True
    )
    return [child.pid, int(grandchild.stdout.strip())]


if __name__ == "__main__":
    server.run()
