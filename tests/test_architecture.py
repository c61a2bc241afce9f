"""The shape of the package, checked: what ARCHITECTURE.md promises."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest_toolguard
from pytest_toolguard.errors import ToolguardError


def _modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(pytest_toolguard.__path__, "pytest_toolguard.")
        if not info.name.endswith("__main__")
    )


def test_every_exception_of_ours_derives_from_toolguard_error() -> None:
    outside = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ != name or not issubclass(value, BaseException):
                continue
            if issubclass(value, Warning):
                continue
            if not issubclass(value, ToolguardError):
                outside.append(f"{name}.{value.__qualname__}")
    assert outside == []


def test_the_exception_check_sees_every_module() -> None:
    # the control of the test above: it walks the subpackages too
    names = _modules()
    assert "pytest_toolguard.sandbox" in names
    assert "pytest_toolguard.replay.cassette" in names
    assert "pytest_toolguard.bridges.mcp" in names
