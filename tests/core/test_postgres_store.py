"""PostgresAuditStore beyond the shared contract (tests/core/test_audit_store.py
and tests/core/test_idempotency_store.py run that on both backends): selection by
URL, versioned migrations, the bound on every wait, reconnecting, NUL text,
no host path in messages, and the CLI. Every test runs against a real server
the tests start (tests/postgres_server.py)."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, Spy, spy_tool

from pytest_toolguard import CallState, ErrorCode, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.audit.postgres import PostgresAuditStore
from pytest_toolguard.audit.row import AuditRecord, AuditUnavailable, Outcome, table_columns
from pytest_toolguard.audit.schema import POSTGRES_SCHEMA_VERSION
from pytest_toolguard.audit.stores import open_audit_store
from pytest_toolguard.cli import main

T0 = "2025-01-02T03:04:05.000Z"


def running(call_id: str = "c1", **overrides: Any) -> AuditRecord:
    fields: dict[str, Any] = {
        "call_id": call_id,
        "session_id": "s1",
        "actor": "agent",
        "tool_name": "t",
        "risk": "read",
        "arguments_json": "{}",
        "arguments_hash": "h",
        "state": CallState.RUNNING,
        "started_at": T0,
    }
    fields.update(overrides)
    return AuditRecord(**fields)


@pytest.fixture
def url(postgres_server: Any) -> str:
    """A URL whose tables go to a new, empty schema."""
    return str(postgres_server.new_schema())


@pytest.fixture
def store(url: str) -> Any:
    with PostgresAuditStore(url) as opened:
        yield opened


def columns(postgres_server: Any, url: str, table: str) -> list[str]:
    schema = url.rsplit("%3D", 1)[1]
    import psycopg

    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                (schema, table),
            )
        ]


# --- selection by URL -----------------------------------------------------------------


def test_a_postgresql_url_selects_the_postgres_store_and_the_runtime_closes_it(
    url: str, tmp_path: Path, spy: Spy
) -> None:
    runtime = ToolRuntime(
        registry_of_spy(spy), tmp_path, WRITE_ANYWHERE, audit=url.replace("postgresql", "postgres")
    )
    store = runtime.audit
    assert isinstance(store, PostgresAuditStore)
    assert runtime.execute(ToolCall("c1", "spy", {})).ok
    assert [row.call_id for row in store.rows()] == ["c1"]
    runtime.close()
    with pytest.raises(AuditUnavailable, match="closed"):
        store.count()


def registry_of_spy(spy: Spy) -> Any:
    from pytest_toolguard import ToolRegistry

    return ToolRegistry([spy_tool(spy)])


@pytest.mark.parametrize("form", ["plain", "sqlite:", "sqlite://"])
def test_a_path_still_selects_sqlite(tmp_path: Path, form: str) -> None:
    path = tmp_path / "audit.db"
    target = str(path) if form == "plain" else f"{form}{path}"
    with open_audit_store(target) as store:  # type: ignore[attr-defined]
        assert isinstance(store, SQLiteAuditStore)
    assert path.is_file()


def test_a_missing_driver_names_the_extra(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r"pytest-toolguard\[postgres\]"):
        PostgresAuditStore(url)


# --- schema ---------------------------------------------------------------------------


def test_tables_have_the_columns_of_the_sqlite_tables(
    store: PostgresAuditStore, postgres_server: Any, url: str, tmp_path: Path
) -> None:
    raw = sqlite3.connect(SQLiteAuditStore(tmp_path / "a.db")._target)
    try:
        for table in ("tool_call_audit", "idempotency_keys"):
            sqlite_columns = [row[1] for row in raw.execute(f"PRAGMA table_info({table})")]
            assert columns(postgres_server, url, table) == sqlite_columns
    finally:
        raw.close()
    assert columns(postgres_server, url, "tool_call_audit")[1:] == [
        name for name, _ in table_columns()
    ]


def test_migrations_are_recorded_and_applied_once(url: str) -> None:
    with PostgresAuditStore(url) as first, PostgresAuditStore(url) as second:
        first.record(running(state=CallState.DENIED, finished_at=T0))
        assert second.schema_versions() == list(range(1, POSTGRES_SCHEMA_VERSION + 1))
        assert second.count() == 1


def test_workers_starting_together_on_an_empty_database_migrate_it_once(url: str) -> None:
    barrier = threading.Barrier(6)
    opened: list[PostgresAuditStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        barrier.wait(timeout=30)
        try:
            opened.append(PostgresAuditStore(url))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert opened[0].schema_versions() == list(range(1, POSTGRES_SCHEMA_VERSION + 1))
    finally:
        for store in opened:
            store.close()


def test_a_database_from_a_newer_schema_is_refused(
    store: PostgresAuditStore, postgres_server: Any, url: str
) -> None:
    schema = url.rsplit("%3D", 1)[1]
    postgres_server.execute(
        f"INSERT INTO {schema}.toolguard_schema_migrations (version) VALUES (99)"
    )
    with pytest.raises(AuditUnavailable, match="schema version 99"):
        PostgresAuditStore(url)


def test_a_reader_never_creates_tables(url: str, postgres_server: Any) -> None:
    with pytest.raises(AuditUnavailable, match="no pytest-toolguard audit tables"):
        PostgresAuditStore(url, migrate=False)
    assert columns(postgres_server, url, "tool_call_audit") == []


def test_nul_in_stored_text_is_kept_as_its_escape(store: PostgresAuditStore) -> None:
    audit_id, _ = store.start(running("nul\x00id", reason="a\x00b"), claim_key="k\x00")
    assert audit_id is not None
    store.finish(
        audit_id,
        Outcome(
            state=CallState.FAILED,
            result_code=ErrorCode.EXECUTION_ERROR,
            result_preview="out\x00put",
            error_message="boom\x00",
            finished_at=T0,
            duration_ms=1,
            stored_result={"message": "x\x00y"},
        ),
        claim_key="k\x00",
    )
    row = store.get("nul\x00id")
    assert row is not None
    assert (row.call_id, row.reason, row.result_preview, row.error_message) == (
        "nul\\u0000id",
        "a\\u0000b",
        "out\\u0000put",
        "boom\\u0000",
    )
    _, again = store.start(running("again"), claim_key="k\x00")
    assert again is not None and again.stored_result == {"message": "x\x00y"}


# --- the bound, and reconnecting -----------------------------------------------------


def test_an_unreachable_server_is_audit_unavailable_within_the_bound(tmp_path: Path) -> None:
    missing = tmp_path / "no-server-here"
    started = time.monotonic()
    with pytest.raises(AuditUnavailable) as caught:
        PostgresAuditStore(f"postgresql://postgres@/postgres?host={missing}", timeout=1)
    assert time.monotonic() - started < 30  # bounded: 1 s asked, a wide margin for slow CI
    assert caught.value.operation == "open"
    assert str(tmp_path) not in str(caught.value)


def test_a_connection_the_server_closed_is_replaced_before_use(
    store: PostgresAuditStore, postgres_server: Any
) -> None:
    store.record(running("before", state=CallState.DENIED, finished_at=T0))
    postgres_server.execute(
        "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity"
        " WHERE application_name = 'pytest-toolguard'"
    )  # waits (up to 30 s) until those backends are gone
    store.record(running("after", state=CallState.DENIED, finished_at=T0))
    assert [row.call_id for row in store.rows()] == ["before", "after"]


def test_a_finish_repeated_after_a_lost_commit_succeeds(store: PostgresAuditStore) -> None:
    """The runtime retries a finish whose connection died: if the first
    attempt had committed, the retry finds this very outcome and succeeds."""
    audit_id, _ = store.start(running(), claim_key="k")
    assert audit_id is not None
    outcome = Outcome(
        state=CallState.SUCCEEDED,
        result_code=ErrorCode.OK,
        result_preview="ok",
        error_message=None,
        finished_at=T0,
        duration_ms=3,
        stored_result={"ok": True},
    )
    store.finish(audit_id, outcome, claim_key="k")
    store.finish(audit_id, outcome, claim_key="k")
    with pytest.raises(AuditUnavailable, match="not RUNNING"):
        store.finish(audit_id, replace(outcome, state=CallState.FAILED), claim_key="k")


def test_settings_are_checked(url: str) -> None:
    for settings in ({"timeout": 0}, {"min_connections": 3, "max_connections": 2}):
        with pytest.raises(ValueError):
            PostgresAuditStore(url, **settings)
    with pytest.raises(ValueError, match="lease"):
        PostgresAuditStore(url, lease_grace_seconds=-1)


# --- the CLI ----------------------------------------------------------------------------


def test_toolguard_audit_reads_a_postgres_store(
    store: PostgresAuditStore, url: str, capsys
) -> None:
    store.record(running("c1", state=CallState.DENIED, finished_at=T0, tool_name="write_file"))
    store.record(running("c2", state=CallState.DENIED, finished_at=T0, session_id="s2"))
    assert main(["audit", url, "--session", "s1", "--json"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert (json.loads(line)["call_id"], json.loads(line)["tool_name"]) == ("c1", "write_file")


def test_toolguard_audit_of_an_empty_postgres_database_is_one_line_and_exit_2(
    url: str, capsys
) -> None:
    assert main(["audit", url]) == 2
    err = capsys.readouterr().err
    assert "no pytest-toolguard audit tables" in err
    assert len(err.strip().splitlines()) == 1


def test_the_docs_several_machines_example_runs(url: str, tmp_path: Path, spy: Spy) -> None:
    import re

    from pytest_toolguard import ToolRegistry

    page = Path(__file__).resolve().parents[2] / "docs" / "several-machines.md"
    match = re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert match, "the section has a python block"
    code = match.group(1)
    assert '"postgresql://agent@db.internal/toolguard"' in code
    code = code.replace("postgresql://agent@db.internal/toolguard", url)
    code = code.replace("/srv/agent-workspace", str(tmp_path))
    namespace: dict[str, Any] = {
        "ToolRuntime": ToolRuntime,
        "registry": ToolRegistry([spy_tool(spy)]),
        "capabilities": WRITE_ANYWHERE,
    }
    exec(compile(code, "docs/several-machines.md", "exec"), namespace)
    runtime = namespace["runtime"]
    try:
        assert isinstance(runtime.audit, PostgresAuditStore)
        first = runtime.execute(ToolCall("c1", "spy", {}, session_id="w1", idempotency_key="o-1"))
        again = runtime.execute(ToolCall("c2", "spy", {}, session_id="w2", idempotency_key="o-1"))
        assert (first.code, again.code, spy.count) == (ErrorCode.OK, ErrorCode.IDEMPOTENT_REPLAY, 1)
    finally:
        runtime.close()
