"""How recording and replay redact, the same way the runtime does.

Text is redacted by the runtime's ``Redactor``. Bytes (a workspace file, an
HTTP body) are read as text first, in the charset they declare or their
byte-order mark names, else as UTF-8, else as latin-1, which reads any bytes
(``text_charsets``): the ASCII and latin-1 runs of a binary file are text
to the redactor too. Every stretch of bytes that looks like UTF-16 or UTF-32 text
is read in that charset too, wherever it stands (``wide_readings``). A
token in a binary file is glued to the format's bytes (an SQLite record's
serial-type byte, a text column before or after it): each run of token
characters is also read from just past them (``glued_readings``).
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import re

from ..redaction import Redactor, placeholder
from ..registry import ToolRegistry
from ..secret_rules import default_rule_set
from ..secret_scan import Keywords

FILE_WITH_SECRET = placeholder("file_with_secret").encode("ascii")
"""What a file is kept as when it held a secret that could not be
overwritten where it stands (never expected; a safeguard)."""

FILL = "*"
"""What overwrites a secret in bytes that keep their length."""


def tool_redactor(registry: ToolRegistry | None, tool_name: object, default: Redactor) -> Redactor:
    """The redactor the runtime uses for a tool: its own, else ``default``."""
    spec = registry.get(tool_name) if registry is not None and isinstance(tool_name, str) else None
    return spec.redactor if spec is not None and spec.redactor is not None else default


def redact_file(redactor: Redactor, content: bytes) -> bytes:
    """A file's bytes as a cassette keeps them.

    * **UTF-8 text** is redacted like arguments (``<redacted:...>``).
    * **Anything else** (latin-1 or UTF-16 text, a database, an image) is
      redacted in place (``redact_in_place``): each secret its text readings
      hold is overwritten by as many ``*`` as it took bytes. The file keeps
      its length and every other byte, so a format that finds its records by
      offset (an SQLite page, a ZIP directory) still reads; a checksum over
      the secret's bytes (a PNG chunk's CRC) no longer matches.

    UTF-8 text that holds zero bytes (UTF-16 or UTF-32 of ASCII text is
    UTF-8 too) also has its wide stretches (``wide_readings``) and its token
    runs (``glued_readings``) overwritten in place. Replay redacts what it
    reads the same way before comparing."""
    for _ in range(_IN_PLACE_PASSES + 1):
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            return redact_in_place(redactor, content)
        narrow = redactor.redact_text(text).encode("utf-8")
        if 0 not in narrow:
            return narrow  # the redactor's text is already its own fixed point
        redacted = overwritten(redactor, narrow, wide_readings(narrow) + glued_readings(narrow))
        if redacted is None:
            return FILE_WITH_SECRET
        if redacted == content:
            return content
        content = redacted
    return FILE_WITH_SECRET


def redact_path(redactor: Redactor, path: str) -> str:
    """A workspace path as a cassette keeps it: a token in a file's name is
    as secret as one in its content."""
    return redactor.redact_text(path)


# -- bytes read as text ---------------------------------------------------------------

_CHARSET = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9._:+-]{1,40})""", re.IGNORECASE)
BOMS: tuple[tuple[bytes, str, str], ...] = (
    (codecs.BOM_UTF8, "utf-8-sig", "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32", "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32", "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16", "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16", "utf-16-be"),
)
"""Byte-order marks: the mark, the codec that reads it with its mark, and
the codec of what follows it."""
LATIN_1 = codecs.lookup("latin-1").name


def text_charsets(data: bytes, content_type: str = "") -> list[str]:
    """The charsets to read ``data`` in, the first that decodes it wins:
    the ``charset`` of ``content_type``, the one its byte-order mark names,
    UTF-8, and latin-1 (which decodes anything)."""
    found: list[str] = []
    declared = _CHARSET.search(content_type)
    if declared:
        with contextlib.suppress(LookupError):
            found.append(codecs.lookup(declared.group(1)).name)
    for bom, charset, _ in BOMS:
        if data.startswith(bom):
            found.append(charset)
            break
    found += ["utf-8", LATIN_1]
    return found


_WIDE_RUNS: tuple[tuple[str, int, re.Pattern[bytes]], ...] = (
    ("utf-16-le", 2, re.compile(rb"(?:[^\x00]\x00){4,}")),
    ("utf-16-be", 2, re.compile(rb"(?:\x00[^\x00]){4,}")),
    ("utf-32-le", 4, re.compile(rb"(?:[^\x00]\x00\x00\x00){4,}")),
    ("utf-32-be", 4, re.compile(rb"(?:\x00\x00\x00[^\x00]){4,}")),
)
"""Runs of at least four latin-1 characters as each wide charset writes
them: a zero byte beside every ASCII character."""
_WIDE_GAP = 4
"""Characters of any other kind (past latin-1: a CJK label, a euro sign)
that two runs of one wide reading may have between them and still be read
as one text, so that a label and its value stay together."""

