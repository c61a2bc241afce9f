"""The bounds of what a result and an audit row keep (data only)."""

from __future__ import annotations

import threading

MAX_ID_LENGTH = 256
"""Characters of a call id, tool name, actor, session id or idempotency key."""

PREVIEW_LIMIT = 500
"""Characters of redacted output kept in the audit row."""

ARGUMENTS_LIMIT = 16_000
"""Characters of redacted arguments kept in the audit row (the hash covers all)."""

MESSAGE_LIMIT = 2_000
"""Characters of a result's message (and so of the row's error message)."""

PENDING_LIMIT = 10_000
"""Audit writes kept for retry while the store is down; more are dropped."""

TIMEOUT_MAX = threading.TIMEOUT_MAX
"""The largest deadline, in seconds, a lock wait accepts."""

CANCELLED_MESSAGE = "interrupted: the caller's task was cancelled while the handler ran"
"""The message of a call whose ``aexecute`` caller was cancelled."""


def valid_timeout(seconds: float) -> bool:
    """Whether ``seconds`` is a deadline the runtime can wait for."""
    return isinstance(seconds, (int, float)) and 0 < seconds <= TIMEOUT_MAX
