"""What a fault runs against: one recorded interaction of a cassette or case."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..capabilities import Risk
from ..contract import ErrorCode, ToolCall
from ..documents import parse_json
from ..harness.branching import walked_world
from ..path_templates import path_arguments
from ..registry import ToolRegistry, ToolSpec, WorldKind
from ..replay.cassette import Cassette, Interaction


@dataclass(frozen=True, slots=True)
class Target:
    """One recorded interaction, with the tool it calls (``spec`` is None when
    the registry has no such tool)."""

    source: str
    """The cassette or case file, as shown (``cassettes/feedback.yaml``)."""
    cassette: Cassette
    index: int
    """0-based position of the interaction in the file."""
    spec: ToolSpec | None
    world: WorldKind = "fake"
    """The world its cells run in (``harness.branching.walked_world``)."""

    @property
    def interaction(self) -> Interaction:
        return self.cassette.interactions[self.index]

    @property
    def call(self) -> ToolCall:
        return self.interaction.call

    @property
    def label(self) -> str:
        """``3-write_json_file``: the interaction's part of a cell's id."""
        return f"{self.index + 1}-{self.call.tool_name}"

    @property
    def arguments(self) -> dict[str, Any] | None:
        """The call's arguments as an object, or None when they are not one
        (bad JSON text, a list, ...)."""
        value: Any = self.call.arguments
        if isinstance(value, str):
            try:
                value = parse_json(value)  # a cassette's: bounded
            except ValueError:
                return None
        return dict(value) if isinstance(value, Mapping) else None

    @property
    def handler_ran(self) -> bool:
        """Whether the recorded call reached its handler and succeeded: the
        faults that change a handler's world need one."""
        expected = self.interaction.result
        if expected.ok is not None:
            return expected.ok and expected.code in (None, ErrorCode.OK.value)
        return expected.code == ErrorCode.OK.value

    @property
    def handler_can_run(self) -> bool:
        """The tool is registered and its recorded call reached its handler
        and succeeded: what the faults that change a handler's world need."""
        return self.spec is not None and self.handler_ran

    @property
    def writes(self) -> bool:
        """Whether the tool may change files or the world."""
        return self.spec is not None and self.spec.risk is not Risk.READ

    @property
    def declared_path_arguments(self) -> tuple[str, ...]:
        """The fields of the tool's ``paths`` templates."""
        if self.spec is None:
            return ()
        return tuple(name for access in self.spec.paths for name in access.fields)

    @property
    def path_arguments(self) -> tuple[str, ...]:
        """Arguments that name a path and that this call gives as strings:
        fields of the tool's ``paths`` templates, then any other the name
        heuristic judges a path by its name, schema and recorded value
        (``path_templates.looks_like_path``: a tool may use a path it never
        declared, but ``source_timezone='Europe/Warsaw'`` names none), unless
        the tool declared that none is (``ToolSpec.guesses_path_arguments``)."""
        if self.spec is None:
            return ()
        arguments = self.arguments or {}
        names = path_arguments(
            self.spec.input_schema,
            self.spec.path_fields,
            self.spec.guesses_path_arguments,
            arguments,
        )
        return tuple(name for name in names if isinstance(arguments.get(name), str))


def targets(
    cassette: Cassette, registry: ToolRegistry, source: str, world: str = "auto"
) -> list[Target]:
    """Every interaction of ``cassette`` as a target, in file order; its
    cells' world chosen as replay chooses it (``world``: ``auto``, ``fake``
    or ``directory``)."""
    kind = walked_world(cassette, registry, world)
    return [
        Target(source, cassette, index, registry.get(interaction.call.tool_name), kind)
        for index, interaction in enumerate(cassette.interactions)
    ]


RELAYING_MODULE = "pytest_toolguard.bridges.guards.mcp"
"""Where the handlers of bridged MCP servers live: they relay each call to
a server process, whose clock, event loop and files are its own."""


def relays_to_a_server(function: Any) -> bool:
    """Whether ``function`` is a bridged MCP server's handler (see
    ``RELAYING_MODULE``): what it does in this process says nothing of the tool."""
    return (getattr(function, "__module__", "") or "").startswith(RELAYING_MODULE)
