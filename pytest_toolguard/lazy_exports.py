"""A package's public names, imported from their modules on first use (PEP 562).

The packages the pytest plugin imports in every run need this (the top
level and ``replay``): importing them then costs no jsonschema, yaml or
sqlite set-up. ``bridges`` uses it too: its modules pull in SDK glue. Each
such ``__init__.py`` writes its names twice, side by side: once as plain
imports under ``TYPE_CHECKING`` (what type checkers and readers see) and
once as the table given here (what runs); ``tests/test_architecture.py``
checks that both equal the package's
documented names in ``ARCHITECTURE.md``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of ``package`` whose
    public names are ``table`` (a submodule, relative to the package, and
    the names it gives): a name is imported from its submodule on first
    access, then kept in the package's globals."""
    module_of = {name: module for module, names in table.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__, sorted(module_of)
