"""``PostgresAuditStore``: the audit log and the idempotency keys on a
PostgreSQL server, shared by workers on several machines.

SQLite is the embedded default; a fleet of workers on several hosts needs
one audit log and one set of idempotency keys, or the same key runs once per
host. This store is the ``AuditStore`` protocol over psycopg 3 and
``psycopg_pool`` (the ``[postgres]`` extra); what each answer means is the
same as with ``SQLiteAuditStore``, and the same contract tests run on both.

What it guarantees
    - **One claim, one winner.** ``start`` claims a key and writes its
      RUNNING row in one statement (``INSERT ... ON CONFLICT DO NOTHING``
      feeding the row's INSERT), so the two commit together or not at all;
      when the key is taken, the winner is read after the conflict. Exactly
      one of any number of concurrent starts, on any hosts, gets CLAIMED.
      ``finish`` settles the row and its key in one statement too.
    - **Leases.** Each RUNNING row names its owner (host, pid, process start)
      and expires at the call's deadline plus ``lease_grace_seconds`` by the
      *server's* clock, the one clock every worker shares. ``recover`` takes
      over only expired leases, or those of processes of its own host that
      are provably dead (see ``pytest_toolguard.lease``).
    - **Fail closed, with a bound.** Every operation waits at most
      ``timeout`` seconds for a connection, and every statement runs under a
      server-side ``statement_timeout`` of the same length: a server that is
      down or unreachable answers ``AuditUnavailable`` within that bound, the
      runtime answers AUDIT_UNAVAILABLE and does not run the handler. Once one
      operation found no server, each next one first tries to connect
      itself (bounded by ``connect_timeout``): while the server is down it
      fails as soon as that attempt does (a refused connection: at once), so
      a call, and each retry of a queued row, does not wait the whole
      timeout; once the server is back the attempt succeeds and the
      operation proceeds. A connection the server closed (a restart) is
      noticed before use and replaced.
    - **Redacted before the INSERT.** Like SQLite's store it never redacts:
      callers pass redacted text, and no row is written first and redacted
      later (an UPDATE would leave the secret in the WAL and in dead tuples).

What it does not guarantee
    - A connection lost *while* a statement is committing leaves its outcome
      unknown: the store answers ``AuditUnavailable`` either way. For
      ``start`` that can leave a RUNNING row whose handler never ran (the
      call was answered AUDIT_UNAVAILABLE): its lease expires and ``recover``
      marks it INTERRUPTED. A ``finish`` retried after such a loss succeeds
      if the first attempt had committed.
    - PostgreSQL text cannot hold NUL: a NUL in a stored text is kept as the
      six characters ``\\u0000``.
    - A network that drops packets without closing the connection is noticed
      by TCP (``tcp_user_timeout`` is set to ``timeout``), not sooner.

Schema: versioned migrations recorded in ``toolguard_schema_migrations``,
applied on first use under an advisory lock (several workers may start at
once); the tables have the columns of SQLite's ``tool_call_audit`` and
``idempotency_keys``, in the schema the connection's ``search_path`` names
(``?options=-csearch_path%3Dagents`` in the URL puts them elsewhere). A store
is bound to the process that made it: after ``fork`` it raises
``AuditUnavailable`` in the child, which opens its own.
"""

from __future__ import annotations

import json
import os
import select
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pytest_toolguard.audit import (
    AUDIT_COLUMNS,
    FINGERPRINT_KEY,
    INTERRUPTED_MESSAGE,
    LEASE_COLUMNS,
    LEASE_GRACE_SECONDS,
    PLACEHOLDER_LIKE,
    AuditRecord,
    AuditUnavailable,
    interrupted_result,
    interrupted_row,
    lease_length,
    not_running,
    record_from_row,
    result_json,
    row_values,
    storable_text,
    takes_over,
)
from pytest_toolguard.contract import CallState, ErrorCode
from pytest_toolguard.idempotency import (
    Claim,
    ClaimOutcome,
    StoredKey,
    arguments_fingerprint,
    claim_fingerprint,
    new_fingerprint_key,
    resolve_claim,
)
from pytest_toolguard.lease import LeaseOwner, current_owner

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["POSTGRES_SCHEMA_VERSION", "PostgresAuditStore", "is_postgres_url"]

