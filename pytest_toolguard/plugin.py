"""pytest glue: fixtures and markers only; all logic lives in the library."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .audit import SQLiteAuditStore
from .policy import Capabilities
from .registry import ToolRegistry
from .runtime import ToolRuntime
from .tools import builtin_registry

RuntimeFactory = Callable[..., ToolRuntime]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "toolguard(**options): pytest-toolguard options for this test"
    )


@pytest.fixture
def toolguard_runtime(tmp_path: Path) -> Iterator[RuntimeFactory]:
    """A factory of ``ToolRuntime``s on a fresh workspace (``tmp_path /
    "workspace"``) with an audit database on real disk. Built-in tools unless
    ``registry=`` is given. At teardown every runtime is closed, and the test
    fails if a handler that overran its deadline is still running."""
    made: list[ToolRuntime] = []
    stores: list[SQLiteAuditStore] = []

    def make(
        registry: ToolRegistry | None = None,
        capabilities: Capabilities | None = None,
        **options: Any,
    ) -> ToolRuntime:
        workspace = tmp_path / "workspace"
        workspace.mkdir(exist_ok=True)
        audit = options.pop("audit", None)
        if audit is None:
            audit = SQLiteAuditStore(tmp_path / f"audit-{len(made)}.db")
            stores.append(audit)
        runtime = ToolRuntime(
            registry or builtin_registry(), str(workspace), capabilities, audit, **options
        )
        made.append(runtime)
        return runtime

    yield make
    problems: list[str] = []
    for runtime in made:
        problems += runtime.close(join_timeout=5.0)
    for store in stores:
        store.close()
    if problems:
        pytest.fail("toolguard: " + "; ".join(problems), pytrace=False)
