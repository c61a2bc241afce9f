"""A package's public names, listed once in its ``__init__.pyi`` and loaded
on first use (PEP 562).

The stub is the one list: each public name is a line ``from .module import
Name as Name`` there, which is what type checkers read, and
``lazy_exports(__name__)`` builds the package's ``__getattr__``,
``__dir__`` and ``__all__`` from the same lines. Importing
``pytest_toolguard``, as the pytest plugin does in every test run, then
costs no jsonschema, yaml or sqlite set-up: a name's module is imported
when the name is first used.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from importlib import resources
from typing import Any


def lazy_exports(
    package: str,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of ``package``, from
    the ``from .module import Name as Name`` lines of its ``__init__.pyi``
    (a name is imported from its submodule on first access, then kept in the
    package's globals). ``ValueError`` for a stub line of another form."""
    stub = resources.files(package).joinpath("__init__.pyi").read_text(encoding="utf-8")
    module_of: dict[str, str] = {}
    for node in ast.parse(stub).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if alias.asname != alias.name:
                    raise ValueError(
                        f"{package}/__init__.pyi: write 'import {alias.name} as "
                        f"{alias.name}' (a re-export), not {ast.unparse(node)!r}"
                    )
                module_of[alias.name] = node.module
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
