"""The floor: an audit row kept with plain ``sqlite3`` and nothing else.

Per call, two commits, as the executor makes them: INSERT the row as RUNNING,
then UPDATE it to its outcome. Each statement is its own transaction
(autocommit), over one persistent connection, on a file database in WAL mode
with ``synchronous=NORMAL`` (the settings ``SQLiteAuditStore`` uses).

The table has the columns of ``tool_call_audit`` and a plain
``INTEGER PRIMARY KEY``: no secondary index, no AUTOINCREMENT. It is the
least any durable audit log of this shape can cost; what the real store adds
on top of it (indexes, explicit transactions, Python) shows up as the ratio
of variant (s) to this one.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

from pytest_toolguard.audit.row import AUDIT_COLUMNS

COLUMNS = AUDIT_COLUMNS  # the same row shape as the real store

_CREATE = (
    "CREATE TABLE IF NOT EXISTS tool_call_audit ("
    "audit_id INTEGER PRIMARY KEY, "
    + ", ".join(f"{name} {'INTEGER' if name == 'duration_ms' else 'TEXT'}" for name in COLUMNS)
    + ")"
)
_INSERT = (
    f"INSERT INTO tool_call_audit ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
)
_FINISH = (
    "UPDATE tool_call_audit SET state = ?, result_code = ?, result_preview = ?,"
    " error_message = ?, finished_at = ?, duration_ms = ?"
    " WHERE audit_id = ? AND state = 'RUNNING'"
)


def running_row(
    call_id: str,
    *,
    tool_name: str,
    arguments_json: str,
    arguments_hash: str,
    started_at: str,
) -> tuple[object, ...]:
    """The values of a RUNNING row, in ``COLUMNS`` order."""
    values: dict[str, object] = dict.fromkeys(COLUMNS)
    values.update(
        call_id=call_id,
        session_id="default",
        actor="agent",
        tool_name=tool_name,
        risk="read",
        arguments_json=arguments_json,
        arguments_hash=arguments_hash,
        decision="allow",
        rule="policy.allow",
        reason="every rule passed",
        state="RUNNING",
        started_at=started_at,
    )
    return tuple(values[name] for name in COLUMNS)


class BareAuditTable:
    """One connection to one database file; two autocommitted writes per call."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._conn = sqlite3.connect(os.fspath(path), isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute(_CREATE)

    def insert_running(self, row: Sequence[object]) -> int:
        """Commit a RUNNING row (from ``running_row``); its row id."""
        cursor = self._conn.execute(_INSERT, row)
        return int(cursor.lastrowid or 0)

    def finish(
        self,
        row_id: int,
        *,
        state: str,
        result_code: str,
        result_preview: str,
        error_message: str,
        finished_at: str,
        duration_ms: int,
    ) -> None:
        """Commit the outcome of the RUNNING row ``row_id``."""
        self._conn.execute(
            _FINISH,
            (state, result_code, result_preview, error_message, finished_at, duration_ms, row_id),
        )

    def settings(self) -> tuple[str, int]:
        """(journal mode, synchronous level) as SQLite reports them."""
        mode = str(self._conn.execute("PRAGMA journal_mode").fetchone()[0])
        synchronous = int(self._conn.execute("PRAGMA synchronous").fetchone()[0])
        return mode.lower(), synchronous

    def close(self) -> None:
        self._conn.close()
