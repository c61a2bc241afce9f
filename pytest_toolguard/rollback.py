"""What write tools changed, kept so a call can be undone.

Before a handler replaces or deletes a file through the workspace, the
previous bytes (a symlink's target, or "absent") are recorded under the
call's id, once per path per call. ``ChangeJournal.rollback`` restores them
in reverse order. The journal lives in memory and does not survive the
process. In process isolation the child that runs the handler sends each
entry to the parent before its change (``isolation.ChildLog``), so a child
killed at its deadline, or dead of its own accord, can still be rolled back.

It is bounded: a file over ``keep_at_most`` bytes is never read (``Unkept``:
the rollback of that call is refused with ``LimitExceeded`` before anything
is restored), and past ``max_bytes`` of kept content the oldest calls are
forgotten first (their rollback then answers that nothing was recorded).
Calls are keyed by call id: two calls sent with the same id are rolled back
together.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .sandbox import (
    DEFAULT_KEEP_AT_MOST,
    LimitExceeded,
    Previous,
    Symlink,
    Unkept,
    Workspace,
    show_path,
)


@dataclass(frozen=True, slots=True)
class Change:
    """One path a call changed, and what it held before: a regular file's
    bytes, a ``Symlink`` (restored as a link), or None (it did not exist)."""

    path: str
    previous: Previous


DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class ChangeJournal:
    """Thread-safe map of call id to the changes that call made, oldest
    call first, holding at most ``max_bytes`` of previous contents, and no
    file over ``keep_at_most`` bytes (pass it to ``Workspace.with_journal``)."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, keep_at_most: int = DEFAULT_KEEP_AT_MOST
    ) -> None:
        self.max_bytes = max_bytes
        self.keep_at_most = keep_at_most
        self._changes: dict[str, list[Change]] = {}  # insertion order: oldest first
        self._bytes = 0
        self._lock = threading.Lock()

    def record(self, call_id: str, path: str, previous: Previous) -> None:
        """Keep the first previous state of ``path`` for this call."""
        with self._lock:
            changes = self._changes.setdefault(call_id, [])
            if all(change.path != path for change in changes):
                changes.append(Change(path, previous))
                self._bytes += _kept(previous)
            while self._bytes > self.max_bytes and len(self._changes) > 1:
                oldest = next(iter(self._changes))
                if oldest == call_id:
                    break  # never drop the call being recorded
                self._bytes -= _size(self._changes.pop(oldest))

    def changes(self, call_id: str) -> list[Change]:
        with self._lock:
            return list(self._changes.get(call_id, ()))

    def rollback(self, call_id: str, workspace: Workspace) -> list[Change]:
        """Restore every path the call changed, newest first, and forget the
        call. Raises KeyError when nothing was recorded for it, and
        ``LimitExceeded`` (restoring nothing, forgetting nothing) when the
        call replaced a file too large to have been kept."""
        with self._lock:
            changes = self._changes[call_id]
            unkept = [c for c in changes if isinstance(c.previous, Unkept)]
            if unkept:
                first = unkept[0]
                assert isinstance(first.previous, Unkept)
                raise LimitExceeded(
                    f"call {call_id} replaced {show_path(first.path)} ({first.previous.size} "
                    f"bytes), larger than the journal keeps ({self.keep_at_most} bytes per "
                    "file): nothing was restored",
                    first.path,
                )
            del self._changes[call_id]
            self._bytes -= _size(changes)
        for change in reversed(changes):
            workspace.restore(change.path, change.previous)
        return changes


def _kept(previous: Previous) -> int:
    """Bytes of memory a previous state holds, as counted against ``max_bytes``."""
    if isinstance(previous, Symlink):
        return len(previous.target)
    if isinstance(previous, Unkept):
        return 0
    return len(previous or b"")


def _size(changes: list[Change]) -> int:
    return sum(_kept(change.previous) for change in changes)
