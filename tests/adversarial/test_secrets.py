"""Secret bytes never reach the audit database: not the ``.db``, not the
``-wal``, not the ``-shm``, not while the connection is open, not after a
checkpoint and close; with the PostgreSQL store, not in any file of the
server's data directory (heap, indexes, WAL) after a ``CHECKPOINT``.

Calls full of fake secrets go through ``ToolRuntime.execute`` on a real WAL
database: under sensitive keys, in free text, in handler output, in a
handler's exception, in refused calls (schema, unknown tool, policy, hook)
and with idempotency keys, so stored results and replays are exercised.
Then the raw bytes of every database file are searched for each secret and
for its distinctive parts. Identifiers that look like secrets but are not
(git SHAs, UUIDs) must survive.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import EVERY_RISK, Spy, spy_tool

from pytest_toolguard import (
    Capabilities,
    ErrorCode,
    HookDecision,
    PathAccess,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)

# --- the fake secrets, and the parts of each that must never be stored -------------

AWS_KEY_ID = "AKIA" + "Q3EGRT7KXN5ZP2WM"
GITHUB_TOKEN = "ghp_" + "Xq7Lk2Vb9Nm4Rt8Yw1Zp5Hc3Jd6Fg0Sa2Qe7"
SLACK_TOKEN = "xoxb-" + "2718281828-3141592653589-Jk3LmN0pQr5StU7vWx9YzA1b"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiJhZ2VudC03NyIsInNjb3BlIjoiYWRtaW4ifQ"
    ".Pq4Rs6Tu8Vw0Xy2Za4Bc6De8Fg0Hi2Jk4Lm6No8Pq0R"
)
BEARER_LINE = f"Authorization: Bearer {JWT}"
PEM_BODY = "MIIEowIBAAKCAQEAz9Qf3kWmT0v5Yc2Hn8Lr1Xp4Jb7Ds6Gq0Ke3Vu9Ma5Nt2Ry8Wf"
PEM = (
    f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n"
    "T1hZbG9yZW1pcHN1bQ==\n-----END RSA PRIVATE KEY-----"
)
DB_PASSWORD = "S3cretPass"
DB_URL = f"postgres://user:{DB_PASSWORD}@db/x"
PASSWORD = "hunter2-Plaid-Otter"
API_KEY = "sk_live_51HqLyjWDarjtT1zdp7dc"
AUTH_HEADER = "Token tk_9F2kQ7mZ4xW1vB8n"
TOKEN = "tok-ZQ81-PLK3-MMX7"
COOKIE = "sessionid=Zq8Rk3Pw1Yt6; csrftoken=Hn4Lc9Vb2Mx7"
CLIENT_SECRET = "cs-4f1d9a7e2b8c6d3f0e5a"

SECRETS: dict[str, tuple[str, ...]] = {
    "aws_key_id": (AWS_KEY_ID, AWS_KEY_ID[4:]),
    "github_token": (GITHUB_TOKEN, GITHUB_TOKEN[4:]),
    "slack_token": (SLACK_TOKEN, SLACK_TOKEN[5:], SLACK_TOKEN[-24:]),
    "jwt": (JWT, JWT.rsplit(".", 1)[1], JWT.split(".")[1]),
    "bearer_line": (BEARER_LINE,),
    "pem": (PEM, PEM_BODY),
    "db_url": (DB_URL, DB_PASSWORD),
    "password": (PASSWORD,),
    "api_key": (API_KEY, API_KEY[8:]),
    "authorization": (AUTH_HEADER, AUTH_HEADER[6:]),
    "token": (TOKEN,),
    "cookie": (COOKIE, "Zq8Rk3Pw1Yt6", "Hn4Lc9Vb2Mx7"),
    "client_secret": (CLIENT_SECRET, CLIENT_SECRET[3:]),
}

GIT_SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"

SENSITIVE_ARGUMENTS = {
    "password": PASSWORD,
    "api_key": API_KEY,
    "token": TOKEN,
    "client_secret": CLIENT_SECRET,
    "headers": {"Authorization": AUTH_HEADER, "Cookie": COOKIE},
}
FREE_TEXT_ARGUMENTS = {
    "note": f"curl -H '{BEARER_LINE}' https://api.example.com",
    "log": f"found {AWS_KEY_ID} and {GITHUB_TOKEN} in the repo",
    "chat": f"slack bot {SLACK_TOKEN} posted; session jwt {JWT}",
    "key_file": PEM,
    "dsn": DB_URL,
}
ALL_FREE_TEXT = " | ".join(FREE_TEXT_ARGUMENTS.values())


def stored_bytes(db: Path) -> dict[str, bytes]:
    """The raw bytes of the database and its -wal and -shm, those that exist."""
    files = {}
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        if path.exists():
            files[path.name] = path.read_bytes()
    return files


def holding(files: dict[str, bytes], fragment: str) -> list[str]:
    """The names of the files whose bytes contain ``fragment``."""
    return sorted(name for name, data in files.items() if fragment.encode() in data)


def leaks(files: dict[str, bytes]) -> list[tuple[str, str, str]]:
    """(file, secret name, the part found) for every secret part in any file."""
    return [
        (name, label, part)
        for name, data in sorted(files.items())
        for label, parts in SECRETS.items()
        for part in parts
        if part.encode() in data
    ]


# --- tools that take, echo and raise secrets ---------------------------------------

OPEN_SCHEMA = {"type": "object"}
STRICT_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}, "password": {"type": "string"}},
    "required": ["count"],
    "additionalProperties": False,
}


def build_registry(spy: Spy) -> ToolRegistry:
    def leak_in_output(ctx: Any, **arguments: Any) -> Any:
        return {
            "status": f"connected to {DB_URL} as {GITHUB_TOKEN}",
            "config": {"api_key": API_KEY, "lines": [BEARER_LINE, PEM]},
            "ref": arguments.get("ref"),
        }

    def leak_in_exception(ctx: Any, **arguments: Any) -> Any:
        raise RuntimeError(f"login failed: password={PASSWORD} via {DB_URL}; {SLACK_TOKEN}")

    return ToolRegistry(
        [
            spy_tool(spy, "echo", schema=OPEN_SCHEMA),
            spy_tool(spy, "leak_output", schema=OPEN_SCHEMA, result=leak_in_output),
            spy_tool(spy, "leak_exception", schema=OPEN_SCHEMA, result=leak_in_exception),
            spy_tool(spy, "strict", schema=STRICT_SCHEMA),
            spy_tool(
                spy,
                "save",
                schema=OPEN_SCHEMA,
                risk=Risk.WRITE,
                paths=(PathAccess.write("{path}", content="content"),),
            ),
            spy_tool(spy, "forbidden", schema=OPEN_SCHEMA),
            spy_tool(spy, "gated", schema=OPEN_SCHEMA),
        ]
    )


class DenyGated:
    """A hook whose reason quotes the call's arguments, as real hooks do."""

    name = "deny_gated"

    def pre_tool_use(self, event):
        if event.spec.name == "gated":
            return HookDecision.deny(f"refused gated call with {dict(event.arguments)}")
        return HookDecision.proceed()


