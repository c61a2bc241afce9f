"""What the audit database remembers of a call's arguments fingerprints no
secret that a guess list could recover.

The attacker here knows everything about a call but its secret (the row
shows the rest) and holds a short guess list with the right password in
it. A plain SHA-256 of the raw arguments, stored anywhere in the database,
lets them check each guess. The row's ``arguments_hash`` now covers what
the row shows (the redacted arguments), and an idempotency claim keeps only
an HMAC keyed by the store's own random secret: the guesses find nothing,
on SQLite and PostgreSQL, in the tables and in the bytes at rest. Yet two
calls that differ only in a secret still conflict under one key, retries
of the same arguments still replay, and every runtime and process sharing
the store agrees on the fingerprint, also after an old database migrates.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from audit_backends import open_store
from conftest import WRITE_ANYWHERE, python_path

from pytest_toolguard import ErrorCode, Risk, ToolCall, ToolRegistry, ToolRuntime, tool
from pytest_toolguard.audit.schema import SCHEMA_VERSION, SQLITE_MIGRATIONS
from pytest_toolguard.jsondata import json_hash

REAL = "Summer2024!"
GUESSES = ("password1", "Winter2023!", "letmein", REAL, "qwerty")
OTHER = "Autumn2025?"


def with_secret(secret: str) -> dict[str, dict[str, Any]]:
    """Argument shapes that carry ``secret`` where the redactor removes it."""
    return {
        "password": {"password": secret, "user": "alice"},
        "api_key": {"api_key": secret, "query": "weather"},
        "token": {"token": secret, "channel": "ops"},
        "authorization-header-nested": {
            "request": {"url": "https://api.example/v1", "headers": {"Authorization": secret}}
        },
        "secret-in-an-array": {"accounts": [{"name": "a", "password": secret}, {"name": "b"}]},
    }


SHAPES = sorted(with_secret(REAL))


@tool(input_schema={"type": "object"}, risk=Risk.WRITE)
def submit(ctx: Any, **arguments: Any) -> dict[str, Any]:
    """A side effect: one file per run, so the runs can be counted."""
    ctx.workspace.write_text(f"runs/{ctx.call_id}", "ran")
    return {"accepted": True}


REGISTRY = ToolRegistry([submit])


def runtime(workspace: Path, store: Any) -> ToolRuntime:
    workspace.mkdir(exist_ok=True)
    return ToolRuntime(REGISTRY, str(workspace), WRITE_ANYWHERE, store, idempotency_scope="task-1")


def call(call_id: str, arguments: dict[str, Any], key: str | None = None) -> ToolCall:
    return ToolCall(call_id=call_id, tool_name="submit", arguments=arguments, idempotency_key=key)


def guessed(shape: str, texts: list[str]) -> list[str]:
    """The guesses that a plain hash in ``texts`` confirms."""
    return [
        guess
        for guess in GUESSES
        if any(json_hash(with_secret(guess)[shape]) in text for text in texts)
    ]


def database_texts(audit_backend: Any, store: Any) -> list[str]:
    """Every value of every row, and the bytes at rest, as text."""
    texts = [str(value) for row in store.rows() for value in vars_of(row)]
    texts += [data.decode("latin-1") for data in audit_backend.stored_bytes().values()]
    return texts


def vars_of(row: Any) -> list[Any]:
    return [getattr(row, name) for name in row.__slots__]


# -- the guess list finds nothing -------------------------------------------------------


@pytest.mark.parametrize("key", [None, "order-7"], ids=["no-key", "idempotency-key"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_guess_list_cannot_confirm_a_redacted_secret_from_the_database(
    audit_backend, tmp_path, shape, key
):
    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store)
    result = rt.execute(call("c1", with_secret(REAL)[shape], key))
    assert result.ok, result.message
    rt.close()
    [row] = store.rows()
    assert REAL not in row.arguments_json and "<redacted:" in row.arguments_json
    assert guessed(shape, database_texts(audit_backend, store)) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_the_row_hash_is_the_hash_of_what_the_row_shows(audit_backend, tmp_path, shape):
    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store)
    rt.execute(call("c1", with_secret(REAL)[shape]))
    rt.execute(call("c2", {"user": "alice", "n": 1}))
    rt.close()
    redacted, plain = store.rows()
    assert redacted.arguments_hash == hashlib.sha256(redacted.arguments_json.encode()).hexdigest()
    # Nothing redacted: the hash it always had (the raw arguments' hash).
    assert plain.arguments_hash == json_hash({"user": "alice", "n": 1})


def test_with_the_whole_database_a_keyed_claim_can_still_be_tested(audit_backend, tmp_path):
    # Where the promise stops: the key lives in the database, so whoever
    # holds all of it can test guesses against the claims of keyed calls.
    from pytest_toolguard.idempotency import arguments_fingerprint

    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store)
    rt.execute(call("c1", with_secret(REAL)["password"], "order-7"))
    rt.close()
    key = fingerprint_key(audit_backend)
    stored = claim_fingerprints(audit_backend)
    confirmed = [
        guess
        for guess in GUESSES
        if arguments_fingerprint(key, json_hash(with_secret(guess)["password"])) in stored
    ]
    assert confirmed == [REAL]


# -- conflicts and replays still hold ---------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_two_calls_differing_only_in_a_secret_conflict_and_a_retry_replays(
    audit_backend, tmp_path, shape
):
    store = audit_backend.open()
    rt = runtime(tmp_path / "ws", store)
    first = rt.execute(call("c1", with_secret(REAL)[shape], "order-7"))
    other = rt.execute(call("c2", with_secret(OTHER)[shape], "order-7"))
    again = rt.execute(call("c3", with_secret(REAL)[shape], "order-7"))
    rt.close()
    assert first.code is ErrorCode.OK
    assert other.code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert again.code is ErrorCode.IDEMPOTENT_REPLAY
    assert sorted(p.name for p in (tmp_path / "ws" / "runs").iterdir()) == ["c1"]


@pytest.mark.parametrize("shape", ["password", "secret-in-an-array"])
def test_runtimes_on_two_stores_of_one_database_agree_on_the_fingerprint(
    audit_backend, tmp_path, shape
):
    one = runtime(tmp_path / "ws", audit_backend.open())
    two = runtime(tmp_path / "ws", audit_backend.open())
    assert one.execute(call("c1", with_secret(REAL)[shape], "order-7")).ok
    assert two.execute(call("c2", with_secret(REAL)[shape], "order-7")).code is (
        ErrorCode.IDEMPOTENT_REPLAY
    )
    assert two.execute(call("c3", with_secret(OTHER)[shape], "order-7")).code is (
        ErrorCode.IDEMPOTENCY_CONFLICT
    )
    one.close()
    two.close()


CHILD = """
import sys
from audit_backends import open_store
from test_security_arguments_hash import call, runtime, with_secret
from pathlib import Path
backend, target, workspace, secret, call_id = sys.argv[1:]
rt = runtime(Path(workspace), open_store((backend, target)))
print(rt.execute(call(call_id, with_secret(secret)["password"], "order-7")).code.value)
rt.close()
"""


def run_child(audit_backend: Any, workspace: Path, secret: str, call_id: str) -> str:
    """The code a runtime in a new process answers one keyed call with."""
    here = Path(__file__).resolve().parent
    path = python_path(here, here.parent)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *audit_backend.spec, str(workspace), secret, call_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_processes_sharing_one_store_agree_on_the_fingerprint(audit_backend, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    audit_backend.open().close()  # the schema and its key, made once
    assert run_child(audit_backend, workspace, REAL, "p1") == "OK"
    assert run_child(audit_backend, workspace, REAL, "p2") == "IDEMPOTENT_REPLAY"
    assert run_child(audit_backend, workspace, OTHER, "p3") == "IDEMPOTENCY_CONFLICT"


# -- an old database migrates -------------------------------------------------------------

OLD_ARGUMENTS = with_secret(REAL)["password"]
OLD_SHOWN = '{"password":"<redacted:password>","user":"alice"}'


def old_sqlite_database(path: Path, claim_key: str) -> None:
    """A schema version 2 database as the previous release left it: a claim
    and its row, both holding the plain hash of the raw arguments."""
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        for step in SQLITE_MIGRATIONS[:2]:
            for statement in step:
                raw.execute(statement)
        raw.execute("PRAGMA user_version = 2")
        raw.execute(
            "INSERT INTO tool_call_audit (call_id, session_id, actor, tool_name, risk,"
            " arguments_json, arguments_hash, idempotency_key, decision, state, result_code,"
            " started_at, finished_at, idempotency_outcome)"
            " VALUES ('old', 'default', 'agent', 'submit', 'write', ?, ?, 'order-7', 'allow',"
            " 'SUCCEEDED', 'OK', 'T0', 'T1', 'claimed')",
            (OLD_SHOWN, json_hash(OLD_ARGUMENTS)),
        )
        raw.execute(
            "INSERT INTO idempotency_keys (key, tool_name, arguments_hash, call_id, audit_id,"
            " status, result_json, created_at, finished_at)"
            " VALUES (?, 'submit', ?, 'old', 1, 'done', ?, 'T0', 'T1')",
            (
                claim_key,
                json_hash(OLD_ARGUMENTS),
                '{"ok": true, "code": "OK", "message": "ok", "data": {"accepted": true}}',
            ),
        )
    finally:
        raw.close()


def test_an_old_sqlite_database_migrates_and_keeps_its_claims(tmp_path):
    from pytest_toolguard.idempotency import scope_client_key

    path = tmp_path / "audit.db"
    old_sqlite_database(path, scope_client_key("order-7", "submit", "task-1"))
    store = open_store(("sqlite", str(path)))
    try:
        assert store.settings().schema_version == SCHEMA_VERSION == 4
        rt = runtime(tmp_path / "ws", store)
        assert rt.execute(call("c1", OLD_ARGUMENTS, "order-7")).code is (
            ErrorCode.IDEMPOTENT_REPLAY
        )
        assert rt.execute(call("c2", with_secret(OTHER)["password"], "order-7")).code is (
            ErrorCode.IDEMPOTENCY_CONFLICT
        )
        rt.close()
        old = store.get("old")
        assert (
            old is not None and old.arguments_hash == hashlib.sha256(OLD_SHOWN.encode()).hexdigest()
        )
    finally:
        store.close()
    at_rest = b"".join(p.read_bytes() for p in tmp_path.glob("audit.db*")).decode("latin-1")
    assert guessed("password", [at_rest]) == []


def fingerprint_key(audit_backend: Any) -> str:
    from pytest_toolguard.audit.schema import FINGERPRINT_KEY

    return str(
        query(audit_backend, "SELECT value FROM toolguard_meta WHERE name = ?", (FINGERPRINT_KEY,))[
            0
        ][0]
    )


def claim_fingerprints(audit_backend: Any) -> set[str]:
    return {
        str(row[0]) for row in query(audit_backend, "SELECT arguments_hash FROM idempotency_keys")
    }


def query(audit_backend: Any, statement: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
    """Rows of ``statement`` read straight from the backend's database."""
    name, target = audit_backend.spec
    if name == "sqlite":
        raw = sqlite3.connect(target)
        try:
            return raw.execute(statement, parameters).fetchall()
        finally:
            raw.close()
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        return conn.execute(statement.replace("?", "%s"), parameters).fetchall()