Reading = tuple[str, tuple[tuple[int, int], ...]]
"""A codec and the ``(start, end)`` spans of the bytes it reads."""


def wide_readings(data: bytes) -> list[Reading]:
    """The UTF-16 and UTF-32 readings of ``data``, either byte order, at any
    alignment: every stretch of the bytes that looks like text of that
    charset (``_WIDE_RUNS``), wherever it stands. A small UTF-16 part of a
    mostly-ASCII body is found as surely as a whole UTF-16 file."""
    if 0 not in data:
        return []
    found: list[Reading] = []
    for codec, unit, run in _WIDE_RUNS:
        spans: dict[int, list[list[int]]] = {}
        for match in run.finditer(data):
            start, end = match.span()
            aligned = spans.setdefault(start % unit, [])
            if aligned and _joins(data, aligned[-1][1], start, codec, unit):
                aligned[-1][1] = end
            else:
                aligned.append([start, end])
        for aligned in spans.values():
            found.append((codec, tuple((start, end) for start, end in aligned)))
    return found


def _joins(data: bytes, end: int, start: int, codec: str, unit: int) -> bool:
    """Whether a run ending at ``end`` and one starting at ``start`` are
    close enough to be read as one text, and what lies between decodes."""
    if start - end > _WIDE_GAP * unit:
        return False
    try:
        data[end:start].decode(codec, "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def whole_readings(data: bytes) -> list[Reading]:
    """The readings of all of ``data``: by its byte-order mark (the explicit
    byte order, so that what is written back keeps it), and as latin-1,
    which reads any bytes."""
    found: list[Reading] = []
    for bom, _, codec in BOMS:
        if data.startswith(bom):
            unit = 4 if "32" in codec else 2 if "16" in codec else 1
            found.append((codec, ((len(bom), len(bom) + (len(data) - len(bom)) // unit * unit),)))
            break
    found.append((LATIN_1, ((0, len(data)),)))
    return found


# -- redaction that keeps the length ----------------------------------------------------

_PLACEHOLDER = re.compile(r"<redacted:[a-z0-9_]{1,64}>")
_IN_PLACE_PASSES = 3


def redact_in_place(redactor: Redactor, data: bytes) -> bytes:
    """``data`` with each secret overwritten by ``FILL`` characters in the
    reading that found it, so that it keeps its length and every byte
    around the secrets. The readings: by its byte-order mark, as latin-1
    (``whole_readings``), each stretch that reads as UTF-16 or UTF-32
    (``wide_readings``), and each run of token characters read past the
    bytes of the format glued to its ends (``glued_readings``); each in
    turn, over what the ones before left.
    Repeated until no reading finds more (a secret is never left because
    the fill changed what surrounds another). A secret that cannot be
    overwritten where it stands makes the whole ``data``
    ``FILE_WITH_SECRET``."""
    for _ in range(_IN_PLACE_PASSES):
        redacted = overwritten(redactor, data, _in_place_readings(data))
        if redacted is None:
            return FILE_WITH_SECRET
        if redacted == data:
            return data
        data = redacted
    last = overwritten(redactor, data, _in_place_readings(data))
    return data if last == data else FILE_WITH_SECRET


def _in_place_readings(data: bytes) -> list[Reading]:
    return whole_readings(data) + wide_readings(data) + glued_readings(data)


_TOKEN_RUNS: tuple[tuple[str, int, re.Pattern[bytes]], ...] = (
    ("ascii", 1, re.compile(rb"(?<![\x21-\x7e])[\x21-\x7e]{16,256}(?![\x21-\x7e])")),
    (
        "utf-16-le",
        2,
        re.compile(rb"(?<![\x21-\x7e]\x00)(?:[\x21-\x7e]\x00){16,256}(?![\x21-\x7e]\x00)"),
    ),
    (
        "utf-16-be",
        2,
        re.compile(rb"(?<!\x00[\x21-\x7e])(?:\x00[\x21-\x7e]){16,256}(?!\x00[\x21-\x7e])"),
    ),
)
"""Runs of printable ASCII without a space, as each charset writes them:
where a token stands in a binary file, often with a byte of the format
glued to either end."""
_CASE_CHANGE = re.compile(r"[a-z](?=[A-Z])")
_WORD_START = re.compile(r"[A-Z](?=[a-z]{2})")
_GLUE = 2
"""Characters of a format that may be glued to either end of a token in a
run: an SQLite record puts its columns' one-byte serial types, often a
letter or a digit (a text of 18 to 56 bytes), right before the first
column's text, and the next cell's length and row id after the last one."""
_OTHER_STARTS = 4
"""Places inside a run also tried as starts, and as ends, at most this many
of each per run. Starts: where a lower-case letter meets an upper-case one
(a text column glued to an ``AKIA...`` key), and where a keyword starts
that every match of its rule starts with (``ghp_``, ``xoxb``, ``sk_live``:
a text column glued to it). Ends: where a capitalised word starts (a text
column glued after a key)."""
_SHORTEST = 8
"""The fewest characters a piece of a run is read as."""


@functools.cache
def _leading_keywords() -> Keywords:
    """The keywords every match of their rule starts with."""
    words = sorted(
        {word for rule in default_rule_set().rules if rule.anchored for word in rule.keywords}
    )
    return Keywords.build(words)


def glued_readings(data: bytes) -> list[Reading]:
    """Token runs of ``data`` (``_TOKEN_RUNS``: ASCII, UTF-16 either byte
    order) read from just past the characters that may be glued to them: a
    pattern that needs a word boundary before or after a secret
    (``\\bAKIA...\\b``) misses it where the run's first or last character
    is a letter of the format, not of the secret. Each run is read from
    each of its first ``_GLUE`` + 1 places and a few places inside it
    (``_OTHER_STARTS``) to each of its last ``_GLUE`` + 1 ends and a few
    places inside it; each such piece stands on its own line."""
    found: list[Reading] = []
    for codec, unit, pattern in _TOKEN_RUNS:
        spans: list[tuple[int, int]] = []
        for run in pattern.finditer(data):
            offset = run.start()
            text = run.group().decode(codec)
            for first, last in _pieces(text):
                spans.append((offset + first * unit, offset + last * unit))
        if spans:
            found.append((codec, tuple(spans)))
    return found


def _pieces(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` pieces of one token run ``glued_readings`` reads."""
    length = len(text)
    inside = [found.end() for found in _CASE_CHANGE.finditer(text, _GLUE, length - _SHORTEST)]
    if _leading_keywords().any_word.search(text.lower()):
        places = _leading_keywords().occurrences(text.lower()).values()
        inside += [
            place for found in places for place in found if _GLUE < place < length - _SHORTEST
        ]
    starts = [*range(_GLUE + 1), *sorted(set(inside))[:_OTHER_STARTS]]
    ends = [*range(length - _GLUE, length + 1)]
    ends += [found.start() for found in _WORD_START.finditer(text, _SHORTEST)][:_OTHER_STARTS]
    return [(first, last) for first in starts for last in ends if last - first >= _SHORTEST]


def overwritten(redactor: Redactor, data: bytes, readings: list[Reading]) -> bytes | None:
    """``data`` with what each of ``readings`` finds overwritten by
    ``FILL`` where it stands (one pass of ``redact_in_place``); None when a
    secret could not be. The spans of one reading are redacted as one text,
    a line break between them."""
    out = bytearray(data)
    for codec, spans in readings:
        pieces: list[str] = []
        kept: list[tuple[int, int]] = []
        for start, end in spans:
            try:
                pieces.append(bytes(out[start:end]).decode(codec, "surrogatepass"))
            except UnicodeDecodeError:
                continue
            kept.append((start, end))
        if not pieces:
            continue
        text = "\n".join(pieces)
        filled = _filled(text, redactor.redact_text(text))
        if filled is None:
            return None
        if filled is text:
            continue
        offset = 0
        for piece, (start, end) in zip(pieces, kept, strict=True):
            encoded = filled[offset : offset + len(piece)].encode(codec, "surrogatepass")
            offset += len(piece) + 1
            if len(encoded) != end - start:
                return None
            # Only the fill is written: the spans of one reading may overlap
            # (``glued_readings``), and a piece must not put back what
            # another piece's redaction overwrote.
            before = piece.encode(codec, "surrogatepass")
            if encoded != before:
                for index, (was, now) in enumerate(zip(before, encoded, strict=True)):
                    if was != now:
                        out[start + index] = now
    return bytes(out)


def _filled(text: str, redacted: str) -> str | None:
    """``text`` with what ``redacted`` replaced by placeholders overwritten
    by as many ``FILL`` characters; ``text`` itself when nothing was
    replaced; None when ``redacted`` is not ``text`` with spans replaced.

    ``redacted`` is ``text`` cut into pieces it kept, in order, between
    placeholders. Each kept piece is found in ``text`` after the previous
    one (one character on at least, past what a placeholder replaced): what
    lies between is filled. Whatever the pieces match, the result holds
    nothing but pieces of ``redacted`` and the fill."""
    if redacted == text:
        return text
    out: list[str] = []
    position = 0
    replacing = False

    def keep(piece: str) -> bool:
        nonlocal position, replacing
        if not piece:
            return True
        if replacing:
            found = text.find(piece, position + 1)
            if found < 0:
                return False
            out.append(FILL * (found - position))
            position, replacing = found, False
        elif not text.startswith(piece, position):
            return False
        out.append(piece)
        position += len(piece)
        return True

    cursor = 0
    for found in _PLACEHOLDER.finditer(redacted):
        if not keep(redacted[cursor : found.start()]):
            return None
        if not replacing and text.startswith(found.group(0), position):
            out.append(found.group(0))  # a placeholder the text held already
            position += len(found.group(0))
        else:
            replacing = True
        cursor = found.end()
    if not keep(redacted[cursor:]):
        return None
    if replacing:
        out.append(FILL * (len(text) - position))
        position = len(text)
    return "".join(out) if position == len(text) else None