CAPABILITIES = Capabilities(
    allowed_tools=frozenset({"echo", "leak_output", "leak_exception", "strict", "save", "gated"}),
    allowed_risks=EVERY_RISK,
    write_roots=("out",),
)


def secret_calls() -> list[tuple[ToolCall, ErrorCode]]:
    """Every call, and the code it must get (so the secrets surely went in)."""
    both = {**SENSITIVE_ARGUMENTS, **FREE_TEXT_ARGUMENTS, "ref": GIT_SHA}
    unparseable = f'{{"password": "{PASSWORD}", "dsn": "{DB_URL}"'
    calls = [
        (ToolCall("sensitive-keys", "echo", dict(SENSITIVE_ARGUMENTS)), ErrorCode.OK),
        (ToolCall("free-text", "echo", dict(FREE_TEXT_ARGUMENTS)), ErrorCode.OK),
        (ToolCall("as-json-text", "echo", json.dumps(both)), ErrorCode.OK),
        (ToolCall("output", "leak_output", {"ref": GIT_SHA}), ErrorCode.OK),
        (ToolCall("exception", "leak_exception", both), ErrorCode.EXECUTION_ERROR),
        # refused before any handler: each refusal's message is stored too
        (
            ToolCall("schema", "strict", {"count": AWS_KEY_ID, "password": PASSWORD, **both}),
            ErrorCode.INVALID_ARGUMENT,
        ),
        (ToolCall("schema-type", "strict", {"count": BEARER_LINE}), ErrorCode.INVALID_ARGUMENT),
        (ToolCall("unknown", "no_such_tool", both), ErrorCode.TOOL_NOT_FOUND),
        (
            ToolCall("outside", "save", {"path": "../x.txt", "content": ALL_FREE_TEXT}),
            ErrorCode.PATH_OUTSIDE_WORKSPACE,
        ),
        (ToolCall("not-allowed", "forbidden", both), ErrorCode.PERMISSION_DENIED),
        (ToolCall("hook", "gated", both), ErrorCode.BLOCKED),
        (ToolCall("not-json", "echo", unparseable), ErrorCode.INVALID_REQUEST),
    ]
    # with idempotency keys: the outcome is stored, then replayed from the store
    for name, first, again in (
        ("echo", ErrorCode.OK, ErrorCode.IDEMPOTENT_REPLAY),
        ("leak_output", ErrorCode.OK, ErrorCode.IDEMPOTENT_REPLAY),
        ("leak_exception", ErrorCode.EXECUTION_ERROR, ErrorCode.EXECUTION_ERROR),
    ):
        arguments = {"ref": GIT_SHA} if name == "leak_output" else both
        calls.append((ToolCall(f"{name}-keyed", name, arguments, idempotency_key=name), first))
        calls.append((ToolCall(f"{name}-replay", name, arguments, idempotency_key=name), again))
    return calls


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "audit.db"


