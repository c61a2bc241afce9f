"""Hooks pytest-toolguard adds to pytest (implement them in a conftest.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from ..faults import Fault


def pytest_toolguard_faults(config: pytest.Config) -> Sequence[Fault | type[Fault]] | None:
    """Return faults of your own to add to the matrix, after the built-in
    ones (instances, or classes made without arguments). Their names can
    then be given to ``--toolguard-faults``; ``all`` includes them.

    .. code-block:: python

        # conftest.py
        from pytest_toolguard.faults import Fault

        class SlowDisk(Fault):
            name = "slow_disk"
            ...

        def pytest_toolguard_faults(config):
            return [SlowDisk]
    """
    _: Any = config
    return None
