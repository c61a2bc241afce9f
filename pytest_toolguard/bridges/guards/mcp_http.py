"""MCP servers started as commands and spoken to over Streamable HTTP on the
loopback, with the ``mcp`` SDK's own client (``streamable_http_client`` +
``ClientSession``).

``from_mcp_http`` (re-exported by ``guards.mcp_server``) is
``from_mcp_command`` with another transport: the same servers per world (``HttpServers``, a
``StdioServers``), the same lifecycle (started from the world's first call
through the world's ``ChildProcesses``, killed with it, retired at a
deadline and killed a bound later, started again after it died), the same
mapping and the same start-up errors. What differs is ``HttpServer.connect``:
each server gets a free port on 127.0.0.1 (``{port}`` in the command, its
environment, its working directory and the URL), its stdout and stderr go
to the file an error shows the end of, the client connects once the port
accepts, and the server's exit ends the connection (a stdio server's end
of stdout does that).

The client's requests carry the protocol, not the tool's traffic: they
bypass vcrpy (``replay.http`` patches every HTTP transport of the process
while a tool that may reach the network runs), so they are neither
recorded in a cassette nor served from one, and ``trust_env`` is off so a
proxy set in the environment never carries them off the machine.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import socket
import subprocess
import time
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
from mcp.client import streamable_http
from mcp.client.stdio import get_default_environment

from ...capabilities import Risk
from ...harness.transports import carrying
from ...registry import ToolSpec
from ..definitions.spec import Paths
from ..errors import BridgeError
from .mcp_stdio import (
    STARTUP_SECONDS,
    WORKSPACE,
    StdioServers,
    from_mcp_command,
)
from .mcp_stdio_server import MCPServerDied, StdioServer

PORT = "{port}"
"""Spelt as the port chosen for a server (free on 127.0.0.1 when chosen), in
the command, its environment, its working directory and the URL."""

URL = "http://127.0.0.1:{port}/mcp"
"""Where the server answers unless told (the SDK servers' default path)."""

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

EXIT_WAIT_SECONDS = 1.0
"""After a call failed in the transport, how long to wait for the server's
process to end before the failure is said as the call's own."""

_POLL_SECONDS = 0.01

CONNECTION_CLOSED = -32000
"""The JSON-RPC code the SDK's client gives a request whose connection was lost."""

# The SDK's HTTP package: httpx2 from mcp 2, httpx before.
_http: Any = getattr(streamable_http, "httpx2", None) or getattr(streamable_http, "httpx")  # noqa: B009
_unrecorded_send = _http.AsyncHTTPTransport.handle_async_request


class _UnrecordedTransport(_http.AsyncHTTPTransport):  # type: ignore[misc]
    """The SDK's HTTP transport as it was when this module was imported:
    vcrpy patches the class it derives from, never this one."""

    handle_async_request = _unrecorded_send


class HttpServer(StdioServer):
    """One server reached over Streamable HTTP at ``url``."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        url: str,
        env: Mapping[str, str] | None,
        cwd: str | None,
        startup_timeout: float,
        label: str,
    ) -> None:
        super().__init__(command, env=env, cwd=cwd, startup_timeout=startup_timeout, label=label)
        self.url = url
        self._command = list(command)
        self._cwd = cwd
        self._startup = startup_timeout
        self._process: Any = None
        self._answered_alive = False
        """Whether the server still ran when its session ended (it was
        listening: what it answered was not MCP)."""

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[tuple[Any, Any]]:
        env = {**get_default_environment(), **(self._params.env or {})}
        process = await anyio.open_process(
            self._command,
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            env=env,
            cwd=self._cwd,
            start_new_session=True,
        )
        self._process = process
        host, port = _address(self.url)
        try:
            with carrying(host, port):
                async with anyio.create_task_group() as group:
                    await self._listening(process)
                    group.start_soon(self._ends_with, process, group.cancel_scope)
                    async with _streams(self.url) as streams:
                        try:
                            yield streams[0], streams[1]
                        finally:
                            self._answered_alive = process.returncode is None
                    group.cancel_scope.cancel()
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await process.wait()

    async def _listening(self, process: Any) -> None:
        """Until the server's port accepts a connection; its exit before
        that is the server's failure to start."""
        host, port = _address(self.url)
        with anyio.fail_after(self._startup):
            while True:
                if process.returncode is not None:
                    self.closed.set()
                    raise MCPServerDied(f"MCP server {self.label} exited")
                try:
                    stream = await anyio.connect_tcp(host, port)
                except OSError:
                    await anyio.sleep(_POLL_SECONDS)
                    continue
                await stream.aclose()
                return

    async def _ends_with(self, process: Any, scope: anyio.CancelScope) -> None:
        """When the server's process ends, so does its connection: no call
        goes to it again, and the session is left."""
        await process.wait()
        self.closed.set()
        scope.cancel()

    def _not_started(self, exc: BaseException | None) -> BridgeError:
        """A server that runs and answers, but not as an MCP server at its
        URL (another path, another protocol), is said so; the other ways
        not to start are a stdio server's."""
        error = _first_error(exc)
        if not self._answered_alive or error is None or isinstance(error, (TimeoutError, OSError)):
            return super()._not_started(exc)
        self.kill()
        tail = self.stderr_tail()
        why = f"does not speak MCP at {self.url}: {type(error).__name__}: {error}"
        return BridgeError(
            " ".join(f"MCP server {self.label} {why}".split())
            + (f"; its stderr ends: {tail}" if tail else "")
        )

    def call(self, name: str, arguments: Mapping[str, Any], cancelled: Any) -> dict[str, Any]:
        """As a stdio server's; a failure in the transport while the server's
        process ends (a request cut short by its death) is its death."""
        try:
            return super().call(name, arguments, cancelled)
        except MCPServerDied:
            raise
        except Exception as exc:
            if _in_transport(exc) and self._exits_soon():
                raise self.died() from exc
            raise

    def _exits_soon(self) -> bool:
        process = self._process
        if process is None:
            return False
        deadline = time.monotonic() + EXIT_WAIT_SECONDS
        while process.returncode is None and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)
        return process.returncode is not None or self.closed.is_set()


