"""Variants sized to a tool's result limit, found by running the trusted tool.

A tool's result longer than its ``result_limit`` (characters of JSON) is
cut (``ToolResult.truncated``). Two variants sit on that edge: a result of
exactly ``result_limit`` characters (not cut) and one of one more (cut).
Which file gives such a result only running the tool can tell, so
``limit_sized(facts, limit, size_of)`` searches for it with ``size_of``
(one run of a candidate, answering its result's size in characters of
JSON, None when the call fails): the first file read, grown from one of its
lines (one the data quotes, else its second, after a header kept as it is),
or else from blank lines (two characters of JSON each), with the call's
integer arguments at their schema ``maximum`` (so that the tool's own cut
does not stop the result first). The number of lines is found by doubling,
then by bisection; the last line is then lengthened by the characters
still missing, corrected by what that measured, until the size is exact.
A result that stops growing (a tool that does not return what it reads)
gives up on that line; so does a search past ``PROBES`` runs. Nothing here
knows a particular tool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..replay.cassette import GeneratedContent
from .changes import strings_in
from .derive import CallFacts, Candidate

PROBES = 80
"""Runs of the tool one call's search may take, at most."""
MAX_LINES = 1 << 16
"""Lines a file grown for the search may have, at most."""
MAX_EXTRA = 4096
"""Characters the last line may be lengthened by, to make the size exact."""
TRIES = 4
"""Corrections of that length, at most, before a line count is given up."""

SizeOf = Callable[[Candidate], "int | None"]


def limit_sized(facts: CallFacts, limit: int, size_of: SizeOf) -> list[Candidate]:
    """The two candidates on ``limit`` (see the module docstring), or none."""
    first = next(iter(facts.files_read.items()), None)
    if first is None:
        return []
    path, content = first
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return []
    arguments = _at_maximum(facts)
    head, line = _head_and_line(text, set(strings_in(facts.data)))
    budget = _Budget(size_of)
    for unit in dict.fromkeys(u for u in (line, "\n") if u):
        found = _search(budget, path, head, unit, arguments, limit)
        if found:
            return found
    return []


class _Budget:
    """``size_of`` counted, and remembered per candidate; past ``PROBES``
    runs every size is None (the search gives up)."""

    def __init__(self, size_of: SizeOf) -> None:
        self.size_of = size_of
        self.left = PROBES
        self.known: dict[str, int | None] = {}

    def size(self, candidate: Candidate) -> int | None:
        identity = candidate.identity()
        if identity not in self.known:
            if self.left <= 0:
                return None
            self.left -= 1
            self.known[identity] = self.size_of(candidate)
        return self.known[identity]


def _search(
    budget: _Budget,
    path: str,
    head: str,
    unit: str,
    arguments: Mapping[str, Any],
    limit: int,
) -> list[Candidate]:
    def candidate(lines: int, extra: int, target: int) -> Candidate:
        last = unit.rstrip("\n") + "x" * extra + "\n" if lines else "x" * extra
        recipe = GeneratedContent(repeat=unit, times=max(lines - 1, 0), head=head, tail=last)
        what = "the result limit" if target == limit else "one over the result limit"
        return Candidate(
            f"{path} sized to a result of {target} characters ({what})",
            "size",
            "limit",
            dict(arguments),
            {path: recipe},
        )

    def size(lines: int, extra: int = 0) -> int | None:
        return budget.size(candidate(lines, extra, limit))

    low, high = _bracket(size, limit)
    if high is None:
        return []
    while high - low > 1:
        middle = (low + high) // 2
        measured = size(middle)
        if measured is None:
            return []
        low, high = (low, middle) if measured >= limit else (middle, high)
    found = []
    for target in (limit, limit + 1):
        hit = next(_exact(size, (low, high), target), None)
        if hit is None:
            return []
        found.append(candidate(*hit, target))
    return found


def _bracket(size: Callable[[int], int | None], limit: int) -> tuple[int, int | None]:
    """(low, high): line counts whose results are under and at least
    ``limit`` characters; high None when growing never gets there."""
    low, high = 0, 1
    before = size(low)
    while True:
        measured = size(high)
        if measured is None or before is None:
            return low, None
        if measured >= limit:
            return low, high
        if measured - before < (high - low) // 2 or high >= MAX_LINES:
            return low, None  # stopped growing: the tool cuts what it reads
        low, high, before = high, high * 2, measured


def _exact(
    size: Callable[..., int | None], lines: tuple[int, ...], target: int
) -> Iterator[tuple[int, int]]:
    """(lines, extra characters on the last line) whose result is
    ``target`` characters: the extra characters guessed from the shortfall,
    then corrected by what they measured (a few times at most)."""
    for count in lines:
        base = size(count)
        if base is None or base > target:
            continue
        extra = target - base
        for _ in range(TRIES):
            if extra < 0 or extra > MAX_EXTRA:
                break
            measured = size(count, extra)
            if measured is None:
                break
            if measured == target:
                yield count, extra
                return
            extra += target - measured


def _at_maximum(facts: CallFacts) -> dict[str, Any]:
    """The call's arguments with every integer one at its schema's maximum."""
    arguments = dict(facts.arguments)
    properties = facts.schema.get("properties")
    for name, schema in (properties if isinstance(properties, Mapping) else {}).items():
        if not isinstance(schema, Mapping):
            continue
        kind = schema.get("type")
        maximum = schema.get("maximum")
        if (kind == "integer" or (isinstance(kind, list) and "integer" in kind)) and isinstance(
            maximum, int
        ):
            arguments[name] = maximum
    return arguments


def _head_and_line(text: str, quoted: set[str]) -> tuple[str, str]:
    """A first line kept as it is (a header, unless the data quotes it),
    and the line to repeat: one the data quotes, else the next one."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return "", ""
    head = lines[0] if len(lines) >= 2 and lines[0].rstrip("\r\n") not in quoted else ""
    body = lines[1:] if head else lines
    line = next((item for item in body if item.rstrip("\r\n") in quoted), body[0])
    line = line if line.endswith("\n") else line + "\n"
    return head, line if line.strip() else ""
