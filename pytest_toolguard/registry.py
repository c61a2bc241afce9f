"""Tools: what a model may call, with the contract the executor enforces.

A ``ToolSpec`` is the whole server-side truth about a tool: its schemas, its
risk, its limits and which arguments are paths. The model only ever sees
``ToolRegistry.specs_for(capabilities)``: name, description, input schema.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import string
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .capabilities import Capabilities, Risk
from .errors import ToolguardError
from .schema import SchemaValidator
from .signatures import schema_from_signature, with_dataclass_arguments

if TYPE_CHECKING:
    from .redaction import Redactor

Handler = Callable[..., Any]
"""``handler(ctx: pytest_toolguard.context.ToolContext, **arguments) -> JSON-like data``, or an
``async def`` handler (or any callable returning an awaitable of such data)."""

AccessMode = Literal["read", "write"]


PATH_ARGUMENT = re.compile(
    r"(?:^|_)(?:path|paths|file|files|filename|filepath|dir|dirs|directory|folder"
    r"|dest|destination|target|source|src|dst)(?:$|_)",
    re.IGNORECASE,
)
"""Argument names that usually hold a path (``path``, ``src_dir``,
``target_file``, ...): the fuzzer and the ``path_traversal`` fault also
try escapes in these when a tool does not declare them in ``paths``."""


class PathValueError(ToolguardError, ValueError):
    """A path template's field reached a value that is not a string (a
    list, an object, a number, a boolean, null), or a ``[*]`` / ``.key`` step
    met a value of the wrong kind. Such a value is never turned into a path:
    its text (``"['../x']"``) says nothing about where a handler goes.

    ``selector`` is the field as the template spells it, ``where`` the place
    in the arguments that broke it (``files[2].file_path``), ``found`` the
    JSON type found there. The message names no value."""

    def __init__(self, selector: str, where: str, found: str, wanted: str) -> None:
        self.selector, self.where, self.found = selector, where, found
        super().__init__(
            f"path template field {{{selector}}}: {where} is {found}, not {wanted}; "
            "a path template names strings only (each element of an array with "
            "[*], a field of an object with .name)"
        )


WILDCARD = "[*]"
"""The template step that takes each element of an array: ``{paths[*]}``,
``{files[*].file_path}``."""

MAX_TEMPLATE_DEPTH = 8
"""Steps a template field may take (``.key`` and ``[*]`` together)."""


@dataclass(frozen=True, slots=True)
class _Selector:
    """One ``{...}`` field of a template: its argument (or variable) name,
    then steps: a key (``.name``) or ``None`` for ``[*]``."""

    text: str
    name: str
    steps: tuple[str | None, ...]

    @property
    def many(self) -> bool:
        return None in self.steps


_SELECTOR = re.compile(r"([^.\[\]]+)((?:\.[^.\[\]]+|\[\*\])*)")
_STEP = re.compile(r"\.([^.\[\]]+)|\[\*\]")


def _parse_selector(text: str, template: str) -> _Selector:
    match = _SELECTOR.fullmatch(text)
    if match is None:
        raise ValueError(
            f"path template {template!r}: field {{{text}}} is not NAME followed by "
            "'.key' or '[*]' steps (an index such as [0] is not supported: use [*])"
        )
    steps = tuple(step.group(1) for step in _STEP.finditer(match.group(2)))
    if len(steps) > MAX_TEMPLATE_DEPTH:
        raise ValueError(
            f"path template {template!r}: field {{{text}}} takes more than "
            f"{MAX_TEMPLATE_DEPTH} steps"
        )
    return _Selector(text, match.group(1), steps)


@functools.lru_cache(maxsize=1024)
def _parse_template(template: str) -> tuple[tuple[str, _Selector | None], ...]:
    """The template as (literal text, field or None) pairs. Raises
    ValueError for anything but plain ``{field}``s: no conversion (``!r``),
    no format spec (``:>10``, which could cut or pad a path), no positional
    ``{}``, at most one field with ``[*]``."""
    if not isinstance(template, str):
        raise TypeError(f"a path template is a str, not {type(template).__name__}")
    parts: list[tuple[str, _Selector | None]] = []
    for literal, text, spec, conversion in string.Formatter().parse(template):
        if text is None:
            parts.append((literal, None))
            continue
        if not text:
            raise ValueError(f"path template {template!r}: a field must name an argument")
        if spec or conversion:
            raise ValueError(
                f"path template {template!r}: field {{{text}}} may not have a "
                "conversion (!r) or a format spec (:...)"
            )
        parts.append((literal, _parse_selector(text, template)))
    if sum(1 for _, selector in parts if selector is not None and selector.many) > 1:
        raise ValueError(
            f"path template {template!r}: at most one field may use [*] "
            "(declare one PathAccess per array)"
        )
    return tuple(parts)


_ABSENT = object()


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def _select(selector: _Selector, root: object) -> list[object]:
    """Every value ``selector``'s steps reach from ``root`` (the argument
    or variable): one without ``[*]``, one per element with it. A key an
    object lacks reaches ``_ABSENT`` (an optional field). Raises
    PathValueError for a non-string value or a step on the wrong kind."""
    reached: list[tuple[str, object]] = [(selector.name, root)]
    for step in selector.steps:
        following: list[tuple[str, object]] = []
        for where, value in reached:
            if value is _ABSENT:
                following.append((where, value))
            elif step is None:
                if not isinstance(value, (list, tuple)):
                    raise PathValueError(selector.text, where, _json_type(value), "an array")
                following += [(f"{where}[{i}]", item) for i, item in enumerate(value)]
            elif isinstance(value, Mapping):
                following.append((f"{where}.{step}", value.get(step, _ABSENT)))
            else:
                raise PathValueError(selector.text, where, _json_type(value), "an object")
        reached = following
    for where, value in reached:
        if value is not _ABSENT and not isinstance(value, str):
            raise PathValueError(selector.text, where, _json_type(value), "a string")
    return [value for _, value in reached]


@dataclass(frozen=True, slots=True)
class PathAccess:
    """One path a call touches, built from a template over its arguments.

    ``template`` uses ``{field}``s: ``"{path}"`` or
    ``"runs/{run_id}/artifacts/{artifact_name}"``. A field is filled from the
    runtime's ``variables`` first (so a model cannot pick another ``run_id``)
    and then from the call's arguments. When an argument is absent the
    ``default`` is used, and with no default the access is skipped (an
    optional path argument).

    A field may go into an argument: ``{options.target}`` takes the key
    ``target`` of the object ``options``; ``{paths[*]}`` takes each element
    of the array ``paths``; ``{files[*].file_path}`` the ``file_path`` of each
    object of ``files``. With ``[*]`` the access names one path per element
    (none for an empty array), and each one is checked; at most one field of
    a template may use ``[*]``. A key an object lacks is an absent optional
    field, as above.

    A field must reach a string. Anything else (an array, an object, a
    number, a boolean, null) is refused, never turned into text: by the tool
    at construction when its input schema types the field so, by the policy
    at the call otherwise (``INVALID_ARGUMENT``). The template itself is
    checked here: ``ValueError`` for a field with an index (``[0]``), a
    conversion or a format spec.

    ``content`` names the argument whose UTF-8 size counts against
    ``max_write_bytes`` (strings as they are, anything else as the JSON the
    tool will write).
    """

    template: str
    mode: AccessMode = "read"
    content: str | None = None
    default: str | None = None

    def __post_init__(self) -> None:
        _parse_template(self.template)

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the arguments (or variables) the template reads:
        ``files`` for ``{files[*].file_path}``."""
        return tuple(selector.name for _, selector in _parse_template(self.template) if selector)

    @property
    def selectors(self) -> tuple[str, ...]:
        """The template's fields as spelt: ``files[*].file_path``."""
        return tuple(selector.text for _, selector in _parse_template(self.template) if selector)

    def expand(self, arguments: Mapping[str, Any], variables: Mapping[str, str]) -> list[str]:
        """Every path this access names for a call: one, or one per element
        of the ``[*]`` field (none for an empty array); an absent optional
        field gives ``default``, or no path. Raises KeyError naming a field
        found nowhere in a template of several fields (it has no path
        without it), and PathValueError for a field on anything but a
        string."""
        parts = _parse_template(self.template)
        chosen: dict[str, list[object]] = {}
        for _, selector in parts:
            if selector is None or selector.text in chosen:
                continue
            if selector.name in variables:
                root: object = str(variables[selector.name])
            else:
                root = arguments.get(selector.name, _ABSENT)
            chosen[selector.text] = _select(selector, root)
        rounds = max((len(values) for values in chosen.values()), default=1)
        if any(not values for values in chosen.values()):
            return []  # an empty array: the access names no path
        single = len(chosen) == 1
        paths: list[str] = []
        for index in range(rounds):
            text: list[str] = []
            for literal, selector in parts:
                text.append(literal)
                if selector is None:
                    continue
                values = chosen[selector.text]
                value = values[index] if len(values) > 1 else values[0]
                if value is _ABSENT:
                    break
                text.append(str(value))
            else:
                paths.append("".join(text))
                continue
            if self.default is not None:
                paths.append(self.default)
            elif not single:
                raise KeyError(next(s for s, v in chosen.items() if _ABSENT in v))
        return paths

    @classmethod
    def read(cls, template: str, *, default: str | None = None) -> PathAccess:
        return cls(template, "read", default=default)

    @classmethod
    def write(cls, template: str, *, content: str | None = None) -> PathAccess:
        return cls(template, "write", content=content)


