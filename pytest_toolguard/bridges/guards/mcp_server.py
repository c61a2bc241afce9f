"""Live MCP servers behind our executor: each call goes through our
pipeline first, then to the server.

``from_mcp_server(server)`` wraps a live in-process server (the ``mcp``
SDK's ``MCPServer``, v1's ``FastMCP``, the ``fastmcp`` package's
``FastMCP``: anything with ``await list_tools()`` and ``await
call_tool(name, arguments)``; and v1's low-level ``Server``, whose
``list_tools``/``call_tool`` are decorators, through the request handlers
they registered): each call goes through our pipeline first, then to the
server's own ``call_tool``. ``call_tool_outcome`` maps the
``CallToolResult`` (v1's or v2's): ``isError`` is a failure whose message
is the text blocks, ``structuredContent`` is the data (else the text, else
the content blocks).

``from_mcp_command(command)`` wraps a server started as a command (any
language), spoken to over stdio (``bridges.guards.mcp_stdio``).

``from_mcp_http(command)`` does the same over Streamable HTTP, for a
server the command starts on 127.0.0.1 (``bridges.guards.mcp_http``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...capabilities import Risk
from ...registry import Handler, ToolSpec, WorldKind, checked_world
from ..definitions.mcp import spec_from_wire, tool_wire
from ..definitions.spec import Paths
from ..errors import BridgeError, BridgeWarning, warn
from .mcp_results import MCPToolError, call_tool_outcome, result_wire

if TYPE_CHECKING:
    from .mcp_http import from_mcp_http as from_mcp_http


class RequestHandlerServer:
    """A v1 low-level ``Server`` seen as ``list_tools``/``call_tool``
    coroutines. v1's ``@server.list_tools()`` and ``@server.call_tool()``
    register handlers in ``server.request_handlers``, keyed by the request
    types: those handlers are what the SDK's own session dispatches to
    (input validation against the listed schema, the result's
    normalisation, an exception as an ``isError`` result), so calling them
    keeps the server's behaviour without a session. ``request_context`` is
    not set: a tool that reads it fails as it would outside a request."""

    def __init__(self, server: Any) -> None:
        handlers = getattr(server, "request_handlers", None)
        by_name = (
            {getattr(key, "__name__", None): (key, handler) for key, handler in handlers.items()}
            if isinstance(handlers, Mapping)
            else {}
        )
        if "ListToolsRequest" not in by_name or "CallToolRequest" not in by_name:
            raise BridgeError(
                f"{type(server).__name__} registers no list_tools and call_tool handlers "
                "(decorate them with @server.list_tools() and @server.call_tool())"
            )
        self._list = by_name["ListToolsRequest"]
        self._call = by_name["CallToolRequest"]

    @staticmethod
    def applies(server: Any) -> bool:
        """Whether ``server`` is a low-level server: ``list_tools`` is a
        decorator factory next to a table of request handlers."""
        return isinstance(getattr(server, "request_handlers", None), Mapping) and not (
            inspect.iscoroutinefunction(getattr(server, "list_tools", None))
        )

    async def list_tools(self) -> list[Any]:
        request_type, handler = self._list
        listed = _root(await handler(request_type.model_validate({"method": "tools/list"})))
        return list(getattr(listed, "tools", None) or ())

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> Any:
        request_type, handler = self._call
        request = request_type.model_validate(
            {"method": "tools/call", "params": {"name": name, "arguments": dict(arguments)}}
        )
        return _root(await handler(request))


def _root(value: Any) -> Any:
    """A v1 ``ServerResult`` unwrapped (a pydantic ``RootModel``)."""
    return getattr(value, "root", value)


def mcp_server_view(server: Any) -> Any:
    """``server`` as an object with ``await list_tools()`` and ``await
    call_tool(name, arguments)``: itself, or a v1 low-level server through
    ``RequestHandlerServer``. ``BridgeError`` for anything else."""
    if isinstance(server, type):
        raise BridgeError(f"{server.__name__} is a class, not a server: pass an instance")
    if RequestHandlerServer.applies(server):
        return RequestHandlerServer(server)
    if not (
        callable(getattr(server, "list_tools", None))
        and callable(getattr(server, "call_tool", None))
    ):
        raise BridgeError(
            f"{type(server).__name__} is not an MCP server (it needs async list_tools() and "
            "call_tool(name, arguments))"
        )
    return server


async def _awaited(value: Any, server: Any, method: str) -> Any:
    """``value`` awaited; ``BridgeError`` naming the server's method when it
    returned something that cannot be awaited (a decorator factory, a
    plain value), never Python's ``TypeError``."""
    if not inspect.isawaitable(value):
        raise BridgeError(
            f"{type(server).__name__}.{method}() returned {type(value).__name__}, not an "
            "awaitable: not an MCP server from_mcp_server can wrap"
        )
    return await value


def server_tool_handler(server: Any, name: str) -> Handler:
    """The handler that sends a call to ``server.call_tool(name, ...)`` and
    maps its result: data on success, ``MCPToolError`` (its text) on
    ``isError``. An exception the server raises is its error result, as
    its own JSON-RPC handler would answer."""

    async def call_server_tool(ctx: Any, **arguments: Any) -> Any:
        try:
            answer = server.call_tool(name, arguments)
            wire = result_wire(await _awaited(answer, server, "call_tool"))
        except BridgeError:
            raise
        except Exception as exc:  # the SDKs raise ToolError for failed calls
            wire = {"content": [{"type": "text", "text": str(exc)}], "isError": True}
        ok, data, message = call_tool_outcome(wire)
        if not ok:
            raise MCPToolError(message or "the tool reported an error")
        return data

    call_server_tool.__name__ = f"mcp_{name}"
    return call_server_tool


