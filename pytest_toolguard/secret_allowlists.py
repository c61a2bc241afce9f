"""Allowlists of the secret rules: what keeps a finding visible (a
regex found in the secret, the match or its line, or a stopword).

Each allowlist regex is searched one top-level alternative at a time (a
literal prefix gets the engine's fast search, an anchored alternative is
tried at the start only), with a leading repeat cut to its minimum for a
yes-or-no search; stopwords are found in one automaton pass. A line is
looked at within ``LINE_WINDOW`` characters of the match.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .secret_regex import LEADING_FLAGS, alternatives_of, compile_bounded, reads_around
from .secret_scan import Keywords

LINE_WINDOW = 1024


"""How far around a match its "line" reaches for an allowlist that looks at
the line: a whole line, looked at again for each match on it, would cost
the square of its length. A window can only make fewer allowlists hold."""


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

    def holds_on_no_part_of(self, text: str) -> bool:
        """True when this allowlist holds for no secret, match or line
        taken from ``text``: it never holds here, or its regexes, none of
        which reads around what it looks at (``reads_around``), are found
        nowhere in the whole text and no stopword could hold it alone. One
        search of the text, where a text packed with matches would search
        each match's line. False when unsure."""
        if self.condition == "and" and self.scoped:
            return True
        if not self.regexes:
            return not self.stopwords
        if self.stopwords and self.condition != "and":
            return False
        found = _any_of(self.regexes)
        return not found.reads_around and not found.found_in(text)

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
    reads_around: bool = True
    """Whether one of the regexes reads around what it looks at (see
    ``secret_regex.reads_around``)."""

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
        for alternative in alternatives_of(regex):
            flags = LEADING_FLAGS.match(alternative)
            body = alternative[flags.end() :] if flags else alternative
            if body.startswith(("^", "\\A")):
                anchored.append(compile_bounded(alternative))
            else:
                head = flags.group(0) if flags else ""
                floating.append(compile_bounded(head + _shortest_lead(body)))
    around = bool(anchored) or any(reads_around(regex.pattern) for regex in floating)
    return _AnyOf(tuple(anchored), tuple(floating), around)


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


@functools.cache
def _stopword_finder(stopwords: tuple[str, ...]) -> Keywords:
    return Keywords.build(sorted(set(stopwords)))
