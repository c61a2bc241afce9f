"""One MCP server process, spoken to over stdio with the ``mcp`` SDK's own
client (``stdio_client`` + ``ClientSession``) on an event loop of its own.

``StdioServer`` starts the process (through the world's ``ChildProcesses``
when started from a handler run), relays calls to it, sends
``notifications/cancelled`` at a call's deadline and kills the server and
everything it started (found by ``MARKER``) a bound later. Every running
server is stopped at exit. ``mcp_stdio`` keeps one per world.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, TextIO, cast

import anyio
import anyio.abc
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ...errors import ToolguardError
from ...harness.probes import file_serving_the_world, serving_the_world
from ..errors import BridgeError
from .mcp_results import result_wire

KILL_AFTER_SECONDS = 1.0
"""After a call's deadline (``notifications/cancelled`` sent), how long the
server may go on before it is killed with its children."""

STDERR_TAIL = 4096  # the last bytes of a server's stderr an error shows
FIRST_BYTES = 200  # the bytes of what a server wrote instead of MCP an error shows

MARKER = "TOOLGUARD_MCP_SERVER"
"""The environment variable each server gets (a fresh id): what it starts
inherits it, so the server's whole tree can be found and killed."""

_WATCH_SECONDS = 0.02

LOOP_THREAD = "toolguard-mcp-stdio"  # each server's event loop thread


class _OnOurLoops(logging.Filter):
    """Drops what the SDK's stdio client logs on our loop threads: a
    traceback per line that is not JSON-RPC (the relay keeps the first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != LOOP_THREAD


logging.getLogger("mcp.client.stdio").addFilter(_OnOurLoops())


class MCPServerDied(ToolguardError):
    """The server's process ended (or was killed) during a call."""


