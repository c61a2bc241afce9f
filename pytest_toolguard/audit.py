"""The audit log: one row per call, written before the handler runs (or,
for a READ call, before its result is returned).

Every call, refused ones included, leaves exactly one row in
``tool_call_audit`` saying who asked, in which session, for which tool, with
which (redacted) arguments and their hash, which rule decided and why, the
state, the code, the duration and a bounded preview. A call that will run
its handler gets its row in state ``RUNNING`` *committed before the handler
starts* (``start``), and the row is finished afterwards (``finish``); a call
refused earlier gets one finished row (``record``). If the store cannot
write, it raises ``AuditUnavailable`` and the runtime must not run the
handler (fail closed). The runtime writes a READ tool's call without an
idempotency key as one finished row (``record``) after its handler, and
withholds the result when that fails: for READ tools, failing closed means
no data leaves the executor unrecorded (``pytest_toolguard.runtime``).

Idempotency keys live in the same database (table ``idempotency_keys``) so
that claiming a key and writing the RUNNING row are one transaction: see
``pytest_toolguard.idempotency`` for the semantics. A claim stores no hash
of the raw arguments, only ``arguments_fingerprint``: an HMAC keyed by a
random secret of the database (table ``toolguard_meta``, made with the
schema), so every process sharing the file agrees on it and a guess of a
redacted secret cannot be checked against a row without that key.

**The store never redacts.** Callers pass text that is already redacted
(``pytest_toolguard.redaction``). Redact before the INSERT: an UPDATE that
redacts later leaves the secret in the ``-wal`` file until a checkpoint
copies and truncates it, and in free pages of the database file after that.
The same holds for ``stored_result`` (kept in ``idempotency_keys`` and
returned by replays): pass a redacted result or accept the secret at rest.

Leases. A RUNNING row carries its owner (host, pid, process start time)
and the time its lease expires, by the database's clock: the call's
deadline, which the runtime passes to ``start``, plus the store's
``lease_grace_seconds`` (see ``pytest_toolguard.lease``). ``recover`` takes
over only rows whose lease ended (expired, or their owner provably dead), so
it is safe while other processes work on the same database.

Concurrency. ``SQLiteAuditStore`` opens one connection per thread, in WAL
mode, with ``synchronous`` as configured and a busy timeout. A write of one
statement (``record``, ``release``, and ``start``/``finish`` without a key)
is committed on its own (autocommit): one statement is atomic, and SQLite
takes the write lock when the statement starts, as ``BEGIN IMMEDIATE``
would, without the two extra statements per write. A write of several
statements (a claim with its RUNNING row, a finish with its key's outcome,
``recover``) is one ``BEGIN IMMEDIATE`` ... ``COMMIT``, so writers queue
instead of deadlocking. Several processes may share one database file, each with its
own ``SQLiteAuditStore``. A store is bound to the process that made it:
after ``fork`` it raises ``AuditUnavailable`` in the child, which must open
a new ``SQLiteAuditStore``. ``":memory:"`` is one database per connection,
so a memory store shares a single connection between threads under a lock.

Indexes cost every call: each one is written by the INSERT of every row.
The table has the one its per-call reads need (``call_id``, for ``get``);
``rows(session_id)`` and ``recover`` scan the table instead (see there).

``PostgresAuditStore`` (``pytest_toolguard.audit_postgres``) is the same
protocol on a PostgreSQL server, for workers on several machines; the helpers
below that turn records into rows and back are shared by both stores.

sqlite3 is C code and never sees pyfakefs: the file must be a real path,
made before a fake filesystem starts, or ``":memory:"``. Simulate "audit
down" at the store: ``close()``, a read-only URI
(``SQLiteAuditStore("file:/x/audit.db?mode=ro", uri=True)``) or the
harness's ``pytest_toolguard.harness.failing_store.FailingStore``.
"""

from __future__ import annotations

import json
import operator
import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

from pytest_toolguard.contract import CallState, ErrorCode
from pytest_toolguard.errors import ToolguardError
from pytest_toolguard.file_writes import create_private
from pytest_toolguard.forking import FORK_GATE
from pytest_toolguard.idempotency import (
    Claim,
    ClaimOutcome,
    StoredKey,
    arguments_fingerprint,
    claim_fingerprint,
    new_fingerprint_key,
    resolve_claim,
)
from pytest_toolguard.jsondata import sha256_text
from pytest_toolguard.lease import LeaseOwner, current_owner, owner_is_dead

__all__ = [
    "AUDIT_COLUMNS",
    "FINGERPRINT_KEY",
    "INTERRUPTED_MESSAGE",
    "LEASE_COLUMNS",
    "LEASE_GRACE_SECONDS",
    "MAX_LEASE_SECONDS",
    "PLACEHOLDER_LIKE",
    "SCHEMA_VERSION",
    "AuditRecord",
    "AuditStore",
    "AuditUnavailable",
    "ConnectionSettings",
    "Decision",
    "SQLiteAuditStore",
    "interrupted_result",
    "interrupted_row",
    "lease_length",
    "not_running",
    "record_from_row",
    "result_json",
    "row_values",
    "storable_data",
    "storable_text",
    "takes_over",
]

