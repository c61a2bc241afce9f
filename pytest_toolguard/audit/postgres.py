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
      are provably dead (see ``pytest_toolguard.audit.lease``).
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
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..contract import CallState, ErrorCode
from ..idempotency import (
    Claim,
    ClaimOutcome,
    StoredKey,
    arguments_fingerprint,
    claim_fingerprint,
    resolve_claim,
)
from ..storable import storable_text
from .lease import LeaseOwner, current_owner
from .postgres_schema import (
    check_idle,
    fingerprint_key,
    import_driver,
    migrate_schema,
    postgres_text,
    postgres_texts,
)
from .row import (
    AUDIT_COLUMNS,
    INTERRUPTED_MESSAGE,
    LEASE_GRACE_SECONDS,
    AuditRecord,
    AuditUnavailable,
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

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

_PLACEHOLDERS = ", ".join("%s" for _ in AUDIT_COLUMNS)
_SERVER_NOW = (
    "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
)
_EXPIRY = (
    "to_char((statement_timestamp() + make_interval(secs => %s)) AT TIME ZONE 'UTC',"
    ' \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')'
)
_SELECT_AUDIT = f"SELECT audit_id, {ALL_COLUMNS} FROM tool_call_audit"
_INSERT_RECORD = (
    f"INSERT INTO tool_call_audit ({', '.join(AUDIT_COLUMNS)}) VALUES ({_PLACEHOLDERS})"
    " RETURNING audit_id"
)
_INSERT_RUNNING = (
    f"INSERT INTO tool_call_audit ({ALL_COLUMNS}) VALUES ({_PLACEHOLDERS}, %s, {_EXPIRY})"
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
    f" INSERT INTO tool_call_audit (audit_id, {ALL_COLUMNS})"
    f" SELECT claim.audit_id, {_PLACEHOLDERS}, %s, {_EXPIRY} FROM claim"
    " RETURNING audit_id"
)
_READ_KEY = (
    "SELECT tool_name, arguments_hash, call_id, status, result_json"
    " FROM idempotency_keys WHERE key = %s"
)
_SET_FINISHED = finish_sql("%s")
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
        driver, pool_module = import_driver()
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
            check=check_idle,
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
            migrate_schema(conn, migrate)

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
            row = conn.execute(_INSERT_RECORD, postgres_texts(row_values(rec, state))).fetchone()
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
            values = postgres_texts(row_values(rec, state))
            with self._connection("start") as conn:
                row = conn.execute(_INSERT_RUNNING, [*values, owner, lease]).fetchone()
            assert row is not None
            return int(row[0]), None
        values = postgres_texts(
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
                    postgres_text(storable_text(text))
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
            self._fingerprint_key = fingerprint_key(conn)
        return self._fingerprint_key

    @staticmethod
    def _json(text: str | None) -> dict[str, Any] | None:
        return json.loads(text) if text is not None else None

    def finish(self, audit_id: int, outcome: Outcome, *, claim_key: str | None = None) -> None:
        """Finish the RUNNING row ``audit_id`` with ``outcome`` and, with
        ``claim_key``, mark the key done with ``outcome.stored_result``, in
        one statement. As ``SQLiteAuditStore.finish``: a key no longer
        running keeps its first outcome; ``AuditUnavailable`` when the row is
        unknown or no longer RUNNING, unless it already holds this very
        outcome (an earlier attempt whose commit was lost with its
        connection). ``ValueError`` when the outcome's state is not
        finished."""
        parameters = postgres_texts((*finish_values(outcome), audit_id))
        finished_at = outcome.finished_at
        with self._connection("finish") as conn:
            if claim_key is None:
                changed = conn.execute(_SET_FINISHED, parameters).rowcount
            else:
                name = claim_fingerprint(self._key(conn), claim_key)
                settle = postgres_texts((result_json(outcome.stored_result), finished_at, name))
                row = conn.execute(_FINISH_WITH_KEY, [*parameters, *settle]).fetchone()
                changed = int(row[0]) if row is not None else 0
            if changed == 1:
                return
            now = conn.execute(
                "SELECT state, finished_at FROM tool_call_audit WHERE audit_id = %s", (audit_id,)
            ).fetchone()
        if now is None or tuple(now) != (
            CallState(outcome.state).value,
            postgres_text(finished_at),
        ):
            raise not_running_error(audit_id)

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
                f"SELECT audit_id, {ALL_COLUMNS},"
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
                        postgres_text(now),
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
                            postgres_text(now),
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
                (postgres_text(storable_text(call_id)),),
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
                    (postgres_text(storable_text(session_id)),),
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
