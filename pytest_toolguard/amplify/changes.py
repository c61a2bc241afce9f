"""The changes amplified variants make to values: what each text change
does to a text, and the order each kind of text gets them in (see
``derive``'s docstring); strings, lists and files resized.

Pure functions; ``derive`` makes the candidates with them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..replay.cassette import GeneratedContent

LONG_LINE = 1000
"""Characters of each line of the "very long lines" text variant."""
LONG_LINES = 20
"""Lines the "very long lines" variant makes long (the first ones)."""


def _non_ascii(text: str) -> str:
    return text.translate(str.maketrans("aeou", "äéöü"))


def _astral(text: str) -> str:
    lines = text.split("\n")
    return "\n".join(line + " \U0001f99c\U0001d11e" if line else line for line in lines)


def _combining(text: str) -> str:
    return text.replace("e", "e\u0301").replace("a", "a\u0308")


def _crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n") if "\n" in text else text + "\r\n"


def _other_ending(text: str) -> str:
    return text.rstrip("\r\n") if text.endswith("\n") else text + "\n"


def long_lines(text: str) -> str:
    """Each of the first ``LONG_LINES`` lines repeated onto itself to at
    least ``LONG_LINE`` characters (a cut a tool makes shows on any of them)."""
    lines = text.split("\n")
    for number, line in enumerate(lines[:LONG_LINES]):
        if line.strip():
            lines[number] = (line * (LONG_LINE // len(line) + 1))[:LONG_LINE]
    if not any(line.strip() for line in lines):
        lines[0] = "x" * LONG_LINE
    return "\n".join(lines)


def _other_case(text: str) -> str:
    return text.swapcase()


TEXT_CHANGES: dict[str, Callable[[str], str]] = {
    "non-ASCII letters": _non_ascii,
    "no trailing newline": _other_ending,
    "astral characters": _astral,
    "CRLF line ends": _crlf,
    "combining marks": _combining,
    "very long lines": long_lines,
    "letters in the other case": _other_case,
    "empty": lambda _text: "",
}
"""Each text variant: its name and what it does to a text."""

QUOTED_FILE_ORDER = (
    "very long lines",
    "letters in the other case",
    "empty",
    "non-ASCII letters",
    "no trailing newline",
    "CRLF line ends",
    "astral characters",
    "combining marks",
)
"""The changes to a file whose lines the data quotes (a search's), most
telling first: lines cut, case folded, nothing found (a file that is
not UTF-8: ``shapes``)."""
FILE_ORDER = (
    "empty",
    "very long lines",
    "non-ASCII letters",
    "no trailing newline",
    "CRLF line ends",
    "letters in the other case",
    "astral characters",
    "combining marks",
)
"""The changes to any other file read: first empty (every count 0)."""
KEY_ORDER = ("letters in the other case", "empty", "very long lines")
"""The changes to an argument found in a file read (a search key) tried in
turn with the first file's; its other changes come after every file's."""
CONTENT_ORDER = (
    "no trailing newline",
    "non-ASCII letters",
    "empty",
    "CRLF line ends",
    "astral characters",
    "combining marks",
    "very long lines",
    "letters in the other case",
)
"""The changes to any other free-text argument (content a tool writes)."""


def shown_name(name: str, text: str) -> str:
    if name == "no trailing newline" and not text.endswith("\n"):
        return "a trailing newline"
    return name


def has_text(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, Mapping):
        return any(has_text(item) for item in value.values())
    if isinstance(value, list):
        return any(has_text(item) for item in value)
    return False


def map_strings(value: Any, change: Callable[[str], str], *, first_only: bool = False) -> Any:
    """``value`` with ``change`` applied to every string in it (not to
    keys), or only to the first one."""
    left = [1 if first_only else -1]

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            if left[0] == 0:
                return item
            left[0] -= 1
            return change(item)
        if isinstance(item, Mapping):
            return {key: walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def resized_text(value: Any, size: int, pattern: Any = None) -> str | None:
    """``value`` cut or grown to ``size`` characters, still matching
    ``pattern`` (a schema's) when one of the ways does: grown by repeating
    its first character after it, or its middle one, or its last one; cut
    from the front, or from the end, or from the middle (a fixed suffix such
    as a file extension, or prefix such as ``https://``, stays)."""
    if not isinstance(value, str) or not value:
        return None
    if size <= len(value):
        half = size // 2
        ways = [
            value[len(value) - size :],
            value[:size],
            value[:half] + value[len(value) - (size - half) :],
        ]
    else:
        more, middle = size - len(value), len(value) // 2
        ways = [
            value[0] * more + value,
            value[:middle] + value[middle] * more + value[middle:],
            value + value[-1] * more,
        ]
    if isinstance(pattern, str):
        try:
            expression = re.compile(pattern)
        except re.error:
            return ways[0]
        return next((way for way in ways if expression.search(way)), ways[0])
    return ways[0]


def resized_list(value: Any, size: int) -> list[Any] | None:
    """``value``'s items cycled to ``size`` items."""
    if not isinstance(value, list) or (size and not value):
        return None
    return [value[i % len(value)] for i in range(size)]


def file_of_chars(text: str, size: int) -> bytes | GeneratedContent:
    """``text`` cut to ``size`` characters, or repeated up to them (a recipe)."""
    if size <= len(text):
        return text[:size].encode("utf-8")
    return GeneratedContent(repeat=text, times=size // len(text), tail=text[: size % len(text)])


def first_line_of(text: str, size: int) -> GeneratedContent:
    """``text`` with its first line repeated onto itself to ``size`` characters."""
    first, newline, rest = text.partition("\n")
    unit = first.rstrip("\r") or "x"
    return GeneratedContent(
        repeat=unit, times=size // len(unit), tail=unit[: size % len(unit)] + newline + rest
    )


def strings_in(value: Any) -> Iterator[str]:
    """Every string of JSON-like data (values, not keys)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
