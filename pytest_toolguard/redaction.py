"""Redaction: secrets never reach the audit log or a cassette.

A ``Redactor`` removes secrets from the arguments and results of tool calls
before anything is written, by these rules:

* **By key.** In a mapping, the value of a sensitive key is replaced whole,
  whatever its type, by ``<redacted:KEYWORD>`` (``{"password": 1234}`` ->
  ``{"password": "<redacted:password>"}``). A key is split into lowercase
  words at non-alphanumerics and camelCase boundaries (``X-Api-Key`` ->
  ``x api key``, ``sessionToken`` -> ``session token``) and is sensitive when
  a phrase such as ``api key``, ``client secret`` or ``set cookie`` occurs in
  it, when a word such as ``password``, ``secret``, ``authorization``,
  ``cookie`` or ``credentials`` occurs anywhere, or when it *ends* in
  ``token``, ``auth`` or ``jwt``. So ``access_token`` and ``basicAuth`` are
  sensitive while ``max_tokens``, ``token_count``, ``tokens`` and ``author``
  are not.
* **By value pattern**, inside every string, also under harmless keys:
  ``Bearer``/``Basic`` credentials, AWS access key ids and secret keys,
  GitHub and Slack tokens, Slack webhooks, JWTs, PEM private key blocks,
  the password in ``scheme://user:PASSWORD@host`` (user and host stay), and
  ``label=value`` / ``label: value`` assignments whose label is a sensitive
  key by the rule above. Each is replaced by a stable placeholder such as
  ``<redacted:jwt>`` or ``<redacted:aws_access_key>``.
* **By a maintained rule set**, after the patterns above: the ~220 rules of
  gitleaks' default configuration (``secret_rules.py``), each run only where
  one of its keywords occurs, for the providers' key formats the patterns
  above do not know (``<redacted:stripe_access_token>``: the rule id with
  ``_``). Overlapping matches merge into one placeholder.
* **By entropy**, in config syntax (``.env``, YAML, JSON, TOML, INI): a long
  high-entropy value given to any key-like name (``<redacted:high_entropy>``);
  ``entropy="everywhere"`` also takes such values standing alone in prose,
  ``entropy="off"`` none.

A JSON document whose strings hold escapes (``"a\\nAKIA..."``) has its
strings redacted as decoded, in their escaped form, before the text itself:
an escape glues a secret to a letter, and no ``\\b`` pattern matches there.

Guarantees: the input is never modified; the output is a deep copy made of
dicts, lists, tuples, strings, numbers, booleans and ``None`` (any other
object is redacted as ``str(obj)``); redaction is idempotent
(``redact(redact(x)) == redact(x)``); git SHAs, UUIDs, sha256 digests and
ordinary words are left alone. Nesting deeper than ``MAX_DEPTH`` (a cycle, for
instance) is replaced by ``<redacted:depth_limit>`` rather than overflowing
the stack.

Limits, by design: free text is redacted by pattern, so a secret with no
recognisable shape and no sensitive label (``the password is hunter2``) is
not found, and an unquoted value ends at the first space, so only the first
word of ``password: correct horse`` is removed. Tools that take secrets
should name them with sensitive keys, or add ``extra_keys`` /
``extra_patterns``.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .secret_entropy import high_entropy_assignments
from .secret_regex import bounded_repeats
from .secret_rules import SecretRuleSet, default_rule_set
from .secret_scan import Finding, Keywords

MAX_DEPTH = 64
"""Containers nested deeper than this are replaced by ``<redacted:depth_limit>``."""

ExtraPattern = str | re.Pattern[str] | tuple[str, str | re.Pattern[str]]
"""An extra value pattern: a regex (placeholder ``<redacted:pattern>``) or a
``(keyword, regex)`` pair (placeholder ``<redacted:keyword>``). When the regex
has a group named ``secret`` only that group is replaced."""

EntropyScope = Literal["off", "config", "everywhere"]
"""Where ``Redactor`` looks for high-entropy values no rule names: nowhere,
in config syntax only (``KEY=value``, ``key: value``, ``"key": "value"``),
or also standing alone in prose."""

MAX_PASSES = 4
"""``redact_text`` repeats its pass until the text stops changing (each pass
that changes it only replaces text outside placeholders), at most this often."""

_PLACEHOLDER_PREFIX = "<redacted:"
_PLACEHOLDER = re.compile(r"<redacted:[a-z0-9_]{1,64}>")


def placeholder(keyword: str) -> str:
    """The text that replaces a secret: ``<redacted:KEYWORD>``."""
    return f"{_PLACEHOLDER_PREFIX}{keyword}>"


# --- keys -------------------------------------------------------------------

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
"""Words of a key: ``XMLHttpToken`` -> XML, Http, Token; ``api_key2`` -> api, key, 2."""

# Phrases that make a key sensitive wherever they occur, most specific first;
# the placeholder keyword is the phrase joined by "_".
_PHRASES: tuple[tuple[str, ...], ...] = (
    ("client", "secret"),
    ("secret", "access", "key"),
    ("secret", "key"),
    ("private", "key"),
    ("api", "key"),
    ("access", "key"),
    ("session", "token"),
    ("access", "token"),
    ("refresh", "token"),
    ("set", "cookie"),
)
_PHRASE_SETS = tuple((phrase, frozenset(phrase)) for phrase in _PHRASES)
# The same phrases written as one word (``apikey``, ``clientSecret`` is split anyway).
_JOINED_PHRASES: Mapping[str, str] = {"".join(p): "_".join(p) for p in _PHRASES}

# Words that make a key sensitive anywhere in it, mapped to the placeholder keyword.
_ANYWHERE_WORDS: Mapping[str, str] = {
    "password": "password",
    "passwords": "password",
    "passwd": "password",
    "pwd": "password",
    "passphrase": "passphrase",
    "secret": "secret",
    "secrets": "secret",
    "authorization": "authorization",
    "cookie": "cookie",
    "cookies": "cookie",
    "credential": "credentials",
    "credentials": "credentials",
}

# Words that make a key sensitive only as its last word: ``access_token`` yes,
# ``token_count`` no; ``basic_auth`` yes, ``auth_method`` no.
_LAST_WORDS: Mapping[str, str] = {"token": "token", "auth": "auth", "jwt": "jwt"}


def _words(key: str) -> tuple[str, ...]:
    return tuple(word.lower() for word in _WORD.findall(key))


def _contains_phrase(words: tuple[str, ...], phrase: tuple[str, ...]) -> bool:
    size = len(phrase)
    return any(words[i : i + size] == phrase for i in range(len(words) - size + 1))


# --- value patterns ----------------------------------------------------------

FAMILY_LIMIT = 8192
"""The most times one repeat of a value pattern runs (see
``secret_rules.SCAN_LIMIT``, the same for the rules): a token, a JWT part,
a URL's password is found when it is at most this long."""

