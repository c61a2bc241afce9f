"""Text and data as SQLite, PostgreSQL and YAML can store them (pure).

A file name that is not UTF-8 reaches Python as text with lone surrogates
(``os.fsdecode``); no UTF-8 store can encode those. The audit row, the
cassette and a transcript keep such text with each surrogate spelt as its
``\\udcff`` escape, so that the row is still written and the name still
readable. Valid text is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def storable_text(text: str) -> str:
    """``text`` as SQLite (and YAML) can store it: a lone surrogate (a file
    name that is not UTF-8, as ``os.fsdecode`` gives it) becomes its
    ``\\udcff`` escape; valid text is returned unchanged."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def storable_data(value: Any) -> Any:
    """``value`` with every string (keys included) made ``storable_text``;
    the same object when nothing needed it (the usual case)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        items = [(storable_data(key), storable_data(item)) for key, item in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, (list, tuple)):
        copied = [storable_data(item) for item in value]
        if all(a is b for a, b in zip(copied, value, strict=True)):
            return value
        return copied if isinstance(value, list) else tuple(copied)
    return value
