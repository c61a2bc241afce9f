"""MCP servers started as commands, spoken to over stdio with the ``mcp``
SDK's own client (``stdio_client`` + ``ClientSession``).

``from_mcp_command`` (re-exported by ``guards.mcp_server``) lists the
server's tools once, in a temporary directory (or ``list_in``), and gives each a
handler that talks to the server of the world the call runs in: ``StdioServers`` keeps one
``StdioServer`` per workspace root, started for the first call there with
``{workspace}`` in the command, its environment and its working directory
spelt as that root. Each server has an event loop on a thread of its own,
so the runtime's synchronous workers can call it.

The start is the handler's ``prepare``, run before the call's deadline
starts, bounded by ``startup_timeout`` alone: a slow start (``npx -y``) is
never the call's TIMEOUT, a failed one is its EXECUTION_ERROR (a fault
cell's probe passes it on, even when the fault wraps the handler). Its
``needed`` (asked on the calling thread) says False while the world's
server runs, which spares each later call the hand-off to a worker.

In a directory world the server's process is started from a handler run,
so the world's ``ChildProcesses`` starts it (the recorded time, the
recorded root mounted, killed with everything it started when the world
ends); the server's threads are marked as the world's
(``probes.serving_the_world``), not as threads a handler left running.
A server that died (``process_killed``, a crash) is started again by the
next call in its world.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...capabilities import Risk
from ...registry import Handler, PathAccess, ToolSpec
from ..definitions.mcp import from_mcp, tool_wire
from ..definitions.spec import Paths
from ..errors import BridgeError
from .mcp_results import MCPToolError, call_tool_outcome
from .mcp_stdio_server import KILL_AFTER_SECONDS as KILL_AFTER_SECONDS  # callers read it here
from .mcp_stdio_server import MCPServerDied as MCPServerDied
from .mcp_stdio_server import StdioServer as StdioServer

WORKSPACE = "{workspace}"
"""The world's root, in the command, its environment and working directory."""

STARTUP_SECONDS = 30.0
"""How long a server may take to answer ``initialize``."""

PREPARE_MARGIN_SECONDS = 10.0
"""Beyond ``startup_timeout``, the time to spawn a server (or kill it)."""


