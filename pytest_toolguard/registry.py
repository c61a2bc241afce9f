"""Tools: what a model may call, with the contract the executor enforces.

A ``ToolSpec`` is the whole server-side truth about a tool: its schemas, its
risk, its limits and which arguments are paths. The model only ever sees
``ToolRegistry.specs_for(capabilities)``: name, description, input schema.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .capabilities import Capabilities, Risk
from .path_templates import PATH_ARGUMENT as PATH_ARGUMENT
from .path_templates import expand_template, parse_template, template_schema_problem
from .schema import SchemaValidator
from .signatures import schema_from_signature, with_dataclass_arguments

if TYPE_CHECKING:
    from .redaction import Redactor

Handler = Callable[..., Any]
"""``handler(ctx: pytest_toolguard.context.ToolContext, **arguments) -> JSON-like data``, or an
``async def`` handler (or any callable returning an awaitable of such data)."""

AccessMode = Literal["read", "write"]

WorldKind = Literal["fake", "directory"]
"""Which world the harness runs a tool in when it replays or tests it:
``fake`` (a fake filesystem in this process: tools that reach files only
through Python's ``os``/``open`` within ``ctx.workspace``) or ``directory``
(a fresh real directory: tools that reach files through C libraries,
subprocesses or absolute paths)."""

WORLD_KINDS: tuple[WorldKind, ...] = ("fake", "directory")

ENVIRONMENT_INPUTS: tuple[str, ...] = ("TZ", "COLUMNS", "locale", "PYTHONHASHSEED", "cwd")
"""What a handler may read from its process besides its arguments, as
``ToolSpec.depends_on_environment`` names them: the time zone, the terminal
width (``COLUMNS``/``LINES``), the locale (``setlocale`` and ``LANG``/``LC_*``),
the hash seed (the order of a set of strings) and the working directory."""


def checked_world(value: object, where: str) -> WorldKind:
    """``value`` as a ``WorldKind``; ``ValueError`` naming ``where`` otherwise."""
    if value == "fake":
        return "fake"
    if value == "directory":
        return "directory"
    raise ValueError(f"{where}: unknown world {value!r}; choose one of {', '.join(WORLD_KINDS)}")


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
        parse_template(self.template)

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the arguments (or variables) the template reads:
        ``files`` for ``{files[*].file_path}``."""
        return tuple(selector.name for _, selector in parse_template(self.template) if selector)

    @property
    def selectors(self) -> tuple[str, ...]:
        """The template's fields as spelt: ``files[*].file_path``."""
        return tuple(selector.text for _, selector in parse_template(self.template) if selector)

    def expand(self, arguments: Mapping[str, Any], variables: Mapping[str, str]) -> list[str]:
        """Every path this access names for a call: one, or one per element
        of the ``[*]`` field (none for an empty array); an absent optional
        field gives ``default``, or no path. Raises KeyError naming a field
        found nowhere in a template of several fields (it has no path
        without it), and PathValueError for a field on anything but a
        string."""
        return expand_template(self.template, arguments, variables, self.default)

    @classmethod
    def read(cls, template: str, *, default: str | None = None) -> PathAccess:
        return cls(template, "read", default=default)

    @classmethod
    def write(cls, template: str, *, content: str | None = None) -> PathAccess:
        return cls(template, "write", content=content)


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
    acts_on_repeat: bool = False
    """The same call repeated without an idempotency key is meant to act
    again (an append, a message sent each time): the ``duplicate_submission``
    fault then accepts a second run that changes files. Without it, a tool
    not declared ``idempotent`` whose keyless repeat changes files again is
    reported there."""
    paths: tuple[PathAccess, ...] = ()
    paths_declared: bool = False
    """Whether ``paths`` was given (to ``tool()``, or to an importer for this
    tool), even empty: ``tool(paths=[])`` says no argument is a path (see
    ``guesses_path_arguments``)."""
    network_host_argument: str | None = None
    """For external tools: the argument holding the URL or host the call
    reaches; it must be in ``Capabilities.network_hosts``."""
    allow_hardlinks: bool = False
    """Let this tool's handler read and replace hard-linked files, which the
    sandbox refuses by default (a hard link may share an outside file)."""
    redactor: Redactor | None = None
    """Replaces the runtime's redactor for this tool's arguments and output."""
    world: WorldKind | None = None
    """The world the harness replays and tests this tool in (``WorldKind``);
    None: its registry's default. The runtime itself ignores it."""
    depends_on_environment: tuple[str, ...] = ()
    """What of its process this tool's result may depend on, by design
    (``ENVIRONMENT_INPUTS``: ``("TZ",)`` for a tool that answers in the
    machine's local time): the ``environment`` and ``hash_seed`` faults
    then vary the others only. Without it, a result or a file that changes
    with any of them is reported there."""
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
        if self.idempotent and self.acts_on_repeat:
            raise ValueError(f"tool {self.name}: idempotent and acts_on_repeat contradict")
        if self.world is not None:
            checked_world(self.world, f"tool {self.name}")
        declared = self.depends_on_environment
        declared = (declared,) if isinstance(declared, str) else tuple(declared)
        unknown = [name for name in declared if name not in ENVIRONMENT_INPUTS]
        if unknown:
            raise ValueError(
                f"tool {self.name}: depends_on_environment names {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(ENVIRONMENT_INPUTS)}"
            )
        object.__setattr__(self, "depends_on_environment", declared)
        object.__setattr__(self, "input_validator", SchemaValidator(self.input_schema))
        output = SchemaValidator(self.output_schema, root="output") if self.output_schema else None
        object.__setattr__(self, "output_validator", output)
        object.__setattr__(self, "is_async", _is_coroutine_function(self.handler))
        for access in self.paths:
            problem = template_schema_problem(access.template, self.input_schema)
            if problem is not None:
                raise ValueError(f"tool {self.name}: path template {access.template!r}: {problem}")

    @property
    def path_fields(self) -> tuple[str, ...]:
        """The arguments (and variables) this tool's ``paths`` templates
        read, each once."""
        return tuple(dict.fromkeys(name for access in self.paths for name in access.fields))

    @property
    def guesses_path_arguments(self) -> bool:
        """Whether the harness may take other arguments than ``path_fields``
        for paths by their name and schema (``path_templates.looks_like_path``):
        not when ``paths`` was declared empty (``paths_declared``), which
        says that none is. A template reading no argument (``"."``, a fixed
        file) grants a place, and says nothing about the arguments."""
        return not (self.paths_declared and not self.paths)

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
    acts_on_repeat: bool = False,
    depends_on_environment: Sequence[str] = (),
    paths: Sequence[PathAccess] | None = None,
    network_host_argument: str | None = None,
    allow_hardlinks: bool = False,
    redactor: Redactor | None = None,
    world: WorldKind | None = None,
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
            acts_on_repeat=acts_on_repeat,
            depends_on_environment=(
                (depends_on_environment,)
                if isinstance(depends_on_environment, str)
                else tuple(depends_on_environment)
            ),
            paths=tuple(paths or ()),
            paths_declared=paths is not None,
            network_host_argument=network_host_argument,
            allow_hardlinks=allow_hardlinks,
            redactor=redactor,
            world=world,
        )

    return wrap


class ToolRegistry:
    """The tools a runtime can run. Names are unique; registration refuses a
    second tool of the same name (``ValueError``). ``world`` is the world
    of its tools that declare none (``ToolSpec.world``)."""

    def __init__(self, specs: Sequence[ToolSpec] = (), *, world: WorldKind = "fake") -> None:
        self.world: WorldKind = checked_world(world, "ToolRegistry(world=...)")
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

    def world_for(self, names: Iterable[object]) -> WorldKind:
        """The world a session calling the tools ``names`` needs:
        ``directory`` when any of them runs in it (its own ``world``, or
        the registry's default), else ``fake``. Names of no tool here
        count as the registry's default."""
        for name in names:
            spec = self._tools.get(name) if isinstance(name, str) else None
            kind = (spec.world if spec is not None else None) or self.world
            if kind == "directory":
                return "directory"
        return "fake"

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
