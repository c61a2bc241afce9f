"""What write tools changed, kept so a call can be undone.

Before a handler replaces or deletes a file through the workspace, the
previous bytes (a symlink's target, or "absent") are recorded under the
call's id, once per path per call, with what the change leaves there (the
size and SHA-256 of the bytes written, or "absent"; the last one when the
call changed a path twice). ``ChangeJournal.rollback`` restores them in
reverse order. The journal lives in memory and does not survive the
process. In process isolation the child that runs the handler sends each
entry to the parent before its change (``isolation.ChildLog``), so a child
killed at its deadline, or dead of its own accord, can still be rolled back.

A rollback never destroys later work, and never acts outside the paths
the call changed: every path is first checked, through the same
descriptors it is then restored by (``Workspace.undo``), to still be what
the call left, without following any symbolic link. Only if every path
passes is anything restored; otherwise ``RollbackConflict`` (or the
refusal of the first path that cannot be checked) is raised and the call
stays in the journal. A path already back to what it held before the call
is left alone. If the workspace changes between the check and the act, the
rollback stops there: ``RollbackConflict.restored`` says which paths were
restored, and only the others stay in the journal.

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
    UNRECORDED,
    Leaves,
    LimitExceeded,
    Previous,
    RollbackConflict,
    SandboxError,
    Symlink,
    Unkept,
    Unrecorded,
    Workspace,
    show_path,
)


@dataclass(frozen=True, slots=True)
class Change:
    """One path a call changed, and what it held before: a regular file's
    bytes, a ``Symlink`` (restored as a link), or None (it did not exist);
    ``leaves``: what the call's last change of it left (``UNRECORDED`` when
    the journal was not told: the rollback then cannot check it)."""

    path: str
    previous: Previous
    leaves: Leaves | Unrecorded = UNRECORDED


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
            self._forget_oldest(call_id)

    def leave(self, call_id: str, path: str, leaves: Leaves) -> None:
        """Keep what the call's latest change of ``path`` leaves there (heard
        after ``record``, still before the change: ``Workspace.with_journal``'s
        ``on_leave``)."""
        with self._lock:
            changes = self._changes.get(call_id, [])
            for at, change in enumerate(changes):
                if change.path == path:
                    changes[at] = Change(path, change.previous, leaves)

    def _forget_oldest(self, call_id: str) -> None:
        """Drop the oldest calls past the budget (the lock held)."""
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
        call (see the module docstring). Raises KeyError when nothing was
        recorded for it; ``LimitExceeded`` when the call replaced a file too
        large to have been kept; ``RollbackConflict`` naming every path that
        is no longer what the call left; the ``SandboxError`` of a path that
        cannot be checked safely (``ForbiddenPath`` for a symbolic link
        planted on it). All of these restore and forget nothing, but for a
        ``RollbackConflict`` met while acting, whose ``restored`` paths were
        restored and forgotten."""
        with self._lock:
            changes = list(self._changes[call_id])
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
        newest_first = changes[::-1]
        conflicts: list[str] = []
        for change in newest_first:
            try:
                workspace.undo(change.path, change.previous, change.leaves, check_only=True)
            except RollbackConflict:
                conflicts.append(change.path)
        if conflicts:
            raise RollbackConflict(
                f"rollback conflict: {_listed(conflicts)} no longer what call {call_id} left "
                "(a later call, session or process changed them): nothing was restored; "
                "roll back the later change first, or restore by hand",
                conflicts[0],
                quoted=tuple(conflicts),
                conflicts=tuple(conflicts),
            )
        done: list[Change] = []
        try:
            for change in newest_first:
                workspace.undo(change.path, change.previous, change.leaves)
                done.append(change)
        except (SandboxError, OSError) as exc:
            if not done:
                raise  # nothing restored: the refusal as it is
            self._forget(call_id, done)
            left = [change.path for change in newest_first[len(done) :]]
            raise RollbackConflict(
                f"rollback conflict: the workspace changed while call {call_id} was rolled "
                f"back: {len(done)} path(s) were restored, {_listed(left)} not "
                f"({type(exc).__name__}); they stay in the journal",
                left[0],
                quoted=tuple(left),
                conflicts=tuple(left),
                restored=tuple(change.path for change in done),
            ) from exc
        self._forget(call_id, changes)
        return changes

    def _forget(self, call_id: str, changes: list[Change]) -> None:
        with self._lock:
            kept = self._changes.get(call_id)
            if kept is None:
                return
            gone = {change.path for change in changes}
            self._bytes -= _size([change for change in kept if change.path in gone])
            kept[:] = [change for change in kept if change.path not in gone]
            if not kept:
                del self._changes[call_id]


def _listed(paths: list[str]) -> str:
    """Paths as a message names them: the first few, quoted, then a count."""
    shown = ", ".join(show_path(path) for path in paths[:5])
    more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    verb = "is" if len(paths) == 1 else "are"
    return f"{shown}{more} {verb}"


def _kept(previous: Previous) -> int:
    """Bytes of memory a previous state holds, as counted against ``max_bytes``."""
    if isinstance(previous, Symlink):
        return len(previous.target)
    if isinstance(previous, Unkept):
        return 0
    return len(previous or b"")


def _size(changes: list[Change]) -> int:
    return sum(_kept(change.previous) for change in changes)
