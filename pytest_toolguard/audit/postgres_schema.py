"""The PostgreSQL audit store's schema and connections: migrations
applied under an advisory lock (several workers may start at once), the
data migrations, the database's fingerprint key, the pool's check of a
connection, and text PostgreSQL can hold.

The tables themselves are ``pytest_toolguard.audit.schema``'s, made from the
same specification as SQLite's; migrations are recorded in
``toolguard_schema_migrations``, in the schema the connection's
``search_path`` names.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..idempotency import arguments_fingerprint, claim_fingerprint, new_fingerprint_key
from .row import AuditUnavailable
from .schema import (
    FINGERPRINT_KEY,
    KEYED_CLAIMS_VERSION,
    KEYED_NAMES_VERSION,
    PLACEHOLDER_LIKE,
    POSTGRES_MIGRATIONS,
    POSTGRES_MIGRATIONS_TABLE,
    POSTGRES_SCHEMA_VERSION,
)

if TYPE_CHECKING:
    import psycopg

INSTALL_HINT = "pip install 'pytest-toolguard[postgres]'"

_MIGRATION_LOCK = 0x746F6F6C67756172  # "toolguar": pg_advisory_xact_lock's key


def import_driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ImportError(
            f"PostgresAuditStore needs psycopg 3 and psycopg_pool: {INSTALL_HINT}"
        ) from exc
    return psycopg, psycopg_pool


def postgres_text(value: Any) -> Any:
    """A value PostgreSQL text can hold: NUL becomes ``\\u0000``."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\\u0000")
    return value


def postgres_texts(values: Sequence[Any]) -> list[Any]:
    return [postgres_text(value) for value in values]


def fingerprint_key(conn: psycopg.Connection[Any]) -> str:
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
    key = fingerprint_key(conn)
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
    key = fingerprint_key(conn)
    names = [str(row[0]) for row in conn.execute("SELECT key FROM idempotency_keys").fetchall()]
    with conn.cursor() as cursor:
        cursor.executemany(
            "UPDATE idempotency_keys SET key = %s WHERE key = %s",
            [(claim_fingerprint(key, name), name) for name in names],
        )


def migrate_schema(conn: psycopg.Connection[Any], migrate: bool) -> None:
    """Make or migrate the schema under an advisory lock (workers starting
    together take turns); with ``migrate=False`` only check that the tables
    exist. ``AuditUnavailable`` for a database of a newer version."""
    if True:
        if not migrate:
            version = applied_version(conn)
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
            conn.execute(POSTGRES_MIGRATIONS_TABLE)
            version = applied_version(conn)
            for number in range(version, POSTGRES_SCHEMA_VERSION):
                for statement in POSTGRES_MIGRATIONS[number]:
                    conn.execute(statement)
                if number + 2 == KEYED_CLAIMS_VERSION:
                    _key_claims(conn)
                if number + 2 == KEYED_NAMES_VERSION:
                    _key_claim_names(conn)
                conn.execute(
                    "INSERT INTO toolguard_schema_migrations (version) VALUES (%s)",
                    (number + 1,),
                )


def applied_version(conn: psycopg.Connection[Any]) -> int:
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


def check_idle(conn: psycopg.Connection[Any]) -> None:
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