def _types(schema: Mapping[str, Any]) -> frozenset[str] | None:
    """The JSON types a schema's ``type`` allows (None: it does not say)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return frozenset(declared)
    return None


def _template_schema_problem(access: PathAccess, input_schema: Mapping[str, Any]) -> str | None:
    """Why ``access`` can never name a string under ``input_schema``, or
    None. The schema is followed where it speaks plainly (``type``,
    ``properties``, ``items``, ``additionalProperties: false``, local
    ``$ref``s); what it leaves open (``anyOf``, ...) is checked at the call.
    A top-level name the schema does not list is taken for a runtime
    variable."""
    for selector in (s for _, s in _parse_template(access.template) if s is not None):
        node = _deref(input_schema, input_schema)
        steps: tuple[str | None, ...] = (selector.name, *selector.steps)
        for depth, step in enumerate(steps):
            types = _types(node)
            if step is None:
                if types is not None and "array" not in types:
                    return f"{{{selector.text}}} takes [*] of a value typed {sorted(types)}"
                node = _deref(node.get("items"), input_schema)
                continue
            if types is not None and "object" not in types:
                return f"{{{selector.text}}} takes .{step} of a value typed {sorted(types)}"
            properties = node.get("properties")
            if isinstance(properties, Mapping) and isinstance(properties.get(step), Mapping):
                node = _deref(properties[step], input_schema)
            elif node.get("additionalProperties") is False:
                if depth == 0 and not selector.steps:
                    break  # a variable the runtime fills
                return f"{{{selector.text}}} names {step!r}, which the schema does not allow"
            else:
                node = {}
        else:
            types = _types(node)
            if types is not None and "string" not in types:
                hint = _selector_hint(selector.text, node, input_schema)
                return (
                    f"{{{selector.text}}} names a value typed {sorted(types)}, not a string{hint}"
                )
    return None


def _deref(node: Any, document: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with its local ``$ref``s (``#/$defs/X``) followed; ``{}``
    (anything) for a schema that is not an object or a reference that
    leads nowhere or too far."""
    for _ in range(MAX_TEMPLATE_DEPTH):
        if not isinstance(node, Mapping):
            return {}
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        if not ref.startswith("#"):
            return {}
        target: Any = document
        for part in ref[1:].split("/")[1:]:
            key = part.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, Mapping) else None
        node = target
    return {}


