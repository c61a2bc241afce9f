"""SQLite connections for the audit store: one per thread, transactions,
the schema made or migrated, and what ``fork`` must not copy.

Concurrency. A store opens one connection per thread, in WAL mode, with
``synchronous`` as configured and a busy timeout. A write of one statement
(``record``, ``release``, and ``start``/``finish`` without a key) is
committed on its own (autocommit): one statement is atomic, and SQLite
takes the write lock when the statement starts, as ``BEGIN IMMEDIATE``
would, without the two extra statements per write. A write of several
statements (a claim with its RUNNING row, a finish with its key's outcome,
``recover``) is one ``BEGIN IMMEDIATE`` ... ``COMMIT``, so writers queue
instead of deadlocking. Several processes may share one database file,
each with its own store. A store is bound to the process that made it:
after ``fork`` it raises ``AuditUnavailable`` in the child, which must open
a new one. ``":memory:"`` is one database per connection, so a memory
store shares a single connection between threads under a lock.

Every operation that enters SQLite does so inside the fork gate
(``pytest_toolguard.forking``), so that no fork copies SQLite's locks held.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Literal

from ..file_writes import create_private
from ..forking import FORK_GATE
from ..idempotency import arguments_fingerprint, claim_fingerprint, new_fingerprint_key
from ..jsondata import sha256_text
from .row import LEASE_GRACE_SECONDS, AuditUnavailable, lease_length
from .schema import (
    FINGERPRINT_KEY,
    KEYED_CLAIMS_VERSION,
    KEYED_NAMES_VERSION,
    PLACEHOLDER_LIKE,
    SCHEMA_VERSION,
    SQLITE_MIGRATIONS,
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
                for step in SQLITE_MIGRATIONS:
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


class SQLiteConnections:
    """The connections of one SQLite audit store (see the module docstring
    and ``SQLiteAuditStore``, the store built on them): its settings
    checked, the database opened and its schema made or migrated.
    ``AuditUnavailable`` when it cannot, ``ValueError`` for bad settings."""

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
            for step in SQLITE_MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            if version < KEYED_CLAIMS_VERSION:
                _key_claims(conn)
            if version < KEYED_NAMES_VERSION:
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
