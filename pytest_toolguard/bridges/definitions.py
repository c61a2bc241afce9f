"""Foreign tool definitions into ToolSpecs: what every importer shares.

A foreign definition (an MCP ``Tool``, an OpenAI function, an Anthropic
tool, a LangChain tool) says nothing about paths and little about risk.
``build_spec`` turns its parts into a ``ToolSpec`` and says, as a
``BridgeWarning`` naming the tool, what the import had to assume: an
argument named like a path that no ``PathAccess`` declares, a schema that
declares another JSON Schema dialect than 2020-12 (checked as 2020-12
anyway). A definition that cannot become a tool at all raises
``BridgeError`` naming it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..capabilities import Risk
from ..errors import ToolguardError
from ..registry import PATH_ARGUMENT, Handler, PathAccess, ToolSpec
from ..schema import InvalidSchema

DIALECT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

Paths = Mapping[str, Sequence[PathAccess]]
"""``{tool name: [PathAccess, ...]}``: the paths each imported tool touches."""


class BridgeWarning(UserWarning):
    """An importer had to assume something about a tool; the message names
    the tool and says what to pass to be explicit."""


class BridgeError(ToolguardError, ValueError):
    """A definition, transcript or server that cannot be imported; the
    message names the tool or the place, and what is wrong."""


def warn(message: str) -> None:
    """A ``BridgeWarning`` pointing at the first caller outside this package."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(__package__):
        frame = frame.f_back
        level += 1
    warnings.warn(message, BridgeWarning, stacklevel=level)


def no_handler(name: str) -> Handler:
    """The handler of a tool imported from a definition alone: it fails
    every call, saying how to give one."""

    def handler(ctx: Any, **arguments: Any) -> Any:
        raise NotImplementedError(
            f"tool {name} was imported from its definition only; "
            f"pass handlers={{{name!r}: function}} to run it"
        )

    handler.__name__ = f"no_handler_{name}"
    return handler


def dialect_of(schema: Mapping[str, Any]) -> str | None:
    """The ``$schema`` a schema declares when it is not 2020-12 (None for
    2020-12 or no declaration, which means 2020-12 in MCP and here)."""
    declared = schema.get("$schema")
    if declared is None:
        return None
    text = str(declared).rstrip("#")
    if text in (DIALECT_2020_12, "http://json-schema.org/draft/2020-12/schema"):
        return None
    return str(declared)


def undeclared_path_arguments(schema: Mapping[str, Any], paths: Sequence[PathAccess]) -> list[str]:
    """Top-level string arguments named like a path (``PATH_ARGUMENT``)
    that no ``PathAccess`` template uses."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    declared = {field for access in paths for field in access.fields}
    return [
        name
        for name in properties
        if isinstance(name, str) and PATH_ARGUMENT.search(name) and name not in declared
    ]


def build_spec(
    *,
    source: str,
    name: Any,
    description: str,
    input_schema: Mapping[str, Any] | None,
    handler: Handler | None,
    risk: Risk,
    paths: Paths | None,
    output_schema: Mapping[str, Any] | None = None,
    idempotent: bool = False,
    timeout_seconds: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ToolSpec:
    """A ``ToolSpec`` from a foreign definition's parts. ``source`` names
    the format in messages (``MCP tool``, ``OpenAI function``).

    Warns (``BridgeWarning``) for a schema of another dialect and for
    undeclared path-like arguments; raises ``BridgeError`` for a missing
    name or a schema that is not valid JSON Schema 2020-12."""
    if not isinstance(name, str) or not name:
        raise BridgeError(f"{source} without a name: {str(extra or '')[:80]}")
    schema: Mapping[str, Any] = input_schema if input_schema is not None else {"type": "object"}
    if not isinstance(schema, Mapping):
        raise BridgeError(f"{source} {name}: its input schema is a {type(schema).__name__}")
    accesses = tuple((paths or {}).get(name, ()))
    for where, checked in (("input", schema), ("output", output_schema)):
        if isinstance(checked, Mapping) and (dialect := dialect_of(checked)) is not None:
            warn(
                f"{source} {name}: its {where} schema declares $schema {dialect!r}; "
                "it is checked as JSON Schema 2020-12"
            )
    for argument in undeclared_path_arguments(schema, accesses):
        warn(
            f"{source} {name}: argument {argument!r} looks like a path but no PathAccess "
            f"declares it, so the policy does not check it; pass "
            f"paths={{{name!r}: [PathAccess.read('{{{argument}}}')]}} (or .write)"
        )
    options: dict[str, Any] = {}
    if timeout_seconds is not None:
        options["timeout_seconds"] = timeout_seconds
    try:
        return ToolSpec(
            name=name,
            description=description or "",
            input_schema=schema,
            handler=handler or no_handler(name),
            risk=risk,
            output_schema=output_schema,
            idempotent=idempotent,
            paths=accesses,
            **options,
        )
    except InvalidSchema as exc:
        raise BridgeError(f"{source} {name}: {exc}") from None
    except ValueError as exc:
        raise BridgeError(f"{source} {name}: {exc}") from None


def handler_for(
    name: str, handlers: Mapping[str, Handler] | None, default: Callable[[], Handler | None]
) -> Handler | None:
    """The handler the user gave for ``name``, else ``default()``."""
    if handlers and name in handlers:
        return handlers[name]
    return default()


def as_list(definitions: Any) -> list[Any]:
    """One definition or several, as a list."""
    if isinstance(definitions, (list, tuple)):
        return list(definitions)
    return [definitions]
