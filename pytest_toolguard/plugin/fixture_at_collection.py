"""A fixture's value during collection, when its definition allows it.

pytest gives fixtures to items at run time, but some items can only be
named from a fixture's value: one fuzz item per tool of the
``toolguard_registry`` fixture. ``value_at_collection(node, name)`` calls the
fixture definition that ``node``'s items will get, if it is safe to call
outside pytest's setup:

- a plain function (not a generator, not async), not parametrized;
- whose arguments are ``pytestconfig`` or fixtures of the same kind
  (resolved the same way, recursively).

Anything else raises ``NotAtCollection`` saying why (a ``yield`` fixture, a
fixture that needs ``request`` or ``tmp_path_factory``, one that raised), and
the caller falls back to the run-time value. The function is called once
more than pytest would call it: keep such fixtures free of side effects,
or make them ``yield`` fixtures, which are never called here.

Guarantee: nothing is cached in pytest's fixture machinery; at run time the
fixture is set up as usual and its value is what the item must use. Not
guaranteed: that the value equals the run-time one (a fixture may depend on
autouse fixtures or state that only exists at run time).

Reads ``session._fixturemanager.getfixturedefs``: pytest's private API
(stable since 8.1; before, it took a node id instead of the node).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import ToolguardError

if TYPE_CHECKING:
    from _pytest.fixtures import FixtureDef


PYTESTCONFIG = "pytestconfig"
_MAX_DEPTH = 20


class NotAtCollection(ToolguardError):
    """The fixture cannot be evaluated at collection; the message says why."""


def visible_definition(node: pytest.Collector, name: str) -> FixtureDef[Any] | None:
    """The definition of fixture ``name`` that items under ``node`` get (the
    most specific one visible from it), or None when none is visible."""
    manager = node.session._fixturemanager
    try:
        found = manager.getfixturedefs(name, node)
    except (AttributeError, TypeError):  # pytest < 8.1 takes the node id
        found = manager.getfixturedefs(name, node.nodeid)  # type: ignore[arg-type]
    return found[-1] if found else None


def value_at_collection(node: pytest.Collector, definition: FixtureDef[Any]) -> Any:
    """The value ``definition`` gives, computed now; ``NotAtCollection`` when
    it cannot be (see the module docstring)."""
    return _value(node, definition, (definition.argname,))


def describe(definition: FixtureDef[Any], rootpath: Path) -> str:
    """Where a fixture is defined, as ``conftest.py:12`` (relative to the
    rootdir when inside it)."""
    function = definition.func
    try:
        source = inspect.getsourcefile(function)
        line = inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return f"fixture {definition.argname!r}"
    if source is None:
        return f"fixture {definition.argname!r}"
    path = Path(source).resolve()
    shown = path.relative_to(rootpath) if path.is_relative_to(rootpath) else path
    return f"{shown.as_posix()}:{line}"


def _value(node: pytest.Collector, definition: FixtureDef[Any], chain: tuple[str, ...]) -> Any:
    name = definition.argname
    function = definition.func
    if (
        inspect.isgeneratorfunction(function)
        or inspect.isasyncgenfunction(function)
        or inspect.iscoroutinefunction(function)
    ):
        raise NotAtCollection(f"fixture {name!r} is a generator or async function")
    if definition.params is not None:
        raise NotAtCollection(f"fixture {name!r} is parametrized")
    if len(chain) > _MAX_DEPTH:
        raise NotAtCollection(f"fixture {name!r} depends on more than {_MAX_DEPTH} fixtures")
    arguments: dict[str, Any] = {}
    for argument in definition.argnames:
        if argument == PYTESTCONFIG:
            arguments[argument] = node.config
            continue
        needed = visible_definition(node, argument)
        if needed is None or argument in chain:
            raise NotAtCollection(
                f"fixture {name!r} needs {argument!r}, which only pytest's setup can give"
            )
        arguments[argument] = _value(node, needed, (*chain, argument))
    try:
        return function(**arguments)
    except Exception as exc:  # the user's fixture: any failure means "at run time"
        raise NotAtCollection(
            f"calling fixture {name!r} at collection raised {type(exc).__name__}: {exc}"
        ) from exc
