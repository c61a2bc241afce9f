"""An audit store named by a URL or a path: one switch for every place that
takes one (``ToolRuntime(audit=...)``, ``toolguard audit``).

* ``postgresql://...`` or ``postgres://...``: ``PostgresAuditStore`` (the
  ``[postgres]`` extra), for workers on several machines;
* ``sqlite:///abs/path.db``, ``sqlite:relative.db``, ``sqlite::memory:``, a
  plain path, or ``:memory:``: ``SQLiteAuditStore``, the embedded default.
"""

from __future__ import annotations

import os
from typing import Any

from .protocol import AuditStore
from .sqlite import SQLiteAuditStore


def store_kind(target: str | os.PathLike[str]) -> str:
    """``"postgres"`` or ``"sqlite"``: which store ``target`` names."""
    text = os.fspath(target)
    if text.startswith(("postgresql://", "postgres://")):
        return "postgres"
    return "sqlite"


def _sqlite_path(text: str) -> str:
    if text.startswith("sqlite://"):
        return text[len("sqlite://") :] or ":memory:"
    if text.startswith("sqlite:"):
        return text[len("sqlite:") :] or ":memory:"
    return text


def open_audit_store(target: str | os.PathLike[str], **settings: Any) -> AuditStore:
    """Open the store ``target`` names, with ``settings`` for its
    constructor. Raises what that constructor raises: ``AuditUnavailable``
    when it cannot open the store, ``ImportError`` naming the extra when the
    PostgreSQL driver is missing."""
    text = os.fspath(target)
    if store_kind(text) == "postgres":
        from .postgres import PostgresAuditStore

        return PostgresAuditStore(text, **settings)
    return SQLiteAuditStore(_sqlite_path(text), **settings)
