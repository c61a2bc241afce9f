"""What every bridge raises or warns: ``BridgeError`` for a definition,
transcript or server that cannot be imported, ``BridgeWarning`` for what an
importer had to assume. Each names the tool or the place.
"""

from __future__ import annotations

import sys
import warnings

from ..errors import ToolguardError

BRIDGES = __package__ or "pytest_toolguard.bridges"
"""The package whose frames ``warn`` skips: every direction's modules."""


class BridgeWarning(UserWarning):
    """An importer had to assume something about a tool; the message names
    the tool and says what to pass to be explicit."""


class BridgeError(ToolguardError, ValueError):
    """A definition, transcript or server that cannot be imported; the
    message names the tool or the place, and what is wrong."""


def warn(message: str) -> None:
    """A ``BridgeWarning`` pointing at the first caller outside the bridges
    (any of their subpackages)."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(BRIDGES):
        frame = frame.f_back
        level += 1
    warnings.warn(message, BridgeWarning, stacklevel=level)
