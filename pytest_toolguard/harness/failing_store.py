"""An audit store that fails on demand: the "audit down" test seam.

``FailingStore(store)`` is an ``AuditStore`` that passes every operation to
``store`` except those ``fail(...)`` named, which raise
``AuditUnavailable`` (as a store whose disk failed would) and change
nothing, until ``heal()``. It is how the ``audit_unavailable`` fault and
the tests make the store go down: the production stores carry no such
switch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..audit.protocol import AuditStore
from ..audit.row import AuditRecord, AuditUnavailable, Outcome
from ..idempotency import Claim

OPERATIONS: frozenset[str] = frozenset(
    {"record", "start", "finish", "release", "get", "rows", "count", "recover", "interrupt_expired"}
)
"""The ``AuditStore`` operations ``FailingStore.fail`` can make fail."""

DEFAULT_MESSAGE = "disk I/O error (injected)"


class FailingStore:
    """``store``, with the operations ``fail`` names raising
    ``AuditUnavailable``. Closing it closes ``store``."""

    def __init__(self, store: AuditStore) -> None:
        self.store = store
        """The store every operation that does not fail reaches."""
        self._failing: frozenset[str] = frozenset()
        self._message = DEFAULT_MESSAGE

    def fail(self, *operations: str, message: str = DEFAULT_MESSAGE) -> None:
        """Make ``operations`` (names from ``OPERATIONS``; all of them when
        none is named) raise ``AuditUnavailable`` saying ``audit store
        failed to <operation>: <message>``, changing nothing. ``ValueError``
        for an unknown operation name."""
        unknown = set(operations) - OPERATIONS
        if unknown:
            raise ValueError(
                f"unknown store operations {sorted(unknown)}; known: {sorted(OPERATIONS)}"
            )
        self._failing = frozenset(operations) or OPERATIONS
        self._message = message

    def heal(self) -> None:
        """Every operation reaches the store again."""
        self._failing = frozenset()

    @contextmanager
    def failing(self, *operations: str, message: str = DEFAULT_MESSAGE) -> Iterator[None]:
        """``fail(*operations)`` within the block, ``heal()`` after it."""
        self.fail(*operations, message=message)
        try:
            yield
        finally:
            self.heal()

    def _check(self, operation: str) -> None:
        if operation in self._failing:
            raise AuditUnavailable(f"audit store failed to {operation}: {self._message}", operation)

    # -- AuditStore --------------------------------------------------------------

    def record(self, rec: AuditRecord) -> int:
        self._check("record")
        return self.store.record(rec)

    def start(
        self,
        rec: AuditRecord,
        *,
        claim_key: str | None = None,
        lease_seconds: float | None = None,
        arguments_digest: str | None = None,
    ) -> tuple[int | None, Claim | None]:
        self._check("start")
        return self.store.start(
            rec,
            claim_key=claim_key,
            lease_seconds=lease_seconds,
            arguments_digest=arguments_digest,
        )

    def finish(self, audit_id: int, outcome: Outcome, *, claim_key: str | None = None) -> None:
        self._check("finish")
        self.store.finish(audit_id, outcome, claim_key=claim_key)

    def release(self, claim_key: str) -> None:
        self._check("release")
        self.store.release(claim_key)

    def get(self, call_id: str) -> AuditRecord | None:
        self._check("get")
        return self.store.get(call_id)

    def rows(self, session_id: str | None = None) -> list[AuditRecord]:
        self._check("rows")
        return self.store.rows(session_id)

    def count(self) -> int:
        self._check("count")
        return self.store.count()

    def recover(self, now: str) -> int:
        self._check("recover")
        return self.store.recover(now)

    def interrupt_expired(self, now: str) -> list[AuditRecord]:
        self._check("interrupt_expired")
        return self.store.interrupt_expired(now)

    def close(self) -> None:
        self.store.close()
