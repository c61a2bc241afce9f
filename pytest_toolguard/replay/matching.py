"""Matching a call a test makes against the calls a cassette recorded.

Two calls match when their ``tool_name``, ``call_id``, ``idempotency_key``,
``actor``, ``session_id`` and arguments are equal, the new call's ids taken
as the audit row stores them (``storable_id``) and its arguments redacted
first (the cassette holds them redacted, so a test may send
the real secret and still match). Arguments are compared key by key, so a
mismatch names ``arguments.content`` rather than the whole mapping.

When a call matches no recorded one, ``closest`` says which recorded call
came nearest (fewest differing fields; the earliest among equals) and which
fields differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..contract import ToolCall
from ..redaction import Redactor
from ..runtime.admission import storable_id
from .cassette import Interaction
from .checks import Difference

MATCHED_FIELDS = ("tool_name", "call_id", "idempotency_key", "actor", "session_id")
"""Call fields compared besides the arguments."""

ABSENT = "<absent>"


def call_differences(recorded: ToolCall, made: ToolCall, redactor: Redactor) -> list[Difference]:
    """The fields in which ``made`` differs from ``recorded`` (empty: they
    match). ``Difference.where`` is ``call``; recorded then made values.
    ``made`` is untrusted: any object, a missing field read as None."""
    differences = [
        Difference(
            "call", name, getattr(recorded, name), _stored(getattr(made, name, None), redactor)
        )
        for name in MATCHED_FIELDS
        if getattr(recorded, name) != _stored(getattr(made, name, None), redactor)
    ]
    return differences + _argument_differences(
        recorded.arguments, _redacted(getattr(made, "arguments", None), redactor)
    )


def closest(
    interactions: Sequence[Interaction], start: int, made: ToolCall, redactor: Redactor
) -> tuple[int, list[Difference]] | None:
    """The index (from 0) of the recorded call from ``start`` on that comes
    closest to ``made``, with its differences; None when none is left."""
    best: tuple[int, list[Difference]] | None = None
    for index in range(start, len(interactions)):
        differences = call_differences(interactions[index].call, made, redactor)
        if best is None or len(differences) < len(best[1]):
            best = (index, differences)
    return best


def _stored(value: Any, redactor: Redactor) -> Any:
    """An id of the new call as the cassette holds the recorded one's
    (``storable_id``): a test may send the real token and still match."""
    return storable_id(redactor, value) if isinstance(value, str) else value


def _redacted(arguments: Any, redactor: Redactor) -> Any:
    if isinstance(arguments, str):
        return redactor.redact_text(arguments)
    return redactor.redact(arguments)


def _argument_differences(recorded: Any, made: Any) -> list[Difference]:
    if not (isinstance(recorded, Mapping) and isinstance(made, Mapping)):
        return [] if recorded == made else [Difference("call", "arguments", recorded, made)]
    keys = list(recorded) + [key for key in made if key not in recorded]
    return [
        Difference("call", f"arguments.{key}", recorded.get(key, ABSENT), made.get(key, ABSENT))
        for key in keys
        if recorded.get(key, ABSENT) != made.get(key, ABSENT)
    ]
