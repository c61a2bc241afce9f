"""The tools items will get, as far as collection can know them.

Fault cells and fuzz items are named at collection, from the registry the
``toolguard_registry`` fixture visible from their node gives: the ini
``toolguard_registry`` when the fixture is this plugin's, else the
overriding fixture called now (``fixture_at_collection``), once per
definition (the run keeps the answers: ``ToolguardRun.registries``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import ToolguardError
from ..options import REGISTRY_INI
from ..replay.registry_loading import DEFAULT_REGISTRY

if TYPE_CHECKING:
    from ..registry import ToolRegistry

FIXTURES_MODULE = "pytest_toolguard.plugin.fixtures"
"""Where the plugin's own fixtures are defined."""


class RegistryUnavailable(ToolguardError):
    """The registry items would get cannot be had at collection (a broken
    ini value, a fixture returning no ``ToolRegistry``); says which and why."""


@dataclass(frozen=True)
class RegistryAtCollection:
    """The tools a node's items will get from ``toolguard_registry``, as far
    as collection can know them."""

    registry: ToolRegistry | None
    """None when the fixture can only give them at run time."""
    source: str
    """Where they come from, for messages."""
    deferred: str = ""
    """Why they are known only at run time ('' when they are known)."""


def is_plugin_fixture(function: Callable[..., Any]) -> bool:
    """Whether a fixture definition's function is this plugin's own."""
    return getattr(function, "__module__", None) == FIXTURES_MODULE


Known = dict[int, "RegistryAtCollection | RegistryUnavailable"]
"""The answers already had, by fixture definition (0: the plugin's own)."""


def registry_at_collection(node: pytest.Collector, known: Known) -> RegistryAtCollection:
    """The registry the ``toolguard_registry`` fixture visible from ``node``
    gives (see the module docstring), from ``known`` when it was asked
    before. ``RegistryUnavailable`` when it cannot be had; a fixture that
    can only run at run time gives ``registry=None``."""
    from ..registry import ToolRegistry
    from ..replay.registry_loading import SpecError, load_registry
    from .fixture_at_collection import (
        NotAtCollection,
        describe,
        value_at_collection,
        visible_definition,
    )

    config = node.config
    definition = visible_definition(node, "toolguard_registry")
    key = 0 if definition is None or is_plugin_fixture(definition.func) else id(definition)
    if key in known:
        found = known[key]
        if isinstance(found, RegistryUnavailable):
            raise found
        return found
    try:
        if definition is None or key == 0:
            spec = str(config.getini(REGISTRY_INI)) or DEFAULT_REGISTRY
            source = f"the ini {REGISTRY_INI} = {spec!r}"
            try:
                found = RegistryAtCollection(load_registry(spec), source)
            except SpecError as exc:
                raise RegistryUnavailable(f"ini {REGISTRY_INI}: {exc}") from None
        else:
            source = f"the toolguard_registry fixture ({describe(definition, config.rootpath)})"
            try:
                value = value_at_collection(node, definition)
            except NotAtCollection as exc:
                found = RegistryAtCollection(None, source, str(exc))
            else:
                if not isinstance(value, ToolRegistry):
                    raise RegistryUnavailable(
                        f"{source} returned a {type(value).__name__}, not a ToolRegistry"
                    )
                found = RegistryAtCollection(value, source)
    except RegistryUnavailable as exc:
        known[key] = exc
        raise
    known[key] = found
    return found