def _selector_hint(text: str, node: Mapping[str, Any], document: Mapping[str, Any]) -> str:
    found = path_selectors(node, prefix=text, document=document) or path_selectors(
        node, prefix=text, like=None, document=document
    )
    return f"; name its strings, e.g. {{{found[0]}}}" if found else ""


def path_selectors(
    schema: Mapping[str, Any],
    *,
    prefix: str = "",
    like: re.Pattern[str] | None = PATH_ARGUMENT,
    document: Mapping[str, Any] | None = None,
) -> list[str]:
    """The template fields (``path``, ``paths[*]``, ``files[*].file_path``,
    ``options.target``) that reach a string under ``schema``: object
    properties, array items, ``anyOf`` / ``oneOf`` alternatives and local
    ``$ref``s (into ``document``, default ``schema``) followed, to
    ``MAX_TEMPLATE_DEPTH`` steps and 10,000 schema nodes. With ``like``,
    only the strings whose own name, or the name of the array holding
    them, matches it. ``prefix`` is the field ``schema`` is the value of."""
    found: list[str] = []
    root = schema if document is None else document
    budget = [_SCHEMA_NODES]  # a schema of $refs to itself grows exponentially with depth

    def walk(raw: Any, text: str, named: str, depth: int) -> None:
        budget[0] -= 1
        if depth > MAX_TEMPLATE_DEPTH or budget[0] < 0:
            return
        node = _deref(raw, root)
        types = _types(node)
        properties = node.get("properties")
        items = node.get("items")
        alternatives = [
            branch
            for keyword in ("anyOf", "oneOf")
            if isinstance(node.get(keyword), list)
            for branch in node[keyword]
        ]
        for branch in alternatives:
            walk(branch, text, named, depth + 1)
        if isinstance(properties, Mapping) and (types is None or "object" in types):
            for key, sub in properties.items():
                if isinstance(key, str) and key and not _STEP_BREAKERS.intersection(key):
                    walk(sub, f"{text}.{key}" if text else key, key, depth + 1)
        if types is not None and "array" in types:
            # Elements of no declared schema may be strings.
            walk(items if isinstance(items, Mapping) else {}, f"{text}{WILDCARD}", named, depth + 1)
        elif isinstance(items, Mapping) and types is None:
            walk(items, f"{text}{WILDCARD}", named, depth + 1)
        leaf = not (properties or items or alternatives)
        string_leaf = text and (types is None or "string" in types) and leaf
        if string_leaf and (like is None or like.search(named)) and text not in found:
            found.append(text)

    walk(schema, prefix, prefix.rsplit(".", 1)[-1].split("[", 1)[0], 0)
    return found


