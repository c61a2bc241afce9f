"""An idempotency claim's name confirms no guess of the session id or
client key it is scoped on.

A claim was kept under ``scope_client_key``: a plain SHA-256 of the raw
session id (a JWT, say) and the raw client key (``retry-ghp_...``), both of
which the audit row shows redacted. Whoever held the table could test a
guessed (session, key) pair against it. A store now keeps each claim under
``claim_fingerprint`` of that key, an HMAC keyed by the database's own
secret, on SQLite and PostgreSQL; retries still replay, another session
still runs, and an older database's claims are renamed when it migrates.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE

from pytest_toolguard import ErrorCode, Risk, ToolCall, ToolRegistry, ToolRuntime, tool
from pytest_toolguard.idempotency import claim_fingerprint, scope_client_key

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkEifQ."
    "c2lnbmF0dXJlLW9mLXRoZS10b2tlbi14eXo"
)
TOKEN = "ghp_R8kT2vXqL0mN5pW7sY1zA3bC6dE9fG4hJ2Ue2"

PAIRS = {
    "jwt session, token in the key": (JWT, f"retry-{TOKEN}", None),
    "plain session, token as the key": ("session-1", TOKEN, None),
    "password-like session": ("Summer2024!", "order-7", None),
    "scoped runtime, stripe key": ("session-1", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "task-1"),
}


@tool(input_schema={"type": "object"}, risk=Risk.WRITE)
def submit(ctx: Any, **arguments: Any) -> dict[str, Any]:
    ctx.workspace.write_text(f"runs/{ctx.call_id}", "ran")
    return {"accepted": True}


def runtime(workspace: Path, store: Any, scope: str | None) -> ToolRuntime:
    workspace.mkdir(exist_ok=True)
    return ToolRuntime(
        ToolRegistry([submit]), str(workspace), WRITE_ANYWHERE, store, idempotency_scope=scope
    )


def call(call_id: str, session: str, key: str) -> ToolCall:
    return ToolCall(
        call_id=call_id,
        tool_name="submit",
        arguments={"n": 1},
        session_id=session,
        idempotency_key=key,
    )


def plain_name(session: str, key: str, scope: str | None) -> str:
    """The unkeyed name a guess of (session, key) would confirm."""
    if scope is not None:
        return scope_client_key(key, "submit", scope)
    return scope_client_key(key, "submit", session, scope_kind="session")


def query(backend: Any, statement: str) -> list[Any]:
    name, target = backend.spec
    if name == "sqlite":
        raw = sqlite3.connect(target)
        try:
            return raw.execute(statement).fetchall()
        finally:
            raw.close()
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        return conn.execute(statement).fetchall()


def everything(backend: Any) -> str:
    """Every value of both tables and the bytes at rest, as one text."""
    texts = [
        str(value)
        for table in ("idempotency_keys", "tool_call_audit")
        for row in query(backend, f"SELECT * FROM {table}")
        for value in row
    ]
    texts += [data.decode("latin-1") for data in backend.stored_bytes().values()]
    return "\n".join(texts)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_no_stored_name_confirms_a_guess_of_the_session_and_key(
    audit_backend: Any, tmp_path: Path, pair: str
) -> None:
    # Every key this test sends or guesses carries the test's own tag: a
    # PostgreSQL backend's bytes at rest are the whole cluster's, where other
    # tests (the migrations') leave plain names of the same pairs on purpose.
    tag = f"-{tmp_path.name}"
    session, key, scope = PAIRS[pair]
    key += tag
    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store, scope)
    assert rt.execute(call("c1", session, key)).ok
    rt.close()
    stored = everything(audit_backend)
    guesses = [(s, k + tag) for s, k, _ in PAIRS.values()]
    guesses += [(session, key + "x"), ("other", key)]
    assert [g for g in guesses if plain_name(*g, scope) in stored] == []
    [(name,)] = query(audit_backend, "SELECT key FROM idempotency_keys")
    [(secret,)] = query(audit_backend, "SELECT value FROM toolguard_meta")
    assert name == claim_fingerprint(str(secret), plain_name(session, key, scope))


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_a_retry_replays_and_another_session_runs(
    audit_backend: Any, tmp_path: Path, pair: str
) -> None:
    session, key, scope = PAIRS[pair]
    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store, scope)
    assert rt.execute(call("c1", session, key)).ok
    assert rt.execute(call("c2", session, key)).code is ErrorCode.IDEMPOTENT_REPLAY
    other = rt.execute(call("c3", session + "-other", key))
    rt.close()
    # A runtime scope names the action whatever the session; without one the
    # session does.
    assert other.code is (ErrorCode.IDEMPOTENT_REPLAY if scope else ErrorCode.OK)
    runs = sorted(p.name for p in (tmp_path / "ws" / "runs").iterdir())
    assert runs == (["c1"] if scope else ["c1", "c3"])


def test_two_stores_of_one_database_find_each_others_claims(
    audit_backend: Any, tmp_path: Path
) -> None:
    first, second = audit_backend.open(), audit_backend.open()
    one = runtime(tmp_path / "one", first, None)
    two = runtime(tmp_path / "two", second, None)
    assert one.execute(call("c1", JWT, TOKEN)).ok
    assert two.execute(call("c2", JWT, TOKEN)).code is ErrorCode.IDEMPOTENT_REPLAY
    one.close()
    two.close()


def unkey_claims(backend: Any) -> None:
    """Put the claims back under their plain names, as an older store kept them."""
    [(secret,)] = query(backend, "SELECT value FROM toolguard_meta")
    names = [row[0] for row in query(backend, "SELECT key FROM idempotency_keys")]
    plain = {
        claim_fingerprint(str(secret), plain_name(JWT, TOKEN, None)): plain_name(JWT, TOKEN, None)
    }
    name, target = backend.spec
    if name == "sqlite":
        raw = sqlite3.connect(target, isolation_level=None)
        try:
            for stored in names:
                raw.execute(
                    "UPDATE idempotency_keys SET key = ? WHERE key = ?", (plain[stored], stored)
                )
            raw.execute("PRAGMA user_version = 3")
        finally:
            raw.close()
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        for stored in names:
            conn.execute(
                "UPDATE idempotency_keys SET key = %s WHERE key = %s", (plain[stored], stored)
            )
        conn.execute("DELETE FROM toolguard_schema_migrations WHERE version = 3")


def test_an_older_database_renames_its_claims_when_it_migrates(
    audit_backend: Any, tmp_path: Path
) -> None:
    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store, None)
    assert rt.execute(call("c1", JWT, TOKEN)).ok
    rt.close()
    store.close()
    unkey_claims(audit_backend)
    assert plain_name(JWT, TOKEN, None) in everything(audit_backend)
    migrated = audit_backend.open()
    rt = runtime(tmp_path / "ws", migrated, None)
    assert rt.execute(call("c2", JWT, TOKEN)).code is ErrorCode.IDEMPOTENT_REPLAY
    assert rt.execute(call("c3", "another", TOKEN)).ok
    rt.close()
    names = {row[0] for row in query(audit_backend, "SELECT key FROM idempotency_keys")}
    assert plain_name(JWT, TOKEN, None) not in names and len(names) == 2
