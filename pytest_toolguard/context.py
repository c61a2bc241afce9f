"""What a handler gets besides its arguments: ``ToolContext``, and
``current_workspace()`` for code that is not given one.

Data only. The runtime makes one per call; handlers read it and reach
files only through ``ctx.workspace``. A function an agent framework calls
with its own arguments (an Agents SDK ``FunctionTool``, a LangChain tool,
imported with ``bridges``) never sees the ``ToolContext``: while the
runtime runs a call's handler it also sets a context variable to the
call's workspace, which ``current_workspace()`` reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
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


_WORKSPACE: ContextVar[Workspace | None] = ContextVar("toolguard_workspace", default=None)


def current_workspace() -> Workspace | None:
    """The workspace of the call whose handler is running (in this thread,
    task or process child), None outside a call. ``.root`` is the root of
    the world the call runs in: the recorded one while recording, the
    replay's own when a cassette is replayed elsewhere. A thread the
    handler starts itself does not inherit it (``contextvars``' rule:
    pass it on with ``contextvars.copy_context()``)."""
    return _WORKSPACE.get()


@contextmanager
def workspace_of_call(workspace: Workspace) -> Iterator[None]:
    """``current_workspace()`` is ``workspace`` inside the block: the
    runtime wraps each handler run in it, and a guard each tool run it
    lets another program do."""
    token = _WORKSPACE.set(workspace)
    try:
        yield
    finally:
        _WORKSPACE.reset(token)