_STEP_BREAKERS = frozenset(".[]{}!:")
_SCHEMA_NODES = 10_000


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A registered tool. Construction compiles its schemas (an invalid
    schema raises ``InvalidSchema`` here, never at call time).

    ``handler`` is called as ``handler(ctx, **arguments)``; it must return
    JSON-serialisable data (or an awaitable of it: ``async def`` handlers
    are awaited) and touch files only through ``ctx.workspace``.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Handler
    risk: Risk = Risk.READ
    output_schema: Mapping[str, Any] | None = None
    timeout_seconds: float = 10.0
    result_limit: int = 8000
    idempotent: bool = False
    paths: tuple[PathAccess, ...] = ()
    network_host_argument: str | None = None
    """For external tools: the argument holding the URL or host the call
    reaches; it must be in ``Capabilities.network_hosts``."""
    allow_hardlinks: bool = False
    """Let this tool's handler read and replace hard-linked files, which the
    sandbox refuses by default (a hard link may share an outside file)."""
    redactor: Redactor | None = None
    """Replaces the runtime's redactor for this tool's arguments and output."""
    input_validator: SchemaValidator = field(init=False, repr=False, compare=False)
    output_validator: SchemaValidator | None = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False, compare=False)
    """True when ``handler`` is a coroutine function (``async def``, a
    ``functools.partial`` of one, an object with ``async def __call__``):
    ``ToolRuntime.aexecute`` awaits it on the caller's loop. A handler that
    returns an awaitable otherwise is awaited too, found by its result."""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a tool needs a non-empty name")
        if not 0 < self.timeout_seconds <= threading.TIMEOUT_MAX or self.result_limit <= 0:
            raise ValueError(
                f"tool {self.name}: timeout_seconds must be positive and finite, "
                "result_limit positive"
            )
        object.__setattr__(self, "risk", Risk(self.risk))
        object.__setattr__(self, "input_validator", SchemaValidator(self.input_schema))
        output = SchemaValidator(self.output_schema, root="output") if self.output_schema else None
        object.__setattr__(self, "output_validator", output)
        object.__setattr__(self, "is_async", _is_coroutine_function(self.handler))
        for access in self.paths:
            problem = _template_schema_problem(access, self.input_schema)
            if problem is not None:
                raise ValueError(f"tool {self.name}: path template {access.template!r}: {problem}")

    def with_handler(self, handler: Handler) -> ToolSpec:
        """A copy of this tool with another handler; the compiled schemas
        are shared, not rebuilt (wrapping a handler costs no compile). It is
        async when this tool was (a wrapper may return the awaitable) or
        when ``handler`` is a coroutine function."""
        clone = copy.copy(self)
        object.__setattr__(clone, "handler", handler)
        object.__setattr__(clone, "is_async", self.is_async or _is_coroutine_function(handler))
        return clone

    def describe(self) -> dict[str, Any]:
        """What the model sees: name, description and input schema."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }

    def to_mcp(self) -> dict[str, Any]:
        """This tool as an MCP ``Tool`` (wire form): ``inputSchema``,
        ``outputSchema`` and the annotations its risk reads back as
        (``pytest_toolguard.bridges.from_mcp`` gives the same risk)."""
        read_only = self.risk is Risk.READ
        body: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }
        if self.output_schema is not None:
            body["outputSchema"] = dict(self.output_schema)
        body["annotations"] = {
            "readOnlyHint": read_only,
            "destructiveHint": self.risk is Risk.DANGEROUS,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.risk in (Risk.EXTERNAL, Risk.DANGEROUS),
        }
        return body

    def to_openai(self, api: Literal["chat", "responses"] = "chat") -> dict[str, Any]:
        """This tool as an OpenAI function tool: the Chat Completions shape
        (``{"type": "function", "function": {...}}``) or the Responses one
        (flat, with ``strict``)."""
        function = {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.input_schema),
        }
        if api == "responses":
            return {"type": "function", **function, "strict": False}
        if api != "chat":
            raise ValueError(f"api must be 'chat' or 'responses', not {api!r}")
        return {"type": "function", "function": function}

    def to_anthropic(self) -> dict[str, Any]:
        """This tool as an Anthropic Messages tool (``input_schema``)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }


def _is_coroutine_function(handler: Handler) -> bool:
    return inspect.iscoroutinefunction(handler) or (
        not inspect.isroutine(handler) and inspect.iscoroutinefunction(type(handler).__call__)
    )


def tool(
    *,
    input_schema: Mapping[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
    risk: Risk | str = Risk.READ,
    output_schema: Mapping[str, Any] | None = None,
    timeout_seconds: float = 10.0,
    result_limit: int = 8000,
    idempotent: bool = False,
    paths: Sequence[PathAccess] = (),
    network_host_argument: str | None = None,
    allow_hardlinks: bool = False,
    redactor: Redactor | None = None,
) -> Callable[[Handler], ToolSpec]:
    """Declare a tool from a handler. The name defaults to the function's
    name and the description to its docstring; without ``input_schema`` the
    schema comes from the handler's signature and type hints (see
    ``pytest_toolguard.signatures``)::

        @tool(input_schema={...}, paths=[PathAccess.read("{path}")])
        def read_text(ctx, path, max_chars=4000): ...

        @tool(paths=[PathAccess.read("{path}")])
        def read_text(ctx, path: str, max_chars: int = 4000): ...
    """

    def wrap(handler: Handler) -> ToolSpec:
        schema = input_schema
        if schema is None:
            schema = schema_from_signature(handler)
            handler = with_dataclass_arguments(handler)
        return ToolSpec(
            name=name or handler.__name__,
            description=description or (handler.__doc__ or "").strip(),
            input_schema=schema,
            handler=handler,
            risk=Risk(risk),
            output_schema=output_schema,
            timeout_seconds=timeout_seconds,
            result_limit=result_limit,
            idempotent=idempotent,
            paths=tuple(paths),
            network_host_argument=network_host_argument,
            allow_hardlinks=allow_hardlinks,
            redactor=redactor,
        )

    return wrap


class ToolRegistry:
    """The tools a runtime can run. Names are unique; registration refuses a
    second tool of the same name (``ValueError``)."""

    def __init__(self, specs: Sequence[ToolSpec] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: ToolSpec) -> ToolSpec:
        if not isinstance(spec, ToolSpec):
            raise TypeError(
                f"expected a ToolSpec, got {type(spec).__name__}; decorate the handler with @tool"
            )
        if spec.name in self._tools:
            raise ValueError(f"duplicate tool: {spec.name}")
        self._tools[spec.name] = spec
        return spec

    def replace(self, spec: ToolSpec) -> ToolSpec | None:
        """Register ``spec`` in place of the tool of the same name; returns
        the tool it replaced, if any."""
        previous = self._tools.get(spec.name)
        self._tools[spec.name] = spec
        return previous

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs_for(self, capabilities: Capabilities) -> list[dict[str, Any]]:
        """The tools this session may call, as the model should see them."""
        return [
            spec.describe()
            for name, spec in sorted(self._tools.items())
            if capabilities.permits_tool(name) and capabilities.permits_risk(spec.risk)
        ]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools[name] for name in sorted(self._tools))

    def __len__(self) -> int:
        return len(self._tools)