class HttpServers(StdioServers):
    """The servers of one ``from_mcp_http``: one per workspace root, each
    on a port of its own."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        url: str,
        env: Mapping[str, str] | None,
        cwd: str | None,
        startup_timeout: float,
    ) -> None:
        super().__init__(command, env=env, cwd=cwd, startup_timeout=startup_timeout)
        self.url = url

    def start(self, root: str) -> StdioServer:
        port = str(free_port())

        def spelt(text: str) -> str:
            return text.replace(WORKSPACE, root).replace(PORT, port)

        return HttpServer(
            [spelt(part) for part in self.command],
            url=spelt(self.url),
            env={key: spelt(value) for key, value in (self.env or {}).items()},
            cwd=spelt(self.cwd) if self.cwd is not None else None,
            startup_timeout=self.startup_timeout,
            label=self.label,
        ).start()


def from_mcp_http(
    command: Sequence[str],
    *,
    url: str = URL,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    risks: Mapping[str, Risk | str] | None = None,
    paths: Paths | None = None,
    trust_annotations: bool = True,
    default_risk: Risk | str = Risk.DANGEROUS,
    startup_timeout: float = STARTUP_SECONDS,
    tools: Sequence[str] | None = None,
    list_in: str | os.PathLike[str] | None = None,
) -> list[ToolSpec]:
    """``ToolSpec``s for the tools of the MCP server ``command`` starts on the
    loopback, spoken to over Streamable HTTP at ``url`` with the ``mcp``
    SDK's client: ``from_mcp_command`` with another transport (the same
    mapping, servers per world, deadlines and start-up errors; a server
    that never listens on its port is silent). ``{port}`` in ``command``,
    ``env``, ``cwd`` and ``url`` is a port free on 127.0.0.1, chosen for
    each server; ``{workspace}`` is the root of the call's world;
    ``list_in``, where the server lists its tools, as ``from_mcp_command``'s.
    ``BridgeError`` for a ``url`` that is not ``http://`` on the loopback
    with a port."""
    if isinstance(command, (str, bytes)) or not command:
        raise BridgeError("from_mcp_http: the command is a list of its words, not empty")
    _address(url.replace(PORT, "1"))  # refused now, before anything runs
    return from_mcp_command(
        command,
        env=env,
        cwd=cwd,
        startup_timeout=startup_timeout,
        transport=functools.partial(HttpServers, url=url),
        risks=risks,
        paths=paths,
        trust_annotations=trust_annotations,
        default_risk=default_risk,
        tools=tools,
        list_in=list_in,
    )


def _in_transport(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the connection (the SDK's "connection
    closed" error, or the HTTP package's), not an error the server answered."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return code is None or code == CONNECTION_CLOSED


def _first_error(exc: BaseException | None) -> BaseException | None:
    """The first error an exception group (a task group's) holds, itself otherwise."""
    inner = getattr(exc, "exceptions", None)  # BaseExceptionGroup (3.11) or anyio's backport
    while inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's choice; the server binds
    it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _address(url: str) -> tuple[str, int]:
    """``url``'s host and port; ``BridgeError`` unless it is plain HTTP on the
    loopback (the test starts the server on this machine)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host in LOOPBACK or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not loopback or port is None:
        raise BridgeError(
            f"from_mcp_http: the url must be http://127.0.0.1:PORT/... (a server this test "
            f"starts on the loopback), not {url!r}"
        )
    return host, port


def _unrecorded_client(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
    """An HTTP client of the SDK's package whose requests vcrpy never sees
    and no proxy of the environment carries; the SDK's default timeouts."""
    return _http.AsyncClient(
        transport=_UnrecordedTransport(),
        headers=headers,
        timeout=timeout if timeout is not None else _http.Timeout(30.0, read=300.0),
        auth=auth,
        trust_env=False,
    )


@contextlib.asynccontextmanager
async def _streams(url: str) -> AsyncIterator[Any]:
    """The SDK's Streamable HTTP client's streams: ``streamable_http_client``
    (mcp 2, late 1.x), else 1.x's ``streamablehttp_client``. The session is
    not ended with a request: the server is killed instead."""
    modern = getattr(streamable_http, "streamable_http_client", None)
    if modern is not None:
        async with (
            _unrecorded_client() as client,
            modern(url, http_client=client, terminate_on_close=False) as streams,
        ):
            yield streams
        return
    legacy: Any = getattr(streamable_http, "streamablehttp_client")  # noqa: B009  # pragma: no cover
    async with legacy(  # pragma: no cover - mcp 1.x before streamable_http_client
        url, httpx_client_factory=_unrecorded_client, terminate_on_close=False
    ) as streams:
        yield streams
