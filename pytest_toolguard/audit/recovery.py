"""After a crash: take over the calls whose process died, and clean up
what their killed writes left.

``recover_calls(store, workspace, now)`` is what ``ToolRuntime.recover``
runs: the store marks every RUNNING row whose lease ended INTERRUPTED (and
settles its idempotency key with that failure, so a retry never repeats a
side effect that may have happened), then the workspace loses the temporary
files (``.toolguard-tmp-<tag>-*``) of exactly those calls: a write killed
between creating its temporary file and renaming it leaves one behind. A
call still running elsewhere keeps its lease, its row and its temporary
files. Run it at a worker's start-up and after a worker was lost; several
workers may run it at once (each row is taken over by one of them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sandbox import Workspace
from .lease import call_tag
from .protocol import AuditStore
from .row import AuditRecord


@dataclass(frozen=True, slots=True)
class Recovery:
    """What ``recover_calls`` did: the rows it marked INTERRUPTED (oldest
    first) and the temporary files it removed (paths relative to the
    workspace, sorted)."""

    interrupted: tuple[AuditRecord, ...]
    removed_temporaries: tuple[str, ...]

    def __len__(self) -> int:
        """How many calls were taken over."""
        return len(self.interrupted)


def recover_calls(store: AuditStore, workspace: Workspace, now: str) -> Recovery:
    """Mark the calls whose lease ended INTERRUPTED in ``store`` (finished
    at ``now``), then remove their temporary files from ``workspace``.
    ``AuditUnavailable`` when the store cannot; nothing is removed then."""
    interrupted = store.interrupt_expired(now)
    tags = [call_tag(rec.audit_id, rec.started_at) for rec in interrupted if rec.audit_id]
    removed = workspace.remove_temporaries(tags) if tags else []
    return Recovery(tuple(interrupted), tuple(removed))
