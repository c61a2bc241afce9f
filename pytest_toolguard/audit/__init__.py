"""The audit log: one row per call, written before the handler runs (or,
for a READ call, before its result is returned).

Every call, refused ones included, leaves exactly one row in
``tool_call_audit`` saying who asked, in which session, for which tool, with
which (redacted) arguments and their hash, which rule decided and why, the
state, the code, the duration and a bounded preview. A call that will run
its handler gets its row in state ``RUNNING`` *committed before the handler
starts* (``start``), and the row is finished afterwards
(``finish(audit_id, outcome)``); a call refused earlier gets one finished
row (``record``). If the store cannot write, it raises ``AuditUnavailable``
and the runtime must not run the handler (fail closed). The runtime writes
a READ tool's call without an idempotency key as one finished row
(``record``) after its handler, and withholds the result when that fails:
for READ tools, failing closed means no data leaves the executor
unrecorded. Every write of the runtime, and of a gate in front of another
program's tools, goes through its ``AuditLog`` (``runtime/audit_log.py``),
which queues a write that fails after the call's outcome is real.

Idempotency keys live in the same database (table ``idempotency_keys``) so
that claiming a key and writing the RUNNING row are one transaction: see
``pytest_toolguard.idempotency`` for the semantics. A claim stores no hash
of the raw arguments, only ``arguments_fingerprint``: an HMAC keyed by a
random secret of the database (table ``toolguard_meta``, made with the
schema), so every process sharing the database agrees on it and a guess of
a redacted secret cannot be checked against a row without that key.

**The store never redacts.** Callers pass text that is already redacted
(``pytest_toolguard.redaction``). Redact before the INSERT: an UPDATE that
redacts later leaves the secret in the ``-wal`` file until a checkpoint
copies and truncates it, and in free pages of the database file after that.
The same holds for ``Outcome.stored_result`` (kept in ``idempotency_keys``
and returned by replays): pass a redacted result or accept the secret at
rest.

Leases. A RUNNING row carries its owner (host, pid, process start time)
and the time its lease expires, by the database's clock: the call's
deadline, which the runtime passes to ``start``, plus the store's
``lease_grace_seconds`` (``lease``). ``recover`` takes over only rows whose
lease ended (expired, or their owner provably dead), so it is safe while
other processes work on the same database.

The modules, each one job:

- ``row``: the row (``AuditRecord``, whose fields declare their columns),
  how it ends (``Outcome``), and the conversions between records and rows;
- ``schema``: both dialects' tables and migrations, made from ``row``;
- ``protocol``: ``AuditStore``, what the runtime needs from a store;
- ``sqlite`` (with ``sqlite_connections``): ``SQLiteAuditStore``, the
  embedded default;
- ``postgres`` (with ``postgres_schema``): ``PostgresAuditStore``, for
  workers on several machines;
- ``stores``: a store named by a URL or a path (``open_audit_store``);
- ``lease``: who owns a RUNNING row; ``recovery``: after a crash.
"""

from __future__ import annotations

from .postgres import PostgresAuditStore
from .protocol import AuditStore
from .row import AuditRecord, AuditUnavailable, Outcome
from .sqlite import SQLiteAuditStore

__all__ = [
    "AuditRecord",
    "AuditStore",
    "AuditUnavailable",
    "Outcome",
    "PostgresAuditStore",
    "SQLiteAuditStore",
]
