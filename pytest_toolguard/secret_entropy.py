"""Entropy of the secret rules, and high-entropy values in config syntax.

``shannon_entropy`` serves the rules' ``entropy`` thresholds.
``high_entropy_assignments`` finds long high-entropy values given to a
key-like name in config syntax (``.env``, YAML, JSON, TOML, INI), which no
rule names; each distinct value is judged once per text.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import sys
from collections import Counter
from collections.abc import Iterator

from .secret_scan import Finding, VerdictMemo


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``, as gitleaks computes it (counts of
    characters over the UTF-8 length). 0.0 for the empty text."""
    if not text:
        return 0.0
    size = len(text.encode("utf-8", "surrogatepass"))
    return -sum(count / size * math.log2(count / size) for count in Counter(text).values())


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
    memo = VerdictMemo()

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