async def afrom_mcp_server(
    server: Any,
    *,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.DANGEROUS,
    trust_annotations: bool = True,
    risks: Mapping[str, Risk | str] | None = None,
    tools: Sequence[str] | None = None,
    world: WorldKind | None = None,
) -> list[ToolSpec]:
    """``from_mcp_server`` for async code."""
    chosen = None if world is None else checked_world(world, "from_mcp_server(world=...)")
    server = mcp_server_view(server)
    try:
        answer = server.list_tools()
    except TypeError as exc:  # a decorator factory wanting arguments, a method of another shape
        raise BridgeError(f"{type(server).__name__}.list_tools() cannot be called: {exc}") from exc
    listed = _root(await _awaited(answer, server, "list_tools"))
    if not isinstance(listed, Sequence):  # a ListToolsResult rather than its list
        listed = getattr(listed, "tools", None)
    if not isinstance(listed, Sequence) or isinstance(listed, (str, bytes)):
        raise BridgeError(
            f"{type(server).__name__}.list_tools() gave {type(listed).__name__}, "
            "not a list of tools"
        )
    specs = []
    for definition in listed:
        wire = tool_wire(definition)
        if not isinstance(wire, Mapping):
            raise BridgeError(f"MCP tool listed as {type(definition).__name__}, not an object")
        name = wire.get("name")
        if tools is not None and name not in tools:
            continue
        spec = spec_from_wire(
            wire,
            server_tool_handler(server, str(name)),
            paths=paths,
            default_risk=Risk(default_risk),
            trust_annotations=trust_annotations,
            risks=risks,
        )
        specs.append(spec if chosen is None else dataclasses.replace(spec, world=chosen))
    return specs


def from_mcp_server(
    server: Any,
    *,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.DANGEROUS,
    trust_annotations: bool = True,
    risks: Mapping[str, Risk | str] | None = None,
    tools: Sequence[str] | None = None,
    world: WorldKind | None = None,
) -> list[ToolSpec]:
    """``ToolSpec``s for every tool of a live in-process MCP server (or the
    named ``tools``), each running the server's own ``call_tool`` after our
    pipeline. Risks and warnings as for ``from_mcp``. ``world`` is the
    world its tools need (``"directory"`` for a server whose tools reach
    files through C code or other processes; default: the registry's).
    From async code, use ``await afrom_mcp_server(...)``. ``BridgeError``
    for an object that is not such a server; ``ValueError`` for an unknown
    ``world``."""
    if world is not None:
        checked_world(world, "from_mcp_server(world=...)")
    mcp_server_view(server)  # refuses before an event loop is started
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # Inside asyncio.run the first frame outside this package is the event
        # loop's: the warnings are caught there and said again from here, so
        # they point at the caller's line.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            specs = asyncio.run(
                afrom_mcp_server(
                    server,
                    paths=paths,
                    default_risk=default_risk,
                    trust_annotations=trust_annotations,
                    risks=risks,
                    tools=tools,
                    world=world,
                )
            )
        for said in caught:
            if issubclass(said.category, BridgeWarning):
                warn(str(said.message))
            else:
                warnings.warn_explicit(said.message, said.category, said.filename, said.lineno)
        return specs
    raise BridgeError("from_mcp_server() called inside an event loop: await afrom_mcp_server()")


def from_mcp_command(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    risks: Mapping[str, Risk | str] | None = None,
    paths: Paths | None = None,
    trust_annotations: bool = True,
    default_risk: Risk | str = Risk.DANGEROUS,
    startup_timeout: float = 30.0,
    tools: Sequence[str] | None = None,
    list_in: str | os.PathLike[str] | None = None,
) -> list[ToolSpec]:
    """``ToolSpec``s for the tools of the MCP server ``command`` starts (a
    list of words, any language), spoken to over stdio with the ``mcp``
    SDK's client; mapped as ``from_mcp_server``'s, each with
    ``world="directory"``. ``{workspace}`` in ``command``, ``env``
    (added to the SDK's default environment) and ``cwd`` is the root of
    the world a call runs in. One server per world, started for its first
    call (before that call's deadline starts: the start is bounded by
    ``startup_timeout`` alone) and again after it died; at a call's deadline the request is
    cancelled (``notifications/cancelled``), the next call goes to a new
    server, and the old one is killed with its children a second later.
    ``BridgeError`` (naming the command, what it wrote, its stderr's end)
    for a server that does not start, exits, or does not speak MCP within
    ``startup_timeout`` seconds. The tools are listed once, with
    ``{workspace}`` an empty temporary directory, or ``list_in`` (used as
    it is) for a server that needs one it can serve (a git repository)."""
    from .mcp_stdio import from_mcp_command as started  # the SDK only when asked

    return started(
        command,
        env=env,
        cwd=cwd,
        risks=risks,
        paths=paths,
        trust_annotations=trust_annotations,
        default_risk=default_risk,
        startup_timeout=startup_timeout,
        tools=tools,
        list_in=list_in,
    )


def __getattr__(name: str) -> Any:
    """``from_mcp_http``, imported when first asked for (it needs the SDK)."""
    if name == "from_mcp_http":
        from .mcp_http import from_mcp_http

        return from_mcp_http
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def restoring_process_state() -> Iterator[None]:
    """Construct a server inside this block: what servers are known to
    change at construction (``os.environ``, the working directory, the root
    logger's handlers and level: ``MCPServer`` calls
    ``logging.basicConfig``) is put back when the block ends."""
    environ = dict(os.environ)
    cwd = os.getcwd()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        root.handlers[:] = handlers
        root.setLevel(level)
