"""MCP tool definitions in: ``from_mcp``.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...capabilities import Risk
from ...registry import Handler, ToolSpec
from ..errors import BridgeError, warn
from .spec import Paths, as_list, build_spec, handler_for

ANNOTATION_DEFAULTS = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
"""The MCP spec's value of each hint when a tool's annotations omit it."""

KNOWN_ANNOTATIONS = frozenset(ANNOTATION_DEFAULTS) | {"title"}


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
            spec_from_wire(
                wire,
                handler_for(str(name), handlers, lambda: None),
                paths=paths,
                default_risk=Risk(default_risk),
                trust_annotations=trust_annotations,
                risks=risks,
            )
        )
    return specs


def spec_from_wire(
    wire: Mapping[str, Any],
    handler: Handler | None,
    *,
    paths: Paths | None,
    default_risk: Risk,
    trust_annotations: bool,
    risks: Mapping[str, Risk | str] | None,
) -> ToolSpec:
    """The ``ToolSpec`` of one tool's wire dict, run by ``handler``: what
    ``from_mcp`` and the live servers (``guards.mcp_server``,
    ``guards.mcp_stdio``) share. Risks, warnings and errors as for
    ``from_mcp``."""
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
    return wire_dict(definition)


def wire_dict(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, mode="json", exclude_none=True)
    return value
