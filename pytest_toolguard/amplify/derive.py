"""Deriving variants of one recorded call: the candidates amplification tries.

Everything comes from what the call itself shows: its tool's input schema,
its arguments, the files its handler read and the data it returned. Nothing
here knows a particular tool. ``candidates(facts)`` gives them in the order
they are tried. They fall in groups taken in turn (one of each group, then
a second of each, ...), so that a cap keeps every group before any group
gets a second slot:

- ``text``: each free-text argument and the first file read, in turn
  (then the other files), each with its own order of changes
  (``changes``): a file whose lines the data quotes (a search) first with
  very long lines, then its letters in the other case; any other file
  first empty; an argument found in a file read
  (a search key) first in the other case; any other argument (content to
  write) first without its trailing newline and with non-ASCII letters;
  then the rest (astral characters, combining marks, CRLF line ends, ...);
- ``boundary``: every ``minimum``, ``maximum`` (integer arguments first),
  ``minLength``, ``maxLength``, ``minItems`` and ``maxItems`` of the schema
  exactly (an exclusive bound: one step inside; a string resized so that
  it still matches the schema's ``pattern``), then one step inside;
- ``data size``: an integer argument set to a size of the data, then one
  under and one over it: the length of a list of the returned data (one
  as long as an integer argument or an integer of the data first), an
  integer in it, a file's length in lines or characters, the length of a
  string of the data (``max_chars = data.total_chars``, ``max_rows =
  len(data.rows) + 1``);
- ``size``: the files read (those the data quotes first) with as many
  lines after their first as every limit-like number of the call (its
  integer arguments, as sent or by default, then the schema's bounds), one
  more and one fewer (a line the data quotes repeated: counted so that the
  result holds that many, the other files' items included), the same in
  characters and in the length of the first line; list arguments with that
  many items;
- ``limit``: candidates found by running the tool (``probed``: a result
  of exactly the tool's result limit and one over, ``limit.limit_sized``);
- the text shapes of ``shapes``, a group per family: ``BOM``,
  ``normalisation``, ``long lines``, ``byte limit``, ``undecodable``.

And apart from these, ``refusal``: an argument the schema does not allow,
a required one left out, each bound one step outside (the tool's input
schema refuses these: recorded as the refusal they get, and counted and
capped apart). A candidate of another group that the schema refuses (an
empty search key) is a refusal too.

Pure: no runtime, no files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import zip_longest
from typing import Any

from ..replay.cassette import GeneratedContent
from .changes import (
    CONTENT_ORDER,
    FILE_ORDER,
    KEY_ORDER,
    QUOTED_FILE_ORDER,
    TEXT_CHANGES,
    file_of_chars,
    first_line_of,
    has_text,
    long_lines,
    map_strings,
    resized_list,
    resized_text,
    shown_name,
    strings_in,
)
from .shapes import SHAPES, text_shapes

SIZE_LIMIT = 65_536
"""Limit-like numbers above this are not tried as file sizes."""
LIST_LIMIT = 500
"""Limit-like numbers above this are not tried as list lengths."""

FAMILIES = (
    "data size",
    "boundary",
    "outside",
    "file text",
    "argument text",
    "size",
    "inside",
    "limit",
    *SHAPES,
)
"""The families of candidates (a variant's ``family``)."""
GROUPS: dict[str, str] = {
    "file text": "text",
    "argument text": "text",
    "boundary": "boundary",
    "inside": "boundary",
    "data size": "data size",
    "size": "size",
    "limit": "limit",
    **{shape: shape for shape in SHAPES},
    "outside": "refusal",
}
"""The group of each family; ``candidates`` takes from the groups in turn,
in this order. The refusals (capped apart) have a group of their own, so
that they never take another group's turn."""


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What one recorded call shows, as amplification reads it."""

    arguments: Mapping[str, Any]
    schema: Mapping[str, Any]
    """The tool's input schema."""
    fixed: frozenset[str] = frozenset()
    """Arguments not varied as text: paths and hosts the policy checks."""
    files_read: Mapping[str, bytes] = field(default_factory=dict)
    """Workspace files the handler read (relative path -> bytes before the
    call), the most telling first (those the data names)."""
    beneath: Mapping[str, bytes] = field(default_factory=dict)
    """Every file the handler could have read (all of a directory it
    walked, not only the few of ``files_read``), for the variants that
    change them all at once."""
    data: Any = None
    """The data the call returned."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One variant to try: what it is called, what it changes."""

    name: str
    kind: str
    """``boundary``, ``text`` or ``size``."""
    family: str
    arguments: Mapping[str, Any]
    files: Mapping[str, bytes | GeneratedContent] = field(default_factory=dict)
    bound: str = ""
    """For a schema bound: which (the argument's schema and the step), the
    same for every tool sharing that schema ('' for other candidates)."""

    def identity(self) -> str:
        """Equal for two candidates that send the same call over the same files."""
        files = {
            path: value.decode("utf-8", "surrogateescape")
            if isinstance(value, bytes)
            else [value.head, value.repeat, value.times, value.tail]
            for path, value in sorted(self.files.items())
        }
        return json.dumps([self.arguments, files], sort_keys=True, default=str)


def candidates(
    facts: CallFacts,
    *,
    probed: Sequence[Candidate] = (),
    refused: Callable[[Candidate], bool] = lambda _candidate: False,
) -> list[Candidate]:
    """Every candidate of ``facts``, in the order they are tried (one of each
    group in turn, see the module docstring). ``probed``: candidates found
    by running the tool (``limit.limit_sized``), first in their group;
    ``refused``: whether the input schema refuses a candidate (it then
    goes with the refusals, whatever its family)."""
    groups: dict[str, list[Candidate]] = {name: [] for name in dict.fromkeys(GROUPS.values())}
    for candidate in [*probed, *_all(facts)]:
        group = "refusal" if refused(candidate) else GROUPS[candidate.family]
        groups[group].append(candidate)
    return _in_turn(groups.values())


def _in_turn(lists: Iterable[Sequence[Candidate]]) -> list[Candidate]:
    """One item of each list in turn, until every list is used up."""
    ordered: list[Candidate] = []
    for round_ in zip_longest(*lists):
        ordered += [candidate for candidate in round_ if candidate is not None]
    return ordered


def _all(facts: CallFacts) -> Iterator[Candidate]:
    yield from _data_sizes(facts)
    yield from _shape(facts)
    yield from _bounds(facts)
    yield from _texts(facts)
    yield from _sizes(facts)
    yield from _shapes(facts)


# -- the schema ------------------------------------------------------------------


def _properties(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {name: value for name, value in properties.items() if isinstance(value, Mapping)}


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    return {item for item in kind if isinstance(item, str)} if isinstance(kind, list) else set()


def _is_integer(schema: Mapping[str, Any]) -> bool:
    return "integer" in _types(schema)


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _with(arguments: Mapping[str, Any], name: str, value: Any) -> dict[str, Any]:
    changed = dict(arguments)
    changed[name] = value
    return changed


# -- data sizes --------------------------------------------------------------------


def _sizes_of_data(facts: CallFacts) -> list[tuple[str, int]]:
    """(label, size) of the data and the files, first label of each size kept."""
    # The counts of the data first (lengths of its lists, its integers),
    # then the files read, and last the lengths of its strings.
    numbers: list[tuple[str, int]] = []
    lists: list[tuple[str, int]] = []
    strings: list[tuple[str, int]] = []
    if isinstance(facts.data, Mapping):
        for key, value in facts.data.items():
            if isinstance(value, list):
                lists.append((f"len(data.{key})", len(value)))
            elif isinstance(value, str):
                strings.append((f"len(data.{key})", len(value)))
            elif isinstance(value, int) and not isinstance(value, bool):
                numbers.append((f"data.{key}", value))
    files: list[tuple[str, int]] = []
    for path, content in facts.files_read.items():
        text = _text(content)
        if text is not None:
            files.append((f"lines of {path}", len(text.splitlines())))
            files.append((f"len({path})", len(text)))
    # A list as long as an integer argument (the one it cut) or as an
    # integer of the data (a list and its count) is the most telling.
    counts = {size for _, size in numbers} | {
        value for value in facts.arguments.values() if type(value) is int
    }
    lists.sort(key=lambda item: item[1] not in counts)
    found = lists + numbers + files + strings
    seen: set[int] = set()
    unique = []
    for label, size in found:
        if size not in seen:
            seen.add(size)
            unique.append((label, size))
    return unique


def _data_sizes(facts: CallFacts) -> Iterator[Candidate]:
    integers = {
        name: schema for name, schema in _properties(facts.schema).items() if _is_integer(schema)
    }
    # Each size equal, then one under and one over (a limit reached with
    # more to come, a limit not reached), before the next size.
    for label, size in _sizes_of_data(facts):
        for name, schema in integers.items():
            current = facts.arguments.get(name, schema.get("default"))
            for offset, suffix in ((0, ""), (-1, " - 1"), (1, " + 1")):
                value = size + offset
                if value != current and _within(schema, value):
                    yield Candidate(
                        f"{name} = {label}{suffix}",
                        "boundary",
                        "data size",
                        _with(facts.arguments, name, value),
                    )


def _within(schema: Mapping[str, Any], value: int) -> bool:
    low, high = _number(schema.get("minimum")), _number(schema.get("maximum"))
    return (low is None or value >= low) and (high is None or value <= high)


# -- bounds ------------------------------------------------------------------------

_NUMBER_BOUNDS = (("minimum", 1), ("maximum", -1))
_LENGTH_BOUNDS = (("minLength", 1), ("maxLength", -1))
_ITEM_BOUNDS = (("minItems", 1), ("maxItems", -1))


def _steps(keyword: str, inward: int) -> tuple[tuple[str, int, str], ...]:
    """(family, offset, label) of a bound exactly, one step inside, one outside."""
    into, out = ("+", "-") if inward > 0 else ("-", "+")
    return (
        ("boundary", 0, keyword),
        ("inside", inward, f"{keyword} {into} 1"),
        ("outside", -inward, f"{keyword} {out} 1"),
    )


def _bounds(facts: CallFacts) -> Iterator[Candidate]:
    """Each bound exactly (the integer arguments' first), then one step
    outside, then one step inside."""
    found = list(_number_bounds(facts)) + list(_length_bounds(facts))
    for family in ("boundary", "outside", "inside"):
        yield from (candidate for candidate in found if candidate.family == family)


def _number_bounds(facts: CallFacts) -> Iterator[Candidate]:
    for name, schema in _properties(facts.schema).items():
        types = _types(schema)
        if not types & {"integer", "number"}:
            continue
        for keyword, inward in _NUMBER_BOUNDS:
            bound = _number(schema.get(keyword))
            if bound is None:
                continue
            for family, offset, where in _steps(keyword, inward):
                number = bound + offset
                yield Candidate(
                    f"{name} = {where} ({number:g})",
                    "boundary",
                    family,
                    _with(facts.arguments, name, number),
                    bound=_bound_key(name, schema, where),
                )
        for keyword, inward in (("exclusiveMinimum", 1), ("exclusiveMaximum", -1)):
            bound = _number(schema.get(keyword))
            if bound is None:
                continue
            step = 1 if "integer" in types else 0.5
            inside = bound + inward * step
            sign = "+" if inward > 0 else "-"
            yield Candidate(
                f"{name} = {keyword} {sign} {step:g} ({inside:g})",
                "boundary",
                "boundary",
                _with(facts.arguments, name, inside),
                bound=_bound_key(name, schema, f"{keyword} inside"),
            )
            yield Candidate(
                f"{name} = {keyword} ({bound:g})",
                "boundary",
                "outside",
                _with(facts.arguments, name, bound),
                bound=_bound_key(name, schema, keyword),
            )


def _length_bounds(facts: CallFacts) -> Iterator[Candidate]:
    for name, schema in _properties(facts.schema).items():
        if name not in facts.arguments:
            continue
        value = facts.arguments[name]
        builds: tuple[tuple[Any, Callable[[Any, int], Any], str], ...] = (
            (_LENGTH_BOUNDS, partial(resized_text, pattern=schema.get("pattern")), "len"),
            (_ITEM_BOUNDS, resized_list, "items of"),
        )
        for keywords, build, measure in builds:
            for keyword, inward in keywords:
                bound = _number(schema.get(keyword))
                if bound is None:
                    continue
                for family, offset, where in _steps(keyword, inward):
                    size = int(bound) + offset
                    if size < 0 or size > SIZE_LIMIT:
                        continue
                    resized = build(value, size)
                    if resized is not None:
                        yield Candidate(
                            f"{measure}({name}) = {where} ({size})",
                            "boundary",
                            family,
                            _with(facts.arguments, name, resized),
                            bound=_bound_key(name, schema, where),
                        )


def _shape(facts: CallFacts) -> Iterator[Candidate]:
    """The object's own bounds, one step outside: an argument the schema
    does not name (``additionalProperties: false``), a required one left out."""
    if facts.schema.get("additionalProperties") is False:
        extra = "unexpected_argument"
        while extra in _properties(facts.schema):
            extra += "_"
        yield Candidate(
            f"an extra argument {extra}",
            "boundary",
            "outside",
            _with(facts.arguments, extra, 1),
            bound=_bound_key("", {"properties": sorted(_properties(facts.schema))}, extra),
        )
    required = facts.schema.get("required")
    for name in required if isinstance(required, list) else ():
        if name in facts.arguments:
            rest = {key: value for key, value in facts.arguments.items() if key != name}
            yield Candidate(
                f"without {name}",
                "boundary",
                "outside",
                rest,
                bound=_bound_key(name, {"properties": sorted(_properties(facts.schema))}, "absent"),
            )


def _bound_key(name: str, schema: Mapping[str, Any], step: str) -> str:
    """Which bound a candidate checks: the argument, its schema (what the
    model reads, defaults and descriptions aside) and the step."""
    kept = {key: value for key, value in schema.items() if key not in ("default", "description")}
    return json.dumps([name, kept, step], sort_keys=True, default=str)


# -- text ------------------------------------------------------------------------------------


def _text(content: bytes) -> str | None:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _texts(facts: CallFacts) -> Iterator[Candidate]:
    """Each free-text argument and the first file read, one change of each
    in turn; then a search key's other changes and the other files' (see
    the module docstring)."""
    texts = {path: text for path, c in facts.files_read.items() if (text := _text(c)) is not None}
    first: list[list[Candidate]] = []
    later: list[list[Candidate]] = []
    for name, value in _free_arguments(facts):
        key = isinstance(value, str) and any(value.lower() in t.lower() for t in texts.values())
        if key:
            rest = tuple(change for change in CONTENT_ORDER if change not in KEY_ORDER)
            first.append(list(_argument_text(facts, name, value, KEY_ORDER)))
            later.append(list(_argument_text(facts, name, value, rest)))
        else:
            first.append(list(_argument_text(facts, name, value, CONTENT_ORDER)))
    files = [list(_file_text(facts, path, text)) for path, text in texts.items()]
    yield from _in_turn(first + files[:1])
    yield from _in_turn(later + files[1:])


def _free_arguments(facts: CallFacts) -> Iterator[tuple[str, Any]]:
    properties = _properties(facts.schema)
    for name, value in facts.arguments.items():
        schema = properties.get(name, {})
        if name not in facts.fixed and _free_text(schema) and has_text(value):
            yield name, value


def _file_text(facts: CallFacts, path: str, text: str) -> Iterator[Candidate]:
    quoted = set(strings_in(facts.data))
    lines = {line.rstrip("\r") for line in text.split("\n") if line.strip()}
    order = QUOTED_FILE_ORDER if lines & quoted else FILE_ORDER
    for name in order:
        changed = TEXT_CHANGES[name](text)
        if changed != text:
            yield Candidate(
                f"{path}: {shown_name(name, text)}",
                "text",
                "file text",
                dict(facts.arguments),
                {path: changed.encode("utf-8")},
            )


def _shapes(facts: CallFacts) -> Iterator[Candidate]:
    keys = [(name, value) for name, value in _free_arguments(facts) if isinstance(value, str)]
    every, quoted = facts.beneath or facts.files_read, set(strings_in(facts.data))
    numbers = limit_like_numbers(facts)
    for shape in text_shapes(facts.arguments, facts.files_read, every, keys, quoted, numbers):
        yield Candidate(shape.name, shape.kind, shape.family, shape.arguments, shape.files)


def _free_text(schema: Mapping[str, Any]) -> bool:
    """A value whose strings are text to vary: no pattern, enum, const or format."""
    return not any(key in schema for key in ("pattern", "enum", "const", "format"))


def _argument_text(
    facts: CallFacts, name: str, value: Any, order: Sequence[str]
) -> Iterator[Candidate]:
    for change_name in order:
        change = TEXT_CHANGES[change_name]
        # One very long line is enough: not every string of a document.
        changed = map_strings(value, change, first_only=change is long_lines)
        if changed != value:
            sample = value if isinstance(value, str) else ""
            yield Candidate(
                f"{name}: {shown_name(change_name, sample)}",
                "text",
                "argument text",
                _with(facts.arguments, name, changed),
            )


# -- sizes ---------------------------------------------------------------------------


def limit_like_numbers(facts: CallFacts) -> list[int]:
    """The call's integer arguments (as sent, or their defaults), then every
    bound and default of the schema, each once, in that order."""
    found: list[int] = []
    properties = _properties(facts.schema)
    for name, schema in properties.items():
        value = _number(facts.arguments.get(name, schema.get("default")))
        if _is_integer(schema) and isinstance(value, int):
            found.append(value)
    for schema in properties.values():
        for keyword in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"):
            value = _number(schema.get(keyword))
            if isinstance(value, int):
                found.append(value)
    return [number for number in dict.fromkeys(found) if 2 <= number <= SIZE_LIMIT]


def _sizes(facts: CallFacts) -> Iterator[Candidate]:
    numbers = limit_like_numbers(facts)
    texts = {
        path: text
        for path, content in facts.files_read.items()
        if (text := _text(content)) is not None and text
    }
    # Data holding a list counts lines (rows, matches); else characters count.
    lines_first = isinstance(facts.data, Mapping) and any(
        isinstance(value, list) for value in facts.data.values()
    )
    quoted = set(strings_in(facts.data))
    for number in numbers:
        for path, text in texts.items():
            yield from _sized_files(facts, path, text, number, lines_first, quoted)
        for size in (number, number + 1, number - 1):
            for name, value in facts.arguments.items():
                if isinstance(value, list) and value and size <= LIST_LIMIT:
                    yield Candidate(
                        f"{name} with {size} items",
                        "size",
                        "size",
                        _with(facts.arguments, name, resized_list(value, size)),
                    )


def _sized_files(
    facts: CallFacts, path: str, text: str, number: int, lines_first: bool, quoted: set[str]
) -> Iterator[Candidate]:
    """``path`` with as many lines after its first as ``number``, one more
    and one fewer; then as many characters; then a first line that long.
    The line repeated is one the data quotes (a match a search returned),
    else the second; repeated so that the data's list holds that many items
    with those the other files gave (``elsewhere``)."""
    lines = text.splitlines(keepends=True)
    # A first line kept as it is (a header), unless the data quotes it.
    head = lines[0] if len(lines) >= 2 and lines[0].rstrip("\r\n") not in quoted else ""
    body = lines[1:] if head else lines
    unit = next((line for line in body if line.rstrip("\r\n") in quoted), body[0])
    others = _items_elsewhere(facts.data, text) if unit.rstrip("\r\n") in quoted else 0
    unit = unit if unit.endswith("\n") else unit + "\n"
    sizes = (number, number + 1, number - 1)
    Recipe = tuple[str, bytes | GeneratedContent]
    after = " after its first" if head else ""
    by_lines: list[Recipe] = [
        (
            f"{path} with {size - others} lines{after}"
            + (f" ({size} items with the other files')" if others else ""),
            GeneratedContent(repeat=unit, times=size - others, head=head),
        )
        for size in sizes
        if size - others >= 0
    ]
    by_chars: list[Recipe] = [
        (f"{path} of {size} characters", file_of_chars(text, size)) for size in sizes
    ]
    recipes: list[Recipe] = by_lines + by_chars if lines_first else by_chars + by_lines
    recipes += [
        (f"{path} with a first line of {size} characters", first_line_of(text, size))
        for size in sizes
    ]
    for name, content in recipes:
        yield Candidate(name, "size", "size", dict(facts.arguments), {path: content})


def _items_elsewhere(data: Any, text: str) -> int:
    """Items of the data's list that quote no line of ``text`` (a search's
    matches in other files), for the first list that quotes ``text`` at all."""
    lines = {line.rstrip("\r") for line in text.split("\n") if line.strip()}
    lists = (
        [value for value in data.values() if isinstance(value, list)]
        if isinstance(data, Mapping)
        else []
    )
    for items in lists:
        mine = sum(1 for item in items if lines & set(strings_in(item)))
        if mine:
            return len(items) - mine
    return 0
