"""``AuditStore``: what the runtime needs from an audit log, whichever
database keeps it (``sqlite.SQLiteAuditStore``, ``postgres.PostgresAuditStore``,
or a wrapper such as the harness's ``FailingStore``)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..idempotency import Claim
from .row import AuditRecord, Outcome


@runtime_checkable
class AuditStore(Protocol):
    """What the runtime needs from an audit log. Every method raises
    ``AuditUnavailable`` (and nothing from the storage layer) when the store
    cannot do its work; ``ValueError`` marks a caller's mistake."""

    def record(self, rec: AuditRecord) -> int:
        """Store one finished row (a refused call); committed; its audit_id."""
        ...

    def start(
        self,
        rec: AuditRecord,
        *,
        claim_key: str | None = None,
        lease_seconds: float | None = None,
        arguments_digest: str | None = None,
    ) -> tuple[int | None, Claim | None]:
        """Claim ``claim_key`` and store the RUNNING row, atomically; its
        lease lasts ``lease_seconds`` (the call's deadline) plus the store's
        grace. ``arguments_digest`` (``json_hash`` of the raw arguments,
        given with a key) decides a conflict; a store keeps only a keyed
        fingerprint of it (``idempotency.arguments_fingerprint``), never
        the digest itself."""
        ...

    def finish(self, audit_id: int, outcome: Outcome, *, claim_key: str | None = None) -> None:
        """Finish a RUNNING row with ``outcome`` and, with ``claim_key``,
        store the key's outcome (``outcome.stored_result``)."""
        ...

    def release(self, claim_key: str) -> None:
        """Free a key whose call never reached its handler."""
        ...

    def get(self, call_id: str) -> AuditRecord | None:
        """The latest row for ``call_id``."""
        ...

    def rows(self, session_id: str | None = None) -> list[AuditRecord]:
        """All rows (of one session), oldest first."""
        ...

    def count(self) -> int:
        """How many rows."""
        ...

    def recover(self, now: str) -> int:
        """Mark RUNNING rows whose lease ended INTERRUPTED; how many."""
        ...

    def interrupt_expired(self, now: str) -> list[AuditRecord]:
        """``recover``, answering the rows it marked (as they now are)."""
        ...

    def close(self) -> None:
        """Release the store; later calls raise ``AuditUnavailable``."""
        ...