class StdioServers:
    """The servers of one ``from_mcp_command``: one per workspace root."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        startup_timeout: float,
    ) -> None:
        self.command = tuple(command)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.startup_timeout = startup_timeout
        self.label = " ".join(self.command)
        self._lock = threading.Lock()
        self._servers: dict[str, StdioServer] = {}

    def start(self, root: str) -> StdioServer:
        """A new server with ``{workspace}`` spelt as ``root``."""
        return StdioServer(
            [_spelt(part, root) for part in self.command],
            env={key: _spelt(value, root) for key, value in (self.env or {}).items()},
            cwd=_spelt(self.cwd, root) if self.cwd is not None else None,
            startup_timeout=self.startup_timeout,
            label=self.label,
        ).start()

    def running(self, root: str) -> bool:
        """Whether ``root``'s world has a running server as the calling
        thread sees it (``of`` would return it without starting one)."""
        with self._lock:
            server = self._servers.get(_key(root))
        return server is not None and not server.closed.is_set()

    def of(self, root: str) -> StdioServer:
        """The running server of ``root``'s world as the calling thread sees
        it (its mount namespace: a full-disk fault mounts one for the
        handler's thread), started (again) if needed; a forked process
        (process isolation) gets its own, as it has no loop thread."""
        key = _key(root)
        with self._lock:
            server = self._servers.get(key)
            if server is not None and server.closed.is_set():
                server.stop()
                server = None
            if server is None:
                for gone in [k for k in self._servers if not os.path.isdir(k.partition("\0")[0])]:
                    self._servers.pop(gone).stop()  # its world ended: nothing will call it again
                server = self._servers[key] = self.start(root)
            return server

    def handler(self, name: str) -> Handler:
        """The handler sending a call to ``name`` on its world's server."""
        return _CommandTool(self, name)


class _CommandTool:
    """A tool of a server started as a command: ``prepare`` (run before the
    deadline starts) starts its world's server; the call talks to it."""

    def __init__(self, servers: StdioServers, name: str) -> None:
        self.servers = servers
        self.name = name
        self.__name__ = f"mcp_{name}"

        def prepare(ctx: Any) -> None:
            if not _cancelled(ctx):
                self.server(ctx)

        def needed(ctx: Any) -> bool:
            return not _cancelled(ctx) and not servers.running(os.fspath(ctx.workspace.root))

        # The runtime's bound on it: the start-up timeout, and time to spawn and kill.
        prepare.__dict__["timeout_seconds"] = servers.startup_timeout + PREPARE_MARGIN_SECONDS
        # Checked on the calling thread: a running server spares the hand-off
        # to a worker (if it dies meanwhile, the call starts it again).
        prepare.__dict__["needed"] = needed
        self.prepare = prepare

    def server(self, ctx: Any) -> StdioServer:
        """The running server of the call's world, started when none runs."""
        try:
            return self.servers.of(os.fspath(ctx.workspace.root))
        except BridgeError as exc:
            raise MCPServerDied(str(exc)) from None

    def __call__(self, ctx: Any, **arguments: Any) -> Any:
        cancelled = getattr(ctx, "cancelled", None)
        if cancelled is not None and cancelled.is_set():  # the deadline passed already
            raise MCPServerDied(f"MCP server {self.servers.label}: the call's deadline passed")
        wire = self.server(ctx).call(self.name, arguments, cancelled)
        ok, data, message = call_tool_outcome(wire)
        if not ok:
            raise MCPToolError(message or "the tool reported an error")
        return data


def from_mcp_command(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    risks: Mapping[str, Risk | str] | None = None,
    paths: Paths | None = None,
    trust_annotations: bool = True,
    default_risk: Risk | str = Risk.DANGEROUS,
    startup_timeout: float = STARTUP_SECONDS,
    tools: Sequence[str] | None = None,
    list_in: str | os.PathLike[str] | None = None,
    transport: Callable[..., StdioServers] = StdioServers,  # mcp_http's servers
) -> list[ToolSpec]:
    """See ``guards.mcp_server.from_mcp_command``."""
    if isinstance(command, (str, bytes)) or not command:
        raise BridgeError("from_mcp_command: the command is a list of its words, not empty")
    command, cwd = _pinned(command, cwd)
    servers = transport(command, env=env, cwd=cwd, startup_timeout=startup_timeout)
    program = servers.command[0]
    if WORKSPACE not in program and shutil.which(program) is None and not os.path.exists(program):
        raise BridgeError(f"MCP server {servers.label} cannot be started: command not found")
    if list_in is not None and not os.path.isdir(list_in):
        raise BridgeError(f"MCP server {servers.label}: list_in {list_in!r} is not a directory")
    listing_root = tempfile.mkdtemp(prefix="toolguard-mcp-list-") if list_in is None else None
    try:
        server = servers.start(listing_root or os.path.abspath(os.fspath(list_in or ".")))
        try:
            listed = server.list_tools()
        finally:
            server.stop()
    finally:
        if listing_root is not None:
            shutil.rmtree(listing_root, ignore_errors=True)
    wires = [tool_wire(tool) for tool in listed]
    names = [str(wire.get("name")) for wire in wires if isinstance(wire, Mapping)]
    chosen = [wire for wire in wires if tools is None or wire.get("name") in tools]
    specs = from_mcp(
        chosen,
        handlers={name: servers.handler(name) for name in names},
        paths=paths,
        default_risk=default_risk,
        trust_annotations=trust_annotations,
        risks=risks,
    )
    return [_in_its_workspace(dataclasses.replace(spec, world="directory")) for spec in specs]


def _pinned(command: Sequence[str], cwd: str | None) -> tuple[list[str], str | None]:
    """``command`` and ``cwd`` with what they name relative to the caller's
    working directory spelt absolute: a world moves the working directory
    into itself while it runs, and a server started there must still find
    ``servers/x.js``. Pinned: a relative ``cwd``; with no ``cwd``, a program
    spelt with a ``/`` and any other word naming an existing file. Left as
    given: words holding ``{workspace}``, options, bare program names
    (``node``: found on ``PATH``) and words naming directories (``.`` for
    ``--repository .`` means the server's own directory)."""
    if cwd is not None:
        return list(command), cwd if WORKSPACE in cwd else os.path.abspath(cwd)

    def pin(word: str, program: bool) -> str:
        if WORKSPACE in word or os.path.isabs(word) or word.startswith("-"):
            return word
        if (program and "/" in word) or (not program and os.path.isfile(word)):
            return os.path.abspath(word)
        return word

    return [pin(word, index == 0) for index, word in enumerate(command)], None


def _in_its_workspace(spec: ToolSpec) -> ToolSpec:
    """A tool that may change files and declares no path may change any
    file of its workspace (``PathAccess(".", "write")``: the session's write
    roots must hold the workspace): the server is started for that
    workspace. The boundary checks no argument of it, so escapes reach the
    server, and only what it reached or changed outside is held against
    it: the server author's view (``paths=None``)."""
    if spec.risk is Risk.READ or spec.paths:
        return spec
    return dataclasses.replace(spec, paths=(PathAccess(".", "write"),))


# -- helpers ----------------------------------------------------------------------


def _key(root: str) -> str:
    """A server's key: its root, the calling thread's mount namespace and this process."""
    return f"{root}\0{_mount_namespace()}\0{os.getpid()}"


def _cancelled(ctx: Any) -> bool:
    cancelled = getattr(ctx, "cancelled", None)
    return cancelled is not None and bool(cancelled.is_set())


def _spelt(text: str, root: str) -> str:
    return text.replace(WORKSPACE, root)


def _mount_namespace() -> str:
    """The calling thread's mount namespace (a private one is per thread)."""
    try:
        return os.readlink(f"/proc/self/task/{threading.get_native_id()}/ns/mnt")
    except OSError:
        return ""
