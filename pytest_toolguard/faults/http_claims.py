"""Whether a result answered to a failed HTTP exchange claims the success
it never had.

When every request a handler makes fails (an error status, a broken
connection), the call did not do what it was recorded doing. The result
must say so: a failure (any code but OK), or OK with data that says what
failed. ``false_success`` judges an OK result; it finds one of:

- **the recorded data** again: the answer of the success;
- **a claim of success**: a key named like a success flag (``ok``,
  ``success``, ``delivered``, ``sent``, ...) set to true at the top of the
  data or where the recorded success had it true, or a status-like key
  (``status``, ``result``, ``outcome``, ...) holding the value it held in
  the recorded success (``"sent"``, ``200``); a flag deeper in the data
  (``{"cache": {"ok": true}}``) is not read as the call's own;
- **no word of the failure**: nothing in the data or the message says
  what failed: no error-like key (``error``, ``errors``, ``failure``,
  ``stale``, ``retry_after``, ...) with a value, no success flag set to false, no status of
  4xx or 5xx, no text naming an error, a failure, a timeout, a refusal, an
  HTTP status of 4xx or 5xx.

A tool that raises, or answers ``{"delivered": false, "error": "HTTP
500"}`` or ``{"status": 503, "body": ...}``, passes; one answering
``{"delivered": true}`` or ``{"status": "sent"}`` under a 500 does not.
The words are looked for in keys and text, in English: a result saying
its failure in other words is reported, and says so in its problem line.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Any

SUCCESS_FLAGS = frozenset(
    {
        "ok",
        "success",
        "succeeded",
        "successful",
        "delivered",
        "sent",
        "done",
        "completed",
        "complete",
        "created",
        "accepted",
        "saved",
        "posted",
        "published",
        "updated",
        "deleted",
        "uploaded",
        "healthy",
    }
)
"""Keys (as ``_key`` spells them: ``isDelivered`` is ``delivered``) whose
true value claims the request succeeded; false, they say it failed."""

STATUS_KEYS = frozenset(
    {"status", "status_code", "statuscode", "http_status", "code", "state", "result", "outcome"}
)
"""Keys whose value says how the request went."""

CLAIM_KEYS = STATUS_KEYS - {"state"}
"""Status keys whose recorded value, repeated, claims the recorded success
(a ``state`` is as often the state of a thing, ``"open"``, as of the
request)."""

FAILURE_KEY = re.compile(
    r"(^|_)(error|errors|err|failure|failures|failed|exception|problem|fault|stale|degraded|"
    r"retry|retryable|unavailable|rejected|undelivered)($|_)"
)
"""Keys that, with a value, say what failed."""

FAILURE_TEXT = re.compile(
    r"error|fail|unavailable|refused|denied|timed?[ _-]?out|reset|rate[ _-]?limit|"
    r"too many requests|could not|couldn't|cannot|unable|retry|try again|reject|declin|"
    r"abort|unreachable|not (sent|delivered|saved|created)|\b[45]\d\d\b",
    re.IGNORECASE,
)
"""Text that says something failed."""

MESSAGE_KEYS = frozenset(
    {
        "message",
        "msg",
        "detail",
        "details",
        "reason",
        "description",
        "text",
        "note",
        "notes",
        "summary",
        "info",
        "warning",
        "warnings",
        "comment",
        "explanation",
        "answer",
        "reply",
    }
)
"""Keys whose text is a message to the reader, where words of failure count."""

MAX_NODES = 2000
"""At most this many values of a result are walked."""


def false_success(data: Any, message: str, recorded: Any, *, silent_ok: bool = False) -> str | None:
    """Why an OK result with ``data`` and ``message``, answered to a failed
    exchange, claims a success (see the module's list), or None when it
    says what failed. ``recorded``: the data of the recorded success, both
    redacted alike. ``silent_ok``: a result saying nothing of the failure
    passes (an unfollowed redirect answers data of its own, a 3xx status,
    that need not say "error")."""
    if data == recorded:
        return "with the recorded data"
    claim = _claim(data, recorded)
    if claim is not None and not (claim.endswith(", as recorded") and _names_failure(data)):
        return f"claiming success ({claim})"
    if silent_ok or _says_failure(data) or FAILURE_TEXT.search(message or ""):
        return None
    return (
        "with data that does not say what failed (no error field, no false ok or "
        "success flag, no 4xx or 5xx status)"
    )


def _key(name: Any) -> str:
    """A key as the lists spell it: snake case (``isDelivered`` and
    ``is-delivered`` read ``delivered``, ``statusCode`` reads
    ``status_code``), lower case, without an ``is_`` prefix."""
    key = _CAMEL.sub("_", str(name).strip()).lower().replace("-", "_")
    return key[3:] if key.startswith("is_") else key


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _leaves(value: Any) -> Iterator[tuple[tuple[str, ...], str, Any]]:
    """(path of keys, the last key normalised, value) of every value under
    a mapping key, walked breadth-first up to ``MAX_NODES``."""
    queue: deque[tuple[tuple[str, ...], Any]] = deque([((), value)])
    seen = 0
    while queue and seen < MAX_NODES:
        path, node = queue.popleft()
        seen += 1
        if isinstance(node, dict):
            for name, child in node.items():
                here = (*path, str(name))
                yield here, _key(name), child
                queue.append((here, child))
        elif isinstance(node, list | tuple):
            queue.extend(((*path, "[]"), child) for child in node)


def _claim(data: Any, recorded: Any) -> str | None:
    """The first claim of success in ``data``: a success flag set to true
    at the top or where the recorded success had it, or a status-like key
    holding the recorded success's value there."""
    recorded_claims = {
        path: value
        for path, key, value in _leaves(recorded)
        if (key in CLAIM_KEYS and _is_success_value(value))
        or (key in SUCCESS_FLAGS and value is True)
    }
    for path, key, value in _leaves(data):
        if key in SUCCESS_FLAGS and value is True and (len(path) == 1 or path in recorded_claims):
            return f"{'.'.join(path)}: true"
        if path in recorded_claims and value == recorded_claims[path]:
            return f"{'.'.join(path)}: {value!r}, as recorded"
    return None


def _is_success_value(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return 200 <= value < 400
    if isinstance(value, str):
        return bool(value.strip()) and not FAILURE_TEXT.search(value)
    return False


def _names_failure(data: Any) -> bool:
    """Whether ``data`` holds a field that names a failure (an error, a
    false success flag): then a status repeated from the recorded success
    is a thing's state (a ticket still ``"open"``), not a claim."""
    for _path, key, value in _leaves(data):
        if FAILURE_KEY.search(key) and value not in (None, False, "", [], {}, 0):
            return True
        if key in SUCCESS_FLAGS and value is False:
            return True
    return False


def _says_failure(data: Any) -> bool:
    """Whether ``data`` says what failed (see the module's list): a field
    naming a failure, a failing status, or words of failure in a text of
    its own or in a field that carries a message (never any string: an
    amount of ``"450 EUR"`` or a "password reset" link says nothing)."""
    if isinstance(data, str):
        return bool(FAILURE_TEXT.search(data))
    if _names_failure(data):
        return True
    for _path, key, value in _leaves(data):
        if key in STATUS_KEYS:
            if isinstance(value, int) and not isinstance(value, bool) and value >= 400:
                return True
            if isinstance(value, str) and FAILURE_TEXT.search(value):
                return True
        if key in MESSAGE_KEYS and isinstance(value, str) and FAILURE_TEXT.search(value):
            return True
    return False
