"""Secret rules: gitleaks' default rule set, run with Python's ``re``.

``secret_rules.json`` beside this module holds the rules of the gitleaks
default configuration (``config/gitleaks.toml``; MIT licence, in
``secret_rules.LICENSE.txt``; the source version is in the file), each
regex translated from Go's RE2 syntax by ``translate_go_regex`` when the
file was refreshed (``scripts/refresh_secret_rules.py`` reads a local copy;
nothing is fetched at run time). ``SecretRuleSet.find`` scans a text as
gitleaks scans a fragment (``detect/detect.go``):

1. **Keywords.** A rule runs only where one of its keywords occurs in the
   lowercased text. All keywords are looked for in one pass, by an
   Aho-Corasick automaton when ``ahocorasick_rs`` is installed (the
   ``fast`` extra), else by one regex shaped like a trie: the cost of a
   text without keywords does not grow with the number of rules.
2. **The regex**, compiled on first use. Its secret is the group
   ``secretGroup`` names, else the first non-empty unnamed group, else the
   whole match.
3. **Entropy.** A rule with an ``entropy`` threshold keeps a secret only
   when its Shannon entropy is above it.
4. **Allowlists**, the global one and the rule's: a regex found in the
   secret, the match or its line, or a stopword in the secret, keeps the
   text visible.

What differs from gitleaks, and why: rules that match file names only are
left out, and rules limited to some paths apply to every text (a tool's
text has no path); allowlist conditions on paths or commits never hold;
encoded segments (base64, hex, percent) are not decoded; ``gitleaks:allow``
comments are ignored (a redactor does not take the text's word for it);
named groups, and groups inside a repeat, never hold the secret
(``jwt-base64`` uses named groups as labels, ``microsoft-teams-webhook``
repeats ``([a-z0-9]{4}-){3}``: gitleaks would report that part alone, so
their whole match is redacted); and case-insensitive parts fold ASCII letters
only, where Go also folds the Kelvin sign and the long s. A match never
starts inside a ``<redacted:...>`` placeholder (the ``>`` of a placeholder
would otherwise serve as gitleaks' XML separator after the label it
names).

Separately, ``high_entropy_assignments`` finds long high-entropy values
given to a key-like name in config syntax (``.env``, YAML, JSON, TOML,
INI), which no rule names.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import importlib
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .errors import ToolguardError

# The regex parser, for the width of a pattern: ``re._parser`` on Python
# 3.11+, ``sre_parse`` before (neither has type stubs).
_sre_parse: Any
try:
    _sre_parse = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")

_ahocorasick: Any
try:  # the ``fast`` extra: one automaton pass for every keyword
    import ahocorasick_rs as _ahocorasick
except ImportError:  # pragma: no cover - the regex stands in (tested with accelerated=False)
    _ahocorasick = None

__all__ = [
    "RULES_FILE",
    "Allowlist",
    "Finding",
    "Keywords",
    "SecretRule",
    "SecretRuleSet",
    "UnsupportedRegex",
    "ENTROPY_MIN_LENGTH",
    "LINE_WINDOW",
    "SCAN_LIMIT",
    "ENTROPY_THRESHOLD",
    "bounded_repeats",
    "default_rule_set",
    "high_entropy_assignments",
    "shannon_entropy",
    "translate_go_regex",
]

RULES_FILE = "secret_rules.json"
"""The vendored rules, beside this module."""

_FLAGS = re.ASCII
"""Go's ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII-only; so are these."""

_PLACEHOLDER = re.compile(r"<redacted:[a-z0-9_]+>")


# --- Go RE2 syntax -> Python re ------------------------------------------------------

_POSIX_CLASSES: Mapping[str, str] = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_INLINE_FLAGS = frozenset("is")
# Characters Python reads, or warns it will read, as set syntax inside a
# class (nested sets, set operations): written escaped there, as literals.
_CLASS_SPECIAL = frozenset("[]\\^-&|~")
_FLAG_GROUP = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_NAMED_GROUP = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")


class UnsupportedRegex(ToolguardError, ValueError):
    """A Go regex uses syntax ``translate_go_regex`` has no translation for."""


def translate_go_regex(pattern: str) -> str:
    """``pattern`` (Go RE2 syntax) as a Python ``re`` pattern that matches the
    same texts when compiled with ``re.ASCII``.

    Translated: flag groups in mid-pattern (``ab(?i)cd``, scoped in Go to the
    end of the enclosing group, across its ``|``) become scoped groups
    (``ab(?i:cd)``); ``\\z`` and ``$`` (the end of the text in Go) become
    ``\\Z``; POSIX classes (``[[:alnum:]]``) become ranges; ``\\x{...}``,
    ``\\Q...\\E`` and ``(?<name>...)`` get Python's spelling; ``{,n}`` (text in
    Go) is escaped; in classes, ``[``, ``&``, ``|``, ``~`` and stray ``-`` are
    escaped. Raises ``UnsupportedRegex`` for what has no translation here:
    Unicode classes (``\\p{...}``), ``\\C``, the ``m`` and ``U`` flags.
    """
    out: list[str] = []
    # Per open group, the flags opened inside it by a mid-pattern "(?i)":
    # closed with it, and reopened after each "|".
    frames: list[list[str]] = [[]]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            text, i = _translate_escape(pattern, i, in_class=False)
            out.append(text)
        elif char == "[":
            text, i = _translate_class(pattern, i)
            out.append(text)
        elif char == "(":
            i = _translate_group_start(pattern, i, out, frames)
        elif char == ")":
            if len(frames) == 1:
                raise UnsupportedRegex(f"unbalanced ')' at {i}")
            out.append(")" * len(frames.pop()) + ")")
            i += 1
        elif char == "|":
            opened = frames[-1]
            out.append(")" * len(opened) + "|" + "".join(f"(?{spec}:" for spec in opened))
            i += 1
        elif char == "{" and re.match(r"\{,\d*\}", pattern[i:]):
            out.append("\\{")
            i += 1
        elif char == "$":
            out.append("\\Z")
            i += 1
        else:
            out.append(char)
            i += 1
    if len(frames) != 1:
        raise UnsupportedRegex("unbalanced '('")
    out.append(")" * len(frames[0]))
    return "".join(out)


def _translate_group_start(pattern: str, i: int, out: list[str], frames: list[list[str]]) -> int:
    flags = _FLAG_GROUP.match(pattern, i)
    if flags:
        on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
        unknown = set(on + off) - _INLINE_FLAGS
        if unknown:
            raise UnsupportedRegex(f"flag {''.join(sorted(unknown))!r} at {i}")
        spec = on + (f"-{off}" if off else "")
        if end == ":":
            out.append(f"(?{spec}:")
            frames.append([])
        elif i == 0 and not off:
            out.append(f"(?{on})")  # leading: global in both
        else:
            out.append(f"(?{spec}:")
            frames[-1].append(spec)
        return flags.end()
    named = _NAMED_GROUP.match(pattern, i)
    if named:
        out.append(f"(?P<{named.group(1)}>")
        frames.append([])
        return named.end()
    if pattern.startswith("(?", i):
        raise UnsupportedRegex(f"group syntax at {i}")
    out.append("(")
    frames.append([])
    return i + 1


def _translate_escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    if i + 1 >= len(pattern):
        raise UnsupportedRegex("trailing backslash")
    char = pattern[i + 1]
    if char == "z" and not in_class:
        return "\\Z", i + 2
    if char == "x":
        braced = re.compile(r"\\x\{([0-9A-Fa-f]{1,6})\}").match(pattern, i)
        if braced:
            return f"\\U{int(braced.group(1), 16):08x}", braced.end()
        if re.compile(r"\\x[0-9A-Fa-f]{2}").match(pattern, i):
            return pattern[i : i + 4], i + 4
        raise UnsupportedRegex(f"\\x at {i}")
    if char == "Q":
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
        return re.escape(literal), len(pattern) if end < 0 else end + 2
    if char in "pPCZ" or (char.isdigit() and char != "0"):
        raise UnsupportedRegex(f"\\{char} at {i}")
    return "\\" + char, i + 2


def _translate_class(pattern: str, i: int) -> tuple[str, int]:
    start = i
    i += 1
    out = ["["]
    if pattern.startswith("^", i):
        out.append("^")
        i += 1
    first = True
    single = False  # the last item is one character: a "-" after it makes a range
    while True:
        if i >= len(pattern):
            raise UnsupportedRegex(f"unterminated class at {start}")
        char = pattern[i]
        if char == "]" and not first:
            out.append("]")
            return "".join(out), i + 1
        first = False
        posix = re.compile(r"\[:(\^?)([a-z]+):\]").match(pattern, i) if char == "[" else None
        if posix:
            if posix.group(1) or posix.group(2) not in _POSIX_CLASSES:
                raise UnsupportedRegex(f"class {posix.group(0)} at {i}")
            out.append(_POSIX_CLASSES[posix.group(2)])
            i, single = posix.end(), False
        elif char == "\\":
            text, i = _translate_escape(pattern, i, in_class=True)
            out.append(text)
            single = text[1] not in "dDwWsS"
        elif char == "-" and single and i + 1 < len(pattern) and pattern[i + 1] != "]":
            out.append("-")
            i, single = i + 1, False
            if pattern[i] == "\\":
                text, i = _translate_escape(pattern, i, in_class=True)
            else:
                text, i = _class_literal(pattern[i]), i + 1
            out.append(text)
        else:
            out.append(_class_literal(char))
            i, single = i + 1, True


def _class_literal(char: str) -> str:
    return "\\" + char if char in _CLASS_SPECIAL else char


