"""``package.module:attribute`` specs, as the ini options name them.

``toolguard_registry = myproject.agent_tools:registry`` names a
``ToolRegistry`` or a function called without arguments that returns one;
``toolguard_secrets = myproject.testing:secrets`` names a mapping of
placeholder keywords to values (or a function returning one). The attribute
may be dotted (``module:Class.attribute``).

Every failure raises ``SpecError`` saying which spec, what went wrong
(malformed, module not importable, attribute missing, wrong type) and what
to do; the module must be importable from the test run (set ``pythonpath``
in the pytest ini file for a module beside the tests).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import ToolguardError

if TYPE_CHECKING:
    from ..registry import ToolRegistry

DEFAULT_REGISTRY = "pytest_toolguard.tools:builtin_registry"
"""The built-in tools, used when no registry is configured."""


class SpecError(ToolguardError, ValueError):
    """A ``module:attribute`` spec that does not name what it must."""


def resolve(spec: str) -> Any:
    """The object a ``package.module:attribute`` spec names."""
    module_name, separator, attribute = spec.strip().partition(":")
    if not separator or not module_name or not attribute:
        raise SpecError(f"{spec!r} is not of the form 'package.module:attribute'")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # a module can fail to import in any way
        raise SpecError(
            f"{spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc} "
            "(is it importable from the test run? see the 'pythonpath' ini option)"
        ) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SpecError(f"{spec!r}: {module_name} has no attribute {attribute!r}") from None
    return target


def load_registry(spec: str) -> ToolRegistry:
    """The ``ToolRegistry`` a spec names, calling a function without
    arguments when it names one."""
    from ..registry import ToolRegistry  # here: this module is imported in every pytest run

    target = resolve(spec)
    if not isinstance(target, ToolRegistry) and callable(target):
        target = _call(spec, target)
    if not isinstance(target, ToolRegistry):
        raise SpecError(
            f"{spec!r} is a {type(target).__name__}, not a ToolRegistry "
            "(or a function returning one)"
        )
    return target


def load_secrets(spec: str) -> Mapping[str, str]:
    """The mapping of placeholder keyword to real value a spec names,
    calling a function without arguments when it names one."""
    target = resolve(spec)
    if not isinstance(target, Mapping) and callable(target):
        target = _call(spec, target)
    if not isinstance(target, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in target.items()
    ):
        raise SpecError(
            f"{spec!r} must be a mapping of str to str (or a function returning one), "
            f"got {type(target).__name__}"
        )
    return dict(target)


IMPORTED_FROM_CWD_FIRST: list[str] = []
"""Modules imported while ``python -m`` had the current directory first on
``sys.path`` (``pytest_toolguard.__main__`` sets it): a file of such a name
there would have been imported instead; the hook forbids those names."""


class DirectoryFinder:
    """A finder of top-level modules in one ``directory``, asked after
    every other one (``sys.meta_path``'s last): the standard library and
    installed packages always win, and a name none of them has is looked
    for there. Each name it was asked for is kept in ``asked``, found or
    not: a file written there later under that name would be imported."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.asked: list[str] = []

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec of the top-level module ``name`` in ``directory`` (None
        for a submodule: its package finds it)."""
        if path is not None:
            return None
        self.asked.append(name)
        return importlib.machinery.PathFinder.find_spec(name, [self.directory])


@contextmanager
def importable_from(directory: str) -> Iterator[DirectoryFinder]:
    """While inside, a module no other finder has is imported from
    ``directory`` (``DirectoryFinder``), never ahead of the standard
    library or an installed package, as ``sys.path.insert(0, ...)`` would."""
    finder = DirectoryFinder(directory)
    sys.meta_path.append(finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)


def _call(spec: str, function: Any) -> Any:
    try:
        return function()
    except Exception as exc:  # the user's factory: say where it failed
        raise SpecError(f"{spec!r}: calling it raised {type(exc).__name__}: {exc}") from None