INSTALL_HINT = "pip install 'pytest-toolguard[postgres]'"

POSTGRES_SCHEMA_VERSION = 3
"""The newest migration this version of the store knows; a database that
has applied a newer one is refused. Version 2 is SQLite's version 3: the
``toolguard_meta`` table and its fingerprint key, the claims' plain
argument hashes keyed, the rows that show a placeholder rehashed from what
they show (see ``pytest_toolguard.idempotency``). Version 3 is SQLite's
version 4: each claim kept under ``claim_fingerprint`` of its key."""

_MIGRATION_LOCK = 0x746F6F6C67756172  # "toolguar": pg_advisory_xact_lock's key

# _MIGRATIONS[n] takes the schema from version n to n + 1.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # The columns and meaning of SQLite's schema version 2. Timestamps are
        # the runtime's ISO 8601 text (its clock may be frozen in replay), as
        # in SQLite; lease_expires_at is the server's clock in the same shape.
        """
        CREATE TABLE tool_call_audit (
            audit_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
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
            duration_ms BIGINT,
            replay_of TEXT,
            idempotency_outcome TEXT,
            lease_owner TEXT,
            lease_expires_at TEXT
        )
        """,
        # For get(). Not unique: models reuse ids. No index on state: every
        # call would pay for it twice (and lose HOT updates) for recover's sake.
        "CREATE INDEX idx_audit_call ON tool_call_audit (call_id)",
        # audit_id is not a foreign key: the claim is written before its row
        # in one statement, and SQLite does not enforce it either.
        """
        CREATE TABLE idempotency_keys (
            key TEXT PRIMARY KEY,
            tool_name TEXT NOT NULL,
            arguments_hash TEXT NOT NULL,
            call_id TEXT NOT NULL,
            audit_id BIGINT,
            status TEXT NOT NULL CHECK (status IN ('running', 'done')),
            result_json TEXT,
            created_at TEXT NOT NULL,
            finished_at TEXT
        )
        """,
    ),
    (
        # The fingerprint key is written by ``_key_claims`` (Python: no
        # pgcrypto needed), in the same transaction.
        """
        CREATE TABLE toolguard_meta (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )
        """,
    ),
    (),  # claims renamed by their keyed fingerprint: ``_key_claim_names``
)
assert len(_MIGRATIONS) == POSTGRES_SCHEMA_VERSION

_KEYED_CLAIMS_VERSION = 2
"""The migration after whose statements ``_key_claims`` runs."""

_KEYED_NAMES_VERSION = 3
"""The migration after whose statements ``_key_claim_names`` runs."""

