"""Documents read from files anyone may have written (cassettes, cases,
transcripts, the hook's configuration): YAML, JSON and JSON lines, read and
parsed within limits, so that a small hostile file costs no more time or
memory than an honest file of its size.

What is bounded, and how:

- the file: at most ``MAX_DOCUMENT_BYTES``, judged by ``fstat`` before a
  byte is read, and never more than that read (a file that grows, a pipe);
- YAML: aliases (``*name``) are refused, so no value stands for more than
  the text that writes it (a "billion laughs" of nested aliases is one
  line); at most ``MAX_DEPTH`` nested collections and ``MAX_YAML_NODES``
  values, both counted on libyaml's event stream before any node is built;
  a number of more than ``MAX_NUMBER_CHARS`` characters is refused (Python's
  ``int`` of a long text is quadratic, and YAML 1.1's base-60 integers,
  ``1:30:00``, are built by multiplication);
- JSON: at most ``MAX_DEPTH`` nested collections, and no integer of more
  than ``MAX_NUMBER_CHARS`` characters (its sign included), as in YAML: a
  JSON document and the YAML one written from it are held to the same
  limit (Python itself refuses more than 4300 digits, after parsing them).

A string is never longer than its file, and without aliases nothing is
shared: what a parsed document holds is bounded by the text's length. A
document over a limit raises ``DocumentRefused``, whose ``str()`` is one
line naming the limit (the constant of this module) and what exceeded it.
Neither function here expands anything; a format that writes a value as a
recipe (the cassette's ``repeat``) bounds the recipe itself.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import ToolguardError

MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
"""The largest file read (bytes), or text parsed (characters). A cassette
of 10,000 interactions with files in them is about 140 MB of JSON."""

MAX_DEPTH = 100
"""The deepest nesting of collections (mappings and lists): the format's
own few levels, plus the 64 a call's arguments may have
(``jsondata.MAX_JSON_DEPTH``), with room to spare. Deeper data would be
walked by recursive code (comparing, redacting, dumping) past Python's
recursion limit."""

MAX_YAML_NODES = 2_000_000
"""The most values (scalars, mappings and lists) a YAML document may hold.
libyaml's node graph costs about 300 bytes a value before any of it is
used; a cassette of 1,000 interactions holds under a million, and
``replay.cassette.dumps`` writes larger ones as JSON."""

MAX_NUMBER_CHARS = 1000
"""The longest number (integer or float) a YAML document may write; the
longest integer a JSON document may (a JSON float becomes a float, whose
text is short however long the document wrote it)."""

_TOO_LONG = (10**MAX_NUMBER_CHARS, 10 ** (MAX_NUMBER_CHARS - 1))
"""The smallest magnitude of an integer written with more than
``MAX_NUMBER_CHARS`` characters: positive, then negative (its ``-``)."""

_FEW_BITS = _TOO_LONG[1].bit_length() - 1
"""An integer of at most this many bits is within the limit whatever its
sign: only longer ones are compared."""

_NUMBER_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})


class DocumentRefused(ToolguardError, ValueError):
    """A document refused for going over one of this module's limits. ``limit`` is the name of
    the constant; ``line`` (from 1) where the text went over it, when known.
    ``str()`` is one line: what went over which limit (the constant's full
    name, or ``aliases``, which are refused whatever their number)."""

    def __init__(self, limit: str, message: str, *, line: int | None = None) -> None:
        self.limit = limit
        self.line = line
        named = f" (limit: pytest_toolguard.documents.{limit})" if limit.isupper() else ""
        super().__init__(message + named)


def read_text(path: str | os.PathLike[str], *, limit: int | None = None) -> str:
    """The UTF-8 text of the file at ``path``, refused (``DocumentRefused``)
    when it is over ``limit`` bytes (default ``MAX_DOCUMENT_BYTES``), before
    it is read. ``OSError`` when it cannot be read; ``UnicodeDecodeError``
    when it is not UTF-8."""
    return read_bytes(path, limit=limit).decode("utf-8")


def read_bytes(path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
    """``read_text``'s bytes, undecoded."""
    limit = MAX_DOCUMENT_BYTES if limit is None else limit
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise _too_long(size, limit)
        data = handle.read(limit + 1)  # a file that grew, or a pipe
    if len(data) > limit:
        raise _too_long(len(data), limit, at_least=True)
    return data


def _too_long(size: int, limit: int, *, at_least: bool = False) -> DocumentRefused:
    more = "over " if at_least else ""
    return DocumentRefused(
        "MAX_DOCUMENT_BYTES", f"the file is {more}{size:,} bytes, more than {limit:,}"
    )


def check_length(text: str | bytes | bytearray) -> None:
    """``DocumentRefused`` for a text of more than ``MAX_DOCUMENT_BYTES``
    characters (bytes, for bytes)."""
    if len(text) > MAX_DOCUMENT_BYTES:
        unit = "characters" if isinstance(text, str) else "bytes"
        raise DocumentRefused(
            "MAX_DOCUMENT_BYTES",
            f"the text is {len(text):,} {unit}, more than {MAX_DOCUMENT_BYTES:,}",
        )


