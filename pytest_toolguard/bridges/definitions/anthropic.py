"""Anthropic tools in: ``from_anthropic(tools)`` reads Messages API tools
(``{name, description, input_schema}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...capabilities import Risk
from ...registry import Handler, ToolSpec
from ..errors import BridgeError
from .spec import Declared, Paths, as_list


def from_anthropic(
    tools: Any,
    *,
    handlers: Mapping[str, Handler] | None = None,
    paths: Paths | None = None,
    default_risk: Risk | str = Risk.READ,
    risks: Mapping[str, Risk | str] | None = None,
) -> list[ToolSpec]:
    """``ToolSpec``s from Anthropic tool definitions (one or a list).
    Anthropic tools carry no risk: ``risks[name]``, else ``default_risk``.
    Server tools (``{"type": "web_search_20250305", ...}``) have no schema
    to run and raise ``BridgeError``."""
    declared = Declared(handlers, paths, default_risk, risks)
    specs = []
    for index, definition in enumerate(as_list(tools)):
        if not isinstance(definition, Mapping):
            raise BridgeError(f"Anthropic tool {index + 1}: not an object")
        kind = definition.get("type")
        if kind not in (None, "custom") and "input_schema" not in definition:
            raise BridgeError(
                f"Anthropic tool {definition.get('name', index + 1)}: {kind!r} is a server or "
                "client tool of Anthropic's, with no input_schema to import"
            )
        name = definition.get("name")
        specs.append(
            declared.spec(
                source="Anthropic tool",
                name=name,
                description=str(definition.get("description") or ""),
                input_schema=definition.get("input_schema"),
                extra=definition,
            )
        )
    return specs
