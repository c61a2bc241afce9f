"""Plain JSON data: the canonical text and hash of a value, and private copies.

Everything that hashes, compares or copies call arguments goes through
these functions, so an audit row's ``arguments_hash``, an idempotency
claim and a plan's memory of a keyed call agree on what "the same
arguments" means. Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

MAX_JSON_DEPTH = 64
"""Deeper arguments are refused (``plain_json_problem``)."""

MAX_JSON_INTEGER = 2**128
"""Larger integers are refused: Python cannot print one of over 4,300 digits
as JSON, and no tool argument needs one."""


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value`` used for hashing and comparing: keys
    sorted, no spaces, non-ASCII kept as UTF-8.

    Equal mappings give equal text whatever their key order. ``1`` and
    ``1.0`` give different text (JSON Schema would call both integers).
    Raises ``TypeError`` for values JSON cannot encode and ``ValueError`` for
    circular references.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    """sha256 hex digest of ``text`` in UTF-8. A lone surrogate (JSON text
    may carry one: ``"\\ud800"`` parses) is hashed, never an error; valid
    text hashes exactly as its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def json_hash(value: Any) -> str:
    """sha256 hex digest of ``canonical_json(value)``: an audit row's
    ``arguments_hash``, what an idempotency claim compares. Same failure
    modes as ``canonical_json``."""
    return sha256_text(canonical_json(value))


def plain(value: Any) -> Any:
    """``value`` as a plain ``str``/``int``/``float`` when it is an instance
    of a subclass of one (read with the base type's own method: a subclass's
    methods may raise or lie); anything else unchanged."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool cannot be subclassed: never here
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return value


def copy_json(value: Any) -> Any:
    """A private copy, so a caller mutating its dict cannot change a call in
    flight, made of plain types (``plain``): mappings become dicts, lists and
    tuples lists."""
    if isinstance(value, Mapping):
        return {plain(key): copy_json(child) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        return [copy_json(child) for child in value]
    return plain(value)


def plain_json_problem(value: object) -> str:
    """Why ``value`` is not plain JSON data ('' when it is): string keys,
    finite numbers within ``MAX_JSON_INTEGER``, UTF-8-encodable text, at
    most ``MAX_JSON_DEPTH`` deep. Judged as ``copy_json`` would copy it."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        item = plain(item)  # judged as the copy will hold it (a subclass's methods unused)
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "text holds an unpaired surrogate"
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return "numbers must be finite"
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -MAX_JSON_INTEGER <= item <= MAX_JSON_INTEGER:
                return f"integers must be within +-{MAX_JSON_INTEGER}"
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"object keys must be strings, not {type(key).__name__}"
                stack.append((key, depth + 1))
                stack.append((child, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
        elif not (item is None or isinstance(item, (bool, int))):
            return f"{type(item).__name__} is not a JSON type"
    return ""


def strings_of(value: Any) -> list[str]:
    """Every string in ``value`` (values of mappings, items of lists),
    depth first; keys are not included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in strings_of(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings_of(item)]
    return []