SCHEMA_VERSION = 4
"""Kept in ``PRAGMA user_version``; a database from a newer version is refused.

Version 4 keeps each claim under ``claim_fingerprint`` of its key (an HMAC
under the database's fingerprint key) instead of the key itself, a plain
hash of the raw session id and client key; migrating renames the existing
claims so, so retries of those keys still find them.

Version 3 added ``toolguard_meta`` and its ``fingerprint_key`` (see
``pytest_toolguard.idempotency``). Migrating to it keys the fingerprints of
the existing claims (their plain hashes become ``arguments_fingerprint`` of
them, so retries of those keys still replay), and rehashes each audit row
that shows a placeholder from its shown arguments: no plain hash of a
redacted secret is left in the tables.

Version 2 added the lease columns (``lease_owner``, ``lease_expires_at``);
a version 1 database is migrated when opened, and its RUNNING rows, which
have no lease, count as expired. Version 1 lost ``AUTOINCREMENT`` and four
indexes before the first release: no database of the earlier shape exists
outside this project's own runs. One would still be read correctly (the
columns and their meaning are the same); it would only keep paying for the
dropped indexes."""

LEASE_GRACE_SECONDS = 30.0
"""What a lease lasts beyond the call's deadline, by default: time for the
runtime to answer TIMEOUT and write the finishing update after the deadline
(through a reconnect, for a server)."""

MAX_LEASE_SECONDS = 10 * 365 * 86400.0
"""Leases are cut to ten years (a call without a practical deadline): the
expiry stays a four-digit-year timestamp, which text compares in order."""

INTERRUPTED_MESSAGE = "interrupted: the process died while the handler ran"

Decision = Literal["allow", "deny", "ask", "none"]
_DECISIONS: frozenset[str] = frozenset({"allow", "deny", "ask", "none"})


class AuditUnavailable(ToolguardError):
    """The audit store could not read or write. The runtime answers
    ``AUDIT_UNAVAILABLE`` and does not run the handler. The message names the
    operation and SQLite's reason, never the database path; ``operation`` is
    the store method that failed."""

    def __init__(self, message: str, operation: str = "") -> None:
        super().__init__(message)
        self.operation = operation


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One row of ``tool_call_audit``: one call, as the runtime saw it.

    Text fields must be redacted already. ``started_at``/``finished_at`` are
    ISO 8601 UTC text. ``rule`` names what decided (``policy.write_root``,
    ``schema.input``, ``hook.plan_progress``), ``reason`` says why.
    ``replay_of`` names the call that holds the idempotency key (for a
    replay, a DUPLICATE_CALL or an IDEMPOTENCY_CONFLICT), or the call a
    rollback undid; ``idempotency_outcome`` is ``claimed``, ``replay``,
    ``running`` or ``conflict`` when the call carried a key. ``audit_id``
    is the row id: None until stored. ``ValueError`` for a decision outside
    allow/deny/ask/none.
    """

    call_id: str
    session_id: str
    actor: str
    tool_name: str
    risk: str
    arguments_json: str
    arguments_hash: str
    idempotency_key: str | None = None
    decision: Decision = "none"
    rule: str = ""
    reason: str = ""
    state: CallState
    result_code: ErrorCode | None = None
    result_preview: str | None = None
    error_message: str | None = None
    started_at: str
    finished_at: str | None = None
    duration_ms: int | None = None
    replay_of: str | None = None
    idempotency_outcome: str | None = None
    audit_id: int | None = None
    lease_owner: str | None = None
    """Who wrote a row that ran a handler (``LeaseOwner`` text); set by the
    store on ``start`` (a value given is ignored), None for ``record`` rows."""
    lease_expires_at: str | None = None
    """When that row's lease ends, by the database's clock (ISO 8601 UTC
    text); set by the store, kept after the row finished."""

    def __post_init__(self) -> None:
        if self.decision not in _DECISIONS:
            raise ValueError(
                f"decision must be one of allow, deny, ask, none; got {self.decision!r}"
            )


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """The SQLite settings of the calling thread's connection, as SQLite reports them."""

    journal_mode: str
    synchronous: str
    busy_timeout_ms: int
    schema_version: int


def interrupted_result(call_id: str, tool_name: str) -> dict[str, Any]:
    """The outcome ``recover`` stores for a key whose call was interrupted:
    what a later call with that key replays. Uses ``ToolResult``'s field
    names, as results passed to ``finish`` should."""
    return {
        "call_id": call_id,
        "tool_name": tool_name,
        "ok": False,
        "code": ErrorCode.EXECUTION_ERROR.value,
        "message": INTERRUPTED_MESSAGE,
        "data": None,
        "retryable": False,
        "state": CallState.INTERRUPTED.value,
    }


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

    def finish(
        self,
        audit_id: int,
        *,
        state: CallState,
        result_code: ErrorCode | None,
        result_preview: str | None,
        error_message: str | None,
        finished_at: str,
        duration_ms: int | None,
        claim_key: str | None = None,
        stored_result: Mapping[str, Any] | None = None,
    ) -> None:
        """Finish a RUNNING row and, with ``claim_key``, store the key's outcome."""
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


# --- schema -----------------------------------------------------------------

AUDIT_COLUMNS: tuple[str, ...] = (  # the order of the table's columns
    "call_id",
    "session_id",
    "actor",
    "tool_name",
    "risk",
    "arguments_json",
    "arguments_hash",
    "idempotency_key",
    "decision",
    "rule",
    "reason",
    "state",
    "result_code",
    "result_preview",
    "error_message",
    "started_at",
    "finished_at",
    "duration_ms",
    "replay_of",
    "idempotency_outcome",
)
LEASE_COLUMNS: tuple[str, ...] = ("lease_owner", "lease_expires_at")
"""Columns after ``AUDIT_COLUMNS``, written by the store itself on ``start``."""