_PEM_BEGIN = re.compile(r"-----BEGIN (?P<kind>[A-Z0-9 ]{0,64})PRIVATE KEY(?: BLOCK)?-----")


def _redact_pem_blocks(text: str) -> str:
    """``text`` with each private key block replaced, from its BEGIN line up
    to the matching END line; a block cut short (a truncated preview) is
    redacted to the end of the text rather than leaking its body. Found with
    ``str.find``: a lazy regex run from each BEGIN to a missing END would
    cost the square of the text."""
    pieces: list[str] = []
    copied = 0
    begin = _PEM_BEGIN.search(text)
    while begin is not None:
        close = f"-----END {begin['kind']}PRIVATE KEY"
        end = len(text)
        found = text.find(close, begin.end())
        while found >= 0:
            after = found + len(close)
            for suffix in ("-----", " BLOCK-----"):
                if text.startswith(suffix, after):
                    end = after + len(suffix)
                    break
            else:
                found = text.find(close, found + 1)
                continue
            break
        pieces.append(text[copied : begin.start()])
        pieces.append(placeholder("private_key"))
        copied = end
        begin = _PEM_BEGIN.search(text, end)
    pieces.append(text[copied:])
    return "".join(pieces)


@dataclass(frozen=True, slots=True)
class _Clue:
    """What every match of a family contains, so a text without it is not
    scanned for that family: one of ``literals`` (looked for in the text as
    written, or in ``_fold_case(text)`` when ``folded``) and, when ``needs``
    is not empty, one of its characters (a fast single-character search that
    spares the slower literal search in most texts)."""

    literals: tuple[str, ...]
    folded: bool = False
    needs: str = ""


@dataclass(frozen=True, slots=True)
class _Family:
    """One kind of secret: where it may start, its regex, and what replaces it."""

    name: str  # the outer group name in the combined regex
    keyword: str  # placeholder keyword; "" when it depends on the match
    lead: str  # "" or "\\b" or a one-character lookbehind: what must precede it
    body: str
    secret_group: str | None  # only this group is replaced; None: the whole match
    clue: _Clue
    # "" or a lookahead that every match satisfies, tried first because it
    # fails faster than the body where the family does not match.
    guard: str = ""

    def regex(self, after_placeholder: bool, guarded: bool = True) -> str:
        """The family's regex, with its outer group. ``after_placeholder``: the
        text just before is a placeholder, so no lookbehind applies, and a word
        boundary means a word character next. ``guarded=False`` leaves out the
        guard, which changes no match, only the speed."""
        lead = self.lead
        if after_placeholder:
            lead = r"(?=\w)" if lead == r"\b" else ""
        guard = self.guard if guarded else ""
        return f"(?P<{self.name}>{lead}{guard}{self.body})"


# An assignment's label names a secret only when it holds one of these (any case).
_LABEL_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "auth", "cookie", "credential", "jwt")