@pytest.fixture
def secret_run(tmp_path: Path, db: Path):
    """Runs every secret call; yields (runtime, store, results by call_id)
    with the connection still open."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    store = SQLiteAuditStore(db)
    runtime = ToolRuntime(
        build_registry(Spy()), str(workspace), CAPABILITIES, store, hooks=[DenyGated()]
    )
    results = {call.call_id: runtime.execute(call) for call, _ in secret_calls()}
    try:
        yield runtime, store, results
    finally:
        runtime.close()
        store.close()


def test_every_kind_of_call_was_answered_and_stored_so_the_scan_means_something(secret_run, db):
    runtime, store, results = secret_run
    expected = {call.call_id: code for call, code in secret_calls()}
    assert {call_id: result.code for call_id, result in results.items()} == expected
    assert store.count() == len(results)
    assert store.get("leak_exception-replay").replay_of == "leak_exception-keyed"
    files = stored_bytes(db)
    assert len(files.get("audit.db-wal", b"")) > 0
    every_byte = b"".join(files.values())
    for placeholder in (b"<redacted:aws_access_key>", b"<redacted:password>", b"<redacted:jwt>"):
        assert placeholder in every_byte


@pytest.mark.parametrize("label", sorted(SECRETS))
def test_no_secret_is_in_the_db_wal_or_shm_while_the_connection_is_open(secret_run, db, label):
    files = stored_bytes(db)
    found = [leak for leak in leaks(files) if leak[1] == label]
    assert found == []


def test_no_secret_is_in_the_database_after_a_checkpoint_and_close(secret_run, db, capsys):
    runtime, store, results = secret_run
    scans = [stored_bytes(db)]
    with closing(sqlite3.connect(db)) as raw:
        busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0
    scans.append(stored_bytes(db))
    runtime.close()
    store.close()
    scans.append(stored_bytes(db))
    assert [leaks(files) for files in scans] == [[], [], []]
    assert b"<redacted:github_token>" in scans[-1]["audit.db"]
    parts = sum(len(parts) for parts in SECRETS.values())
    files = sum(len(files) for files in scans)
    with capsys.disabled():
        print(
            f"\n[secrets] {len(SECRETS)} secrets ({parts} distinctive strings) through "
            f"{len(results)} calls; {files} files read in 3 scans (open: "
            f"{sorted(scans[0])}, checkpointed, closed: {sorted(scans[2])}): 0 found"
        )


def test_git_shas_and_uuids_in_arguments_are_not_redacted(tmp_path, db):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with SQLiteAuditStore(db) as store:
        runtime = ToolRuntime(build_registry(Spy()), str(workspace), CAPABILITIES, store)
        arguments = {"commit": GIT_SHA, "request_id": UUID, "note": f"fix {GIT_SHA} for {UUID}"}
        runtime.execute(ToolCall("ids", "echo", arguments))
        runtime.close()
        row = store.get("ids")
    assert row.arguments_json.count(GIT_SHA) == 2
    assert row.arguments_json.count(UUID) == 2
    assert GIT_SHA in row.result_preview and UUID in row.result_preview


def test_replay_of_an_output_holding_a_secret_answers_it_redacted(secret_run):
    """The stored outcome is redacted before the INSERT, so what a replay can
    give back is the redacted output: the secret is never at rest."""
    _, _, results = secret_run
    first, replay = results["leak_output-keyed"], results["leak_output-replay"]
    assert GITHUB_TOKEN in first.data["status"]
    assert replay.data["config"]["api_key"] == "<redacted:api_key>"
    assert GITHUB_TOKEN not in replay.data["status"]
    assert replay.data["ref"] == GIT_SHA


# --- regressions: the text of a schema error, text cut before it is redacted ---------


def require(condition: bool, what: str) -> None:
    """A precondition: failing it means the test no longer sets up what it checks."""
    if not condition:
        pytest.fail(f"precondition failed: {what}")


def run_one(tmp_path: Path, db: Path, spec: Any, call: ToolCall):
    """One call on a fresh runtime; the result and the raw files read before close."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    store = SQLiteAuditStore(db)
    capabilities = Capabilities(allowed_risks=EVERY_RISK)
    runtime = ToolRuntime(ToolRegistry([spec]), str(workspace), capabilities, store)
    try:
        result = runtime.execute(call)
        return result, stored_bytes(db)
    finally:
        runtime.close()
        store.close()