# _MIGRATIONS[n] takes a database from schema version n to n + 1.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE IF NOT EXISTS tool_call_audit (
            -- Not AUTOINCREMENT, which writes sqlite_sequence on every INSERT: a
            -- plain rowid could be reused only after the newest rows were
            -- deleted, and the store never deletes rows.
            audit_id INTEGER PRIMARY KEY,
            call_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            actor TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            risk TEXT NOT NULL,
            arguments_json TEXT NOT NULL,
            arguments_hash TEXT NOT NULL,
            idempotency_key TEXT,
            decision TEXT NOT NULL CHECK (decision IN ('allow', 'deny', 'ask', 'none')),
            rule TEXT NOT NULL DEFAULT '',
            reason TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL,
            result_code TEXT,
            result_preview TEXT,
            error_message TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            duration_ms INTEGER,
            replay_of TEXT,
            idempotency_outcome TEXT
        )
        """,
        # For get(). Not unique: models reuse ids, and every call still gets its row.
        "CREATE INDEX IF NOT EXISTS idx_audit_call ON tool_call_audit (call_id)",
        """
        CREATE TABLE IF NOT EXISTS idempotency_keys (
            key TEXT PRIMARY KEY,
            tool_name TEXT NOT NULL,
            arguments_hash TEXT NOT NULL,
            call_id TEXT NOT NULL,
            audit_id INTEGER REFERENCES tool_call_audit (audit_id),
            status TEXT NOT NULL CHECK (status IN ('running', 'done')),
            result_json TEXT,
            created_at TEXT NOT NULL,
            finished_at TEXT
        )
        """,
    ),
    (
        "ALTER TABLE tool_call_audit ADD COLUMN lease_owner TEXT",
        "ALTER TABLE tool_call_audit ADD COLUMN lease_expires_at TEXT",
    ),
    (
        # Settings of the database itself: the fingerprint key
        # (``idempotency.new_fingerprint_key``), written by ``_key_claims``.
        """
        CREATE TABLE IF NOT EXISTS toolguard_meta (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )
        """,
    ),
    (),  # claims renamed by their keyed fingerprint: ``_key_claim_names``
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

FINGERPRINT_KEY = "fingerprint_key"
"""The ``toolguard_meta`` row holding the key of the claims' fingerprints."""

PLACEHOLDER_LIKE = "%<redacted:%"
"""A ``LIKE`` pattern for arguments that show a redacted secret."""

_SELECT_AUDIT = f"SELECT audit_id, {', '.join(AUDIT_COLUMNS + LEASE_COLUMNS)} FROM tool_call_audit"
_INSERT_AUDIT = (
    f"INSERT INTO tool_call_audit ({', '.join(AUDIT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in AUDIT_COLUMNS)})"
)
# SQLite's clock, not Python's: replay freezes Python's, and every process
# on the machine shares this one. Text of one fixed shape compares in order.
_SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_INSERT_RUNNING = (
    f"INSERT INTO tool_call_audit ({', '.join(AUDIT_COLUMNS + LEASE_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in AUDIT_COLUMNS)}, ?,"
    " strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?))"
)
_FINISH_AUDIT = (
    "UPDATE tool_call_audit SET state = ?, result_code = ?, result_preview = ?,"
    " error_message = ?, finished_at = ?, duration_ms = ?"
    " WHERE audit_id = ? AND state = 'RUNNING'"
)
_SYNCHRONOUS_NAMES: Mapping[int, str] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


_FIELD_VALUES = operator.attrgetter(*AUDIT_COLUMNS)
_STATE, _RESULT_CODE, _IDEMPOTENCY_KEY, _IDEMPOTENCY_OUTCOME = (
    AUDIT_COLUMNS.index(name)
    for name in ("state", "result_code", "idempotency_key", "idempotency_outcome")
)


def storable_text(text: str) -> str:
    """``text`` as SQLite (and YAML) can store it: a lone surrogate (a file
    name that is not UTF-8, as ``os.fsdecode`` gives it) becomes its
    ``\\udcff`` escape; valid text is returned unchanged."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def storable_data(value: Any) -> Any:
    """``value`` with every string (keys included) made ``storable_text``;
    the same object when nothing needed it (the usual case)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        items = [(storable_data(key), storable_data(item)) for key, item in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, (list, tuple)):
        copied = [storable_data(item) for item in value]
        if all(a is b for a, b in zip(copied, value, strict=True)):
            return value
        return copied if isinstance(value, list) else tuple(copied)
    return value


def row_values(
    rec: AuditRecord,
    state: CallState,
    *,
    idempotency_key: str | None = None,
    idempotency_outcome: str | None = None,
) -> list[Any]:
    """``rec``'s values in ``AUDIT_COLUMNS`` order, enums as their text;
    ``state`` is ``rec.state`` checked by the caller, the two idempotency
    values replace ``rec``'s when given."""
    # Made storable here too: a row that SQLite cannot encode would leave the
    # call without its row (or a RUNNING row never finished).
    # (``isascii`` inline: the common row is all ASCII, and a call per value
    # costs as much as the rest of this function.)
    values = [
        v if not isinstance(v, str) or v.isascii() else storable_text(v) for v in _FIELD_VALUES(rec)
    ]
    values[_STATE] = state.value
    code = values[_RESULT_CODE]
    if code is not None:
        values[_RESULT_CODE] = ErrorCode(code).value
    if idempotency_key is not None:
        values[_IDEMPOTENCY_KEY] = storable_text(idempotency_key)
    if idempotency_outcome is not None:
        values[_IDEMPOTENCY_OUTCOME] = idempotency_outcome
    return values


def record_from_row(row: Sequence[Any]) -> AuditRecord:
    """The record of a row read as ``audit_id``, ``AUDIT_COLUMNS``, then
    ``LEASE_COLUMNS`` (the lease may be left out)."""
    audit_id, *values = row
    fields = dict(zip(AUDIT_COLUMNS + LEASE_COLUMNS, values, strict=False))
    fields["state"] = CallState(fields["state"])
    if fields["result_code"] is not None:
        fields["result_code"] = ErrorCode(fields["result_code"])
    return AuditRecord(audit_id=audit_id, **fields)


