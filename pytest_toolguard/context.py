"""What a handler gets besides its arguments: ``ToolContext``.

Data only. The runtime makes one per call; handlers read it and reach
files only through ``ctx.workspace``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .capabilities import Capabilities
from .sandbox import Workspace


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a handler gets besides its arguments. Files only through
    ``workspace``: it is the sandbox, journaled for rollback."""

    call_id: str
    session_id: str
    actor: str
    workspace: Workspace
    capabilities: Capabilities
    variables: Mapping[str, str]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set when the deadline passed and the call was answered TIMEOUT. A
    write or delete through ``workspace`` that starts after that raises
    ``CallCancelled`` (one already past its checks still finishes); a long
    handler should also check it and return."""

    @property
    def max_read_bytes(self) -> int:
        return self.capabilities.max_read_bytes

    @property
    def max_write_bytes(self) -> int:
        return self.capabilities.max_write_bytes