SENSITIVE_SCHEMA = {
    "type": "object",
    "properties": {
        "api_key": {"type": "string"},
        "cookie": {"type": "string", "maxLength": 256},
    },
    "additionalProperties": False,
}


def _wrong_type_in_arguments() -> tuple[Any, ToolCall, ErrorCode]:
    spec = spy_tool(Spy(), "login", schema=SENSITIVE_SCHEMA)
    return spec, ToolCall("c1", "login", {"api_key": [API_KEY]}), ErrorCode.INVALID_ARGUMENT


def _wrong_type_in_output() -> tuple[Any, ToolCall, ErrorCode]:
    spec = spy_tool(
        Spy(),
        "issue_key",
        schema=OPEN_SCHEMA,
        result=lambda ctx, **a: {"api_key": [API_KEY]},
        output_schema=SENSITIVE_SCHEMA,
    )
    return spec, ToolCall("c1", "issue_key", {}), ErrorCode.OUTPUT_INVALID


@pytest.mark.parametrize(
    "make", [_wrong_type_in_arguments, _wrong_type_in_output], ids=["arguments", "output"]
)
def test_secret_under_a_sensitive_key_with_the_wrong_type_is_not_in_the_schema_error(
    tmp_path, db, make
):
    spec, call, code = make()
    result, files = run_one(tmp_path, db, spec, call)
    require(result.code is code, f"{code}, got {result.code}")
    assert leaks(files) == []


LONG_COOKIE = "sessionid=" + "Zq8Rk3Pw1Yt6" * 30


def test_long_secret_under_a_sensitive_key_is_not_in_the_schema_error(tmp_path, db):
    spec = spy_tool(Spy(), "login", schema=SENSITIVE_SCHEMA)
    result, files = run_one(tmp_path, db, spec, ToolCall("c1", "login", {"cookie": LONG_COOKIE}))
    require(result.code is ErrorCode.INVALID_ARGUMENT, f"schema error, got {result.code}")
    assert holding(files, "Zq8Rk3Pw1Yt6") == []


SURVIVING = 15  # characters of the token's 36 left before the cut: too few for its pattern