class StdioServer:
    """One running server: its process (through ``stdio_client``), its
    ``ClientSession``, and the event loop thread they live on. ``start``
    raises ``BridgeError`` when the server does not become an MCP server."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        startup_timeout: float,
        label: str,
    ) -> None:
        self.label = label
        self.marker = uuid.uuid4().hex
        self._params = StdioServerParameters(
            command=command[0],
            args=list(command[1:]),
            env={**(env or {}), MARKER: self.marker},
            cwd=cwd,
        )
        self._startup_timeout = startup_timeout
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _run
        file_serving_the_world(self._stderr)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=LOOP_THREAD, daemon=True)
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._first_garbage: str | None = None
        self._flight_lock = threading.Lock()
        self._in_flight: dict[concurrent.futures.Future[Any], threading.Event] = {}
        self._retired = False
        self._tail_at_end: str | None = None
        self.closed = threading.Event()
        """Set once the server's connection ended (it exited, was killed or stopped)."""

    # -- life

    def start(self) -> StdioServer:
        before = set(threading.enumerate())
        serving_the_world(self._thread)
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._thread.start()
        try:
            self._ready.result()
        except BridgeError:
            self._thread.join(5.0)
            raise
        finally:
            # asyncio's child watcher may wait for the process on a thread of its own.
            for thread in set(threading.enumerate()) - before:
                if "waitpid" in thread.name:  # asyncio-waitpid-N
                    serving_the_world(thread)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()
            if self._retired:  # its loop ended before the bound: killed now
                self.kill()
            self._tail_at_end = self._raw_tail()  # a call may still ask for it
            self._stderr.close()
            with _LIVE_LOCK:
                _LIVE.discard(self)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with self.connect() as (read, write), anyio.create_task_group() as group:
                group.start_soon(self._watcher)
                async with ClientSession(_Watched(self, read), write) as session:
                    await self._initialize(session)
                    self._session = session
                    self._ready.set_result(None)
                    await self._stop.wait()
                group.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - every way to fail is said as one error
            if not self._ready.done():
                self._ready.set_exception(self._not_started(exc))
        finally:
            self.closed.set()
            if not self._ready.done():
                self._ready.set_exception(self._not_started(None))

    def connect(self) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
        """The transport's (read, write) streams while entered (``mcp_http`` overrides it)."""
        return stdio_client(self._params, errlog=cast(TextIO, self._stderr))  # has a descriptor

    def _ended(self) -> None:
        """What the server writes ended (or is not MCP): the server is closed."""
        self.closed.set()
        if self._stop is not None:
            self._stop.set()

    async def _initialize(self, session: ClientSession) -> None:
        with anyio.fail_after(self._startup_timeout):
            await session.initialize()

    def _not_started(self, exc: BaseException | None) -> BridgeError:
        exc = _leaf(exc)
        if self._first_garbage is not None:
            why = f"does not speak MCP on stdout; it wrote {self._first_garbage!r}"
        elif isinstance(exc, TimeoutError):
            why = f"did not answer initialize within {self._startup_timeout:g} s"
        elif isinstance(exc, OSError):
            why = f"cannot be started: {exc.strerror or exc}"
        elif self.closed.is_set() or exc is None:
            why = "exited before answering initialize"
        else:
            why = f"failed to start: {type(exc).__name__}: {exc}"
        self.kill()
        tail = self.stderr_tail()
        return BridgeError(
            " ".join(f"MCP server {self.label} {why}".split())
            + (f"; its stderr ends: {tail}" if tail else "")
        )

    def stop(self) -> None:
        """End the session and the server (its stdin closed, then killed)."""
        if self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._stop.set)
        self.kill()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10.0)

    def kill(self) -> None:
        """``SIGKILL`` to every process carrying this server's marker and to
        their process groups: the server and what it started."""
        wanted = f"{MARKER}={self.marker}".encode()
        for pid in _pids_with(wanted):
            with contextlib.suppress(OSError):
                group = os.getpgid(pid)
                if group != os.getpgrp():
                    os.killpg(group, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def stderr_tail(self) -> str:
        """The last ``STDERR_TAIL`` bytes of the server's stderr on one line
        (`` | `` between lines); kept when the loop ends (the file closes)."""
        text = self._tail_at_end if self._tail_at_end is not None else self._raw_tail()
        return " | ".join(line.strip() for line in text.splitlines() if line.strip())

    def _raw_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            start = max(0, size - STDERR_TAIL)
            return os.pread(fd, size - start, start).decode("utf-8", "replace")
        return ""

    # -- calls

    def submit(
        self, make: Callable[[ClientSession], Any], cancelled: threading.Event | None = None
    ) -> Any:
        """``await make(session)`` on the server's loop, from any thread.
        When ``cancelled`` is set first (the call's deadline passed), or the
        wait is interrupted (inline isolation's deadline), the request is
        abandoned (the SDK sends ``notifications/cancelled``) and the
        server retired (``_retire``)."""
        session = self._session
        if session is None or self.closed.is_set():
            raise MCPServerDied(f"MCP server {self.label} is not running")
        try:
            future = asyncio.run_coroutine_threadsafe(make(session), self._loop)
        except RuntimeError as exc:  # its loop ended
            raise MCPServerDied(f"MCP server {self.label} is not running") from exc
        if cancelled is not None:
            self._watch(future, cancelled)
        try:
            return future.result()
        except concurrent.futures.CancelledError as exc:
            if cancelled is not None and cancelled.is_set():
                raise MCPServerDied(
                    f"MCP server {self.label}: the call was cancelled at its deadline"
                ) from None
            raise self.died() from exc
        except BaseException:
            if not future.done():  # interrupted while waiting, not the call's own error
                future.cancel()
                self._abandoned()
            raise

    def _watch(self, future: concurrent.futures.Future[Any], cancelled: threading.Event) -> None:
        """Cancel ``future`` once ``cancelled`` is set (checked by one task
        per server every ``_WATCH_SECONDS``: waking the loop for each call
        cost more than the checks)."""
        with self._flight_lock:
            self._in_flight[future] = cancelled
        future.add_done_callback(self._landed)

    def _landed(self, future: concurrent.futures.Future[Any]) -> None:
        with self._flight_lock:
            self._in_flight.pop(future, None)

    async def _watcher(self) -> None:
        while True:
            with self._flight_lock:
                flights = list(self._in_flight.items())
            for future, cancelled in flights:
                if cancelled.is_set() and future.cancel():
                    self._abandoned()
            await asyncio.sleep(_WATCH_SECONDS)

    def _abandoned(self) -> None:
        retiring = self._retire()
        try:
            asyncio.run_coroutine_threadsafe(retiring, self._loop)
        except RuntimeError:  # its loop ended: the server with it
            retiring.close()

    async def _retire(self) -> None:
        """After an abandoned call: no new call comes here (the next one
        starts a new server), and ``KILL_AFTER_SECONDS`` later the server
        is killed with its children, whatever it is doing (its work on
        the call may go on after a cancellation: nothing shows it ended)."""
        self.closed.set()
        self._retired = True
        await anyio.sleep(KILL_AFTER_SECONDS)
        self.kill()

    def died(self) -> MCPServerDied:
        tail = self.stderr_tail()
        return MCPServerDied(
            f"MCP server {self.label} exited during the call"
            + (f"; its stderr ends: {tail[-500:]}" if tail else "")
        )

    def list_tools(self) -> list[Any]:
        async def listed(session: ClientSession) -> list[Any]:
            tools: list[Any] = []
            cursor: str | None = None
            while True:
                params = None if cursor is None else {"cursor": cursor}
                page = await session.list_tools(params=params)  # type: ignore[arg-type]
                tools.extend(page.tools)
                cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
                if not cursor:
                    return tools

        return list(self.submit(listed))

    def call(
        self, name: str, arguments: Mapping[str, Any], cancelled: threading.Event | None
    ) -> dict[str, Any]:
        """The ``CallToolResult`` wire dict of one call (see ``submit``)."""

        async def called(session: ClientSession) -> Any:
            return await session.call_tool(name, dict(arguments))

        try:
            result = self.submit(called, cancelled)
        except MCPServerDied:
            raise
        except Exception as exc:
            if self.closed.is_set() or _is_closed(exc):
                raise self.died() from exc
            raise
        return result_wire(result)


class _Watched(anyio.abc.ObjectReceiveStream[Any]):
    """What the server writes, as the session reads it: the first line that
    is not JSON-RPC kept for the error (before ``initialize`` answered, it
    ends the stream: not MCP); the end of stdout closes the server. Read in
    the session's own receive, not relayed by a task of ours: a relay cost
    a task switch and a stream hand-off per message."""

    def __init__(self, server: StdioServer, read: Any) -> None:
        self._server = server
        self._read = read

    @property
    def last_context(self) -> Any:
        """The sender's context, which the SDK's dispatcher may read."""
        return getattr(self._read, "last_context", None)

    async def receive(self) -> Any:
        server = self._server
        try:
            item = await self._read.receive()
        except Exception:  # its end, or closed: nothing more comes
            server._ended()
            raise
        if isinstance(item, Exception) and server._first_garbage is None:
            server._first_garbage = _input_of(item)
            if not server._ready.done():  # garbage before initialize: not MCP
                server._ended()
                raise anyio.EndOfStream
        return item

    async def aclose(self) -> None:
        await self._read.aclose()


_LIVE: set[StdioServer] = set()
"""Every server whose loop runs (its registry may be collected first)."""
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all() -> None:
    """At exit, every server still running is stopped with what it started:
    a blocked one never sees its stdin close, nor a retired one its bound."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


def _input_of(exc: Exception) -> str:
    """The raw line a parse error was about (pydantic keeps it), cut short."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            for error in errors():
                value = error.get("input")
                if isinstance(value, (str, bytes)):
                    text = value if isinstance(value, str) else value.decode("utf-8", "replace")
                    return text[:FIRST_BYTES]
    return str(exc)[:FIRST_BYTES]


def _leaf(exc: BaseException | None) -> BaseException | None:
    """The first error an exception group (a task group's) holds, itself otherwise."""
    inner = getattr(exc, "exceptions", None)
    while inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def _is_closed(exc: BaseException) -> bool:
    """Whether the SDK's error says the connection closed."""
    return "closed" in str(exc).lower() or isinstance(
        exc, (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
    )


def _pids_with(entry: bytes) -> list[int]:
    """The processes (never this one) whose environment holds ``entry``."""
    me = os.getpid()
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        with contextlib.suppress(OSError), open(f"/proc/{name}/environ", "rb") as handle:
            if entry in handle.read().split(b"\0"):
                found.append(int(name))
    return found


if sys.platform == "win32":  # pragma: no cover - /proc and process groups are POSIX
    raise ImportError("from_mcp_command needs a POSIX system")
