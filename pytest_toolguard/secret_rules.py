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

The parts live beside this module, at the same layer: ``secret_regex``
(Go's syntax translated, every repeat bounded, a regex's structure),
``secret_scan`` (the keyword pass and the scans that try a regex at few
places), ``secret_allowlists`` (what keeps a finding visible) and
``secret_entropy`` (high-entropy values in config syntax). This module
loads the rule set and runs it; its public names are the ones callers use.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .secret_allowlists import LINE_WINDOW, Allowlist
from .secret_entropy import (
    shannon_entropy,
)
from .secret_regex import (
    compile_bounded,
    split_gap,
    split_lazy_prefix,
)
from .secret_scan import (
    ASSIGNMENT_SIGN,
    GENERIC_RULE,
    Finding,
    Keywords,
    VerdictMemo,
    assignment_sign_reach,
    barrier_at,
    gap_matches,
    gated_starts,
    gates_of,
)

RULES_FILE = "secret_rules.json"


"""The vendored rules, beside this module."""


_PLACEHOLDER = re.compile(r"<redacted:[a-z0-9_]+>")


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
        return compile_bounded(self.pattern)

    def matches(
        self,
        text: str,
        exhaustive: bool = False,
        barriers: Sequence[tuple[int, int]] = (),
        starts: Sequence[int] | None = None,
        shared: dict[str, list[Any]] | None = None,
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
        ``exhaustive`` searches with the whole regex: the reference.
        ``shared``: a dict the scans of one text share (``find`` passes one)."""
        gap = None if exhaustive else split_gap(self.pattern)
        if gap is not None:
            yield from gap_matches(text, gap, barriers, shared)
            return
        rest, prefix, longest = split_lazy_prefix(self.pattern)
        fast = not exhaustive
        regex = compile_bounded(rest) if fast and prefix else self.regex()
        # The lazy run is one character class: where it starts is read
        # backwards from the rest's match, in the text reversed (made at the
        # first match). A search for a run ending there would try every
        # place of its window, each up to the end: the square of the window.
        run_back = compile_bounded(f"{prefix}*") if fast and prefix else None
        backwards = ""
        seeds = iter(starts) if fast and starts is not None and self.anchored else None
        # Where a keyword is not followed by an assignment sign within reach,
        # the regex cannot match: a cheap look, where the regex would run
        # through the label's run and back at every keyword.
        sign_reach = (
            assignment_sign_reach(rest if prefix else self.pattern) if seeds is not None else None
        )
        gates = gates_of(self.pattern) if fast and seeds is None and not prefix else None
        if gates is not None:
            seeds = iter(gated_starts(text, gates))
        position = 0
        while position <= len(text):
            if seeds is None:
                match = regex.search(text, position)
            else:
                match = None
                for seed in seeds:
                    if seed < position or (
                        sign_reach is not None
                        and ASSIGNMENT_SIGN.search(text, seed, seed + sign_reach) is None
                    ):
                        continue
                    match = regex.match(text, seed)
                    if match is not None:
                        break
            if match is None:
                return
            barrier = barrier_at(barriers, match.start())
            if barrier is not None:
                position = barrier
                continue
            start = match.start()
            if run_back is not None:
                backwards = backwards or text[::-1]
                size = len(text)
                floor = max(position, start - longest)
                run = run_back.match(backwards, size - start, size - floor)
                start -= run.end() - (size - start) if run else 0
            yield match, start
            position = match.end() if match.end() > match.start() else match.start() + 1


class SecretRuleSet:
    """Rules and the keyword pass that picks the ones a text needs.

    Thread-safe; regexes are compiled on first use. ``accelerated=False``
    looks for keywords with the trie regex even when ``ahocorasick_rs`` is
    installed (the two find the same)."""

    __slots__ = (
        "_by_keyword",
        "_keywords",
        "_maskable",
        "_rule_words",
        "_shortest",
        "allowlist",
        "rules",
    )

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
        # A keyword place strictly inside a placeholder can only seed a match
        # the placeholder bars: such places are masked before the keyword
        # pass, unless a keyword could run into a placeholder from outside.
        self._maskable = not any("<r" in word for word in words)
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

    def _candidates(self, words: Iterable[int]) -> list[int]:
        """The rules one of whose keywords is among ``words`` (indexes)."""
        return sorted({rule for word in words for rule in self._by_keyword[word]})

    def _keywords_outside(
        self, lowered: str, barriers: Sequence[tuple[int, int]]
    ) -> tuple[dict[int, list[int]], set[int]]:
        """Where each keyword starts in ``lowered`` outside the placeholders
        (``barriers``), and the keywords found inside them. A rule whose
        keyword is only inside a placeholder is still a candidate (a keyword
        gates a rule, wherever the rule's match lies), but an anchored rule
        is not tried where a placeholder bars its match."""
        pieces: list[str] = []
        copied = 0
        for start, end in barriers:
            # The placeholder's ``<`` stays: a match may start there.
            pieces.append(lowered[copied : start + 1])
            pieces.append("\0" * (end - start - 1))
            copied = end
        pieces.append(lowered[copied:])
        inner = {lowered[start + 1 : end] for start, end in barriers}
        inside = set(self._keywords.occurrences("\0".join(inner)))
        return self._keywords.occurrences("".join(pieces)), inside

    def find(
        self,
        text: str,
        folded: str | None = None,
        exhaustive: bool = False,
        *,
        kept: Sequence[tuple[int, int]] = (),
        others: Sequence[int] = (),
    ) -> list[Finding]:
        """Every secret the rules find in ``text``, by start (see the module
        docstring). ``folded`` is ``text`` in lowercase, when the caller has
        it. ``exhaustive`` checks each rule's keywords with ``in`` and
        searches with its whole regex: the reference the fast way is tested
        against.

        ``kept``: spans (sorted) the caller keeps as they are when it
        replaces findings, its placeholders; ``others``: where the caller's
        other findings start. A finding whose secret is exactly a kept span
        changes nothing when replaced, unless another finding starts inside
        that span (the merged span takes the first one's keyword): such
        findings are left out, unjudged. A text redacted once holds one per
        placeholder for a rule whose secret may be any text."""
        if len(text) < self._shortest:
            return []
        lowered = text.lower() if folded is None else folded
        places: Mapping[int, list[int]] = {}
        if exhaustive:
            indexes = [
                i for i, rule in enumerate(self.rules) if any(w in lowered for w in rule.keywords)
            ]
        # Keyword places are places in ``text`` when lowering kept every offset.
        seeded = not exhaustive and text.isascii() and len(lowered) == len(text)
        barriers = _placeholder_spans(text)
        if not exhaustive:
            if seeded and barriers and self._maskable:
                places, inside = self._keywords_outside(lowered, barriers)
            else:
                places, inside = self._keywords.occurrences(lowered), set()
            candidates = self._candidates(places.keys() | inside)
            indexes = [i for i in candidates if len(text) >= self.rules[i].min_length]
        if not indexes:
            return []
        findings: list[tuple[int, bool, int, Finding]] = []
        memo = VerdictMemo()
        shared: dict[str, list[Any]] = {}  # what scans of this text share (``gap_matches``)
        kept_ends = dict(kept)
        unchanging: list[tuple[int, int, Any]] = []  # (start, end, how to judge it)
        for order, index in enumerate(indexes):
            rule = self.rules[index]
            starts = None
            if seeded and rule.anchored:
                starts = sorted(
                    {p for word in self._rule_words[index] for p in places.get(word, ())}
                )
            lists = (self.allowlist, *rule.allowlists) if self.allowlist else rule.allowlists
            # Those that hold on no line of this text are not looked at again per match.
            on_line = tuple(
                allowlist
                for allowlist in lists
                if allowlist.target == "line" and not allowlist.holds_on_no_part_of(text)
            )
            generic = rule.id.startswith(GENERIC_RULE)
            for match, start in rule.matches(text, exhaustive, barriers, starts, shared):
                if kept_ends:
                    span = _secret_span(rule, match)
                    if span is not None and kept_ends.get(span[0]) == span[1]:
                        judging = (rule, match, start, lists, on_line, generic, order)
                        unchanging.append((*span, judging))
                        continue
                finding = self._judge(rule, match, start, memo, lists, on_line)
                if finding is not None:
                    findings.append((finding.start, generic, order, finding))
        if unchanging:
            # Judged only when another finding starts inside its span.
            taken = sorted([item[0] for item in findings] + [*others] + [u[0] for u in unchanging])
            for begin, end, (rule, match, start, lists, on_line, generic, order) in unchanging:
                if bisect.bisect_left(taken, end) - bisect.bisect_left(taken, begin) > 1:
                    finding = self._judge(rule, match, start, memo, lists, on_line)
                    if finding is not None:
                        findings.append((finding.start, generic, order, finding))
        findings.sort(key=lambda item: item[:3])
        return [item[3] for item in findings]

    def _judge(
        self,
        rule: SecretRule,
        match: re.Match[str],
        start: int,
        memo: VerdictMemo,
        lists: tuple[Allowlist, ...],
        on_line: tuple[Allowlist, ...],
    ) -> Finding | None:
        """The finding ``match`` makes, or None when gitleaks would drop it;
        ``memo`` holds the verdicts on this text's findings so far; ``lists``
        are the allowlists that apply to the rule, ``on_line`` those of them
        that look at the line."""
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
    for group in _secret_groups(match.re, rule.repeated_groups):
        start, end = match.span(group)
        if end > start:
            return start, end
    return None


@functools.lru_cache(maxsize=1024)
def _secret_groups(regex: re.Pattern[str], repeated: tuple[int, ...]) -> tuple[int, ...]:
    """The groups of ``regex`` that may hold a secret, in order: neither
    named nor ``repeated``."""
    named = set(regex.groupindex.values())
    return tuple(
        group
        for group in range(1, regex.groups + 1)
        if group not in repeated and group not in named
    )


def _placeholder_spans(text: str) -> list[tuple[int, int]]:
    if "<redacted:" not in text:
        return []
    return [match.span() for match in _PLACEHOLDER.finditer(text)]


# Read when this module is imported: a fake filesystem (replay's pyfakefs)
# may be in place by the time the first Redactor needs the rules.
_RULES_TEXT = resources.files(__package__).joinpath(RULES_FILE).read_text("utf-8")


@functools.lru_cache(maxsize=4)
def default_rule_set(accelerated: bool = True) -> SecretRuleSet:
    """The vendored gitleaks rules (``secret_rules.json``), built once."""
    return SecretRuleSet.from_json(json.loads(_RULES_TEXT), accelerated)
