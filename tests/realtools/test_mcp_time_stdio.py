"""mcp-server-time from the package index, started as a command over stdio
(``python -m mcp_server_time``), fuzzed from its schemas: a few examples of
``convert_time`` (three arguments, none a path) in the directory world (a
Python server started per example), with nothing reported. Recording,
replay and its fault matrix over stdio are ``tests/bridges/test_mcp_stdio.py``'s."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest

from pytest_toolguard import ToolRegistry
from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command
from pytest_toolguard.fuzz import fuzz_tool

pytest.importorskip("mcp_server_time")

TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    with warnings.catch_warnings():  # the author's view: no path declared
        warnings.simplefilter("ignore")
        return ToolRegistry(from_mcp_command(TIME))


def test_mcp_server_time_over_stdio_is_fuzzed_and_shows_no_problem(
    registry: ToolRegistry, surroundings: Any
) -> None:
    """Its time zones are never taken for paths (no probe); a zone it does
    not know is its own error (``EXECUTION_ERROR``), which is no problem."""
    spec = registry.get("convert_time")
    assert spec is not None and spec.world == "directory"
    before = surroundings.snapshots()
    report = fuzz_tool(spec, registry=registry, examples=3, timeout_seconds=60.0)
    assert [(f.problem, f.detail, f.arguments) for f in report.failures] == []
    assert report.skipped is None and report.handler_calls > 0
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []
