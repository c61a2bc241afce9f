"""The scans that find where the secret rules may match, cheaply.

* ``Keywords``: every rule's keywords in one pass over the text (an
  Aho-Corasick automaton when ``ahocorasick_rs`` is installed, else one
  trie-shaped regex).
* Gated starts (``gates_of``, ``gated_starts``): a rule whose every
  alternative holds a lazy gap is tried only at heads with a match of their
  rest within reach.
* Gap rules (``split_gap``, ``gap_matches``): gitleaks' "this line or the
  next n" rules run tail first.
* The assignment-sign gate (``assignment_sign_reach``) of gitleaks' semi-generic
  template.
* ``Finding``, what a scan reports, and ``VerdictMemo``, one verdict per
  distinct finding within a text.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from .secret_regex import (
    LEADING_FLAGS,
    LineGap,
    alternatives_of,
    compile_bounded,
    group_depth_at,
    top_level_split,
    widest_match,
)

_ahocorasick: Any


try:  # the ``fast`` extra: one automaton pass for every keyword
    import ahocorasick_rs as _ahocorasick
except ImportError:  # pragma: no cover - the regex stands in (tested with accelerated=False)
    _ahocorasick = None


class VerdictMemo(dict[tuple[object, ...], bool]):
    """Verdicts on the findings of one text, by what each verdict depends
    on: a text packed with findings repeats its secrets, matches and lines,
    and judging one costs far more than a look-up. Bounded: keys holding a
    text longer than ``TEXT_LIMIT``, and verdicts beyond ``LIMIT``, are not
    kept."""

    LIMIT = 4096
    TEXT_LIMIT = 1024

    def keep(self, key: tuple[object, ...], size: int, verdict: bool) -> bool:
        """Keep ``verdict`` under ``key`` (whose texts are ``size``
        characters in all) when within the bounds; return it."""
        if size <= self.TEXT_LIMIT and len(self) < self.LIMIT:
            self[key] = verdict
        return verdict


@dataclass(frozen=True, slots=True)
class Finding:
    """A secret at ``text[start:end]``, found by the rule named ``rule``;
    ``keyword`` names its placeholder."""

    start: int
    end: int
    keyword: str
    rule: str


# The label, spaces and quotes between a keyword and its value in the rules
# gitleaks generates for "KEYWORD ... = value" (its semi-generic template),
# and the first character of every assignment sign the template allows.
_ASSIGNMENT = "(?:[ \\t\\w.\\-]{0,20})[\\s'\"]{0,3}(?:=|>|:{1,3}=|\\|\\||:|=>|\\?=|,)"


_ASSIGNMENT_GAP = 20 + 3


ASSIGNMENT_SIGN = re.compile(r"[=>:|?,]")


@functools.cache
def assignment_sign_reach(pattern: str) -> int | None:
    """For a regex that starts with a keyword then gitleaks' assignment
    template: how far from where it starts its assignment sign must begin
    (the widest keyword, the template's run, plus one); None for others."""
    found = pattern.find(_ASSIGNMENT)
    if found <= 0 or group_depth_at(pattern, found) != 0 or len(top_level_split(pattern)) > 1:
        return None  # not there, or not on every way the regex can match
    widest = widest_match(compile_bounded(pattern[:found]).pattern)
    return None if widest is None else widest + _ASSIGNMENT_GAP + 1


# A lazy gap of any characters, as gitleaks writes "then, within n
# characters": ``(?s:.){0,200}?``.
_ANY_GAP = re.compile(r"\(\?s:\.\)\{0,(\d+)\}\?|\.\{0,(\d+)\}\?")


@dataclass(frozen=True, slots=True)
class _Gate:
    """A regex read as a head, a lazy gap of at most so many characters,
    then the rest: a match starts where its head matches, with a match of
    its rest at most ``reach`` characters on (the head's widest match and
    the gap). The rest is a regex or, when it
    holds a gap of its own, another gate."""

    head: re.Pattern[str]
    reach: int
    rest: _Gate | re.Pattern[str]


@functools.cache
def gates_of(pattern: str) -> tuple[_Gate, ...] | None:
    """The gates of ``pattern``, one per top-level alternative, when each
    alternative holds a lazy gap (``kubernetes-secret-yaml``); else None.
    Such a regex, searched, goes through the gap from every place its head
    matches, and through the gaps after it from each of those: the cost of
    their product at every head. Gated (``gated_starts``), it is tried
    only at the heads that have a match of their rest within reach."""
    gates: list[_Gate] = []
    for alternative in alternatives_of(pattern):
        flags = LEADING_FLAGS.match(alternative)
        head_flags = flags.group(0) if flags else ""
        gate = _gate(head_flags, alternative[len(head_flags) :])
        if not isinstance(gate, _Gate):
            return None
        gates.append(gate)
    return tuple(gates) or None


def _gate(flags: str, body: str) -> _Gate | re.Pattern[str] | None:
    """``body`` cut at its first lazy gap outside groups, its rest likewise;
    ``body`` compiled when it has no gap; None when it cannot be cut
    (a gap first, a head with no widest match)."""
    gap = next((g for g in _ANY_GAP.finditer(body) if group_depth_at(body, g.start()) == 0), None)
    if gap is None:
        return compile_bounded(flags + body)
    head = body[: gap.start()]
    widest = widest_match(compile_bounded(flags + head).pattern) if head else None
    rest = _gate(flags, body[gap.end() :])
    if widest is None or rest is None:
        return None
    return _Gate(compile_bounded(flags + head), widest + int(gap.group(1) or gap.group(2)), rest)


def gated_starts(text: str, gates: Sequence[_Gate]) -> Iterator[int]:
    """Where a regex split into ``gates`` may match in ``text``, in order:
    the places where one of its heads has a match of its rest within reach.
    Every place the regex matches is among them (the rest of a match is a
    match of the rest, within reach)."""
    seekers = [_Seeker(gate, text) for gate in gates]
    place = 0
    while True:
        firsts = [first for seeker in seekers if (first := seeker.first(place)) is not None]
        if not firsts:
            return
        place = min(firsts)
        yield place
        place += 1


class _Seeker:
    """The first place, at or after a given one, where a gate (or a plain
    regex) may match in one text. Asked at places that do not go back, as
    a scan is: each answer holds until the place passes it, and the heads
    between a head and the nearest rest out of its reach are skipped, so a
    text is searched about once per head and rest."""

    __slots__ = ("_answer", "_asked", "_gate", "_rest", "_text")

    def __init__(self, gate: _Gate | re.Pattern[str], text: str) -> None:
        self._gate = gate
        self._text = text
        self._rest = _Seeker(gate.rest, text) if isinstance(gate, _Gate) else None
        self._asked = -1
        self._answer: int | None = None

    def first(self, place: int) -> int | None:
        """The first place at or after ``place`` where the gate may match."""
        if 0 <= self._asked <= place and (self._answer is None or self._answer >= place):
            return self._answer  # nothing between where it was asked and its answer
        self._asked, self._answer = place, self._seek(place)
        return self._answer

    def _seek(self, place: int) -> int | None:
        gate = self._gate
        if not isinstance(gate, _Gate):
            found = gate.search(self._text, place)
            return None if found is None else found.start()
        assert self._rest is not None
        while True:
            found = gate.head.search(self._text, place)
            if found is None:
                return None
            head = found.start()
            rest = self._rest.first(head)
            if rest is None:
                return None
            if rest <= head + gate.reach:
                return head
            # No head before ``rest - reach`` has a rest within its reach.
            place = max(head + 1, rest - gate.reach)


def gap_matches(
    text: str,
    gap: LineGap,
    barriers: Sequence[tuple[int, int]],
    shared: dict[str, list[Any]] | None = None,
) -> Iterator[tuple[re.Match[str], int]]:
    """The matches of a rule split at a line gap, found tail first: each
    match of the tail that has a match of the head before it, with at most
    ``gap.breaks`` line breaks between, with where that head starts. Every
    tail so placed is found (a backtracking engine tried from the head
    finds the last or the first one on the line only); and the text is
    scanned once for heads and once for tails, however many heads share a
    line. ``shared``: what the other rules' scans of the same text found
    (their heads, the line breaks), so rules with one head (the two curl
    rules) look for it and for the breaks once."""
    shared = {} if shared is None else shared
    heads = shared.get(gap.head)
    if heads is None:
        heads = shared[gap.head] = [
            found.span() for found in compile_bounded(gap.head).finditer(text)
        ]
    if not heads:
        return
    ends = [end for _, end in heads]
    breaks = shared.get("")
    if breaks is None:
        breaks = shared[""] = line_breaks(text)
    tail = compile_bounded(gap.tail)
    position = 0
    while position <= len(text):
        match = tail.search(text, position)
        if match is None:
            return
        start = match.start()
        barrier = barrier_at(barriers, start)
        if barrier is not None:
            position = barrier
            continue
        # On from the end of what the tail holds, not of what it checks after
        # (the space that separates the next option).
        position = max([start + 1, *(match.end(group) for group in range(1, tail.groups + 1))])
        # The nearest head before the tail has the fewest breaks between.
        nearest = bisect.bisect_right(ends, start) - 1
        if nearest < 0:
            continue
        crossed = bisect.bisect_right(breaks, start) - bisect.bisect_left(breaks, ends[nearest])
        if crossed <= gap.breaks:
            yield match, heads[nearest][0]


_LINE_BREAK = re.compile(r"[\r\n]")


def line_breaks(text: str) -> list[int]:
    """Where each ``\\r`` or ``\\n`` of ``text`` is, in order. Without ``\\r``,
    from the lengths of the lines, summed in C, not match by match."""
    if "\r" in text:
        return [found.start() for found in _LINE_BREAK.finditer(text)]
    # Each line's length plus its break, summed from -1: where each break is.
    lines = text.split("\n")[:-1]
    return list(accumulate(map((1).__add__, map(len, lines)), initial=-1))[1:]


GENERIC_RULE = "generic"


@dataclass(frozen=True, slots=True)
class Keywords:
    """Finds which of ``words`` (lowercase) occur in a lowercased text: one
    pass of an Aho-Corasick automaton (``ahocorasick_rs``) when it is
    installed and ``accelerated``, else of one trie-shaped regex."""

    words: tuple[str, ...]
    automaton: Any
    any_word: re.Pattern[str]
    each_word: re.Pattern[str]
    implied: Mapping[str, tuple[int, ...]]
    """For each word, itself and the words that are prefixes of it."""

    @classmethod
    def build(cls, words: Sequence[str], accelerated: bool = True) -> Keywords:
        trie = _trie_regex(words)
        index = {word: i for i, word in enumerate(words)}
        implied = {
            word: tuple(
                index[word[:size]] for size in range(1, len(word) + 1) if word[:size] in index
            )
            for word in words
        }
        automaton = None
        if accelerated and _ahocorasick is not None and words:
            automaton = _ahocorasick.AhoCorasick(
                list(words),
                matchkind=_ahocorasick.MatchKind.Standard,
                implementation=_ahocorasick.Implementation.DFA,
            )
        return cls(
            tuple(words),
            automaton,
            re.compile(trie or "(?!)"),
            re.compile(f"(?=({trie or '(?!)'}))"),
            implied,
        )

    def occurrences(self, folded: str) -> dict[int, list[int]]:
        """Where each word of ``folded`` starts, by the word's index."""
        places: dict[int, list[int]] = {}
        if self.automaton is not None:
            try:
                matches = self.automaton.find_matches_as_indexes(folded, True)
            except UnicodeEncodeError:  # a lone surrogate: the regex takes it
                pass
            else:
                for word, start, _ in matches:
                    found = places.get(word)
                    if found is None:
                        places[word] = [start]
                    else:
                        found.append(start)
                return places
        first = self.any_word.search(folded)
        if first is None:
            return places
        for match in self.each_word.finditer(folded, first.start()):
            for word in self.implied[match.group(1)]:
                places.setdefault(word, []).append(match.start())
        return places


def _trie_regex(words: Iterable[str]) -> str:
    """One regex matching any of ``words``, shaped as their trie (``ab|ac`` is
    ``a(?:b|c)``), which Python's engine tries faster than a flat
    alternation; at each place it matches the longest word there."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + emit(node[char]) for char in sorted(node) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        if "" in node:  # a word ends here: the longer ones are optional
            return f"(?:{'|'.join(branches)})?"
        return body

    return emit(trie)


def barrier_at(spans: Sequence[tuple[int, int]], position: int) -> int | None:
    """The end of the span ``position`` is inside (after its first character),
    if any. ``spans`` are sorted and do not overlap."""
    index = bisect.bisect_left(spans, (position,)) - 1
    if index >= 0 and position < spans[index][1]:
        return spans[index][1]
    return None
