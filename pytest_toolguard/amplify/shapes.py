"""Text shapes: variants that give the files a call read (and the keys it
looked up in them) the shapes text takes on the way in, each a family of
its own so that a cap keeps one of each (``derive`` takes the families in
turn) and each variant's name starts with its family, so that a catch says
which shape broke the tool:

- ``BOM``: a file read starting with a UTF-8 byte-order mark (a CSV header
  read as ``\\ufeffid`` by a reader decoding plain ``utf-8``);
- ``normalisation``: a search key found in a file's text, or in a file's
  name (first when the data quotes that name), written with non-ASCII
  letters decomposed (NFD, as macOS names files) on the file's side and
  composed (NFC, as keyboards type) on the argument's, then the other way
  round: the same text to a person, different code points to a comparison
  that does not normalise;
- ``long lines``: the line the data quotes (else the first line after a
  header) repeated onto itself past the usual read buffers (64, 8 and
  4 KiB; at least as many bytes), so that a reader with a fixed buffer
  (``readline(4096)``, ``read(8192)`` chunks split into lines) splits it
  and what the line shows (a search key) shows again after the split;
- ``byte limit``: for every limit-like number N of the call (then 4, 8
  and 64 KiB), the first file read as non-ASCII text with a three-byte
  character across byte N (its bytes N-2, N-1 and N), so that
  ``data[:N]`` (and ``data[:N-1]``) ends inside it; then the same text cut
  to N characters, more bytes than N: a limit counted in the wrong unit
  shows;
- ``undecodable``: one byte that is never UTF-8 (``0xff``) in every file
  the call could read (at their start; in the first file read, in the
  middle of the line the data quotes), then the first file ending inside a
  character, then the first file alone holding the byte. It sits where the
  tool's own data shows it: a tool that drops it
  (``errors="ignore"``) returns the recorded line unchanged, where the
  trusted tool failed, or showed the byte (a replacement character, an
  escape). As for every variant, replay judges the tool under test
  against what the trusted tool did on the same variant.

Pure: functions from the call's facts to ``Shape`` tuples; ``derive`` makes
them candidates.
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from ..replay.cassette import GeneratedContent

BOM = "BOM"
NORMALISATION = "normalisation"
LONG_LINES = "long lines"
BYTE_LIMIT = "byte limit"
UNDECODABLE = "undecodable"
SHAPES = (BOM, NORMALISATION, LONG_LINES, BYTE_LIMIT, UNDECODABLE)
"""The families of this module, in the order ``derive`` takes them."""

BUFFER_SIZES = (65_536, 8_192, 4_096)
"""Read buffers a long line is made longer than, largest first (a line
longer than 64 KiB is longer than every smaller buffer too), and byte
limits a handler may keep to itself."""
NEVER_UTF8 = b"\xff"
"""A byte that never occurs in UTF-8."""
ACROSS = "\u20ac"
"""The three-byte character put across a byte limit (the euro sign)."""
_COMPOSED = str.maketrans("aeouAEOU", "\u00e4\u00e9\u00f6\u00fc\u00c4\u00c9\u00d6\u00dc")


class Shape(NamedTuple):
    """One variant of this module: its family, name, arguments and files."""

    family: str
    name: str
    arguments: Mapping[str, Any]
    files: Mapping[str, bytes | GeneratedContent]

    @property
    def kind(self) -> str:
        """A variant's ``kind``: ``size`` for a byte limit, else ``text``."""
        return "size" if self.family == BYTE_LIMIT else "text"


