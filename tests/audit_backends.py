"""The audit stores the contract tests run on: SQLite and PostgreSQL.

A backend opens any number of stores on one database (one test's), and
knows the two things the contract tests need from outside the protocol: how
to make the database fail the second statement of a write (a trigger, as a
full disk can), and which raw bytes hold the data at rest.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from postgres_server import PostgresServer

from pytest_toolguard.audit import AuditStore, SQLiteAuditStore


class Backend:
    """Stores on one test's database; ``close`` closes every one opened."""

    name = ""

    def __init__(self) -> None:
        self._opened: list[Any] = []

    def open(self, **settings: Any) -> Any:
        """A new store on this backend's database."""
        store = self._make(**settings)
        self._opened.append(store)
        return store

    def _make(self, **settings: Any) -> AuditStore:
        return open_store(self.spec, **settings)

    @property
    def spec(self) -> tuple[str, str]:
        """What ``open_store`` needs to open a store on this database in
        another process: (backend name, path or URL)."""
        raise NotImplementedError

    def fail_writes_to(self, table: str, event: str) -> None:
        """Make every ``event`` (INSERT, UPDATE) on ``table`` fail with
        'database or disk is full (simulated)'."""
        raise NotImplementedError

    def stored_bytes(self) -> dict[str, bytes]:
        """The bytes at rest: what a secret scan reads."""
        raise NotImplementedError

    def close(self) -> None:
        for store in self._opened:
            store.close()


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    @property
    def spec(self) -> tuple[str, str]:
        return ("sqlite", str(self.path))

    def fail_writes_to(self, table: str, event: str) -> None:
        raw = sqlite3.connect(self.path, isolation_level=None)
        try:
            raw.execute(
                f"CREATE TRIGGER fail_{event.lower()} BEFORE {event} ON {table}"
                " BEGIN SELECT RAISE(ABORT, 'database or disk is full (simulated)'); END"
            )
        finally:
            raw.close()

    def stored_bytes(self) -> dict[str, bytes]:
        files = {}
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{self.path}{suffix}")
            if path.exists():
                files[path.name] = path.read_bytes()
        return files


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, server: PostgresServer) -> None:
        super().__init__()
        self.server = server
        self.url = server.new_schema()
        self.schema = self.url.rsplit("%3D", 1)[1]

    @property
    def spec(self) -> tuple[str, str]:
        return ("postgres", self.url)

    def fail_writes_to(self, table: str, event: str) -> None:
        function = f"{self.schema}.fail_{event.lower()}"
        self.server.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN RAISE EXCEPTION 'database or disk is full (simulated)'; END$$",
            f"CREATE TRIGGER fail_{event.lower()} BEFORE {event} ON {self.schema}.{table}"
            f" FOR EACH ROW EXECUTE FUNCTION {function}()",
        )

    def stored_bytes(self) -> dict[str, bytes]:
        self.server.execute("CHECKPOINT")
        return {
            str(path.relative_to(self.server.data)): data for path, data in self.server.data_files()
        }


def open_store(spec: tuple[str, str], **settings: Any) -> Any:
    """A store on the database ``spec`` names (``Backend.spec``), in any process."""
    name, target = spec
    if name == "sqlite":
        return SQLiteAuditStore(target, **settings)
    from pytest_toolguard.audit.postgres import PostgresAuditStore

    return PostgresAuditStore(target, **settings)
