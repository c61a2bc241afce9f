"""A test stand-in for ``bridges.mcp.from_mcp_command`` while the stdio
bridge is not in this tree: one server process per call, started with
``{workspace}`` as the root of the world the call runs in. Installed only
when the package has no ``from_mcp_command`` of its own."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tempfile
from collections.abc import Sequence
from typing import Any

from pytest_toolguard.bridges import BridgeError
from pytest_toolguard.bridges.mcp import MCPToolError, call_tool_outcome, from_mcp

HELLO = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
}


def _session(command: Sequence[str], root: str, request: dict[str, Any], timeout: float) -> Any:
    argv = [part.replace("{workspace}", root) for part in command]
    messages = [HELLO, {"jsonrpc": "2.0", "method": "notifications/initialized"}, request]
    text = "".join(json.dumps(message) + "\n" for message in messages)
    try:
        done = subprocess.run(
            argv, input=text, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        raise BridgeError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise BridgeError(f"{' '.join(argv)}: no answer within {timeout}s") from None
    replies = {}
    for line in done.stdout.splitlines():
        try:
            reply = json.loads(line)
        except ValueError:
            raise BridgeError(f"{' '.join(argv)} speaks no MCP: it wrote {line[:40]!r}") from None
        if isinstance(reply, dict):
            replies[reply.get("id")] = reply
    if request["id"] not in replies:
        said = done.stderr.strip()[:80]
        raise BridgeError(f"{' '.join(argv)} exited ({done.returncode}) with no answer: {said}")
    return replies[request["id"]].get("result")


def from_mcp_command(
    command: Sequence[str], *, paths: Any = None, startup_timeout: float = 10.0, **_: Any
) -> list[Any]:
    with tempfile.TemporaryDirectory() as root:
        listed = _session(
            command, root, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, startup_timeout
        )

    def handler_for(name: str) -> Any:
        def handler(ctx: Any, **arguments: Any) -> Any:
            if ctx.cancelled.is_set():  # past its deadline: the call is over
                raise MCPToolError("cancelled")
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
            ok, data, message = call_tool_outcome(
                _session(command, ctx.workspace.root, request, startup_timeout)
            )
            if not ok:
                raise MCPToolError(message)
            return data

        return handler

    names = [tool["name"] for tool in listed["tools"]]
    specs = from_mcp(listed, handlers={n: handler_for(n) for n in names}, paths=paths)
    return [dataclasses.replace(spec, world="directory") for spec in specs]
