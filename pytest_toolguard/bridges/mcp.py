"""MCP: tool definitions in, live servers wrapped, JSON-RPC logs read.

``from_mcp(tools)`` reads MCP ``Tool`` definitions (the wire form: ``name``,
``description``, ``inputSchema``, ``outputSchema``, ``annotations``) into
``ToolSpec``s. The risk comes from the annotations, with the spec's
defaults (``readOnlyHint`` false, ``destructiveHint`` true,
``openWorldHint`` true):

===========================  =========
annotations                  risk
===========================  =========
read-only, closed world      READ
read-only, open world        EXTERNAL
not read-only, destructive   DANGEROUS
not destructive, open world  EXTERNAL
otherwise                    WRITE
===========================  =========

A tool without annotations is DANGEROUS (``default_risk=``), and the spec
calls hints untrusted: ``trust_annotations=False`` gives every tool
``default_risk``. ``idempotentHint`` sets ``ToolSpec.idempotent``. A hint
that is not a boolean, or an annotation the spec does not define, is a
``BridgeWarning`` naming the tool and is read as the spec's default (never
as read-only).

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
language), spoken to over stdio (``bridges.mcp_stdio``).

``from_mcp_http(command)`` does the same over Streamable HTTP, for a
server the command starts on 127.0.0.1 (``bridges.mcp_http``).

``read_jsonrpc_log(text)`` reads a JSON-RPC log (one message per line, or
a JSON array): ``tools/call`` requests and their responses.
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

from ..capabilities import Risk
from ..errors import ToolguardError
from ..registry import Handler, ToolSpec, WorldKind, checked_world
from .definitions import BridgeError, BridgeWarning, Paths, as_list, build_spec, handler_for, warn
from .transcript import CallCollector, Transcript, TranscriptResult, json_records, text_of

if TYPE_CHECKING:
    from .mcp_http import from_mcp_http as from_mcp_http

ANNOTATION_DEFAULTS = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
"""The MCP spec's value of each hint when a tool's annotations omit it."""

KNOWN_ANNOTATIONS = frozenset(ANNOTATION_DEFAULTS) | {"title"}


class MCPToolError(ToolguardError):
    """An MCP tool answered ``isError: true``; the message is its text."""


def risk_from_annotations(
    annotations: Mapping[str, Any] | None, *, tool: str = "?", default_risk: Risk = Risk.DANGEROUS
) -> tuple[Risk, bool]:
    """The risk and idempotence MCP ``annotations`` give (the module's
    table); ``default_risk`` when there are none. Warns for values that are
    not booleans and for unknown keys, reading them as the defaults."""
    if not annotations:
        return Risk(default_risk), False
    hints = dict(ANNOTATION_DEFAULTS)
    for key, value in annotations.items():
        if key not in KNOWN_ANNOTATIONS:
            warn(f"MCP tool {tool}: unknown annotation {key!r} ignored")
        elif key != "title":
            if isinstance(value, bool):
                hints[key] = value
            elif value is not None:
                warn(
                    f"MCP tool {tool}: annotation {key}={value!r} is not a boolean; "
                    f"read as {ANNOTATION_DEFAULTS[key]}"
                )
    read_only = hints["readOnlyHint"]
    open_world = hints["openWorldHint"]
    destructive = hints["destructiveHint"] and not read_only
    if read_only:
        risk = Risk.EXTERNAL if open_world else Risk.READ
    elif destructive:
        risk = Risk.DANGEROUS
    elif open_world:
        risk = Risk.EXTERNAL
    else:
        risk = Risk.WRITE
    return risk, bool(hints["idempotentHint"])


def from_mcp(
    tools: Mapping[str, Any] | Sequence[Mapping[str, Any]] | Any,
    *,
    handlers: Mapping[str, Handler] | None = None,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.DANGEROUS,
    trust_annotations: bool = True,
    risks: Mapping[str, Risk | str] | None = None,
) -> list[ToolSpec]:
    """``ToolSpec``s from MCP tool definitions: one, a list, or a
    ``tools/list`` result (``{"tools": [...]}``); wire dicts or the SDK's
    ``Tool`` objects. ``handlers`` gives each tool its handler (without
    one a call fails saying so); ``paths`` its ``PathAccess``es; ``risks``
    overrides the risk of named tools. ``BridgeError`` names a definition
    that cannot be read."""
    if isinstance(tools, Mapping) and "tools" in tools and "name" not in tools:
        tools = tools["tools"]
    specs = []
    for index, definition in enumerate(as_list(tools)):
        wire = tool_wire(definition)
        if not isinstance(wire, Mapping):
            raise BridgeError(f"MCP tool {index + 1}: not an object ({type(definition).__name__})")
        name = wire.get("name")
        specs.append(
            _spec(
                wire,
                handler_for(str(name), handlers, lambda: None),
                paths=paths,
                default_risk=Risk(default_risk),
                trust_annotations=trust_annotations,
                risks=risks,
            )
        )
    return specs


def _spec(
    wire: Mapping[str, Any],
    handler: Handler | None,
    *,
    paths: Paths | None,
    default_risk: Risk,
    trust_annotations: bool,
    risks: Mapping[str, Risk | str] | None,
) -> ToolSpec:
    name = wire.get("name")
    annotations = wire.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        warn(f"MCP tool {name}: annotations are not an object; ignored")
        annotations = None
    if trust_annotations:
        risk, idempotent = risk_from_annotations(
            annotations, tool=str(name), default_risk=default_risk
        )
    else:
        risk = default_risk
        idempotent = bool((annotations or {}).get("idempotentHint") is True)
    if risks and name in risks:
        risk = Risk(risks[str(name)])
    output = wire.get("outputSchema")
    return build_spec(
        source="MCP tool",
        name=name,
        description=str(wire.get("description") or wire.get("title") or ""),
        input_schema=wire.get("inputSchema"),
        output_schema=output if isinstance(output, Mapping) else None,
        handler=handler,
        risk=risk,
        paths=paths,
        idempotent=idempotent,
        extra=wire,
    )


def tool_wire(definition: Any) -> Any:
    """An MCP tool definition as its wire dict (camelCase), from a dict, an
    ``mcp.types.Tool`` or a ``fastmcp`` tool."""
    if isinstance(definition, Mapping):
        return definition
    to_mcp_tool = getattr(definition, "to_mcp_tool", None)
    if callable(to_mcp_tool):  # fastmcp's own Tool objects
        definition = to_mcp_tool()
    return _wire(definition)


def _wire(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, mode="json", exclude_none=True)
    return value


# -- results ------------------------------------------------------------------


def result_wire(value: Any) -> dict[str, Any]:
    """What a server's ``call_tool`` returned, as a ``CallToolResult`` wire
    dict: an ``mcp`` ``CallToolResult``, a ``fastmcp`` ``ToolResult`` (its
    ``is_error``, ``content``, ``structured_content``), v1 ``FastMCP``'s
    content list, structured dict or ``(content, structured)`` pair."""
    if isinstance(value, Mapping) and ("content" in value or "isError" in value):
        return dict(value)
    dumped = _wire(value)  # an SDK's model whose wire form is a CallToolResult's (v1's, v2's)
    if (
        dumped is not value
        and isinstance(dumped, Mapping)
        and {"content", "isError"} <= set(dumped)
    ):
        return dict(dumped)
    if hasattr(value, "is_error") and hasattr(value, "content"):
        body: dict[str, Any] = {
            "content": [_wire(block) for block in value.content or ()],
            "isError": bool(value.is_error),
        }
        structured = getattr(value, "structured_content", None)
        if structured is not None:
            body["structuredContent"] = structured
        return body
    if isinstance(value, tuple) and len(value) == 2:
        content, structured = value
        return {"content": [_wire(b) for b in content], "structuredContent": structured}
    if isinstance(value, Mapping):
        return {"content": [], "structuredContent": dict(value)}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return {"content": [_wire(block) for block in value]}
    raise BridgeError(f"call_tool returned {type(value).__name__}, not a CallToolResult")


def call_tool_outcome(wire: Mapping[str, Any]) -> tuple[bool, Any, str]:
    """``(ok, data, message)`` of a ``CallToolResult`` wire dict:
    ``isError`` means not ok; the data is ``structuredContent``, else the
    text of the text blocks when there are only those, else the blocks;
    the message is the text."""
    content = wire.get("content") or []
    text = text_of(content)
    if wire.get("structuredContent") is not None:
        data = wire["structuredContent"]
    elif all(isinstance(b, Mapping) and b.get("type") == "text" for b in content):
        data = text
    else:
        data = list(content)
    return not wire.get("isError", False), data, text


def transcript_result(wire: Mapping[str, Any]) -> TranscriptResult:
    """A ``CallToolResult`` wire dict as a transcript keeps it."""
    return TranscriptResult(
        ok=not wire.get("isError", False),
        content=wire.get("content"),
        data=wire.get("structuredContent"),
    )


# -- live servers -------------------------------------------------------------


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
        spec = _spec(
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


# -- JSON-RPC logs ------------------------------------------------------------


def read_jsonrpc_log(text: str) -> Transcript:
    """The ``tools/call`` requests of an MCP JSON-RPC log and their
    responses (``result``: a ``CallToolResult``; ``error``: a failure).
    One message per line, a JSON array of messages, or lines wrapping one
    in ``{"message": {...}}``. Unreadable lines and responses to no request
    are problems naming the line; responses to other methods are ignored."""
    collector = CallCollector("mcp")
    other_requests: set[str] = set()
    for where, message in json_records(text, collector, noun="item"):
        if isinstance(message, Mapping) and isinstance(message.get("message"), Mapping):
            message = message["message"]
        if not isinstance(message, Mapping):
            collector.problem(where, "not a JSON-RPC message object")
            continue
        key = _id(message.get("id"))
        method = message.get("method")
        if method is not None:
            if method != "tools/call":
                if key is not None:
                    other_requests.add(key)
                continue
            params = message.get("params")
            if not isinstance(params, Mapping):
                collector.problem(where, f"tools/call {key} without params: skipped")
                continue
            collector.call(where, key, params.get("name"), params.get("arguments"))
        elif "result" in message or "error" in message:
            if key in other_requests:
                continue
            if "error" in message:
                error = message.get("error") or {}
                detail = error.get("message", "") if isinstance(error, Mapping) else str(error)
                collector.result(where, key, TranscriptResult(ok=False, content=detail))
            elif isinstance(message.get("result"), Mapping):
                collector.result(where, key, transcript_result(message["result"]))
            else:
                collector.problem(where, f"response {key} has a result that is not an object")
        else:
            collector.problem(where, "neither a request nor a response")
    return collector.transcript()


def _id(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    return str(value) if isinstance(value, (str, int)) else None