def result_json(result: Mapping[str, Any] | None) -> str | None:
    """The JSON text an idempotency key keeps for ``result`` (None for
    None): keys sorted, values JSON cannot encode as their ``str``, text
    made ``storable_text``."""
    if result is None:
        return None
    text = json.dumps(dict(result), ensure_ascii=False, sort_keys=True, default=str)
    return (
        text
        if text.isascii()
        else json.dumps(storable_data(json.loads(text)), ensure_ascii=False, sort_keys=True)
    )


class _SchemaTemplate:
    """A memory database holding the current schema, migrated once per
    process: a new memory store copies it (``Connection.backup``, 76 us)
    instead of running every migration (181 us)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def copy_into(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if self._conn is None:
                template = sqlite3.connect(
                    ":memory:", isolation_level=None, check_same_thread=False
                )
                for step in _MIGRATIONS:
                    for statement in step:
                        template.execute(statement)
                template.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
                self._conn = template
            self._conn.backup(conn)
        # Each memory store its own fingerprint key, never the template's.
        conn.execute(
            "INSERT OR REPLACE INTO toolguard_meta (name, value) VALUES (?, ?)",
            (FINGERPRINT_KEY, new_fingerprint_key()),
        )

    def forget(self) -> None:
        """In a forked child: a new lock (another thread may have held the
        parent's at the fork) and a new database on next use. The inherited
        connection is kept, never closed: closing it calls into SQLite, whose
        locks another thread may have held at a fork made outside the fork
        gate (``pytest_toolguard.forking``)."""
        self._lock = threading.Lock()
        if self._conn is not None:
            _INHERITED.append(self._conn)
        self._conn = None


_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked child inherited and must not close."""


_SCHEMA_TEMPLATE = _SchemaTemplate()


def _key_claims(conn: sqlite3.Connection) -> None:
    """The data part of the migration to version 3, in its transaction:
    the fingerprint key made (once: another process may have made it), each
    claim's plain arguments hash replaced by its keyed fingerprint, and each
    audit row that shows a placeholder rehashed from what it shows.
    ``secure_delete`` overwrites the old hashes in the file's pages."""
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute(
        "INSERT OR IGNORE INTO toolguard_meta (name, value) VALUES (?, ?)",
        (FINGERPRINT_KEY, new_fingerprint_key()),
    )
    key = str(
        conn.execute(
            "SELECT value FROM toolguard_meta WHERE name = ?", (FINGERPRINT_KEY,)
        ).fetchone()[0]
    )
    claims = conn.execute("SELECT key, arguments_hash FROM idempotency_keys").fetchall()
    conn.executemany(
        "UPDATE idempotency_keys SET arguments_hash = ? WHERE key = ?",
        ((arguments_fingerprint(key, str(digest)), claim) for claim, digest in claims),
    )
    shown = conn.execute(
        "SELECT audit_id, arguments_json FROM tool_call_audit WHERE arguments_json LIKE ?",
        (PLACEHOLDER_LIKE,),
    ).fetchall()
    conn.executemany(
        "UPDATE tool_call_audit SET arguments_hash = ? WHERE audit_id = ?",
        ((sha256_text(str(text)), audit_id) for audit_id, text in shown),
    )
    conn.execute("PRAGMA secure_delete = OFF")


def _key_claim_names(conn: sqlite3.Connection) -> None:
    """The data part of the migration to version 4, in its transaction:
    each claim renamed from its key to ``claim_fingerprint`` of it, under
    the database's fingerprint key."""
    conn.execute("PRAGMA secure_delete = ON")
    key = str(
        conn.execute(
            "SELECT value FROM toolguard_meta WHERE name = ?", (FINGERPRINT_KEY,)
        ).fetchone()[0]
    )
    names = [str(row[0]) for row in conn.execute("SELECT key FROM idempotency_keys")]
    conn.executemany(
        "UPDATE idempotency_keys SET key = ? WHERE key = ?",
        ((claim_fingerprint(key, name), name) for name in names),
    )
    conn.execute("PRAGMA secure_delete = OFF")


def _is_memory(target: str, uri: bool) -> bool:
    if target in (":memory:", ""):
        return True
    return uri and ("mode=memory" in target or target.startswith("file::memory:"))


def not_running(audit_id: int) -> AuditUnavailable:
    """What ``finish`` raises for a row that is not RUNNING."""
    return AuditUnavailable(
        f"audit row {audit_id} is not RUNNING: unknown, or finished already "
        "(recover() marks rows whose lease ended INTERRUPTED)",
        "finish",
    )


def interrupted_row(rec: AuditRecord, now: str) -> AuditRecord:
    """``rec`` as ``recover`` leaves it: INTERRUPTED, EXECUTION_ERROR,
    ``INTERRUPTED_MESSAGE``, finished at ``now``."""
    return replace(
        rec,
        state=CallState.INTERRUPTED,
        result_code=ErrorCode.EXECUTION_ERROR,
        error_message=INTERRUPTED_MESSAGE,
        finished_at=now,
    )


def lease_length(lease_seconds: float | None, grace: float) -> float:
    """The seconds a new row's lease lasts: ``lease_seconds`` (the call's
    deadline; None counts as 0, for a caller without one) plus ``grace``,
    within [0, ``MAX_LEASE_SECONDS``]. ``ValueError`` for a negative or
    non-finite length."""
    for part in (lease_seconds or 0.0, grace):
        if not (isinstance(part, (int, float)) and 0 <= part < float("inf")):
            raise ValueError(f"a lease needs finite seconds >= 0, got {part!r}")
    return min(float((lease_seconds or 0.0) + grace), MAX_LEASE_SECONDS)


def takes_over(lease_owner: str | None, expired: bool, here: LeaseOwner) -> bool:
    """Whether ``recover`` takes over a RUNNING row: its lease expired, or it
    has none (a row older than leases), or its owner is provably dead."""
    if expired:
        return True
    owner = LeaseOwner.parse(lease_owner)
    return owner is None or owner_is_dead(owner, here)


# Bumped in the child after every os.fork(). A store remembers the value it
# was opened under and compares it on each operation: the same check as
# os.getpid() != its pid, without a system call per operation. Module state,
# because the fork hooks cannot be unregistered (one per store would pile up).
_fork_generation = 0


def _count_fork() -> None:
    global _fork_generation
    _fork_generation += 1
    _SCHEMA_TEMPLATE.forget()


if sys.platform != "win32":
    os.register_at_fork(after_in_child=_count_fork)


def _abandoned(connections: list[tuple[threading.Thread, sqlite3.Connection]]) -> None:
    """A store collected without ``close()``: its connections are closed by
    the next thread inside the fork gate, not by the garbage collector in
    whatever thread it runs, a fork perhaps under way."""
    FORK_GATE.close_later([conn.close for _thread, conn in connections])


class SQLiteAuditStore:
    """``AuditStore`` on SQLite: durable, shared by threads and processes.

    ``path`` is a file path, ``":memory:"``, or with ``uri=True`` a SQLite URI
    such as ``file:/x/audit.db?mode=ro``. ``synchronous="NORMAL"`` (the
    default) in WAL mode never corrupts the database and may lose the last
    commits on power loss; ``"FULL"`` keeps them at some cost per commit.
    ``busy_timeout_ms`` bounds how long a write waits for another writer.
    ``host`` names this machine in the leases of the rows it starts (default:
    its host name); ``lease_grace_seconds`` is what a lease lasts beyond the
    call's deadline (see the module docstring).

    The constructor opens the database and creates or migrates the schema;
    it raises ``AuditUnavailable`` when it cannot, ``ValueError`` for bad
    settings. See the module docstring for threads, processes and fork.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout_ms: int = 5000,
        uri: bool = False,
        host: str | None = None,
        lease_grace_seconds: float = LEASE_GRACE_SECONDS,
    ) -> None:
        lease_length(None, lease_grace_seconds)  # ValueError for a bad grace
        self._host = host
        self._lease_grace = float(lease_grace_seconds)
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        if not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
            raise ValueError(f"busy_timeout_ms must be an int >= 0, got {busy_timeout_ms!r}")
        self._target = os.fspath(path)
        self._uri = uri
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._memory = _is_memory(self._target, uri)
        self._fork_generation = _fork_generation
        self._closed = False
        self._local = threading.local()
        self._registry_lock = threading.Lock()
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        weakref.finalize(self, _abandoned, self._connections)  # changed in place only
        self._shared: sqlite3.Connection | None = None
        # One :memory: connection is the whole database: threads take turns.
        self._memory_lock: threading.Lock | None = threading.Lock() if self._memory else None
        self._fingerprint_key = ""
        try:
            self._migrate()
            self._fingerprint_key = self._load_fingerprint_key()
        except BaseException:
            self.close()
            raise

    # --- connections and transactions ---------------------------------------

    def _open(self) -> sqlite3.Connection:
        if not self._memory and not self._uri:
            # SQLite would create the file 0644, and its -wal and -shm with
            # the database's mode: created 0600 first, all three are private.
            create_private(self._target)
        conn = sqlite3.connect(
            self._target,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,  # autocommit; transactions are explicit
            check_same_thread=False,  # each is used by one thread; close() may run elsewhere
            uri=self._uri,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms:d}")
            if not self._memory:
                conn.execute("PRAGMA journal_mode = WAL")
            elif self._target in (":memory:", "") and not self._uri:
                _SCHEMA_TEMPLATE.copy_into(conn)  # the migrated schema, faster than migrating
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _register(self, conn: sqlite3.Connection) -> None:
        with self._registry_lock:
            if self._closed:
                conn.close()
                raise AuditUnavailable("the audit store is closed")
            # Connections of threads that ended are closed here, so a stream
            # of short-lived threads does not pile up open connections.
            self._close_ended_threads()
            self._connections.append((threading.current_thread(), conn))

    def close_ended_threads(self) -> int:
        """Close the connections of threads that ended (each thread opens
        its own, and one that ended cannot use it again); the store stays
        open. Returns how many were closed. ``ToolRuntime.close`` calls it
        on a store it was given."""
        with self._entered(), self._registry_lock:
            return self._close_ended_threads()

    def _close_ended_threads(self) -> int:
        alive: list[tuple[threading.Thread, sqlite3.Connection]] = []
        ended: list[tuple[threading.Thread, sqlite3.Connection]] = []
        for thread, conn in self._connections:
            (alive if thread.is_alive() else ended).append((thread, conn))
        for _thread, conn in ended:
            with suppress(sqlite3.Error):
                conn.close()
        self._connections[:] = alive
        return len(ended)

    def _connection(self, operation: str) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use.

        ``AuditUnavailable`` when the store is closed or was inherited through
        ``fork``; ``sqlite3.OperationalError`` when the connection cannot be
        opened (callers turn it into ``AuditUnavailable``)."""
        if self._closed:
            raise AuditUnavailable("the audit store is closed", operation)
        if self._fork_generation != _fork_generation:
            raise AuditUnavailable(
                "this audit store was opened in another process; "
                "open a new SQLiteAuditStore in this process (after fork)",
                operation,
            )
        if self._memory:
            if self._shared is None:
                shared = self._open()
                self._register(shared)
                self._shared = shared
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if conn is None:
            conn = self._open()
            self._register(conn)
            self._local.connection = conn
        return conn

    def _unavailable(self, operation: str, exc: sqlite3.Error) -> AuditUnavailable:
        reason = str(exc).replace(self._target, "<audit database>") or type(exc).__name__
        return AuditUnavailable(f"audit store failed to {operation}: {reason}", operation)

    def _write_one(
        self, operation: str, statement: str, parameters: Sequence[Any]
    ) -> sqlite3.Cursor:
        """Run one write statement as its own transaction, committed before
        this returns (autocommit: SQLite takes the write lock when the
        statement starts, as ``BEGIN IMMEDIATE`` would, and rolls the
        statement back when it fails). Every sqlite3 error becomes
        ``AuditUnavailable``."""
        # ``_entered`` spelt out: a generator's context manager costs as much
        # as the rest of this function's Python, and this is every write.
        with FORK_GATE.inside():
            lock = self._memory_lock
            if lock is None:
                return self._execute_one(operation, statement, parameters)
            with lock:
                return self._execute_one(operation, statement, parameters)

    def _execute_one(
        self, operation: str, statement: str, parameters: Sequence[Any]
    ) -> sqlite3.Cursor:
        try:
            conn = self._connection(operation)
            if conn.in_transaction:  # left over from a failed ROLLBACK: never write inside it
                conn.execute("ROLLBACK")
            return conn.execute(statement, parameters)
        except sqlite3.Error as exc:
            raise self._unavailable(operation, exc) from exc

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed when the block ends
        normally and rolled back when it raises. A block that decides to
        store nothing may end the transaction itself with ``ROLLBACK``.
        Every sqlite3 error becomes ``AuditUnavailable``."""
        with self._entered():
            try:
                conn = self._connection(operation)
                if conn.in_transaction:  # left over from a failed ROLLBACK
                    conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    if conn.in_transaction:
                        conn.execute("COMMIT")
                except BaseException:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._unavailable(operation, exc) from exc

    @contextmanager
    def _reading(self, operation: str) -> Iterator[sqlite3.Connection]:
        """The connection for reads, every sqlite3 error turned into
        ``AuditUnavailable``."""
        with self._entered():
            try:
                yield self._connection(operation)
            except sqlite3.Error as exc:
                raise self._unavailable(operation, exc) from exc

    @contextmanager
    def _entered(self) -> Iterator[None]:
        """Inside the fork gate (no fork copies SQLite's locks while this
        thread may hold them: ``pytest_toolguard.forking``), then, for a
        memory store, holding its one connection."""
        with FORK_GATE.inside():
            lock = self._memory_lock
            if lock is None:
                yield
                return
            with lock:
                yield

    def _migrate(self) -> None:
        with self._reading("open") as conn:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise AuditUnavailable(
                f"the audit database has schema version {version}; this pytest-toolguard "
                f"reads up to {SCHEMA_VERSION}: upgrade pytest-toolguard or use another file",
                "open",
            )
        with self._transaction("open") as conn:
            # Read again under the write lock: another process may have migrated.
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            for step in _MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            if version < 3:
                _key_claims(conn)
            if version < 4:
                _key_claim_names(conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")

    def _load_fingerprint_key(self) -> str:
        """The database's fingerprint key, made now if a database of this
        version somehow lacks it (then claims made under a lost key answer
        CONFLICT, never run twice)."""
        with self._reading("open") as conn:
            row = conn.execute(
                "SELECT value FROM toolguard_meta WHERE name = ?", (FINGERPRINT_KEY,)
            ).fetchone()
        if row is None:
            with self._transaction("open") as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO toolguard_meta (name, value) VALUES (?, ?)",
                    (FINGERPRINT_KEY, new_fingerprint_key()),
                )
                row = conn.execute(
                    "SELECT value FROM toolguard_meta WHERE name = ?", (FINGERPRINT_KEY,)
                ).fetchone()
        key = str(row[0])
        try:
            bytes.fromhex(key)
        except ValueError:
            raise AuditUnavailable(
                "the audit database's fingerprint key is not hex text", "open"
            ) from None
        return key

    # --- writes ---------------------------------------------------------------

    def record(self, rec: AuditRecord) -> int:
        """Store one finished row (a call refused before its handler ran, or
        answered from an idempotency record) and commit it.

        Returns its audit_id. ``ValueError`` when ``rec.state`` is not a
        finished state; ``AuditUnavailable`` when the row could not be stored.
        """
        state = CallState(rec.state)
        if not state.finished:
            raise ValueError(f"record() stores finished rows; state {state} is not finished")
        cursor = self._write_one("record", _INSERT_AUDIT, row_values(rec, state))
        return int(cursor.lastrowid or 0)

    @property
    def lease_owner(self) -> LeaseOwner:
        """The owner this store writes into the leases of the rows it starts
        (computed per process: a forked child has its own)."""
        return current_owner(self._host)

    def start(
        self,
        rec: AuditRecord,
        *,
        claim_key: str | None = None,
        lease_seconds: float | None = None,
        arguments_digest: str | None = None,
    ) -> tuple[int | None, Claim | None]:
        """Claim ``claim_key`` (when given) and store ``rec`` as the RUNNING
        row, in one transaction committed before return. The row's lease
        names this process and lasts ``lease_seconds`` (the call's
        deadline) plus ``lease_grace_seconds``, by SQLite's clock. The claim
        keeps ``arguments_fingerprint`` of ``arguments_digest`` (the raw
        arguments' hash; ``rec.arguments_hash`` when not given) under this
        database's key: another digest with the same key is a CONFLICT.

        * No key: ``(audit_id, None)``.
        * Key claimed: ``(audit_id, Claim(CLAIMED, key))``; the row's
          ``idempotency_key`` defaults to ``claim_key`` and its
          ``idempotency_outcome`` to ``"claimed"``.
        * Key held by an earlier call: ``(None, claim)`` with ``REPLAY``,
          ``RUNNING`` or ``CONFLICT``; nothing is stored, and the caller
          records its own finished row with ``record``.

        Exactly one of any number of concurrent starts with one key, in any
        threads or processes, gets ``CLAIMED``. On ``AuditUnavailable``
        nothing was stored and the key is not held. ``ValueError`` when
        ``rec.state`` is not RUNNING or the lease is negative.
        """
        state = CallState(rec.state)
        if state is not CallState.RUNNING:
            raise ValueError(f"start() stores RUNNING rows; got state {state}")
        lease = f"+{lease_length(lease_seconds, self._lease_grace):.3f} seconds"
        if claim_key is None:
            values = row_values(rec, state)
            values += (str(current_owner(self._host)), lease)
            cursor = self._write_one("start", _INSERT_RUNNING, values)
            return int(cursor.lastrowid or 0), None
        values = row_values(
            rec,
            state,
            idempotency_key=rec.idempotency_key or claim_key,
            idempotency_outcome=rec.idempotency_outcome or ClaimOutcome.CLAIMED.value,
        )
        values += (str(current_owner(self._host)), lease)
        fingerprint = arguments_fingerprint(
            self._fingerprint_key,
            rec.arguments_hash if arguments_digest is None else arguments_digest,
        )
        name = claim_fingerprint(self._fingerprint_key, claim_key)
        with self._transaction("start") as conn:
            # The row first, so that the claim carries its audit_id in one
            # statement; when the key is held, both are rolled back.
            audit_id = int(conn.execute(_INSERT_RUNNING, values).lastrowid or 0)
            claimed = conn.execute(
                "INSERT INTO idempotency_keys"
                " (key, tool_name, arguments_hash, call_id, audit_id, status, created_at)"
                " VALUES (?, ?, ?, ?, ?, 'running', ?) ON CONFLICT (key) DO NOTHING",
                (
                    name,
                    rec.tool_name,
                    fingerprint,
                    rec.call_id,
                    audit_id,
                    rec.started_at,
                ),
            ).rowcount
            if claimed == 1:
                return audit_id, Claim(ClaimOutcome.CLAIMED, claim_key)
            stored = self._stored_key(conn, claim_key, name)
            conn.execute("ROLLBACK")
        return None, resolve_claim(stored, rec.tool_name, fingerprint)

    @staticmethod
    def _stored_key(conn: sqlite3.Connection, key: str, name: str) -> StoredKey:
        row = conn.execute(
            "SELECT tool_name, arguments_hash, call_id, status, result_json"
            " FROM idempotency_keys WHERE key = ?",
            (name,),
        ).fetchone()
        tool_name, args_hash, call_id, status, result_json = row
        result = json.loads(result_json) if result_json is not None else None
        return StoredKey(key, tool_name, args_hash, call_id, status, result)

    def finish(
        self,
        audit_id: int,
        *,
        state: CallState,
        result_code: ErrorCode | None,
        result_preview: str | None,
        error_message: str | None,
        finished_at: str,
        duration_ms: int | None,
        claim_key: str | None = None,
        stored_result: Mapping[str, Any] | None = None,
    ) -> None:
        """Finish the RUNNING row ``audit_id`` and, with ``claim_key``, mark
        the key done with ``stored_result`` (what later calls replay), in one
        transaction committed before return.

        ``stored_result`` should use ``ToolResult``'s field names; values JSON
        cannot encode are stored as their ``str``. A key that is no longer
        running (recovered meanwhile) keeps its first outcome.
        ``AuditUnavailable`` when the store fails, or when the row is unknown
        or no longer RUNNING (``recover`` marked it INTERRUPTED): nothing is
        changed then. ``ValueError`` when ``state`` is not finished.
        """
        finished = CallState(state)
        if not finished.finished:
            raise ValueError(f"finish() needs a finished state, got {finished}")
        code = ErrorCode(result_code).value if result_code is not None else None
        parameters = (
            finished.value,
            code,
            None if result_preview is None else storable_text(result_preview),
            None if error_message is None else storable_text(error_message),
            finished_at,
            duration_ms,
            audit_id,
        )
        if claim_key is None:
            if self._write_one("finish", _FINISH_AUDIT, parameters).rowcount != 1:
                raise not_running(audit_id)
            return
        stored_json = result_json(stored_result)
        with self._transaction("finish") as conn:
            if conn.execute(_FINISH_AUDIT, parameters).rowcount != 1:
                raise not_running(audit_id)
            conn.execute(
                "UPDATE idempotency_keys SET status = 'done', result_json = ?,"
                " finished_at = ? WHERE key = ? AND status = 'running'",
                (stored_json, finished_at, claim_fingerprint(self._fingerprint_key, claim_key)),
            )

    def release(self, claim_key: str) -> None:
        """Free ``claim_key`` when its call never reached its handler, so a
        retry runs. A finished key is never freed (its outcome stands); an
        unknown key is ignored. ``start`` already frees the key when it
        fails, so this is for failures after a successful ``start``."""
        self._write_one(
            "release",
            "DELETE FROM idempotency_keys WHERE key = ? AND status = 'running'",
            (claim_fingerprint(self._fingerprint_key, claim_key),),
        )

    def recover(self, now: str) -> int:
        """Mark every RUNNING row whose lease ended INTERRUPTED; how many.
        See ``interrupt_expired``."""
        return len(self.interrupt_expired(now))

    def interrupt_expired(self, now: str) -> list[AuditRecord]:
        """Mark every RUNNING row whose lease ended INTERRUPTED (code
        EXECUTION_ERROR, ``INTERRUPTED_MESSAGE``, finished at ``now``) and
        mark its running idempotency key done with ``interrupted_result``, so
        a retry after a crash replays the failure instead of repeating a side
        effect that may have happened. Answers the rows it marked, as they
        now are, oldest first.

        A lease ended when it expired by SQLite's clock (``now`` is only
        what ``finished_at`` says), when the row has none (written before
        leases), or when its owner is a process of this host that is
        provably dead. Rows of live processes are left alone, so this is safe
        while other processes work on the database. It reads the whole audit
        table, and the running keys' whole table, once: no index serves it,
        since one on ``state`` would cost every call's INSERT and UPDATE while
        ``recover`` runs at start-up and after a crash.
        """
        here = current_owner(self._host)
        with self._transaction("recover") as conn:
            running = conn.execute(
                f"SELECT audit_id, {', '.join(AUDIT_COLUMNS + LEASE_COLUMNS)},"
                f" lease_expires_at IS NULL OR lease_expires_at <= {_SQLITE_NOW}"
                " FROM tool_call_audit WHERE state = 'RUNNING' ORDER BY audit_id"
            ).fetchall()
            marked = {
                row[0]: interrupted_row(record_from_row(row[:-1]), now)
                for row in running
                if takes_over(row[-3], bool(row[-1]), here)
            }
            if not marked:
                return []
            conn.executemany(
                "UPDATE tool_call_audit SET state = ?, result_code = ?, error_message = ?,"
                " finished_at = ? WHERE audit_id = ?",
                (
                    (
                        CallState.INTERRUPTED.value,
                        ErrorCode.EXECUTION_ERROR.value,
                        INTERRUPTED_MESSAGE,
                        now,
                        audit_id,
                    )
                    for audit_id in marked
                ),
            )
            held = conn.execute(
                "SELECT key, audit_id FROM idempotency_keys WHERE status = 'running'"
            ).fetchall()
            conn.executemany(
                "UPDATE idempotency_keys SET status = 'done', result_json = ?,"
                " finished_at = ? WHERE key = ?",
                (
                    (result_json(interrupted_result(row.call_id, row.tool_name)), now, key)
                    for key, audit_id in held
                    if (row := marked.get(audit_id)) is not None
                ),
            )
            return list(marked.values())

    # --- reads ----------------------------------------------------------------

    def get(self, call_id: str) -> AuditRecord | None:
        """The latest row for ``call_id`` (ids may repeat), or None. Served
        by the table's one secondary index."""
        with self._reading("get") as conn:
            row = conn.execute(
                f"{_SELECT_AUDIT} WHERE call_id = ? ORDER BY audit_id DESC LIMIT 1", (call_id,)
            ).fetchone()
        return record_from_row(row) if row is not None else None

    def rows(self, session_id: str | None = None) -> list[AuditRecord]:
        """Every row, or every row of ``session_id``, in insertion order.

        Either way it reads the whole table: no index on ``session_id``,
        because every call would pay for it on its INSERT while this is a
        read for reports and tests, not for the calls themselves."""
        with self._reading("rows") as conn:
            if session_id is None:
                fetched = conn.execute(f"{_SELECT_AUDIT} ORDER BY audit_id").fetchall()
            else:
                fetched = conn.execute(
                    f"{_SELECT_AUDIT} WHERE session_id = ? ORDER BY audit_id", (session_id,)
                ).fetchall()
        return [record_from_row(row) for row in fetched]

    def count(self) -> int:
        """How many rows the log holds."""
        with self._reading("count") as conn:
            return int(conn.execute("SELECT count(*) FROM tool_call_audit").fetchone()[0])

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: ``"ok"`` for a sound database,
        else its findings, one per line."""
        with self._reading("integrity_check") as conn:
            return "\n".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))

    def settings(self) -> ConnectionSettings:
        """The journal mode, synchronous level, busy timeout and schema
        version as SQLite reports them on the calling thread's connection."""
        with self._reading("settings") as conn:
            journal_mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            synchronous = int(conn.execute("PRAGMA synchronous").fetchone()[0])
            busy_timeout = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        return ConnectionSettings(
            journal_mode=journal_mode.lower(),
            synchronous=_SYNCHRONOUS_NAMES.get(synchronous, str(synchronous)),
            busy_timeout_ms=busy_timeout,
            schema_version=version,
        )

    # --- copies and lifetime -------------------------------------------------

    def copy(self) -> SQLiteAuditStore:
        """A new in-memory store holding this one's rows and idempotency
        keys as they are now (a snapshot; later writes to either stay
        apart)."""
        twin = SQLiteAuditStore(":memory:")
        with self._reading("get") as source, twin._reading("get") as target:
            source.backup(target)
        twin._fingerprint_key = twin._load_fingerprint_key()  # the claims' own key
        return twin

    def serialize(self) -> bytes:
        """The database as SQLite would write it to one file (for a memory
        store too): what a secret scan reads. ``AuditUnavailable`` when the
        store is closed."""
        with self._entered():
            conn = self._connection("get")
            try:
                return conn.serialize()
            except sqlite3.Error as exc:
                raise self._unavailable("get", exc) from exc

    def close(self) -> None:
        """Close every connection this store opened, in all threads. Later
        calls raise ``AuditUnavailable``. Idempotent. Call it once no call
        is in flight: a call running meanwhile fails with
        ``AuditUnavailable``."""
        with self._entered():
            with self._registry_lock:
                self._closed = True
                connections = self._connections[:]
                self._connections.clear()
                self._shared = None
            for _thread, conn in connections:
                with suppress(sqlite3.Error):
                    conn.close()

    def __enter__(self) -> SQLiteAuditStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