_CREATE_MIGRATIONS = """
CREATE TABLE IF NOT EXISTS toolguard_schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""

_ALL_COLUMNS = ", ".join(AUDIT_COLUMNS + LEASE_COLUMNS)
_PLACEHOLDERS = ", ".join("%s" for _ in AUDIT_COLUMNS)
_SERVER_NOW = (
    "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
)
_EXPIRY = (
    "to_char((statement_timestamp() + make_interval(secs => %s)) AT TIME ZONE 'UTC',"
    ' \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')'
)
_SELECT_AUDIT = f"SELECT audit_id, {_ALL_COLUMNS} FROM tool_call_audit"
_INSERT_RECORD = (
    f"INSERT INTO tool_call_audit ({', '.join(AUDIT_COLUMNS)}) VALUES ({_PLACEHOLDERS})"
    " RETURNING audit_id"
)
_INSERT_RUNNING = (
    f"INSERT INTO tool_call_audit ({_ALL_COLUMNS}) VALUES ({_PLACEHOLDERS}, %s, {_EXPIRY})"
    " RETURNING audit_id"
)
# The claim first: its audit_id comes from the row's sequence, and the row is
# inserted only when the claim was, in the same statement (one transaction).
_CLAIM_AND_START = (
    "WITH claim AS ("
    " INSERT INTO idempotency_keys"
    " (key, tool_name, arguments_hash, call_id, audit_id, status, created_at)"
    " VALUES (%s, %s, %s, %s, nextval('tool_call_audit_audit_id_seq'), 'running', %s)"
    " ON CONFLICT (key) DO NOTHING RETURNING audit_id)"
    f" INSERT INTO tool_call_audit (audit_id, {_ALL_COLUMNS})"
    f" SELECT claim.audit_id, {_PLACEHOLDERS}, %s, {_EXPIRY} FROM claim"
    " RETURNING audit_id"
)
_READ_KEY = (
    "SELECT tool_name, arguments_hash, call_id, status, result_json"
    " FROM idempotency_keys WHERE key = %s"
)
_SET_FINISHED = (
    "UPDATE tool_call_audit SET state = %s, result_code = %s, result_preview = %s,"
    " error_message = %s, finished_at = %s, duration_ms = %s"
    " WHERE audit_id = %s AND state = 'RUNNING'"
)
_FINISH_WITH_KEY = (
    f"WITH done AS ({_SET_FINISHED} RETURNING audit_id),"
    " settled AS (UPDATE idempotency_keys SET status = 'done', result_json = %s,"
    " finished_at = %s WHERE key = %s AND status = 'running'"
    " AND EXISTS (SELECT 1 FROM done) RETURNING 1)"
    " SELECT count(*) FROM done"
)
_CLAIM_ATTEMPTS = 8
"""A key freed (``release``) between our conflict and our read is claimed
again; this bounds that loop."""


def is_postgres_url(target: str) -> bool:
    """Whether ``target`` names a PostgreSQL server (``postgresql://`` or
    ``postgres://``)."""
    return target.startswith(("postgresql://", "postgres://"))


def _import_driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ImportError(
            f"PostgresAuditStore needs psycopg 3 and psycopg_pool: {INSTALL_HINT}"
        ) from exc
    return psycopg, psycopg_pool


def _text(value: Any) -> Any:
    """A value PostgreSQL text can hold: NUL becomes ``\\u0000``."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\\u0000")
    return value


def _texts(values: Sequence[Any]) -> list[Any]:
    return [_text(value) for value in values]


def _fingerprint_key(conn: psycopg.Connection[Any]) -> str:
    """The fingerprint key of the database, made if it has none yet (one
    wins when several workers make it at once)."""
    conn.execute(
        "INSERT INTO toolguard_meta (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
        (FINGERPRINT_KEY, new_fingerprint_key()),
    )
    row = conn.execute(
        "SELECT value FROM toolguard_meta WHERE name = %s", (FINGERPRINT_KEY,)
    ).fetchone()
    assert row is not None
    key = str(row[0])
    try:
        bytes.fromhex(key)
    except ValueError:
        raise AuditUnavailable(
            "the audit database's fingerprint key is not hex text", "start"
        ) from None
    return key


def _key_claims(conn: psycopg.Connection[Any]) -> None:
    """The data part of migration 2, in its transaction: the key made, each
    claim's plain arguments hash replaced by its keyed fingerprint, each row
    that shows a placeholder rehashed from what it shows. (The old values
    stay in dead tuples until VACUUM reclaims them.)"""
    key = _fingerprint_key(conn)
    claims = conn.execute("SELECT key, arguments_hash FROM idempotency_keys").fetchall()
    with conn.cursor() as cursor:
        cursor.executemany(
            "UPDATE idempotency_keys SET arguments_hash = %s WHERE key = %s",
            [(arguments_fingerprint(key, str(digest)), claim) for claim, digest in claims],
        )
    conn.execute(
        "UPDATE tool_call_audit"
        " SET arguments_hash = encode(sha256(convert_to(arguments_json, 'UTF8')), 'hex')"
        " WHERE arguments_json LIKE %s",
        (PLACEHOLDER_LIKE,),
    )


def _key_claim_names(conn: psycopg.Connection[Any]) -> None:
    """The data part of migration 3, in its transaction: each claim renamed
    from its key to ``claim_fingerprint`` of it, under the database's key."""
    key = _fingerprint_key(conn)
    names = [str(row[0]) for row in conn.execute("SELECT key FROM idempotency_keys").fetchall()]
    with conn.cursor() as cursor:
        cursor.executemany(
            "UPDATE idempotency_keys SET key = %s WHERE key = %s",
            [(claim_fingerprint(key, name), name) for name in names],
        )


class PostgresAuditStore:
    """``AuditStore`` on a PostgreSQL server (see the module docstring).

    ``url`` is a libpq URL (``postgresql://user@host/db``; a unix socket as
    ``postgresql:///db?host=/run/postgresql``) or key=value conninfo.
    ``timeout`` bounds every wait (a connection from the pool, a statement,
    connecting); ``min_connections``/``max_connections`` size the pool (one
    connection serves one operation at a time, shared by the threads). ``host``
    names this machine in leases (default: its host name);
    ``lease_grace_seconds`` is what a lease lasts beyond the call's deadline.
    ``migrate=False`` never changes the schema (for readers such as
    ``toolguard audit``): a database without the tables is refused.

    The constructor connects and creates or migrates the schema; it raises
    ``AuditUnavailable`` when it cannot, ``ValueError`` for bad settings, and
    ``ImportError`` naming the extra when psycopg is not installed.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        min_connections: int = 1,
        max_connections: int = 4,
        host: str | None = None,
        lease_grace_seconds: float = LEASE_GRACE_SECONDS,
        migrate: bool = True,
    ) -> None:
        if not (isinstance(timeout, (int, float)) and 0 < timeout < 86400):
            raise ValueError(f"timeout must be seconds in (0, 86400), got {timeout!r}")
        if not (isinstance(min_connections, int) and isinstance(max_connections, int)):
            raise ValueError("min_connections and max_connections must be ints")
        if not 0 <= min_connections <= max_connections or max_connections < 1:
            raise ValueError(
                f"need 0 <= min_connections <= max_connections, max_connections >= 1; "
                f"got {min_connections}, {max_connections}"
            )
        lease_length(None, lease_grace_seconds)  # ValueError for a bad grace
        driver, pool_module = _import_driver()
        self._psycopg = driver
        self._pool_timeout: type[Exception] = pool_module.PoolTimeout
        self._timeout = float(timeout)
        self._host = host
        self._lease_grace = float(lease_grace_seconds)
        self._pid = os.getpid()
        self._closed = False
        self._fingerprint_key: str | None = None
        self._unreachable = False  # the last wait for a connection found no server
        try:
            params = driver.conninfo.conninfo_to_dict(url)
        except driver.Error as exc:
            raise ValueError(f"not a PostgreSQL URL or conninfo: {exc}") from None
        # Host names and socket directories are kept out of messages (a model
        # and the audit log see them): only "<audit server>".
        self._hidden = sorted(
            {part for part in str(params.get("host") or "").split(",") if part}
            | {part for part in str(params.get("hostaddr") or "").split(",") if part},
            key=len,
            reverse=True,
        )
        params.setdefault("connect_timeout", max(2, round(self._timeout)))
        params.setdefault("tcp_user_timeout", int(self._timeout * 1000))
        params.setdefault("application_name", "pytest-toolguard")
        statement_ms = int(self._timeout * 1000)

        def configure(conn: psycopg.Connection[Any]) -> None:
            # SET takes no parameters; the values are ints formatted here.
            conn.execute(f"SET statement_timeout = {statement_ms:d}")
            conn.execute(f"SET lock_timeout = {statement_ms:d}")

        self._conninfo = driver.conninfo.make_conninfo(**params)
        self._pool: psycopg_pool.ConnectionPool[Any] = pool_module.ConnectionPool(
            self._conninfo,
            kwargs={"autocommit": True},
            min_size=min_connections,
            max_size=max_connections,
            open=False,
            timeout=self._timeout,
            check=_check_idle,
            configure=configure,
            # The pool's own reconnection attempts give up quickly (their
            # backoff doubles while the server is down); the next operation
            # that needs a connection starts a new one at once.
            reconnect_timeout=min(1.0, self._timeout / 4),
            name="toolguard-audit",
        )
        try:
            try:
                self._pool.open(wait=True, timeout=self._timeout)
            except driver.Error as exc:
                raise self._unavailable("open", exc) from exc
            self._migrate(migrate)
        except BaseException:
            self.close()
            raise

    # --- connections ----------------------------------------------------------

    def _unavailable(self, operation: str, exc: BaseException) -> AuditUnavailable:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        for hidden in self._hidden:
            reason = reason.replace(hidden, "<audit server>")
        return AuditUnavailable(f"audit store failed to {operation}: {reason}", operation)

    @contextmanager
    def _connection(self, operation: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the pool for one operation, waiting at most
        ``timeout``; every driver error becomes ``AuditUnavailable``."""
        if self._closed:
            raise AuditUnavailable("the audit store is closed", operation)
        if os.getpid() != self._pid:
            raise AuditUnavailable(
                "this audit store was opened in another process; "
                "open a new PostgresAuditStore in this process (after fork)",
                operation,
            )
        if self._unreachable:
            self._probe(operation)
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                yield conn
        except self._pool_timeout as exc:
            # No connection at all (not a pool busy with other threads'
            # operations): the server is down or unreachable.
            self._unreachable = self._pool.get_stats().get("pool_size", 0) == 0
            raise self._unavailable(operation, exc) from exc
        except self._psycopg.Error as exc:
            raise self._unavailable(operation, exc) from exc
        self._unreachable = False

    def _probe(self, operation: str) -> None:
        """While the server was last found unreachable: one connection
        attempt of our own, so that an operation fails as soon as the
        server refuses, instead of waiting ``timeout`` for the pool."""
        try:
            self._psycopg.connect(self._conninfo, autocommit=True).close()
        except self._psycopg.Error as exc:
            raise self._unavailable(operation, exc) from exc
        self._unreachable = False

    def _migrate(self, migrate: bool) -> None:
        with self._connection("open") as conn:
            if not migrate:
                version = self._applied_version(conn)
                if version < 1:  # reading needs the tables, not the latest keys
                    raise AuditUnavailable(
                        f"no pytest-toolguard audit tables of version {POSTGRES_SCHEMA_VERSION}"
                        f" in this database (found version {version})",
                        "open",
                    )
                return
            with conn.transaction():
                # Workers starting together take turns; each sees the others' work.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(_CREATE_MIGRATIONS)
                version = self._applied_version(conn)
                for number in range(version, POSTGRES_SCHEMA_VERSION):
                    for statement in _MIGRATIONS[number]:
                        conn.execute(statement)
                    if number + 1 == _KEYED_CLAIMS_VERSION:
                        _key_claims(conn)
                    if number + 1 == _KEYED_NAMES_VERSION:
                        _key_claim_names(conn)
                    conn.execute(
                        "INSERT INTO toolguard_schema_migrations (version) VALUES (%s)",
                        (number + 1,),
                    )

    @staticmethod
    def _applied_version(conn: psycopg.Connection[Any]) -> int:
        """The newest migration applied (0 for none); ``AuditUnavailable``
        for a database migrated by a newer pytest-toolguard."""
        exists = conn.execute("SELECT to_regclass('toolguard_schema_migrations')").fetchone()
        if exists is None or exists[0] is None:
            return 0
        row = conn.execute("SELECT max(version) FROM toolguard_schema_migrations").fetchone()
        version = int(row[0]) if row is not None and row[0] is not None else 0
        if version > POSTGRES_SCHEMA_VERSION:
            raise AuditUnavailable(
                f"the audit database has schema version {version}; this pytest-toolguard "
                f"reads up to {POSTGRES_SCHEMA_VERSION}: upgrade pytest-toolguard",
                "open",
            )
        return version

    @property
    def lease_owner(self) -> LeaseOwner:
        """The owner this store writes into the leases of the rows it starts."""
        return current_owner(self._host)

    # --- writes ---------------------------------------------------------------

    def record(self, rec: AuditRecord) -> int:
        """Store one finished row and commit it; its audit_id. ``ValueError``
        when ``rec.state`` is not finished; ``AuditUnavailable`` when the
        row could not be stored (or whether it was is unknown)."""
        state = CallState(rec.state)
        if not state.finished:
            raise ValueError(f"record() stores finished rows; state {state} is not finished")
        with self._connection("record") as conn:
            row = conn.execute(_INSERT_RECORD, _texts(row_values(rec, state))).fetchone()
        assert row is not None
        return int(row[0])

    def start(
        self,
        rec: AuditRecord,
        *,
        claim_key: str | None = None,
        lease_seconds: float | None = None,
        arguments_digest: str | None = None,
    ) -> tuple[int | None, Claim | None]:
        """Claim ``claim_key`` (when given) and store ``rec`` as the RUNNING
        row, committed together before return; the row's lease lasts
        ``lease_seconds`` plus ``lease_grace_seconds`` by the server's clock.
        Answers as ``SQLiteAuditStore.start`` does: ``(audit_id, None)``
        without a key, ``(audit_id, Claim(CLAIMED))`` for the winner,
        ``(None, claim)`` with REPLAY, RUNNING or CONFLICT when the key was
        held (nothing stored); the claim keeps ``arguments_fingerprint`` of
        ``arguments_digest`` (``rec.arguments_hash`` when not given) under
        the database's key. ``ValueError`` when ``rec.state`` is not
        RUNNING."""
        state = CallState(rec.state)
        if state is not CallState.RUNNING:
            raise ValueError(f"start() stores RUNNING rows; got state {state}")
        lease = lease_length(lease_seconds, self._lease_grace)
        owner = str(current_owner(self._host))
        if claim_key is None:
            values = _texts(row_values(rec, state))
            with self._connection("start") as conn:
                row = conn.execute(_INSERT_RUNNING, [*values, owner, lease]).fetchone()
            assert row is not None
            return int(row[0]), None
        values = _texts(
            row_values(
                rec,
                state,
                idempotency_key=rec.idempotency_key or claim_key,
                idempotency_outcome=rec.idempotency_outcome or ClaimOutcome.CLAIMED.value,
            )
        )
        digest = rec.arguments_hash if arguments_digest is None else arguments_digest
        with self._connection("start") as conn:
            fingerprint = arguments_fingerprint(self._key(conn), digest)
            key = claim_fingerprint(self._key(conn), claim_key)
            head = [
                key,
                *(
                    _text(storable_text(text))
                    for text in (rec.tool_name, fingerprint, rec.call_id, rec.started_at)
                ),
            ]
            for _ in range(_CLAIM_ATTEMPTS):
                row = conn.execute(_CLAIM_AND_START, [*head, *values, owner, lease]).fetchone()
                if row is not None:
                    return int(row[0]), Claim(ClaimOutcome.CLAIMED, claim_key)
                stored = conn.execute(_READ_KEY, (key,)).fetchone()
                if stored is not None:  # else freed meanwhile: claim again
                    break
            else:
                raise AuditUnavailable(
                    f"audit store failed to start: key claimed and freed {_CLAIM_ATTEMPTS} "
                    "times while this call tried to claim it",
                    "start",
                )
        tool_name, arguments_hash, call_id, status, stored_json = stored
        result = self._json(stored_json)
        held = StoredKey(claim_key, tool_name, arguments_hash, call_id, status, result)
        return None, resolve_claim(held, rec.tool_name, fingerprint)

    def _key(self, conn: psycopg.Connection[Any]) -> str:
        """The database's fingerprint key, read once (made now if missing:
        claims made under a lost key then answer CONFLICT, never run twice)."""
        if self._fingerprint_key is None:
            self._fingerprint_key = _fingerprint_key(conn)
        return self._fingerprint_key

    @staticmethod
    def _json(text: str | None) -> dict[str, Any] | None:
        return json.loads(text) if text is not None else None

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
        the key done with ``stored_result``, in one statement. As
        ``SQLiteAuditStore.finish``: a key no longer running keeps its first
        outcome; ``AuditUnavailable`` when the row is unknown or no longer
        RUNNING, unless it already holds this very outcome (an earlier attempt
        whose commit was lost with its connection). ``ValueError`` when
        ``state`` is not finished."""
        finished = CallState(state)
        if not finished.finished:
            raise ValueError(f"finish() needs a finished state, got {finished}")
        code = ErrorCode(result_code).value if result_code is not None else None
        parameters = _texts(
            (
                finished.value,
                code,
                None if result_preview is None else storable_text(result_preview),
                None if error_message is None else storable_text(error_message),
                finished_at,
                duration_ms,
                audit_id,
            )
        )
        with self._connection("finish") as conn:
            if claim_key is None:
                changed = conn.execute(_SET_FINISHED, parameters).rowcount
            else:
                name = claim_fingerprint(self._key(conn), claim_key)
                settle = _texts((result_json(stored_result), finished_at, name))
                row = conn.execute(_FINISH_WITH_KEY, [*parameters, *settle]).fetchone()
                changed = int(row[0]) if row is not None else 0
            if changed == 1:
                return
            now = conn.execute(
                "SELECT state, finished_at FROM tool_call_audit WHERE audit_id = %s", (audit_id,)
            ).fetchone()
        if now is None or tuple(now) != (finished.value, _text(finished_at)):
            raise not_running(audit_id)

    def release(self, claim_key: str) -> None:
        """Free ``claim_key`` when its call never reached its handler (a
        finished key is never freed; an unknown key is ignored)."""
        with self._connection("release") as conn:
            conn.execute(
                "DELETE FROM idempotency_keys WHERE key = %s AND status = 'running'",
                (claim_fingerprint(self._key(conn), claim_key),),
            )

    def recover(self, now: str) -> int:
        """Mark every RUNNING row whose lease ended INTERRUPTED; how many.
        See ``interrupt_expired``."""
        return len(self.interrupt_expired(now))

    def interrupt_expired(self, now: str) -> list[AuditRecord]:
        """Mark every RUNNING row whose lease ended INTERRUPTED (code
        EXECUTION_ERROR, ``INTERRUPTED_MESSAGE``, finished at ``now``) and its
        running key done with ``interrupted_result``; answers the rows it
        marked, as they now are, oldest first.

        A lease ended when it expired by the server's clock (``now`` is only
        what ``finished_at`` says), or when its owner is a process of this
        host that is provably dead; rows of live workers on any host are left
        alone. Several workers may recover at once: each row is taken by one
        of them (the update re-checks RUNNING under the row's lock), and a
        finish racing a recover either lands first or is refused."""
        here = current_owner(self._host)
        with self._connection("recover") as conn, conn.transaction():
            running = conn.execute(
                f"SELECT audit_id, {_ALL_COLUMNS},"
                f" lease_expires_at IS NULL OR lease_expires_at <= {_SERVER_NOW}"
                " FROM tool_call_audit WHERE state = 'RUNNING' ORDER BY audit_id"
            ).fetchall()
            candidates = [row[0] for row in running if takes_over(row[-3], bool(row[-1]), here)]
            if not candidates:
                return []
            taken = {
                row[0]
                for row in conn.execute(
                    "UPDATE tool_call_audit SET state = %s, result_code = %s,"
                    " error_message = %s, finished_at = %s"
                    " WHERE audit_id = ANY(%s) AND state = 'RUNNING' RETURNING audit_id",
                    (
                        CallState.INTERRUPTED.value,
                        ErrorCode.EXECUTION_ERROR.value,
                        INTERRUPTED_MESSAGE,
                        _text(now),
                        candidates,
                    ),
                ).fetchall()
            }
            marked = [
                interrupted_row(record_from_row(row[:-1]), now)
                for row in running
                if row[0] in taken
            ]
            with conn.cursor() as cursor:
                cursor.executemany(
                    "UPDATE idempotency_keys SET status = 'done', result_json = %s,"
                    " finished_at = %s WHERE audit_id = %s AND status = 'running'",
                    [
                        (
                            result_json(interrupted_result(rec.call_id, rec.tool_name)),
                            _text(now),
                            rec.audit_id,
                        )
                        for rec in marked
                    ],
                )
        return marked

    # --- reads ----------------------------------------------------------------

    def get(self, call_id: str) -> AuditRecord | None:
        """The latest row for ``call_id`` (ids may repeat), or None."""
        with self._connection("get") as conn:
            row = conn.execute(
                f"{_SELECT_AUDIT} WHERE call_id = %s ORDER BY audit_id DESC LIMIT 1",
                (_text(storable_text(call_id)),),
            ).fetchone()
        return record_from_row(row) if row is not None else None

    def rows(self, session_id: str | None = None) -> list[AuditRecord]:
        """Every row, or every row of ``session_id``, in audit_id order (the
        order their ids were drawn)."""
        with self._connection("rows") as conn:
            if session_id is None:
                fetched = conn.execute(f"{_SELECT_AUDIT} ORDER BY audit_id").fetchall()
            else:
                fetched = conn.execute(
                    f"{_SELECT_AUDIT} WHERE session_id = %s ORDER BY audit_id",
                    (_text(storable_text(session_id)),),
                ).fetchall()
        return [record_from_row(row) for row in fetched]

    def count(self) -> int:
        """How many rows the log holds."""
        with self._connection("count") as conn:
            row = conn.execute("SELECT count(*) FROM tool_call_audit").fetchone()
        return int(row[0]) if row is not None else 0

    def schema_versions(self) -> list[int]:
        """The migrations applied to this database, in order."""
        with self._connection("get") as conn:
            return [
                int(row[0])
                for row in conn.execute(
                    "SELECT version FROM toolguard_schema_migrations ORDER BY version"
                )
            ]

    # --- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Close the pool and its connections (waiting at most ``timeout``
        for operations in flight). Later calls raise ``AuditUnavailable``.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        pool = getattr(self, "_pool", None)
        if pool is not None and os.getpid() == self._pid:
            pool.close(timeout=self._timeout)

    def __enter__(self) -> PostgresAuditStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_idle(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection before it is handed out: no round
    trip, one ``select``. An idle connection has nothing to read; one that
    does has been closed by the server (a restart, an administrator), and
    would fail its first statement, which the pool must not hand out."""
    import psycopg

    if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.close()
        raise psycopg.OperationalError("the connection is not idle")
    fd = conn.fileno()
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        closed_by_server = bool(poller.poll(0))
    else:  # pragma: no cover - Windows
        closed_by_server = bool(select.select([fd], [], [], 0)[0])
    if closed_by_server:
        conn.close()  # so the pool discards it and connects a new one
        raise psycopg.OperationalError("the server closed the connection")