def test_an_old_postgres_database_migrates_and_keeps_its_claims(postgres_server, tmp_path):
    import psycopg
    from audit_backends import PostgresBackend

    from pytest_toolguard.audit.schema import POSTGRES_MIGRATIONS, POSTGRES_MIGRATIONS_TABLE
    from pytest_toolguard.idempotency import scope_client_key

    backend = PostgresBackend(postgres_server)
    with psycopg.connect(backend.url, autocommit=True) as conn:
        conn.execute(POSTGRES_MIGRATIONS_TABLE)
        for statement in POSTGRES_MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("INSERT INTO toolguard_schema_migrations (version) VALUES (1)")
        conn.execute(
            "INSERT INTO tool_call_audit (call_id, session_id, actor, tool_name, risk,"
            " arguments_json, arguments_hash, idempotency_key, decision, state, result_code,"
            " started_at, finished_at, idempotency_outcome)"
            " VALUES ('old', 'default', 'agent', 'submit', 'write', %s, %s, 'order-7', 'allow',"
            " 'SUCCEEDED', 'OK', 'T0', 'T1', 'claimed')",
            (OLD_SHOWN, json_hash(OLD_ARGUMENTS)),
        )
        conn.execute(
            "INSERT INTO idempotency_keys (key, tool_name, arguments_hash, call_id, audit_id,"
            " status, result_json, created_at, finished_at)"
            " VALUES (%s, 'submit', %s, 'old', 1, 'done', %s, 'T0', 'T1')",
            (
                scope_client_key("order-7", "submit", "task-1"),
                json_hash(OLD_ARGUMENTS),
                '{"ok": true, "code": "OK", "message": "ok", "data": {"accepted": true}}',
            ),
        )
    try:
        rt = runtime(tmp_path / "ws", backend.open())
        assert rt.execute(call("c1", OLD_ARGUMENTS, "order-7")).code is (
            ErrorCode.IDEMPOTENT_REPLAY
        )
        assert rt.execute(call("c2", with_secret(OTHER)["password"], "order-7")).code is (
            ErrorCode.IDEMPOTENCY_CONFLICT
        )
        rt.close()
        stored = [
            str(value) for row in query(backend, "SELECT * FROM idempotency_keys") for value in row
        ]
        stored += [
            str(value) for row in query(backend, "SELECT * FROM tool_call_audit") for value in row
        ]
        assert guessed("password", stored) == []
        assert hashlib.sha256(OLD_SHOWN.encode()).hexdigest() in stored
    finally:
        backend.close()