def text_shapes(
    arguments: Mapping[str, Any],
    files_read: Mapping[str, bytes],
    every: Mapping[str, bytes],
    keys: Sequence[tuple[str, str]],
    quoted: set[str],
    numbers: Sequence[int],
) -> Iterator[Shape]:
    """Every shape of one call, family by family (see the module docstring).
    ``files_read``: the files to vary one by one, the most telling first;
    ``every``: all the files the call could read; ``keys``: the free-text
    arguments (name, value) that may be looked up; ``quoted``: the strings
    of the call's data; ``numbers``: its limit-like numbers."""
    texts = {path: text for path, content in files_read.items() if (text := _utf8(content))}
    yield from _boms(arguments, texts)
    yield from _normalisations(arguments, keys, texts, every, quoted)
    first = next(iter(texts.items()), None)
    if first is not None:
        yield from _long_lines(arguments, *first, quoted)
        yield from _byte_limits(arguments, *first, numbers)
    yield from _undecodables(arguments, texts, every, quoted)


def _utf8(content: bytes) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _with(arguments: Mapping[str, Any], name: str, value: Any) -> dict[str, Any]:
    changed = dict(arguments)
    changed[name] = value
    return changed


def _line_shown(text: str, quoted: set[str]) -> int:
    """The index of the line the data quotes, else of the first line after
    a header (a file of two lines or more), else 0."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if line.rstrip("\r") in quoted and line.strip():
            return number
    filled = [number for number, line in enumerate(lines) if line.strip()]
    return filled[1] if len(filled) >= 2 else (filled[0] if filled else 0)


# -- BOM ---------------------------------------------------------------------------


def _boms(arguments: Mapping[str, Any], texts: Mapping[str, str]) -> Iterator[Shape]:
    for path, text in texts.items():
        if not text.startswith("\ufeff"):
            files = {path: ("\ufeff" + text).encode("utf-8")}
            yield Shape(BOM, f"BOM: {path} starts with a UTF-8 BOM", dict(arguments), files)


# -- normalisation ---------------------------------------------------------------------


def composed(value: str) -> str:
    """``value`` with non-ASCII letters that have a decomposed form (its
    vowels accented; one accented letter added when it has no vowel), NFC."""
    changed = value.translate(_COMPOSED)
    if changed == value and unicodedata.normalize("NFD", value) == value:
        changed = value + "\u00e9"
    return unicodedata.normalize("NFC", changed)


def _normalisations(
    arguments: Mapping[str, Any],
    keys: Sequence[tuple[str, str]],
    texts: Mapping[str, str],
    names: Mapping[str, bytes],
    quoted: set[str],
) -> Iterator[Shape]:
    """A key found in a file's text, and a key found in a file's name (first
    when the data quotes that file's name): the file decomposed and the
    argument composed, then the other way round."""
    for name, value in keys:
        if not value.strip():
            continue
        nfc = composed(value)
        forms = ((unicodedata.normalize("NFD", nfc), "NFD"), (nfc, "NFC"))
        found: list[list[Shape]] = [[], []]
        holder = next((path for path, text in texts.items() if value in text), None)
        named = next((path for path in names if value in posixpath.basename(path)), None)
        for (on_file, file_form), (sent, sent_form) in (forms, forms[::-1]):
            changed = _with(arguments, name, sent)
            said = f"normalisation: {name} in {sent_form}"
            if holder is not None:
                text = texts[holder].replace(value, on_file).encode("utf-8")
                shape = Shape(
                    NORMALISATION, f"{said}, {holder} in {file_form}", changed, {holder: text}
                )
                found[0].append(shape)
            if named is not None:
                folder, base = posixpath.split(named)
                renamed = posixpath.join(folder, base.replace(value, on_file))
                label = f"{said}, a file named for it in {file_form}"
                found[1].append(Shape(NORMALISATION, label, changed, {renamed: names[named]}))
        if named is not None and any(posixpath.basename(named) in item for item in quoted):
            found.reverse()
        yield from found[0] + found[1]


# -- long lines ----------------------------------------------------------------------


def _long_lines(
    arguments: Mapping[str, Any], path: str, text: str, quoted: set[str]
) -> Iterator[Shape]:
    lines = text.split("\n")
    index = _line_shown(text, quoted)
    line = lines[index]
    ending = "\r" if line.endswith("\r") else ""
    unit = line.rstrip("\r") or "x"
    head = "".join(item + "\n" for item in lines[:index])
    rest = "\n".join(lines[index + 1 :])
    after = ending + ("\n" + rest if index + 1 < len(lines) else "")
    for size in BUFFER_SIZES:
        # Whole repetitions, a split at ``size`` leaving two or more after it:
        # what the line shows (a search key) shows again past the split.
        times = size // len(unit) + 3
        recipe = GeneratedContent(repeat=unit, times=times, head=head, tail=after)
        yield Shape(
            LONG_LINES,
            f"long lines: {path}, line {index + 1} longer than {size // 1024} KiB "
            f"({times * len(unit):,} characters)",
            dict(arguments),
            {path: recipe},
        )


# -- byte limit ---------------------------------------------------------------------------


def non_ascii_unit(text: str) -> str:
    """``text`` with its vowels accented (two bytes each in UTF-8), or with
    an accented letter before it when it has none."""
    changed = text.translate(_COMPOSED)
    return changed if changed != text else "\u00e9" + text


def _byte_limits(
    arguments: Mapping[str, Any], path: str, text: str, numbers: Sequence[int]
) -> Iterator[Shape]:
    unit = non_ascii_unit(text)
    size = len(unit.encode("utf-8"))
    # The call's own numbers, then the usual buffers (a limit the handler
    # keeps to itself: ``read(4096)``).
    for number in dict.fromkeys([*numbers, *sorted(BUFFER_SIZES)]):
        if number < 2:
            continue
        # ACROSS takes bytes number-2 .. number: ASCII padding puts it there.
        times, padding = divmod(number - 2, size)
        across = GeneratedContent(repeat=unit, times=times, tail="x" * padding + ACROSS + unit)
        yield Shape(
            BYTE_LIMIT,
            f"byte limit: {path}, non-ASCII with '{ACROSS}' across byte {number:,}",
            dict(arguments),
            {path: across},
        )
        chars = GeneratedContent(
            repeat=unit, times=number // len(unit), tail=unit[: number % len(unit)]
        )
        yield Shape(
            BYTE_LIMIT,
            f"byte limit: {path}, {number:,} non-ASCII characters ({len(chars.content()):,} bytes)",
            dict(arguments),
            {path: chars},
        )


# -- undecodable bytes ------------------------------------------------------------------


def _undecodables(
    arguments: Mapping[str, Any],
    texts: Mapping[str, str],
    every: Mapping[str, bytes],
    quoted: set[str],
) -> Iterator[Shape]:
    """Every file the call could read holding the byte (the first one in
    the line its data shows, the others at their start), then the first
    file ending inside a character, then the first file alone holding it."""
    started = {path: NEVER_UTF8 + content for path, content in every.items()}
    first = next(iter(texts.items()), None)
    if first is None:
        if started:
            name = "undecodable: every file read starts with byte 0xff"
            yield Shape(UNDECODABLE, name, dict(arguments), started)
        return
    path, text = first
    lines = text.split("\n")
    index = _line_shown(text, quoted)
    middle = len(lines[index].rstrip("\r")) // 2
    before = "".join(item + "\n" for item in lines[:index]) + lines[index][:middle]
    inside = before.encode("utf-8") + NEVER_UTF8 + text[len(before) :].encode("utf-8")
    where = f"{path} inside line {index + 1}"
    yield Shape(
        UNDECODABLE,
        f"undecodable: every file read holds byte 0xff, {where}",
        dict(arguments),
        {**started, path: inside},
    )
    cut = ACROSS.encode("utf-8")[:2]
    name = f"undecodable: {path} ends inside a character"
    yield Shape(UNDECODABLE, name, dict(arguments), {path: text.encode("utf-8") + cut})
    if len(started) > 1:
        yield Shape(
            UNDECODABLE, f"undecodable: byte 0xff in {where}", dict(arguments), {path: inside}
        )