# --- entropy -----------------------------------------------------------------------


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``, as gitleaks computes it (counts of
    characters over the UTF-8 length). 0.0 for the empty text."""
    if not text:
        return 0.0
    size = len(text.encode("utf-8", "surrogatepass"))
    return -sum(count / size * math.log2(count / size) for count in Counter(text).values())


# --- rules -------------------------------------------------------------------------


# --- the cost of a scan --------------------------------------------------------------

SCAN_LIMIT = 1024
"""The most times one repeat of a rule's regex (or an allowlist's) runs:
``*``, ``+`` and ``{n,}`` are read as ``{0,SCAN_LIMIT}``, ``{1,SCAN_LIMIT}``
and ``{n,max(n,SCAN_LIMIT)}``. A backtracking engine tried at every place
of a text, with a repeat that can run to the end of it, costs the square
of the text's length; bounded, each try looks at a bounded window, so a
scan is linear. A secret a rule finds is therefore at most about this long
(longer ones are found in part, or by another rule, or not at all)."""

LINE_WINDOW = 1024
"""How far around a match its "line" reaches for an allowlist that looks at
the line: a whole line, looked at again for each match on it, would cost
the square of its length. A window can only make fewer allowlists hold."""

_OPEN_REPEAT = re.compile(r"\{(\d+),\}")
_CLOSED_REPEAT = re.compile(r"\{\d*(?:,\d*)?\}")


def bounded_repeats(pattern: str, limit: int = SCAN_LIMIT) -> str:
    """``pattern`` (Python ``re`` syntax) with every open repeat bounded by
    ``limit`` (see ``SCAN_LIMIT``); lazy and possessive marks are kept, and
    everything else is copied as it is."""
    out: list[str] = []
    i = 0
    quantifiable = False  # the text just copied can take a repeat
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i, quantifiable = i + 2, True
        elif char == "[":
            end = _class_end(pattern, i)
            out.append(pattern[i:end])
            i, quantifiable = end, True
        elif char in "*+" and quantifiable:
            out.append(f"{{{0 if char == '*' else 1},{limit}}}")
            i, quantifiable = i + 1, False
        elif char == "{" and quantifiable and (found := _OPEN_REPEAT.match(pattern, i)):
            low = int(found.group(1))
            out.append(f"{{{low},{max(low, limit)}}}")
            i, quantifiable = found.end(), False
        elif char == "{" and quantifiable and (found := _CLOSED_REPEAT.match(pattern, i)):
            out.append(found.group(0))
            i, quantifiable = found.end(), False
        else:
            out.append(char)
            # After "(", "|", "^" or a repeat ("?", or a lazy or possessive mark
            # after one), a "*" or "+" is no repeat of ours to bound.
            quantifiable = char not in "(|^?*+"
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Where the character class opening at ``start`` ends (after its "]")."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1  # a "]" first is a literal
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
        elif pattern[i] == "]":
            return i + 1
        else:
            i += 1
    return len(pattern)


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(bounded_repeats(pattern), _FLAGS)


# A gap written as gitleaks writes "anything on this line or the next n":
# ``(?:.*?|.*?(?:[\r\n]{1,2}.*?){1,n})`` (or greedy). Tried from every place
# of its head, it costs the square of the line; such a rule is run the
# other way (see ``SecretRule.matches``).
_LINE_GAP = re.compile(r"\(\?:\.\*(\??)\|\.\*\1\(\?:\[\\r\\n\]\{1,2\}\.\*\1\)\{1,(\d+)\}\)")


@dataclass(frozen=True, slots=True)
class _Gap:
    """A rule's regex as ``head``, a gap of at most ``breaks`` line-break
    characters, then ``tail``."""

    head: str
    tail: str
    breaks: int


@functools.cache
def _split_gap(pattern: str) -> _Gap | None:
    found = _LINE_GAP.search(pattern)
    if found is None:
        return None
    head, tail = pattern[: found.start()], pattern[found.end() :]
    flags = _LEADING_FLAGS.match(head)
    if flags:
        tail = flags.group(0) + tail
    # Up to two per line crossed, and one the tail may start with.
    return _Gap(head, tail, 2 * int(found.group(2)) + 1)


class _Memo(dict[tuple[object, ...], bool]):
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
class Allowlist:
    """Texts a rule (or every rule) leaves visible. ``target`` is what the
    regexes look at: ``"secret"``, ``"match"`` or ``"line"``; stopwords are
    looked for in the lowercased secret. ``condition="and"`` needs every kind
    of check present to hold, and a path or commit check (``scoped``) never
    does here."""

    regexes: tuple[str, ...] = ()
    stopwords: tuple[str, ...] = ()
    target: str = "secret"
    condition: str = "or"
    scoped: bool = False

    def allows(self, secret: str, match: str, line: str) -> bool:
        """True when this allowlist keeps the finding visible."""
        if self.condition == "and" and self.scoped:
            return False  # a path or commit check never holds here
        target = line if self.target == "line" else match if self.target == "match" else secret
        if self.condition == "and":
            if not self.regexes and not self.stopwords:
                return False
            return (not self.stopwords or self._stopword_in(secret)) and (
                not self.regexes or _any_of(self.regexes).found_in(target)
            )
        return (bool(self.stopwords) and self._stopword_in(secret)) or (
            bool(self.regexes) and _any_of(self.regexes).found_in(target)
        )

    def _stopword_in(self, secret: str) -> bool:
        # One automaton pass, not one search per stopword (gitleaks' generic
        # rule has about 1,500 of them).
        return bool(_stopword_finder(self.stopwords).occurrences(secret.lower()))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Allowlist:
        """From an entry of ``secret_rules.json``."""
        return cls(
            regexes=tuple(data.get("regexes", ())),
            stopwords=tuple(data.get("stopwords", ())),
            target=data.get("target", "secret"),
            condition=data.get("condition", "or"),
            scoped=bool(data.get("scoped", False)),
        )


# A leading lazy run, as most keyword rules start: ``(?i)[\w.-]{0,50}?``, or two
# of them with a flag group between. Cut off, the match starts at the keyword
# that follows (see ``SecretRule.matches``).
_LAZY_RUN = re.compile(r"(\[(?:\\.|[^\]\\])+\])\{0,(\d+)\}\?")
_LEADING_FLAGS = re.compile(r"\(\?[a-z]+\)")
_SCOPED_FLAGS = re.compile(r"\(\?[a-z]+(?:-[a-z]+)?:")


@functools.cache
def _split_lazy_prefix(pattern: str) -> tuple[str, str, int]:
    """``(rest, prefix, longest)``: ``pattern`` without its leading lazy runs
    of one class, that class (with the pattern's leading flags) and the most
    characters the runs take; ``(pattern, "", 0)`` when it has none."""
    flags = _LEADING_FLAGS.match(pattern)
    head = flags.group(0) if flags else ""
    rest = pattern[len(head) :]
    kept, total, char_class = head, 0, ""
    while True:
        run = _LAZY_RUN.match(rest)
        if run and char_class in ("", run.group(1)):
            char_class, total, rest = run.group(1), total + int(run.group(2)), rest[run.end() :]
            continue
        group = _SCOPED_FLAGS.match(rest)
        inner = _LAZY_RUN.match(rest, group.end()) if group else None
        if group and inner and char_class in ("", inner.group(1)):
            kept += group.group(0)
            rest = rest[group.end() :]
            continue
        break
    if not total:
        return pattern, "", 0
    return kept + rest, head + char_class, total


@dataclass(frozen=True, slots=True)
class Finding:
    """A secret at ``text[start:end]``, found by the rule named ``rule``;
    ``keyword`` names its placeholder."""

    start: int
    end: int
    keyword: str
    rule: str


@functools.lru_cache(maxsize=1024)
def _placeholder_keyword(rule_id: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", rule_id.lower())


@dataclass(frozen=True, slots=True)
class SecretRule:
    """One gitleaks rule: its (translated) regex, its lowercase keywords,
    which group holds the secret (0: the first non-empty one that is neither
    named nor repeated), the entropy a secret must exceed (0.0: none) and
    its allowlists."""

    id: str
    pattern: str
    keywords: tuple[str, ...]
    secret_group: int = 0
    entropy: float = 0.0
    allowlists: tuple[Allowlist, ...] = ()
    description: str = ""
    repeated_groups: tuple[int, ...] = ()
    """Groups inside a repeat: they hold their last repetition only, never
    the secret (gitleaks would report that part alone)."""
    min_length: int = 0
    """The fewest characters a match takes: a shorter text is not scanned."""
    anchored: bool = False
    """Every match starts with one of the keywords (proven on the regex's
    parse tree when the file was refreshed): the regex is tried at the
    keywords' places only."""

    @property
    def keyword(self) -> str:
        """The placeholder keyword: the rule id with ``_`` for ``-``."""
        return _placeholder_keyword(self.id)

    def regex(self) -> re.Pattern[str]:
        """The whole regex, compiled (once)."""
        return _compiled(self.pattern)

    def matches(
        self,
        text: str,
        exhaustive: bool = False,
        barriers: Sequence[tuple[int, int]] = (),
        starts: Sequence[int] | None = None,
    ) -> Iterator[tuple[re.Match[str], int]]:
        """Each match in ``text`` as gitleaks finds them (leftmost, not
        overlapping), with where gitleaks' match starts; a match that would
        start inside one of the ``barriers`` (placeholders) is not taken, and
        the scan goes on after that barrier.

        The fast way runs the regex without its leading lazy run
        (``[\\w.-]{0,50}?``, with which a backtracking engine tries 50 starts
        at every place) and finds where the run starts afterwards; for an
        ``anchored`` rule given the keywords' places (``starts``, sorted), it
        tries the regex there only. The same matches, in the same order.
        ``exhaustive`` searches with the whole regex: the reference."""
        gap = None if exhaustive else _split_gap(self.pattern)
        if gap is not None:
            yield from _gap_matches(text, gap, barriers)
            return
        rest, prefix, longest = _split_lazy_prefix(self.pattern)
        fast = not exhaustive
        regex = _compiled(rest) if fast and prefix else self.regex()
        tail = _compiled(f"{prefix}*\\Z") if fast and prefix else None
        seeds = iter(starts) if fast and starts is not None and self.anchored else None
        # Where a keyword is not followed by an assignment sign within reach,
        # the regex cannot match: a cheap look, where the regex would run
        # through the label's run and back at every keyword.
        sign_reach = _sign_reach(rest if prefix else self.pattern) if seeds is not None else None
        gates = _gates(self.pattern) if fast and seeds is None and not prefix else None
        if gates is not None:
            seeds = iter(_gated_starts(text, gates))
        position = 0
        while position <= len(text):
            if seeds is None:
                match = regex.search(text, position)
            else:
                match = None
                for seed in seeds:
                    if seed < position or (
                        sign_reach is not None
                        and _ASSIGNMENT_SIGN.search(text, seed, seed + sign_reach) is None
                    ):
                        continue
                    match = regex.match(text, seed)
                    if match is not None:
                        break
            if match is None:
                return
            barrier = _barrier_at(barriers, match.start())
            if barrier is not None:
                position = barrier
                continue
            start = match.start()
            if tail is not None:
                run = tail.search(text, max(position, start - longest), start)
                start = run.start() if run else start
            yield match, start
            position = match.end() if match.end() > match.start() else match.start() + 1


# The label, spaces and quotes between a keyword and its value in the rules
# gitleaks generates for "KEYWORD ... = value" (its semi-generic template),
# and the first character of every assignment sign the template allows.
_ASSIGNMENT = "(?:[ \\t\\w.\\-]{0,20})[\\s'\"]{0,3}(?:=|>|:{1,3}=|\\|\\||:|=>|\\?=|,)"
_ASSIGNMENT_GAP = 20 + 3
_ASSIGNMENT_SIGN = re.compile(r"[=>:|?,]")


@functools.cache
def _sign_reach(pattern: str) -> int | None:
    """For a regex that starts with a keyword then gitleaks' assignment
    template: how far from where it starts its assignment sign must begin
    (the widest keyword, the template's run, plus one); None for others."""
    found = pattern.find(_ASSIGNMENT)
    if found <= 0 or _depth_at(pattern, found) != 0 or len(_top_level_split(pattern)) > 1:
        return None  # not there, or not on every way the regex can match
    widest = _widest(_compiled(pattern[:found]).pattern)
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
def _gates(pattern: str) -> tuple[_Gate, ...] | None:
    """The gates of ``pattern``, one per top-level alternative, when each
    alternative holds a lazy gap (``kubernetes-secret-yaml``); else None.
    Such a regex, searched, goes through the gap from every place its head
    matches, and through the gaps after it from each of those: the cost of
    their product at every head. Gated (``_gated_starts``), it is tried
    only at the heads that have a match of their rest within reach."""
    gates: list[_Gate] = []
    for alternative in _alternatives(pattern):
        flags = _LEADING_FLAGS.match(alternative)
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
    gap = next((g for g in _ANY_GAP.finditer(body) if _depth_at(body, g.start()) == 0), None)
    if gap is None:
        return _compiled(flags + body)
    head = body[: gap.start()]
    widest = _widest(_compiled(flags + head).pattern) if head else None
    rest = _gate(flags, body[gap.end() :])
    if widest is None or rest is None:
        return None
    return _Gate(_compiled(flags + head), widest + int(gap.group(1) or gap.group(2)), rest)


def _gated_starts(text: str, gates: Sequence[_Gate]) -> Iterator[int]:
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


def _depth_at(body: str, index: int) -> int:
    """How many groups are open at ``body[index]``."""
    depth, i = 0, 0
    while i < index:
        char = body[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(body, i)
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        i += 1
    return depth


def _widest(pattern: str) -> int | None:
    """The most characters ``pattern`` (Python syntax) can match, or None
    when there is no bound."""
    widest = int(_sre_parse.parse(pattern, _FLAGS).getwidth()[1])
    return None if widest >= _sre_parse.MAXREPEAT else widest


def _gap_matches(
    text: str, gap: _Gap, barriers: Sequence[tuple[int, int]]
) -> Iterator[tuple[re.Match[str], int]]:
    """The matches of a rule split at a line gap, found tail first: each
    match of the tail that has a match of the head before it, with at most
    ``gap.breaks`` line breaks between, with where that head starts. Every
    tail so placed is found (a backtracking engine tried from the head
    finds the last or the first one on the line only); and the text is
    scanned once for heads and once for tails, however many heads share a
    line."""
    heads = [(found.start(), found.end()) for found in _compiled(gap.head).finditer(text)]
    if not heads:
        return
    ends = [end for _, end in heads]
    breaks = [found.start() for found in _LINE_BREAK.finditer(text)]
    tail = _compiled(gap.tail)
    position = 0
    while position <= len(text):
        match = tail.search(text, position)
        if match is None:
            return
        start = match.start()
        barrier = _barrier_at(barriers, start)
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


@dataclass(frozen=True, slots=True)
class _AnyOf:
    """Whether any of some regexes is found in a text, for an allowlist: a
    yes or no, never where. Each top-level alternative is its own regex,
    because Python's engine tries one alternation at every place of a text,
    branch by branch, while a lone alternative that starts with a literal is
    looked for by a fast literal search; an alternative anchored at the
    start (``^``, ``\\A``) is tried there only, not at every place."""

    anchored: tuple[re.Pattern[str], ...]
    floating: tuple[re.Pattern[str], ...]

    def found_in(self, text: str) -> bool:
        """True when one of the regexes matches somewhere in ``text``."""
        return any(regex.match(text) for regex in self.anchored) or any(
            regex.search(text) for regex in self.floating
        )

    @property
    def patterns(self) -> tuple[str, ...]:
        """The compiled patterns, anchored ones first."""
        return tuple(regex.pattern for regex in (*self.anchored, *self.floating))


@functools.cache
def _any_of(regexes: tuple[str, ...]) -> _AnyOf:
    """What finds whether any of ``regexes`` is found in a text (see ``_AnyOf``)."""
    anchored: list[re.Pattern[str]] = []
    floating: list[re.Pattern[str]] = []
    for regex in regexes:
        for alternative in _alternatives(regex):
            flags = _LEADING_FLAGS.match(alternative)
            body = alternative[flags.end() :] if flags else alternative
            if body.startswith(("^", "\\A")):
                anchored.append(_compiled(alternative))
            else:
                head = flags.group(0) if flags else ""
                floating.append(_compiled(head + _shortest_lead(body)))
    return _AnyOf(tuple(anchored), tuple(floating))


def _alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of ``pattern``, each with its leading
    flags; a plain group around the whole pattern, or around a whole
    alternative, is opened. Whether a text holds a match of ``a|b`` is
    whether it holds one of ``a`` or of ``b``. A pattern that refers back to
    a group is kept whole (opening a group would renumber it)."""
    flags = _LEADING_FLAGS.match(pattern)
    head = flags.group(0) if flags else ""
    body = pattern[len(head) :]
    if _BACK_REFERENCE.search(body):
        return [pattern]
    found: list[str] = []
    for part in _top_level_split(body):
        inner = _group_contents(part)
        if inner is None:
            found.append(head + part)
        else:
            found.extend(_alternatives(head + inner))
    return found


_BACK_REFERENCE = re.compile(r"\\[1-9]|\(\?P=")
_LEADING_REPEAT = re.compile(
    r"(?P<atom>\[\^?\]?(?:\\.|[^\]\\])*\]|\\[dDwWsS]|\.|[A-Za-z0-9_ <>=:,;\"'-])"
    r"(?:(?P<star>\*)|(?P<plus>\+)|(?P<optional>\?)|\{(?P<low>\d*),\d*\})(?P<mode>[?+]?)"
)


def _shortest_lead(body: str) -> str:
    """``body`` with the repeat of one character it starts with cut to its
    minimum (``[a-z0-9-]*?api``: ``api``; ``[\\w.]+:``: ``[\\w.]:``): a text
    holds a match of ``x{m,n}rest`` exactly when it holds one of
    ``x{m}rest`` (the same text, ``n - m`` characters on), and searched so,
    the regex is not run through one long run from each of its places. A
    possessive repeat, which may take what ``rest`` needs, is kept."""
    while True:
        lead = _LEADING_REPEAT.match(body)
        if lead is None or lead["mode"] == "+" or lead.end() == len(body):
            return body
        if lead["star"] or lead["optional"]:
            low = 0
        elif lead["plus"]:
            low = 1
        else:
            low = int(lead["low"] or 0)
        rest = body[lead.end() :]
        if low == 0:
            body = rest
            continue
        atom = lead["atom"]
        return atom + (f"{{{low}}}" if low > 1 else "") + rest


def _top_level_split(body: str) -> list[str]:
    """``body`` cut at each ``|`` outside groups and classes."""
    parts: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(body, i)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(body[start:i])
            start = i + 1
        i += 1
    parts.append(body[start:])
    return parts


def _group_contents(part: str) -> str | None:
    """What a plain group (``(?:...)`` or ``(...)``) around the whole of
    ``part`` holds, or None when ``part`` is not one such group."""
    if part.startswith("(?:"):
        opening = 3
    elif part.startswith("(") and not part.startswith("(?"):
        opening = 1
    else:
        return None
    depth, i = 0, 0
    while i < len(part):
        char = part[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(part, i)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return part[opening:i] if i == len(part) - 1 else None
        i += 1
    return None


@functools.cache
def _stopword_finder(stopwords: tuple[str, ...]) -> Keywords:
    return Keywords.build(sorted(set(stopwords)))


_GENERIC = "generic"


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
                    places.setdefault(word, []).append(start)
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


class SecretRuleSet:
    """Rules and the keyword pass that picks the ones a text needs.

    Thread-safe; regexes are compiled on first use. ``accelerated=False``
    looks for keywords with the trie regex even when ``ahocorasick_rs`` is
    installed (the two find the same)."""

    __slots__ = ("_by_keyword", "_keywords", "_rule_words", "_shortest", "allowlist", "rules")

    def __init__(
        self,
        rules: Iterable[SecretRule],
        allowlist: Allowlist | None = None,
        accelerated: bool = True,
    ) -> None:
        self.rules: tuple[SecretRule, ...] = tuple(rules)
        self.allowlist = allowlist
        self._shortest = min((rule.min_length for rule in self.rules), default=0)
        words = sorted({word for rule in self.rules for word in rule.keywords})
        self._keywords = Keywords.build(words, accelerated)
        index_of = {word: index for index, word in enumerate(words)}
        by_keyword: dict[int, list[int]] = {}
        for index, rule in enumerate(self.rules):
            for word in rule.keywords:
                by_keyword.setdefault(index_of[word], []).append(index)
        self._rule_words: tuple[tuple[int, ...], ...] = tuple(
            tuple(index_of[word] for word in rule.keywords) for rule in self.rules
        )
        self._by_keyword: Mapping[int, tuple[int, ...]] = {
            word: tuple(indexes) for word, indexes in by_keyword.items()
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], accelerated: bool = True) -> SecretRuleSet:
        """From the contents of ``secret_rules.json``."""
        rules = [
            SecretRule(
                id=rule["id"],
                pattern=rule["regex"],
                keywords=tuple(rule["keywords"]),
                secret_group=rule.get("secret_group", 0),
                entropy=rule.get("entropy", 0.0),
                allowlists=tuple(
                    Allowlist.from_json(entry) for entry in rule.get("allowlists", ())
                ),
                description=rule.get("description", ""),
                repeated_groups=tuple(rule.get("repeated_groups", ())),
                min_length=rule.get("min_length", 0),
                anchored=rule.get("anchored", False),
            )
            for rule in data["rules"]
        ]
        return cls(rules, Allowlist.from_json(data["allowlist"]), accelerated)

    def candidates(self, folded: str) -> list[SecretRule]:
        """The rules a keyword of which occurs in ``folded`` (the text in
        lowercase), in rule order."""
        return [self.rules[index] for index in self._candidates(self._keywords.occurrences(folded))]

    def _candidates(self, places: Mapping[int, list[int]]) -> list[int]:
        if not places:
            return []
        return sorted({rule for word in places for rule in self._by_keyword[word]})

    def find(self, text: str, folded: str | None = None, exhaustive: bool = False) -> list[Finding]:
        """Every secret the rules find in ``text``, by start (see the module
        docstring). ``folded`` is ``text`` in lowercase, when the caller has
        it. ``exhaustive`` checks each rule's keywords with ``in`` and
        searches with its whole regex: the reference the fast way is tested
        against."""
        if len(text) < self._shortest:
            return []
        lowered = text.lower() if folded is None else folded
        places: Mapping[int, list[int]] = {}
        if exhaustive:
            indexes = [
                i for i, rule in enumerate(self.rules) if any(w in lowered for w in rule.keywords)
            ]
        else:
            places = self._keywords.occurrences(lowered)
            indexes = [i for i in self._candidates(places) if len(text) >= self.rules[i].min_length]
        if not indexes:
            return []
        # Keyword places are places in ``text`` when lowering kept every offset.
        seeded = not exhaustive and text.isascii() and len(lowered) == len(text)
        barriers = _placeholder_spans(text)
        findings: list[tuple[int, bool, int, Finding]] = []
        memo = _Memo()
        for order, index in enumerate(indexes):
            rule = self.rules[index]
            starts = None
            if seeded and rule.anchored:
                starts = sorted(
                    {p for word in self._rule_words[index] for p in places.get(word, ())}
                )
            for match, start in rule.matches(text, exhaustive, barriers, starts):
                finding = self._judge(rule, match, start, memo)
                if finding is not None:
                    generic = rule.id.startswith(_GENERIC)
                    findings.append((finding.start, generic, order, finding))
        findings.sort(key=lambda item: item[:3])
        return [item[3] for item in findings]

    def _judge(
        self, rule: SecretRule, match: re.Match[str], start: int, memo: _Memo
    ) -> Finding | None:
        """The finding ``match`` makes, or None when gitleaks would drop it;
        ``memo`` holds the verdicts on this text's findings so far."""
        text = match.string
        end = match.end()
        span = _secret_span(rule, match)
        if span is None:
            # The whole match, less the newlines at its ends (as gitleaks trims).
            while start < end and text[start] == "\n":
                start += 1
            while end > start and text[end - 1] == "\n":
                end -= 1
            span = (start, end)
        secret = text[span[0] : span[1]]
        if not secret:
            return None
        lists = (self.allowlist, *rule.allowlists) if self.allowlist else rule.allowlists
        if not rule.entropy and not lists:
            return Finding(span[0], span[1], rule.keyword, rule.id)
        whole = text[start:end]
        # What the entropy and the allowlists that do not look at the line
        # decide depends on the secret and the match only.
        key: tuple[object, ...] = (id(rule), secret, whole)
        dropped = memo.get(key)
        if dropped is None:
            dropped = memo.keep(
                key,
                len(secret) + len(whole),
                bool(rule.entropy and shannon_entropy(secret) <= rule.entropy)
                or any(a.allows(secret, whole, "") for a in lists if a.target != "line"),
            )
        if dropped:
            return None
        on_line = [allowlist for allowlist in lists if allowlist.target == "line"]
        if on_line:
            line = text[_line_start(text, start) : _line_end(text, end)]
            key = (id(rule), secret, whole, line)
            dropped = memo.get(key)
            if dropped is None:
                dropped = memo.keep(
                    key,
                    len(secret) + len(whole) + len(line),
                    any(allowlist.allows(secret, whole, line) for allowlist in on_line),
                )
            if dropped:
                return None
        return Finding(span[0], span[1], rule.keyword, rule.id)


def _line_start(text: str, start: int) -> int:
    """The start of the line ``start`` is on, at most ``LINE_WINDOW`` before it."""
    floor = max(0, start - LINE_WINDOW)
    newline = text.rfind("\n", floor, start)
    return floor if newline < 0 else newline + 1


def _line_end(text: str, end: int) -> int:
    """The end of the line ``end`` is on, at most ``LINE_WINDOW`` after it."""
    ceiling = min(len(text), end + LINE_WINDOW)
    newline = text.find("\n", end, ceiling)
    return ceiling if newline < 0 else newline


def _secret_span(rule: SecretRule, match: re.Match[str]) -> tuple[int, int] | None:
    """Where the secret of ``match`` is: the rule's secret group, else its
    first non-empty group that is neither named nor repeated; None for the
    whole match."""
    if rule.secret_group:
        start, end = match.span(rule.secret_group)
        return (start, end) if start >= 0 else None
    for group in range(1, (match.re.groups or 0) + 1):
        if group in rule.repeated_groups or group in match.re.groupindex.values():
            continue
        start, end = match.span(group)
        if end > start:
            return start, end
    return None


def _placeholder_spans(text: str) -> list[tuple[int, int]]:
    if "<redacted:" not in text:
        return []
    return [match.span() for match in _PLACEHOLDER.finditer(text)]


def _barrier_at(spans: Sequence[tuple[int, int]], position: int) -> int | None:
    """The end of the span ``position`` is inside (after its first character),
    if any. ``spans`` are sorted and do not overlap."""
    index = bisect.bisect_left(spans, (position,)) - 1
    if index >= 0 and position < spans[index][1]:
        return spans[index][1]
    return None


# Read when this module is imported: a fake filesystem (replay's pyfakefs)
# may be in place by the time the first Redactor needs the rules.
_RULES_TEXT = resources.files(__package__).joinpath(RULES_FILE).read_text("utf-8")


@functools.lru_cache(maxsize=4)
def default_rule_set(accelerated: bool = True) -> SecretRuleSet:
    """The vendored gitleaks rules (``secret_rules.json``), built once."""
    return SecretRuleSet.from_json(json.loads(_RULES_TEXT), accelerated)


# --- high-entropy values in config syntax --------------------------------------------

_TOKEN_CHARS = r"A-Za-z0-9+/=_\-.~"
_LONG_TOKEN = re.compile(
    # Each run of token characters is tried once, from its start.
    rf"(?<![{_TOKEN_CHARS}])[{_TOKEN_CHARS}]{{20,1024}}(?![{_TOKEN_CHARS}])",
    re.ASCII,
)
# A value after "=" or ":", all there is until the end of the line, the
# member or a comment. The scan starts at separators only: most text has few.
# On Python 3.11+ the spaces, the quote and the value are possessive (``*+``,
# ``?+``, ``}+``): giving any of them back can never make a match (a value
# holds no space or quote, and one cut short is followed by a token
# character), and prose, where a colon is followed by a short word, fails
# each colon about twice as fast without the backtracking. Python 3.10 has
# no possessive quantifiers: the same regex without them, the same matches.
_POSSESSIVE = "+" if sys.version_info >= (3, 11) else ""
_SEPARATED_VALUE = re.compile(
    rf"[=:][ \t]*{_POSSESSIVE}(?P<quote>[\"']?{_POSSESSIVE})"
    rf"(?P<value>[{_TOKEN_CHARS}]{{20,1024}}{_POSSESSIVE})"
    rf"(?![{_TOKEN_CHARS}])(?P=quote)[ \t]*(?=[,}}\]#;\r\n]|\Z)",
    re.ASCII,
)
# What comes before the separator: a line of .env, INI, TOML or YAML
# (indented, "export ", a YAML "- "), or a member of an inline JSON or YAML
# object (after "{" or ","), then the name.
_NAME_BEFORE = re.compile(
    r"(?:^[ \t]*(?:export[ \t]+|-[ \t]+)?|[{,][ \t]*)"
    r"(?P<quote>[\"']?)(?P<label>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P=quote)[ \t]*\Z",
    re.ASCII | re.MULTILINE,
)
_LONGEST_NAME = 200
"""How far before a separator its line start and name are looked for."""
# Words of a name that say what the value is, and that it is not a secret.
_NOT_SECRET_WORDS = frozenset(
    {
        *("id", "ids", "uuid", "guid", "hash", "digest", "checksum", "integrity", "sha", "md5"),
        *("commit", "revision", "rev", "etag", "version", "ref"),
        *("url", "uri", "path", "file", "dir", "name", "image", "tag"),
    }
)
_NAME_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_NOT_SECRET_VALUE = re.compile(
    r"[0-9a-fA-F]+"  # digests, git SHAs
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # UUIDs
    r"|(?i:sha(?:1|224|256|384|512)|md5|blake2[bs]?)[-_=].*"  # lock files' integrity
    r"|[~.]{0,2}/.*"  # paths
    r"|[A-Za-z0-9_\-]+(?:\.[A-Za-z][A-Za-z0-9_\-]*)+"  # file and host names, dotted.names
    r"|[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_.\-]+)+\.[A-Za-z]{1,5}"  # relative paths to files
    r"|v?[0-9]+(?:\.[0-9]+)+(?:[-+.][A-Za-z0-9.\-+]*)?"  # versions
    r"|[0-9.+\-_:]+",  # dates, numbers
    re.ASCII,
)
_CHARACTER_CLASSES = (re.compile("[a-z]"), re.compile("[A-Z]"), re.compile("[0-9]"))
_CHUNK = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_CONSONANTS = re.compile("[b-df-hj-np-tv-xz]{4}")
_SEPARATORS = re.compile(r"[_\-.]")
_ONE_CASE_PART = re.compile("[A-Z0-9]{1,8}|[a-z0-9]{1,8}")
ENTROPY_THRESHOLD = 3.7
"""Bits per character a value needs (it has at most ``log2(len)``): random
base62 of 20 characters has about 4.1, of 40 about 5.0; hex at most 4.0."""
ENTROPY_MIN_LENGTH = 20


def _names_no_secret(name: str) -> bool:
    words = [word.lower() for word in _NAME_WORD.findall(name)]
    return any(word in _NOT_SECRET_WORDS or word.startswith("sha") for word in words)


def _looks_random(value: str) -> bool:
    """True when ``value`` looks like a key, not like an identifier, a path,
    a digest or encoded text."""
    classes = sum(1 for chars in _CHARACTER_CLASSES if chars.search(value))
    if classes < 2 or shannon_entropy(value) < ENTROPY_THRESHOLD:
        return False
    if _NOT_SECRET_VALUE.fullmatch(value):
        return False
    # Identifiers are mostly words, or short parts of one case between
    # separators (TLS_ECDHE_RSA_WITH_AES_128); random text is neither.
    words = sum(len(chunk) for chunk in _CHUNK.findall(value) if _pronounceable(chunk))
    if words >= len(value) / 2:
        return False
    parts = _SEPARATORS.split(value)
    if len(parts) >= 3 and all(_ONE_CASE_PART.fullmatch(part) for part in parts):
        return False
    return not _is_base64_of_text(value)


def _pronounceable(chunk: str) -> bool:
    """A run of 4+ letters with vowels as words have them, and no 4 consonants in a row."""
    if len(chunk) < 4:
        return False
    lowered = chunk.lower()
    vowels = sum(char in "aeiouy" for char in lowered)
    return 0.25 <= vowels / len(lowered) <= 0.65 and not _CONSONANTS.search(lowered)


def _is_base64_of_text(value: str) -> bool:
    """True when ``value`` decodes (base64, either alphabet) to printable text."""
    stripped = value.rstrip("=")
    if len(stripped) % 4 == 1:
        return False
    padded = stripped + "=" * (-len(stripped) % 4)
    for altchars in (b"+/", b"-_"):
        try:
            decoded = base64.b64decode(padded, altchars=altchars, validate=True)
            text = decoded.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if text and all(char.isprintable() or char in "\t\n\r" for char in text):
            return True
    return False


_LONGEST_VALUE = 1024
"""The longest value ``_SEPARATED_VALUE`` takes (its ``{20,1024}``)."""
_OVERLONG_RUN = re.compile(rf"[{_TOKEN_CHARS}]{{{_LONGEST_VALUE + 2},}}{_POSSESSIVE}", re.ASCII)


def _separated_values(text: str) -> Iterator[re.Match[str]]:
    """``_SEPARATED_VALUE.finditer(text)``, without trying the separators
    that cannot start a match: a value is a whole run of token characters,
    so an ``=`` inside a run, farther than ``_LONGEST_VALUE`` from its end,
    starts none. Tried there (a long line of ``=``, ``a=a=a=...``), each
    would scan ``_LONGEST_VALUE`` characters before failing."""
    position = 0
    for run in _OVERLONG_RUN.finditer(text):
        # Up to the run's start, where a match found may only look complete
        # because the search stopped there: each is checked on the whole text.
        while True:
            match = _SEPARATED_VALUE.search(text, position, run.start())
            if match is None:
                break
            real = _SEPARATED_VALUE.match(text, match.start())
            if real is not None and real.end() <= run.start():
                yield real
                position = max(real.end(), real.start() + 1)
            else:
                position = match.start() + 1
        position = max(position, run.end() - _LONGEST_VALUE - 1)
    yield from _SEPARATED_VALUE.finditer(text, position)


def high_entropy_assignments(text: str, everywhere: bool = False) -> list[Finding]:
    """Long (``ENTROPY_MIN_LENGTH``+) high-entropy values given to a key-like
    name in config syntax (``KEY=value``, ``key: value``, ``"key": "value"``,
    ``key = "value"``), by start: what no rule names. Left visible: names
    that say what the value is (``commit``, ``sha256``, ``integrity``,
    ``request_id``, ``url``, ``path``...), hex (digests, git SHAs), UUIDs,
    ``sha512-...`` integrity strings, paths, dotted names, versions, base64
    of printable text, identifiers made of words, and values of one
    character class. ``everywhere`` takes such values wherever they stand,
    in prose too."""
    findings: list[Finding] = []
    if len(text) < ENTROPY_MIN_LENGTH:
        return findings
    # A text packed with values repeats them: each is judged once.
    memo = _Memo()

    def looks_random(value: str) -> bool:
        known = memo.get((value,))
        if known is None:
            known = memo.keep((value,), len(value), _looks_random(value))
        return known

    if everywhere:
        for token in _LONG_TOKEN.finditer(text):
            if looks_random(token[0]):
                findings.append(Finding(*token.span(), "high_entropy", "high-entropy"))
        return findings
    if "=" not in text and ":" not in text:
        return findings
    for match in _separated_values(text):
        if not looks_random(match["value"]):
            continue
        separator = match.start()
        name = _NAME_BEFORE.search(text, max(0, separator - _LONGEST_NAME), separator)
        if name is not None and not _names_no_secret(name["label"]):
            findings.append(Finding(*match.span("value"), "high_entropy", "high-entropy"))
    return findings
