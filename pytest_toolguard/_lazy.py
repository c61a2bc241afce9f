"""Re-exports loaded on first use (PEP 562), for the package ``__init__``s.

Importing ``pytest_toolguard`` happens in every pytest run (the plugin is
registered through an entry point); loading jsonschema, yaml or pyfakefs
there would tax every run, toolguard options or not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exported_from: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: each name of
    ``exported_from`` (submodule -> names) is imported from its submodule on
    first access and then kept in ``namespace`` (the package's globals)."""
    module_of = {name: module for module, names in exported_from.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__
