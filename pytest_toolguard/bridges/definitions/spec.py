"""Foreign tool definitions into ToolSpecs: what every importer shares.

A foreign definition (an MCP ``Tool``, an OpenAI function, an Anthropic
tool, a LangChain tool) says nothing about paths and little about risk.
``build_spec`` turns its parts into a ``ToolSpec`` and says, as a
``BridgeWarning`` naming the tool, what the import had to assume: an
argument that looks like a path (``path_templates.looks_like_path``) that
no ``PathAccess`` declares (unless its ``paths`` entry is empty, which
says none is), a schema that declares another JSON
Schema dialect than 2020-12 (checked as 2020-12 anyway). A definition
that cannot become a tool at all raises ``BridgeError`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...capabilities import Risk
from ...path_templates import looks_like_path, path_selectors
from ...registry import Handler, PathAccess, ToolSpec
from ...schema import InvalidSchema
from ..errors import BridgeError, warn

DIALECT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

Paths = Mapping[str, Sequence[PathAccess]]
"""``{tool name: [PathAccess, ...]}``: the paths each imported tool touches."""

Idempotent = bool | Collection[str]
"""Which imported tools are idempotent: all (True), none (False), or the
names given."""


def declared_idempotent(name: str, idempotent: Idempotent) -> bool:
    """Whether ``idempotent`` (an importer's argument) declares tool ``name``."""
    if isinstance(idempotent, bool):
        return idempotent
    return name in ({idempotent} if isinstance(idempotent, str) else set(idempotent))


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
    """The template fields that reach a string that looks like a path
    (``looks_like_path``: named like one, and its schema does not say it is
    a time zone, a hash, a URL, ...; ``path``, ``paths[*]``,
    ``files[*].file_path``, ``options.target``) that no ``PathAccess``
    declares, then the top-level arguments that look like a path, hold no
    such string and that no template reads (by name: ``files`` of
    ``[{name, text}]``)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    declared = {selector for access in paths for selector in access.selectors}
    read = {name for access in paths for name in access.fields}
    found = path_selectors(schema, accept=looks_like_path)
    holding = {_argument_of(selector) for selector in found}
    named = [
        name
        for name, sub in properties.items()
        if isinstance(name, str)
        and looks_like_path(name, sub)
        and name not in holding
        and name not in read
        and _may_hold_text(sub)
    ]
    return [selector for selector in found if selector not in declared] + named


def _may_hold_text(schema: Any) -> bool:
    """Whether a value of ``schema`` may be or hold a string (a number or
    a boolean named ``dirs`` names no path)."""
    types = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(types, str):
        types = [types]
    return not isinstance(types, list) or bool({"string", "array", "object"} & set(types))


def _argument_of(selector: str) -> str:
    return selector.split(".", 1)[0].split("[", 1)[0]


def _path_advice(name: str, argument: str, schema: Mapping[str, Any], risk: Risk) -> str:
    """What to declare for an undeclared path argument: a template that
    names strings (``PathAccess`` refuses one on an array or object)."""
    mode = "read" if risk is Risk.READ else "write"
    other = "write" if mode == "read" else "read"
    field = argument
    if argument not in path_selectors(schema, like=None):
        properties = schema.get("properties")
        sub = properties.get(argument) if isinstance(properties, Mapping) else None
        inner = (
            path_selectors(sub, prefix=argument, like=None, document=schema)
            if isinstance(sub, Mapping)
            else []
        )
        if not inner:
            return "declare the string in it that holds the path"
        field = inner[0]
    return (
        f"pass paths={{{name!r}: [PathAccess.{mode}('{{{field}}}')]}} (or .{other}; "
        "a field names a string: [*] for each element of an array, .key for a field)"
    )


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
    declared = paths is not None and name in paths
    # An empty paths entry for this tool says none of its arguments is a path.
    guess = not (declared and not accesses)
    for where, checked in (("input", schema), ("output", output_schema)):
        if isinstance(checked, Mapping) and (dialect := dialect_of(checked)) is not None:
            warn(
                f"{source} {name}: its {where} schema declares $schema {dialect!r}; "
                "it is checked as JSON Schema 2020-12"
            )
    for argument in undeclared_path_arguments(schema, accesses) if guess else ():
        warn(
            f"{source} {name}: argument {argument!r} looks like a path but no PathAccess "
            f"declares it, so the policy does not check it; "
            f"{_path_advice(name, argument, schema, risk)}"
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
            paths_declared=declared,
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


@dataclass(frozen=True, slots=True)
class Declared:
    """What the caller of an importer declared about the tools it reads
    (the importers' shared keyword arguments): ``handlers`` by name,
    ``paths`` by name, ``risks`` by name over ``default_risk``, and which
    tools are ``idempotent``. ``spec`` applies them to one definition."""

    handlers: Mapping[str, Handler] | None = None
    paths: Paths | None = None
    default_risk: Risk | str = Risk.READ
    risks: Mapping[str, Risk | str] | None = None
    idempotent: Idempotent = False

    def risk(self, name: str) -> Risk:
        """``risks[name]``, else ``default_risk``."""
        if self.risks and name in self.risks:
            return Risk(self.risks[name])
        return Risk(self.default_risk)

    def spec(
        self,
        *,
        source: str,
        name: Any,
        description: str,
        input_schema: Mapping[str, Any] | None,
        handler: Callable[[], Handler | None] = lambda: None,
        risk: Risk | None = None,
        output_schema: Mapping[str, Any] | None = None,
        timeout_seconds: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> ToolSpec:
        """``build_spec`` for one definition: the handler given for
        ``name``, else ``handler()``; ``risk`` when the format says it,
        else the declared one. Raises and warns as ``build_spec``."""
        return build_spec(
            source=source,
            name=name,
            description=description,
            input_schema=input_schema,
            handler=handler_for(str(name), self.handlers, handler),
            risk=risk if risk is not None else self.risk(str(name)),
            paths=self.paths,
            output_schema=output_schema,
            idempotent=declared_idempotent(str(name), self.idempotent),
            timeout_seconds=timeout_seconds,
            extra=extra,
        )
