"""What write tools changed, kept so a call can be undone.

Before a handler replaces or deletes a file through the workspace, the
previous bytes (or "absent") are recorded under the call's id, once per path
per call. ``ChangeJournal.rollback`` restores them in reverse order. The
journal lives in memory: it survives neither the process nor, in process
isolation, the child that ran the handler (its changes are carried back with
the result, see ``runtime``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .sandbox import Workspace


@dataclass(frozen=True, slots=True)
class Change:
    """One path a call changed, and what it held before (None: it did not exist)."""

    path: str
    previous: bytes | None


class ChangeJournal:
    """Thread-safe map of call id to the changes that call made."""

    def __init__(self) -> None:
        self._changes: dict[str, list[Change]] = {}
        self._lock = threading.Lock()

    def record(self, call_id: str, path: str, previous: bytes | None) -> None:
        """Keep the first previous state of ``path`` for this call."""
        with self._lock:
            changes = self._changes.setdefault(call_id, [])
            if all(change.path != path for change in changes):
                changes.append(Change(path, previous))

    def changes(self, call_id: str) -> list[Change]:
        with self._lock:
            return list(self._changes.get(call_id, ()))

    def rollback(self, call_id: str, workspace: Workspace) -> list[Change]:
        """Restore every path the call changed, newest first, and forget the
        call. Raises KeyError when nothing was recorded for it."""
        with self._lock:
            changes = self._changes.pop(call_id)
        for change in reversed(changes):
            workspace.restore(change.path, change.previous)
        return changes