# -- JSON -----------------------------------------------------------------------


def parse_json(text: str | bytes | bytearray) -> Any:
    """``json.loads(text)`` within the limits: ``DocumentRefused`` for a
    text too long, nested too deeply or holding an integer longer than
    ``MAX_NUMBER_CHARS``; ``ValueError`` (``JSONDecodeError``,
    ``UnicodeDecodeError``) for a text that is not JSON. Bytes are read as
    ``json.loads`` reads them (UTF-8, -16 or -32), their length bounded."""
    check_length(text)
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep() from None
    _check_tree(value, MAX_DEPTH, numbers=True)
    return value


def check_depth(value: Any, limit: int | None = None) -> None:
    """``DocumentRefused`` when ``value`` (plain JSON data) nests more than
    ``limit`` (default ``MAX_DEPTH``) mappings and lists. One pass over its
    collections, level by level, with no recursion."""
    _check_tree(value, MAX_DEPTH if limit is None else limit, numbers=False)


def _check_tree(value: Any, limit: int, *, numbers: bool) -> None:
    """``check_depth``; with ``numbers``, also ``DocumentRefused`` for an
    integer (not a bool) longer than ``MAX_NUMBER_CHARS``, judged by its
    bits first, so the common case costs one comparison."""
    containers = (dict, list)
    if numbers:
        _check_number(value)
    level = [value] if type(value) in containers else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise _too_deep(limit)
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [child for child in children if type(child) in containers]
            if numbers:
                for child in children:
                    if type(child) is int and child.bit_length() > _FEW_BITS:
                        _check_number(child)
        level = below


def _check_number(value: Any) -> None:
    if type(value) is not int or value.bit_length() <= _FEW_BITS:
        return
    if abs(value) >= _TOO_LONG[value < 0]:
        raise DocumentRefused(
            "MAX_NUMBER_CHARS", f"an integer of more than {MAX_NUMBER_CHARS} characters"
        )


def _too_deep(limit: int | None = None, line: int | None = None) -> DocumentRefused:
    limit = MAX_DEPTH if limit is None else limit
    return DocumentRefused("MAX_DEPTH", f"nested too deeply (over {limit} levels)", line=line)


# -- YAML -----------------------------------------------------------------------


def parse_yaml(text: str, loader: Any = None) -> Any:
    """The one document of ``text``, as ``yaml.load(text, Loader=loader)``
    reads it (default: libyaml's safe loader when installed), after a pass
    over its events that refuses (``DocumentRefused``) an alias, nesting
    deeper than ``MAX_DEPTH``, more than ``MAX_YAML_NODES`` values or a
    number longer than ``MAX_NUMBER_CHARS``. ``yaml.YAMLError`` for a text
    that is not YAML; ``ValueError`` for a value the loader cannot build."""
    import yaml

    if loader is None:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    check_length(text)
    _check_events(text, loader)
    reader = loader(text)
    try:
        return reader.get_single_data()
    except RecursionError:  # the pure-Python composer, below libyaml's own bound
        raise _too_deep() from None
    finally:
        reader.dispose()


def _check_events(text: str, loader: Any) -> None:
    """The limits, judged on the event stream: nothing is kept but counts."""
    import yaml

    reader = loader(text)
    depth = nodes = 0
    starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    try:
        while reader.check_event():
            event = reader.get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                nodes += 1
                if len(event.value) > MAX_NUMBER_CHARS and _is_number(reader, event):
                    raise DocumentRefused(
                        "MAX_NUMBER_CHARS",
                        f"a number of {len(event.value):,} characters, "
                        f"more than {MAX_NUMBER_CHARS}",
                        line=_line(event),
                    )
            elif kind in starts:
                nodes += 1
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(line=_line(event))
            elif kind in ends:
                depth -= 1
            elif kind is yaml.AliasEvent:
                raise DocumentRefused(
                    "aliases",
                    f"a YAML alias (*{event.anchor}): aliases are refused, "
                    "write the value out in full",
                    line=_line(event),
                )
            if nodes > MAX_YAML_NODES:
                raise DocumentRefused(
                    "MAX_YAML_NODES",
                    f"more than {MAX_YAML_NODES:,} values in one YAML document",
                    line=_line(event),
                )
    except RecursionError:  # the pure-Python parser of flow collections
        raise _too_deep() from None
    except yaml.YAMLError as exc:
        # libyaml's scanner reads a flow collection's brackets ahead of its
        # events, and refuses 1,000 levels (deeper than ours) on its own.
        if "maximum nesting depth" not in str(getattr(exc, "problem", "")):
            raise
        mark = getattr(exc, "problem_mark", None)
        raise _too_deep(line=None if mark is None else int(mark.line) + 1) from None
    finally:
        reader.dispose()


def _is_number(reader: Any, event: Any) -> bool:
    import yaml

    tag = event.tag
    if tag in (None, "!"):
        tag = reader.resolve(yaml.ScalarNode, event.value, event.implicit)
    return tag in _NUMBER_TAGS


def _line(event: Any) -> int | None:
    mark = getattr(event, "start_mark", None)
    return None if mark is None else int(mark.line) + 1
