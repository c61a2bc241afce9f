"""``SQLiteAuditStore``: the audit log and the idempotency keys in SQLite,
the embedded default (``pytest_toolguard.audit`` says what a store
guarantees; ``sqlite_connections`` how threads, processes and forks share
the database).

sqlite3 is C code and never sees pyfakefs: the file must be a real path,
made before a fake filesystem starts, or ``":memory:"``. Simulate "audit
down" at the store: ``close()``, a read-only URI
(``SQLiteAuditStore("file:/x/audit.db?mode=ro", uri=True)``) or the
harness's ``pytest_toolguard.harness.failing_store.FailingStore``.

Indexes cost every call: each one is written by the INSERT of every row.
The table has the one its per-call reads need (``call_id``, for ``get``);
``rows(session_id)`` and ``recover`` scan the table instead (see there).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass

from ..contract import CallState, ErrorCode
from ..idempotency import (
    Claim,
    ClaimOutcome,
    StoredKey,
    arguments_fingerprint,
    claim_fingerprint,
    resolve_claim,
)
from .lease import LeaseOwner, current_owner
from .row import (
    AUDIT_COLUMNS,
    INTERRUPTED_MESSAGE,
    LEASE_COLUMNS,
    AuditRecord,
    Outcome,
    finish_values,
    interrupted_result,
    interrupted_row,
    lease_length,
    not_running_error,
    record_from_row,
    result_json,
    row_values,
    takes_over,
)
from .schema import ALL_COLUMNS, finish_sql
from .sqlite_connections import SQLiteConnections

_SELECT_AUDIT = f"SELECT audit_id, {ALL_COLUMNS} FROM tool_call_audit"
_INSERT_AUDIT = (
    f"INSERT INTO tool_call_audit ({', '.join(AUDIT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in AUDIT_COLUMNS)})"
)
# SQLite's clock, not Python's: replay freezes Python's, and every process
# on the machine shares this one. Text of one fixed shape compares in order.
_SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_INSERT_RUNNING = (
    f"INSERT INTO tool_call_audit ({ALL_COLUMNS})"
    f" VALUES ({', '.join('?' for _ in AUDIT_COLUMNS)}, ?,"
    " strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?))"
)
_FINISH_AUDIT = finish_sql("?")
_SYNCHRONOUS_NAMES: Mapping[int, str] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
assert len(LEASE_COLUMNS) == 2  # the owner, then the expiry: _INSERT_RUNNING's last two


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """The SQLite settings of the calling thread's connection, as SQLite reports them."""

    journal_mode: str
    synchronous: str
    busy_timeout_ms: int
    schema_version: int


class SQLiteAuditStore(SQLiteConnections):
    """``AuditStore`` on SQLite: durable, shared by threads and processes.

    ``path`` is a file path, ``":memory:"``, or with ``uri=True`` a SQLite URI
    such as ``file:/x/audit.db?mode=ro``. ``synchronous="NORMAL"`` (the
    default) in WAL mode never corrupts the database and may lose the last
    commits on power loss; ``"FULL"`` keeps them at some cost per commit.
    ``busy_timeout_ms`` bounds how long a write waits for another writer.
    ``host`` names this machine in the leases of the rows it starts (default:
    its host name); ``lease_grace_seconds`` is what a lease lasts beyond the
    call's deadline (see ``pytest_toolguard.audit.lease``).

    The constructor opens the database and creates or migrates the schema;
    it raises ``AuditUnavailable`` when it cannot, ``ValueError`` for bad
    settings. ``sqlite_connections`` says how threads, processes and forks share it.
    """

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

    def finish(self, audit_id: int, outcome: Outcome, *, claim_key: str | None = None) -> None:
        """Finish the RUNNING row ``audit_id`` with ``outcome`` and, with
        ``claim_key``, mark the key done with ``outcome.stored_result`` (what
        later calls replay), in one transaction committed before return.

        ``stored_result`` should use ``ToolResult``'s field names; values JSON
        cannot encode are stored as their ``str``. A key that is no longer
        running (recovered meanwhile) keeps its first outcome.
        ``AuditUnavailable`` when the store fails, or when the row is unknown
        or no longer RUNNING (``recover`` marked it INTERRUPTED): nothing is
        changed then. ``ValueError`` when the outcome's state is not finished.
        """
        parameters = (*finish_values(outcome), audit_id)
        if claim_key is None:
            if self._write_one("finish", _FINISH_AUDIT, parameters).rowcount != 1:
                raise not_running_error(audit_id)
            return
        stored_json = result_json(outcome.stored_result)
        with self._transaction("finish") as conn:
            if conn.execute(_FINISH_AUDIT, parameters).rowcount != 1:
                raise not_running_error(audit_id)
            conn.execute(
                "UPDATE idempotency_keys SET status = 'done', result_json = ?,"
                " finished_at = ? WHERE key = ? AND status = 'running'",
                (
                    stored_json,
                    outcome.finished_at,
                    claim_fingerprint(self._fingerprint_key, claim_key),
                ),
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
                f"SELECT audit_id, {ALL_COLUMNS},"
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

    def __enter__(self) -> SQLiteAuditStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