# Rules that keep redaction idempotent (``tests/test_redaction.py`` fuzzes it):
# right after a replacement the text is matched as a second pass would see it,
# after the placeholder's ">" (``_Family.regex``); a family that can
# meet its own placeholder matches it and replaces it by itself (``assign``,
# ``url``); and no family's end depends on a character after it that another
# family's placeholder could replace (so ``basic`` has no trailing lookahead).
#
# Each family's clue is a necessary condition for its regex to match anywhere
# (``test_redaction.py`` checks the fast path against a scan by every family):
# change a regex, change its clue.
_FAMILIES: tuple[_Family, ...] = (
    _Family(
        "aws_secret",
        "aws_secret_key",
        r"\b",
        r"(?i:aws_?secret_?(?:access_?)?key|secret_?access_?key)[\"']?\s*[:=]\s*[\"']?"
        r"(?P<aws_secret_s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        "aws_secret_s",
        # Its label holds "secret" in some case, then ":" or "=".
        _Clue(("secret",), folded=True, needs=":="),
    ),
    # A label that may name a secret, then its value. The label is checked by
    # the key rules in Python: ``token_count=5`` is matched here and declined.
    _Family(
        "assign",
        "",
        # The label is a whole identifier run (never its tail, which keeps this
        # linear) that contains a trigger word.
        r"(?<![A-Za-z0-9_.-])",
        r"(?=[A-Za-z0-9_.-]{0,64}?(?i:" + "|".join(_LABEL_TRIGGERS) + "))"
        r"(?P<assign_label>[A-Za-z0-9_.-]{1,128})"
        # The value is matched by ``_ASSIGN_VALUE`` once the label is found
        # sensitive: a harmless label (``max_tokens=...``) never has its value
        # scanned, and labels declined one after another cost no more than
        # themselves.
        r"(?P<assign_sep>[\"']?\s*(?:=>|[:=])\s*)",
        None,  # the value, matched apart (``Redactor._assigned``)
        # The trigger word lies inside the ASCII label (the separator after the
        # label cannot continue it), then ":" or "=" ("=>" holds "=").
        _Clue(_LABEL_TRIGGERS, folded=True, needs=":="),
        # An identifier then a separator: rules out most places (every word
        # start is one) before the trigger words are looked for.
        r"(?=[A-Za-z0-9_.-]{1,128}[\"']?\s*(?:=>|[:=]))",
    ),
    _Family(
        "github",
        "github_token",
        r"\b",
        r"(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255})\b",
        None,
        # Its prefixes, case and all.
        _Clue(("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), needs="_"),
    ),
    _Family(
        "slack_webhook",
        "slack_webhook",
        "",
        r"https://hooks\.slack\.com/(?:services|workflows)/"
        r"(?P<slack_webhook_s>[A-Za-z0-9_]+/[A-Za-z0-9_]+/[A-Za-z0-9_]+)",
        "slack_webhook_s",
        # Its host and the slash after it, as written.
        _Clue(("hooks.slack.com/",)),
    ),
    _Family(
        "slack",
        "slack_token",
        r"\b",
        r"(?:xox[abeprs]|xapp)-[A-Za-z0-9-]{10,}",
        None,
        # Its prefixes, as written, and the "-" after them.
        _Clue(("xox", "xapp-"), needs="-"),
    ),
    _Family(
        "jwt",
        "jwt",
        # Never inside a run of its own characters ("-eyJ" included): a try
        # from each "eyJ" of one long run would scan the rest of it each time.
        r"(?<![A-Za-z0-9_-])",
        r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        None,
        # Base64 of '{"' as written, and the dots between its three parts.
        _Clue(("eyJ",), needs="."),
    ),
    _Family(
        "aws_key",
        "aws_access_key",
        r"\b",
        r"(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        None,
        # Its prefixes, as written.
        _Clue(("AKIA", "ASIA")),
    ),
    _Family(
        "url",
        "url_password",
        r"(?<![A-Za-z0-9+.-])",
        r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/@\"'<>]{0,256}:"
        # The password may be a placeholder already: it is replaced by itself.
        r"(?P<url_s><redacted:[a-z0-9_]+>|[^\s/@\"'<>]{1,256})@",
        "url_s",
        # The "://" after the scheme, and the "@" after the password.
        _Clue(("://",), needs="@"),
    ),
    _Family(
        "bearer",
        "bearer",
        r"\b",
        # At least 8 characters with a digit or symbol: "Bearer of bad news" stays.
        r"(?i:bearer)\s+(?P<bearer_s>(?=[A-Za-z]*[0-9._~+/-])[A-Za-z0-9._~+/-]{8,}=*)",
        "bearer_s",
        # The scheme's name in some case.
        _Clue(("bearer",), folded=True),
    ),
    _Family(
        "basic",
        "basic_auth",
        r"\b",
        r"(?i:basic)\s+(?P<basic_s>[A-Za-z0-9+/]{6,}={0,2})",
        "basic_s",
        # The scheme's name in some case.
        _Clue(("basic",), folded=True),
    ),
)
_FAMILY_BY_NAME: Mapping[str, _Family] = {f.name: f for f in _FAMILIES}
_FAMILY_INDEX: Mapping[str, int] = {f.name: i for i, f in enumerate(_FAMILIES)}
_EVERY_FAMILY = (1 << len(_FAMILIES)) - 1
"""A set of families is a bit mask: bit ``i`` stands for ``_FAMILIES[i]``."""

# Non-ASCII letters that ``re.IGNORECASE`` takes for an ASCII letter, and that
# ``str.lower`` does not turn into it (or turns into two characters).
_CASE_FOLDS = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"), ("\u212a", "k"))


def _fold_case(text: str) -> str:
    """``text`` in lowercase, where a case-insensitive regex matching an ASCII
    word finds that word in lowercase."""
    if not text.isascii():
        for letter, ascii_letter in _CASE_FOLDS:
            text = text.replace(letter, ascii_letter)
    return text.lower()


# (family bit, literals, folded, needs) per family, for the loop below.
_CLUES: tuple[tuple[int, tuple[str, ...], bool, str], ...] = tuple(
    (1 << index, family.clue.literals, family.clue.folded, family.clue.needs)
    for index, family in enumerate(_FAMILIES)
)
# Every family's literals in lowercase, found in the folded text in one pass
# (Aho-Corasick): a literal in the text as written is in its folded form in
# lowercase, so a family none of whose lowercase literals occurs cannot match,
# and only the families one of whose literals does are checked exactly below.
_CLUE_WORDS: tuple[str, ...] = tuple(
    sorted({literal.lower() for family in _FAMILIES for literal in family.clue.literals})
)
_CLUE_FINDER = Keywords.build(_CLUE_WORDS)
_FAMILIES_OF_WORD: tuple[int, ...] = tuple(
    sum(
        bit
        for bit, literals, _, _ in _CLUES
        if any(literal.lower() == word for literal in literals)
    )
    for word in _CLUE_WORDS
)


def _families_that_may_match(text: str, folded: str) -> tuple[int, dict[int, list[int]]]:
    """The families whose clue is in ``text`` (``folded``: ``_fold_case(text)``):
    the others cannot match it; and where each clue word starts in
    ``folded``, by its index in ``_CLUE_WORDS``."""
    places = _CLUE_FINDER.occurrences(folded)
    candidates = 0
    for word in places:
        candidates |= _FAMILIES_OF_WORD[word]
    if not candidates:
        return 0, places
    families = 0
    for bit, literals, in_folded, needs in _CLUES:
        if not candidates & bit:
            continue
        if needs:
            for character in needs:
                if character in text:
                    break
            else:
                continue
        haystack = folded if in_folded else text
        for literal in literals:
            if literal in haystack:
                families |= bit
                break
    return families, places


# Where a family's match may start, from where one of its clue words starts
# (``_starts``): at that place minus each of the offsets, or, for a family
# whose match starts at the start of a run of characters that holds its clue
# (an assignment's label, a URL's scheme), at the start of that run when it
# is at most ``reach`` characters before the clue. Checked against a search
# at every place by ``tests/core/test_redaction.py``'s exhaustive scan.
_RUN_BACK: Mapping[str, tuple[re.Pattern[str], int]] = {
    "assign": (re.compile(r"[A-Za-z0-9_.-]{0,65}"), 64),
    "url": (re.compile(r"[A-Za-z0-9+.-]{0,33}"), 32),
}
_OFFSETS: Mapping[str, tuple[int, ...]] = {
    "aws_secret": (0, len("aws"), len("aws_")),  # "secret" in aws_secret_... or secret_access_key
    "slack_webhook": (len("https://"),),  # "hooks.slack.com/"
}
_SPARSE_CLUES = 32
"""The places a match may start are listed (``_starts``) only when the clue
words are fewer than one per this many characters of the text."""
_STARTS_OF_WORD: tuple[tuple[tuple[int, str], ...], ...] = tuple(
    tuple(
        (bit, _FAMILIES[index].name)
        for index in range(len(_FAMILIES))
        if (bit := 1 << index) & families
    )
    for families in _FAMILIES_OF_WORD
)


_LABELLED = sum(1 << _FAMILY_INDEX[name] for name in ("assign", "aws_secret"))
"""The families whose match starts with a label run (``[A-Za-z0-9_.-]``)
followed by ``:`` or ``=``: none starts inside a placeholder, whose only
such run, ``redacted``, holds none of their clue words."""
_LABEL_WORDS: frozenset[int] = frozenset(
    word for word, families in enumerate(_FAMILIES_OF_WORD) if not families & ~_LABELLED
)


def _outside_placeholders(
    text: str, folded: str, places: dict[int, list[int]]
) -> dict[int, list[int]]:
    """``places`` without the places, strictly inside a placeholder, of the
    clue words only the labelled families have: no match starts there
    (``_LABELLED``), and a text a pass redacted holds one per label (its
    placeholder's keyword), which would double the starts to try. The
    places of other families' words are kept: their matches may start
    anywhere."""
    pieces: list[str] = []
    copied = 0
    for found in _PLACEHOLDER.finditer(text):
        start, end = found.span()
        pieces.append(folded[copied : start + 1])
        pieces.append("\0" * (end - start - 1))
        copied = end
    pieces.append(folded[copied:])
    outside = _CLUE_FINDER.occurrences("".join(pieces))
    return {
        word: outside.get(word, []) if word in _LABEL_WORDS else positions
        for word, positions in places.items()
    }


def _starts(text: str, families: int, places: Mapping[int, list[int]]) -> list[int]:
    """The places, sorted, where a match of ``families`` may start in
    ``text``, given where the clue words start (``places``): every match of
    a family holds one of its clue words at a known distance from its start
    (``_OFFSETS``, ``_RUN_BACK``), so a search need not try the others."""
    found: set[int] = set()
    backwards = ""  # ``text`` reversed, made when a run is first looked for
    for word, positions in places.items():
        for bit, name in _STARTS_OF_WORD[word]:
            if not bit & families:
                continue
            run = _RUN_BACK.get(name)
            if run is None:
                for offset in _OFFSETS.get(name, (0,)):
                    found.update(position - offset for position in positions if position >= offset)
                continue
            back, reach = run
            backwards = backwards or text[::-1]
            size = len(text)
            for position in positions:
                # The length of the run that ends at ``position``, read backwards.
                found_run = back.match(backwards, size - position)
                length = found_run.end() - (size - position) if found_run else 0
                if length <= reach:
                    found.add(position - length)
    return sorted(found)


@functools.lru_cache(maxsize=256)
def _combined(families: int, after_placeholder: bool, guarded: bool = True) -> re.Pattern[str]:
    """The ``families`` as one regex (see ``_Family.regex``): at each place the
    first of them in ``_FAMILIES`` order that matches wins. Compiled on first
    use: a text needs few of them."""
    return re.compile(
        bounded_repeats(
            "|".join(
                family.regex(after_placeholder, guarded)
                for index, family in enumerate(_FAMILIES)
                if families >> index & 1
            ),
            FAMILY_LIMIT,
        )
    )


_ASSIGN_VALUE = re.compile(
    bounded_repeats(
        r"<redacted:[a-z0-9_]+>"  # a placeholder is a value too, and is kept
        r"|\"(?:[^\"\\\n]|\\.)+\"|'[^'\n]+'"
        r"|(?:(?i:bearer|basic|token|digest)\s+)?[^\s,;&\"'<>(){}\[\]]+",
        FAMILY_LIMIT,
    )
)
"""An assignment's value, right after its separator."""


def _is_basic_credential(text: str) -> bool:
    """True when ``text`` is base64 of ``user:password``, as HTTP Basic sends."""
    try:
        decoded = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


@dataclass(frozen=True, slots=True)
class _ExtraPattern:
    keyword: str
    regex: re.Pattern[str]

    def replace(self, match: re.Match[str]) -> str:
        """The group named ``secret`` replaced, or the whole match when there is none."""
        if "secret" in self.regex.groupindex and match.start("secret") >= 0:
            return _splice(
                match, match.start("secret"), match.end("secret"), placeholder(self.keyword)
            )
        return placeholder(self.keyword)


def _compile_extra(spec: ExtraPattern) -> _ExtraPattern:
    if isinstance(spec, tuple):
        keyword, pattern = spec
    else:
        keyword, pattern = "pattern", spec
    if not re.fullmatch(r"[a-z0-9_]+", keyword):
        raise ValueError(f"a placeholder keyword is lowercase letters, digits and _: {keyword!r}")
    return _ExtraPattern(keyword, re.compile(pattern) if isinstance(pattern, str) else pattern)


_KEY_CACHE_LIMIT = 4096
_ASSIGNMENTS_KEPT = 4096
"""At most this many assignments' outcomes are remembered per text and pass."""
_CLEAN_TEXT_LIMIT = 4096
_CLEAN_TEXT_LENGTH = 128
"""Texts up to this long that hold no secret are remembered as such."""
_CACHED_KEY_LENGTH = 256
"""Longer keys are judged afresh each time, so the cache holds no large strings."""


class Redactor:
    """Replaces secrets in JSON-like data by ``<redacted:KEYWORD>`` placeholders.

    ``extra_keys`` adds sensitive key phrases (``"account_number"`` matches
    ``accountNumber`` and ``customer_account_number``; the keyword is the
    phrase's words joined by ``_``). ``extra_patterns`` adds value patterns
    (see ``ExtraPattern``); each must not match its own placeholder, or
    idempotency is lost. Patterns are compiled once, here. ``secret_rules``
    replaces the vendored gitleaks rules (``SecretRuleSet([])``: none);
    ``entropy`` says where high-entropy values are looked for (see
    ``EntropyScope``; config syntax by default, not free prose).

    A ``Redactor`` may be shared by threads. ``redact`` never raises for
    JSON-like input. The constructor raises ``re.error`` for an invalid extra
    pattern and ``ValueError`` for a keyword that is not ``[a-z0-9_]+`` or an
    unknown ``entropy``.
    """

    __slots__ = (
        "_entropy",
        "_extra_phrases",
        "_extra_patterns",
        "_clean_texts",
        "_key_cache",
        "_rules",
    )

    def __init__(
        self,
        extra_keys: Iterable[str] = (),
        extra_patterns: Iterable[ExtraPattern] = (),
        *,
        secret_rules: SecretRuleSet | None = None,
        entropy: EntropyScope = "config",
    ) -> None:
        if entropy not in ("off", "config", "everywhere"):
            raise ValueError(f"entropy is 'off', 'config' or 'everywhere': {entropy!r}")
        self._rules = default_rule_set() if secret_rules is None else secret_rules
        self._entropy: EntropyScope = entropy
        self._extra_phrases: tuple[tuple[str, ...], ...] = tuple(
            words for words in (_words(key) for key in extra_keys) if words
        )
        self._extra_patterns: tuple[_ExtraPattern, ...] = tuple(
            _compile_extra(spec) for spec in extra_patterns
        )
        # Keys repeat across calls; remember their verdicts (bounded, so a
        # stream of unique keys cannot grow it without end).
        self._key_cache: dict[str, str | None] = {}
        # Short texts repeat too (a mapping's keys, a session's ids, "path"):
        # those found to hold no secret are remembered (bounded, and only
        # texts redaction left as they were, so no secret is kept here).
        self._clean_texts: set[str] = set()

    def sensitive_keyword(self, key: str) -> str | None:
        """The placeholder keyword when ``key`` names a secret, else ``None``.

        ``sensitive_keyword("X-Api-Key") == "api_key"``,
        ``sensitive_keyword("max_tokens") is None``.
        """
        cached = self._key_cache.get(key, "")
        if cached != "":
            return cached
        keyword = self._classify(_words(key))
        if len(key) <= _CACHED_KEY_LENGTH:
            if len(self._key_cache) >= _KEY_CACHE_LIMIT:
                # Start afresh rather than stop learning: the keys of the
                # calls to come are likelier those of the recent ones.
                self._key_cache.clear()
            self._key_cache[key] = keyword
        return keyword

    def _classify(self, words: tuple[str, ...]) -> str | None:
        if not words:
            return None
        for phrase in self._extra_phrases:
            if _contains_phrase(words, phrase) or "".join(words) == "".join(phrase):
                return "_".join(phrase)
        # Most keys hold no phrase's every word: set lookups rule them out.
        present = set(words)
        for phrase, phrase_words in _PHRASE_SETS:
            if phrase_words <= present and _contains_phrase(words, phrase):
                return "_".join(phrase)
        for word in words:
            keyword = _JOINED_PHRASES.get(word) or _ANYWHERE_WORDS.get(word)
            if keyword:
                return keyword
        return _LAST_WORDS.get(words[-1])

    def redact(self, value: Any) -> Any:
        """A redacted deep copy of ``value`` (see the module docstring)."""
        return self._redact(value, 0)

    def _redact(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self.redact_text(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        # ``dict`` first: the ``Mapping`` check is the slower one.
        is_mapping = isinstance(value, (dict, Mapping))
        if depth >= MAX_DEPTH and (is_mapping or isinstance(value, (list, tuple))):
            return placeholder("depth_limit")
        if is_mapping:
            result: dict[Any, Any] = {}
            for key, item in value.items():
                if isinstance(key, str):
                    # Classify the redacted key, so a second pass decides the same.
                    key = self.redact_text(key)
                    keyword = self.sensitive_keyword(key)
                elif key is None or isinstance(key, (bool, int, float)):
                    keyword = None
                else:
                    key = self.redact_text(str(key))
                    keyword = self.sensitive_keyword(key)
                result[key] = placeholder(keyword) if keyword else self._redact(item, depth + 1)
            return result
        if isinstance(value, list):
            return [self._redact(item, depth + 1) for item in value]
        if isinstance(value, tuple):
            return tuple(self._redact(item, depth + 1) for item in value)
        return self.redact_text(str(value))

    def redact_text(self, text: str) -> str:
        """``text`` with every secret found by value pattern replaced. A JSON
        document with escapes in its strings (``"a\\nAKIA..."``: the escape
        glues the secret to a letter) has each string redacted as it is
        decoded, in its escaped form, first."""
        if type(text) is not str:
            # A subclass may compare equal to what it is not (to its own
            # redacted form, to a text remembered as clean): a plain copy.
            text = str.__str__(text)
        clean = self._clean_texts
        if text in clean:
            return text
        original = text
        if text[:1] in _JSON_STARTS and "\\" in text:
            text = self._redact_json_strings(text)
        text = self._redact_until_stable(text, exhaustive=False)
        if text == original:
            self._remember_clean(original)
        return text

    def _remember_clean(self, text: str) -> None:
        """Remember that ``text`` holds no secret (when it is short)."""
        if len(text) <= _CLEAN_TEXT_LENGTH:
            clean = self._clean_texts
            if len(clean) >= _CLEAN_TEXT_LIMIT:
                clean.clear()  # afresh: the texts of the calls to come are likelier recent ones
            clean.add(text)

    def _redact_piece(self, text: str, exhaustive: bool) -> str:
        """A piece of a match (an assignment's label, what a match keeps
        around its secret) redacted by one pass. A text packed with matches
        repeats its pieces: those found clean are remembered, as
        ``redact_text`` remembers short texts (a pass that changes nothing
        is a fixed point)."""
        if exhaustive:
            return self._redact_text(text, exhaustive)
        if text in self._clean_texts:
            return text
        redacted = self._redact_text(text, exhaustive)
        # Remembered only where ``redact_text`` would do no more than this
        # pass: not a JSON text whose escaped strings it decodes first.
        if redacted == text and not (text[:1] in _JSON_STARTS and "\\" in text):
            self._remember_clean(text)
        return redacted

    def _redact_json_strings(self, text: str) -> str:
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            return text
        return self._replace_quoted(text, strings_in(document), _JSON_QUOTES)

    def _redact_until_stable(self, text: str, exhaustive: bool) -> str:
        # A pass that replaced a secret can leave text a second pass would
        # match (a rule's scan went on after its match's end): repeat until
        # nothing changes, so that redaction is idempotent.
        scanned_clean: str | None = None
        for _ in range(MAX_PASSES):
            redacted, scanned_clean = self._pass(text, exhaustive, scanned_clean)
            if redacted == text:
                break
            text = redacted
        return text

    def redact_message(self, text: str, raw: Iterable[str] = ()) -> str:
        """``redact_text(text)`` for a message that may quote the ``raw``
        values (a call's arguments): each quoted or escaped form of a raw
        value found in ``text`` (``repr``, JSON, with or without the quotes)
        is first replaced by the same form of the raw value redacted. Quoting
        turns a tab into ``\\t``, after which no pattern matches: the raw
        text is redacted before it is quoted. Forms cut short are not found;
        build messages from redacted text where you can."""
        return self.redact_text(self._replace_quoted(text, raw, (repr, _json_quote)))

    def _replace_quoted(
        self, text: str, raw: Iterable[str], quotes: tuple[Callable[[str], str], ...]
    ) -> str:
        """``text`` with each ``quotes`` form of each ``raw`` value replaced
        by the same form of the value redacted."""
        for value in raw:
            if len(value) < _MIN_QUOTED:
                continue
            redacted = self.redact_text(value)
            if redacted == value:
                continue  # nothing secret in it
            for quote in quotes:
                form, safe = quote(value), quote(redacted)
                if form in text:
                    text = text.replace(form, safe)
                if form[1:-1] != value and form[1:-1] in text:
                    text = text.replace(form[1:-1], safe[1:-1])
        return text

    def _redact_text_exhaustive(self, text: str) -> str:
        """``redact_text`` scanning for every family by its plain regex, with
        no clue or guard consulted: the reference the fast path is tested
        against. Not for use: it is slow."""
        return self._redact_until_stable(text, exhaustive=True)

    def _redact_text(self, text: str, exhaustive: bool) -> str:
        return self._pass(text, exhaustive, None)[0]

    def _pass(
        self, text: str, exhaustive: bool, scanned_clean: str | None
    ) -> tuple[str, str | None]:
        """One pass of redaction over ``text``, and the text the rules and
        the entropy scan found nothing in, if they did not. ``scanned_clean``
        is that text from the pass before: a pass changed only by the
        families (an assignment's value replaced) leaves it as the next pass
        scans it, and the scan of the same text finds the same, so the
        confirming pass does not scan it again."""
        if "-----BEGIN" in text:
            text = _redact_pem_blocks(text)
        # Most text holds no clue of any family and is not scanned at all.
        folded = _fold_case(text)
        starts: list[int] | None = None
        if exhaustive:
            families = _EVERY_FAMILY
        else:
            families, places = _families_that_may_match(text, folded)
            # Clue words close together (a text packed with labels): the
            # regex's own search finds the next match sooner than the places
            # a match may start are listed.
            if families & _LABELLED and _PLACEHOLDER_PREFIX in text:
                places = _outside_placeholders(text, folded, places)
            if families and sum(map(len, places.values())) * _SPARSE_CLUES < len(text):
                starts = _starts(text, families, places)
        if families:
            redacted = self._redact_patterns(text, families, exhaustive, starts)
            if redacted != text:
                text, folded = redacted, _fold_case(redacted)
        findings: list[Finding] = []
        if text != scanned_clean:
            entropy: list[Finding] = []
            if self._entropy != "off":
                entropy = high_entropy_assignments(text, self._entropy == "everywhere")
            if self._rules.rules:
                # A finding that is exactly a placeholder, which replacing
                # keeps, is left out (unjudged) unless another starts in it.
                kept = [] if exhaustive else _placeholder_spans(text)
                others = [finding.start for finding in entropy]
                findings = self._rules.find(text, folded, exhaustive, kept=kept, others=others)
            findings += entropy
        clean = None if findings else text
        if findings:
            text = _replace_findings(text, findings)
        for extra in self._extra_patterns:
            text = extra.regex.sub(extra.replace, text)
        return text, clean

    def _redact_patterns(
        self, text: str, families: int, exhaustive: bool, starts: list[int] | None
    ) -> str:
        # Like ``_combined(families, False).sub``, with two differences that
        # keep the result stable under a second pass. A match found harmless (a
        # label such as ``token_count``, "Basic" and a plain word) consumes
        # nothing: the later families are tried at the same place, then
        # scanning goes on one character later, so a secret that starts inside
        # it or runs past its end is still found. Right after a replacement,
        # the text is matched as if it followed the placeholder.
        # ``starts``: the only places a match may start (``_starts``), or None
        # to search at every place.
        pieces: list[str] = []
        copied = 0  # text[:copied] is in pieces, redacted
        guarded = not exhaustive
        anywhere = _combined(families, False, guarded)
        after_replacement = _combined(families, True, guarded)
        assignments: dict[tuple[str, str, str], str] = {}

        def search(position: int) -> re.Match[str] | None:
            if starts is None:
                return anywhere.search(text, position)
            for index in range(bisect.bisect_left(starts, position), len(starts)):
                found = anywhere.match(text, starts[index])
                if found is not None:
                    return found
            return None

        match = search(0)
        while match is not None:
            start = match.start()
            replaced = self._replacement(match, exhaustive, assignments)
            if replaced is None:
                # The families after the one that declined, in ``_FAMILIES`` order.
                later = families & -(2 << _FAMILY_INDEX[match.lastgroup or ""])
                match = (
                    _combined(later, start == copied, guarded).match(text, start) if later else None
                )
                if match is None:
                    match = search(start + 1)
                continue
            replacement, end = replaced
            pieces.append(text[copied:start])
            pieces.append(replacement)
            copied = end
            match = after_replacement.match(text, copied) or search(copied + 1)
        pieces.append(text[copied:])
        return "".join(pieces)

    def _replacement(
        self,
        match: re.Match[str],
        exhaustive: bool,
        assignments: dict[tuple[str, str, str], str],
    ) -> tuple[str, int] | None:
        """The text that replaces ``match`` and where what it replaces ends,
        or None when it holds no secret. ``assignments``: what each
        assignment seen so far in this text became (see ``_assigned``)."""
        family = _FAMILY_BY_NAME[match.lastgroup or ""]
        if family.name == "assign":
            label: str = match["assign_label"]
            keyword = self.sensitive_keyword(label)
            if keyword is None:
                return None  # and its value is never scanned
            found = _ASSIGN_VALUE.match(match.string, match.end())
            if found is None:
                return None
            key = (label, match["assign_sep"], found.group(0))
            replacement = assignments.get(key)
            if replacement is None:
                replacement = self._assigned(*key, keyword, exhaustive)
                if len(assignments) < _ASSIGNMENTS_KEPT and len(key[2]) <= _CACHED_KEY_LENGTH:
                    assignments[key] = replacement
            return replacement, found.end()
        if family.name == "basic" and not _is_basic_credential(match["basic_s"]):
            return None
        if family.secret_group is None:
            return placeholder(family.keyword), match.end()
        start, end = match.span(family.secret_group)
        # What the match keeps around its secret may hold another secret
        # (an AWS key as a URL's user name): overlapping matches merge.
        text, offset = match.string, match.start()
        before = self._redact_piece(text[offset:start], exhaustive)
        after = self._redact_piece(text[end : match.end()], exhaustive)
        return before + placeholder(family.keyword) + after, match.end()

    def _assigned(
        self, label: str, separator: str, value: str, keyword: str, exhaustive: bool
    ) -> str:
        """What the assignment ``label separator value`` becomes, ``keyword``
        being its label's. It depends on these alone, so a text packed with
        one assignment works it out once (``_redact_patterns`` remembers it)."""
        # The label may itself hold a secret (a token glued to "password").
        label = self._redact_piece(label, exhaustive)
        if _PLACEHOLDER.fullmatch(value.strip("\"'")):
            return label + separator + value  # redacted already
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            # Keep the quotes: JSON and YAML text stays parseable.
            return label + separator + value[0] + placeholder(keyword) + value[0]
        return label + separator + placeholder(keyword)


def _widened(kept: list[tuple[int, int]], position: int, edge: Callable[[int, int], int]) -> int:
    """``position``, or ``edge`` of the placeholder span in ``kept`` it falls
    strictly inside."""
    index = bisect.bisect_left(kept, (position,)) - 1
    if index >= 0 and position < kept[index][1]:
        return edge(*kept[index])
    return position


def _placeholder_spans(text: str) -> list[tuple[int, int]]:
    """Where the placeholders of ``text`` are, as ``_replace_findings`` keeps them."""
    if _PLACEHOLDER_PREFIX not in text:
        return []
    return [found.span() for found in _PLACEHOLDER.finditer(text)]


def _replace_findings(text: str, findings: list[Finding]) -> str:
    """``text`` with each finding's span replaced by its placeholder.
    Overlapping findings merge (the first by start names the placeholder);
    placeholders already in the text stay as they are, and the text around
    them in a finding is replaced."""
    kept = _placeholder_spans(text)
    spans: list[list[Any]] = []
    for finding in sorted(findings, key=lambda finding: finding.start):
        # Never cut a placeholder in two (placeholders are sorted and apart).
        start = _widened(kept, finding.start, lambda begin, finish: begin)
        end = _widened(kept, finding.end, lambda begin, finish: finish)
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end, finding.keyword])
    pieces: list[str] = []
    copied = 0
    for start, end, keyword in spans:
        pieces.append(text[copied:start])
        cursor = start
        first = bisect.bisect_left(kept, (start,))
        for begin, finish in kept[first : bisect.bisect_left(kept, (end,))]:
            if begin >= end:
                break
            if begin >= cursor and finish <= end:
                if begin > cursor:
                    pieces.append(placeholder(keyword))
                pieces.append(text[begin:finish])
                cursor = finish
        if cursor < end:
            pieces.append(placeholder(keyword))
        copied = end
    pieces.append(text[copied:])
    return "".join(pieces)


_MIN_QUOTED = 6
"""Raw values shorter than this are not looked for in messages: none of
the patterns matches so little."""


def _json_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _json_quote_ascii(text: str) -> str:
    return json.dumps(text)


_JSON_STARTS = ("{", "[", '"')
_JSON_QUOTES = (_json_quote, _json_quote_ascii)


def strings_in(value: Any, limit: int = 256) -> list[str]:
    """The strings (keys included) of JSON-like ``value``, at most ``limit``
    of them, depth first: what ``redact_message`` looks for."""
    found: list[str] = []
    stack = [value]
    while stack and len(found) < limit:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                stack.append(child)
                stack.append(key)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def _splice(match: re.Match[str], start: int, end: int, replacement: str) -> str:
    """The matched text with ``[start, end)`` (offsets in the whole string) replaced."""
    text, offset = match[0], match.start()
    return text[: start - offset] + replacement + text[end - offset :]
