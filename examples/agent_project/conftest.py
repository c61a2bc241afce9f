"""The project's tools, for replay, the fault matrix, fuzzing and the
``toolguard`` fixture: a ``toolguard_registry`` fixture instead of the ini."""

from __future__ import annotations

import pytest
from agent_tools import registry


@pytest.fixture(scope="session")
def toolguard_registry():
    return registry()