def _output_cut_at_the_result_limit() -> tuple[Any, ToolCall]:
    cut = len('{"log": "deploy key ghp_') + SURVIVING
    spec = spy_tool(
        Spy(),
        "dump",
        schema=OPEN_SCHEMA,
        result=lambda ctx, **a: {"log": f"deploy key {GITHUB_TOKEN} installed"},
        result_limit=cut,
    )
    return spec, ToolCall("c1", "dump", {}, idempotency_key="k")


def _exception_message_cut_at_its_bound() -> tuple[Any, ToolCall]:
    # runtime.MESSAGE_LIMIT is 2000: the message keeps 1997 characters and "..."
    padding = 1997 - len("handler raised RuntimeError: ") - len(" ghp_") - SURVIVING

    def fail(ctx: Any, **arguments: Any) -> Any:
        raise RuntimeError("x" * padding + f" {GITHUB_TOKEN} rejected")

    spec = spy_tool(Spy(), "push", schema=OPEN_SCHEMA, result=fail)
    return spec, ToolCall("c1", "push", {}, idempotency_key="k")


@pytest.mark.parametrize(
    "make",
    [_output_cut_at_the_result_limit, _exception_message_cut_at_its_bound],
    ids=["output-at-result-limit", "exception-message-at-message-limit"],
)
def test_text_cut_inside_a_token_stores_no_fragment_of_it(tmp_path, db, make):
    spec, call = make()
    result, files = run_one(tmp_path, db, spec, call)
    # The model sees data cut inside the token (data is the tool's own), and a
    # message redacted before it was cut: neither shows the whole token.
    shown = result.data if result.ok else result.message
    require(GITHUB_TOKEN not in str(shown), f"the token is cut or redacted: {str(shown)[-40:]!r}")
    assert holding(files, GITHUB_TOKEN[4 : 4 + SURVIVING]) == []


@pytest.mark.slow
def test_no_secret_is_in_the_postgres_data_directory_after_a_checkpoint(
    own_postgres_server, tmp_path, capsys
):
    """The same calls, through a PostgreSQL store on a server of this test's
    own (no other test's rows in its files)."""
    from pytest_toolguard.audit.postgres import PostgresAuditStore

    server = own_postgres_server
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    store = PostgresAuditStore(server.url())
    runtime = ToolRuntime(
        build_registry(Spy()), str(workspace), CAPABILITIES, store, hooks=[DenyGated()]
    )
    results = {call.call_id: runtime.execute(call) for call, _ in secret_calls()}
    runtime.close()
    assert {call_id: result.code for call_id, result in results.items()} == {
        call.call_id: code for call, code in secret_calls()
    }
    assert store.count() == len(results)
    store.close()
    server.execute("CHECKPOINT")
    files = {str(path.relative_to(server.data)): data for path, data in server.data_files()}
    every_byte = b"".join(files.values())
    for placeholder in (b"<redacted:aws_access_key>", b"<redacted:password>", b"<redacted:jwt>"):
        assert placeholder in every_byte  # the rows are in the bytes scanned
    assert leaks(files) == []
    with capsys.disabled():
        print(
            f"\n[secrets/postgres] {len(SECRETS)} secrets through {len(results)} calls;"
            f" {len(files)} files ({len(every_byte)} bytes) of the data directory read"
            " after a CHECKPOINT: 0 found"
        )


@pytest.mark.slow
def test_postgres_update_redacting_after_insert_leaves_the_secret_in_the_data_directory(
    own_postgres_server,
):
    """Why the stores never redact after the INSERT, on PostgreSQL too: the
    old row version stays in the heap and the WAL, and the scan above would
    find it."""
    import psycopg

    server = own_postgres_server
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (body TEXT)")
        conn.execute("INSERT INTO t VALUES (%s)", (f"password={PASSWORD}",))
        conn.execute("UPDATE t SET body = %s", ("password=<redacted:password>",))
        conn.execute("CHECKPOINT")
    files = {str(path.relative_to(server.data)): data for path, data in server.data_files()}
    assert ("password", PASSWORD) in {(label, part) for _, label, part in leaks(files)}
