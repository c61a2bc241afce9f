"""Benchmark of ``ToolRuntime.execute`` with ``PostgresAuditStore``, against
its floor on the same server: two bare psycopg commits. Reported, never
asserted.

    .venv/bin/python benchmarks/postgres_bench.py              # a throwaway server
    .venv/bin/python benchmarks/postgres_bench.py --url URL    # a server of yours

Without ``--url`` it starts a throwaway PostgreSQL (initdb in a temporary
directory, a unix socket, no TCP; tests/postgres_server.py, as the tests
do), with ``fsync=off``: commits cost a round trip and the server's work,
not the disk's. With ``--url`` the tables go to a new schema that is dropped
afterwards. Where there is no server it says why and exits 0.

Variants, in alternating blocks like ``run.py``'s (see README.md):

* **pg**: ``ToolRuntime.execute(read_text)`` of the same 1 KB file as
  ``run.py``'s main, audited in ``PostgresAuditStore``;
* **(pb)**, the floor: one persistent psycopg connection in autocommit, an
  INSERT of a RUNNING row with the audit row's columns (``RETURNING`` its
  id), then an UPDATE to SUCCEEDED: two commits, no index but the key;
* **(ps)**: ``PostgresAuditStore.start`` + ``finish`` of the same row, no executor.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import uuid
from pathlib import Path
from typing import Any

from bare_audit import running_row
from timing import in_temp_dir, measure, package_version, ratio
from variants import (
    ARGUMENTS,
    ARGUMENTS_HASH,
    ARGUMENTS_JSON,
    TIMESTAMP,
    BenchmarkSetupError,
    Variant,
    make_workspace,
    running_record,
    sample_preview,
)

from pytest_toolguard import CallState, ErrorCode, ToolCall, ToolRuntime
from pytest_toolguard.audit import Outcome
from pytest_toolguard.audit.row import AUDIT_COLUMNS
from pytest_toolguard.tools import builtin_registry

RATIOS = (
    ("pg / (pb)   executor over the floor", "pg", "pb"),
    ("(ps) / (pb) audit store over the floor", "ps", "pb"),
    ("pg / (ps)   executor over its audit store", "pg", "ps"),
)

_BARE_TABLE = (
    "CREATE TABLE bare_audit (audit_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    + ", ".join(f"{name} {'BIGINT' if name == 'duration_ms' else 'TEXT'}" for name in AUDIT_COLUMNS)
    + ")"
)
_BARE_INSERT = (
    f"INSERT INTO bare_audit ({', '.join(AUDIT_COLUMNS)})"
    f" VALUES ({', '.join('%s' for _ in AUDIT_COLUMNS)}) RETURNING audit_id"
)
_BARE_FINISH = (
    "UPDATE bare_audit SET state = %s, result_code = %s, result_preview = %s,"
    " error_message = %s, finished_at = %s, duration_ms = %s"
    " WHERE audit_id = %s AND state = 'RUNNING'"
)


def runtime_execute(url: str, root: Path, content: str) -> Variant:
    """pg: the whole pipeline, audited in PostgreSQL."""
    from pytest_toolguard.audit.postgres import PostgresAuditStore

    store = PostgresAuditStore(url)
    runtime = ToolRuntime(builtin_registry(), root, audit=store)
    ids = itertools.count()

    def call() -> object:
        return runtime.execute(ToolCall(f"pg-{next(ids)}", "read_text", ARGUMENTS))

    result = runtime.execute(ToolCall("check", "read_text", ARGUMENTS))
    if not (result.ok and result.data["content"] == content):
        raise BenchmarkSetupError(f"pg: read_text answered {result.code}: {result.message}")
    row = store.get("check")
    if row is None or row.state is not CallState.SUCCEEDED:
        raise BenchmarkSetupError(f"pg: the audit row is {row}")

    def close() -> None:
        runtime.close()
        store.close()

    return Variant("pg", "ToolRuntime.execute(read_text), PostgresAuditStore", call, close)


def bare_commits(url: str, content: str) -> Variant:
    """(pb): the floor, two plain psycopg commits of an audit-shaped row."""
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute(_BARE_TABLE)
    preview = sample_preview(content)
    ids = itertools.count()

    def call() -> object:
        values = running_row(
            f"bare-{next(ids)}",
            tool_name="read_text",
            arguments_json=ARGUMENTS_JSON,
            arguments_hash=ARGUMENTS_HASH,
            started_at=TIMESTAMP,
        )
        row = conn.execute(_BARE_INSERT, values).fetchone()
        assert row is not None
        conn.execute(_BARE_FINISH, ("SUCCEEDED", "OK", preview, "", TIMESTAMP, 0, row[0]))
        return row[0]

    call()
    done = conn.execute("SELECT count(*) FROM bare_audit WHERE state = 'SUCCEEDED'").fetchone()
    if done is None or done[0] != 1:
        raise BenchmarkSetupError("(pb): the bare row was not finished")
    return Variant("pb", "floor: 2 bare psycopg commits (INSERT, UPDATE)", call, conn.close)


def store_only(url: str, content: str) -> Variant:
    """(ps): PostgresAuditStore.start + finish of the same row, no executor."""
    from pytest_toolguard.audit.postgres import PostgresAuditStore

    store = PostgresAuditStore(url)
    preview = sample_preview(content)
    ids = itertools.count()

    def call() -> object:
        audit_id, _ = store.start(running_record(f"store-{next(ids)}"), lease_seconds=10)
        assert audit_id is not None
        store.finish(
            audit_id,
            Outcome(
                state=CallState.SUCCEEDED,
                result_code=ErrorCode.OK,
                result_preview=preview,
                error_message="",
                finished_at=TIMESTAMP,
                duration_ms=0,
            ),
        )
        return audit_id

    return Variant("ps", "PostgresAuditStore.start + finish only", call, store.close)


def _server(options: argparse.Namespace) -> tuple[str, Any]:
    """(a URL whose tables go to a new schema, a cleanup)."""
    if options.url:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(options.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]

        def drop() -> None:
            with psycopg.connect(options.url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]

        separator = "&" if "?" in options.url else "?"
        return f"{options.url}{separator}options=-csearch_path%3D{schema}", drop
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from postgres_server import start_server

    server = start_server()
    return server.new_schema(), server.remove


def _run(options: argparse.Namespace, directory: Path) -> int:
    try:
        url, cleanup = _server(options)
    except Exception as exc:  # no server here: say why, as a benchmark that could not run
        print(f"postgres benchmark not run: {exc}")
        return 0
    try:
        import psycopg

        with psycopg.connect(url) as conn:
            version = conn.info.server_version
        print(
            f"env: PostgreSQL {version // 10000}.{version % 10000}, psycopg "
            f"{package_version('psycopg')}, psycopg-pool {package_version('psycopg-pool')}; "
            f"{'the server at --url' if options.url else 'a throwaway server, unix socket'}"
        )
        root, content = make_workspace(directory)
        variants = [
            runtime_execute(url, root, content),
            bare_commits(url, content),
            store_only(url, content),
        ]
        try:
            samples = measure(
                {variant.key: variant.call for variant in variants},
                warmup=options.warmup,
                blocks=options.blocks,
                per_block=options.per_block,
            )
        finally:
            for variant in variants:
                variant.close()
    finally:
        cleanup()
    print(
        f"{options.blocks * options.per_block:,} calls per variant in {options.blocks} "
        f"alternating blocks of {options.per_block}, after {options.warmup} warm-up calls"
    )
    print()
    print(f"{'variant':<60}{'median µs':>10}{'p10 µs':>9}{'p90 µs':>9}")
    for variant in variants:
        got = samples[variant.key]
        name = variant.key if variant.key == "pg" else f"({variant.key})"
        print(
            f"{name + ' ' + variant.label:<60}{got.median_us:>10.1f}"
            f"{got.percentile_us(0.1):>9.1f}{got.percentile_us(0.9):>9.1f}"
        )
    print()
    print(f"{'ratio (median of the per-block ratios)':<60}{'value':>10}{'block range':>16}")
    for label, top, bottom in RATIOS:
        value, low, high = ratio(samples[top], samples[bottom])
        print(f"{label:<60}{value:>10.2f}{f'{low:.2f} - {high:.2f}':>16}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL server to use (default: a throwaway one)")
    parser.add_argument("--blocks", type=int, default=8, help="alternating blocks (default 8)")
    parser.add_argument(
        "--per-block", type=int, default=200, help="calls per variant per block (default 200)"
    )
    parser.add_argument("--warmup", type=int, default=200, help="warm-up calls per variant")
    parser.add_argument("--dir", default=None, help="where the workspace goes")
    parser.add_argument("--keep", action="store_true", help="keep the workspace afterwards")
    options = parser.parse_args(argv)
    return in_temp_dir("postgres-bench", options, _run)


if __name__ == "__main__":
    sys.exit(main())
