"""The real secrets a test gives (``toolguard_secrets``), as report text may
spell them, and their removal from anything a report shows.

Replay and fault cells send real secrets in place of a cassette's
placeholders, so what a tool does with one (writes it to a file, returns
it, names a file after it, puts it in an error or a URL, cuts it, encodes
it) can reach a failure report, a pytest log or a report file.
``KnownSecrets.scrub`` puts the placeholder back, wherever the value occurs,
in each form text takes on the way to a report:

- as it is;
- JSON-escaped (``\\"``, ``\\n``, ``\\u00e9``, with and without ASCII
  escapes), as ``repr`` quotes it, and URL-encoded (``%2B`` and ``+``);
- each line of a secret that holds line breaks, at least
  ``MIN_SECRET_LENGTH`` long (a diff shows a multi-line value line by line);
- reversed, in upper and in lower case, as hexadecimal (either case) and
  as base64 and base64url (of its UTF-8 bytes, at each of the three
  alignments a longer text may put it at, padding or not);
- any run of at least ``slice_bound(secret)`` characters (half the
  secret, at least ``MIN_SLICE``) that is a substring of one of the forms
  above (a slice a tool returned: ``read_text max_chars``, a prefix in an
  error, a slice of its base64). Found in time linear in the text: q-grams
  of the forms are looked up at a stride that no run of the bound can
  avoid, and around a hit a suffix automaton of the forms measures the run.

Where it stops: a value shorter than ``MIN_SECRET_LENGTH`` is left alone
(it would match inside ordinary words); a slice shorter than the bound is
left, so a report may still show up to half of a secret (less than
``MIN_SLICE`` characters of a short one); so are a slice that was then
transformed (a slice's reverse or other case; base64 of a slice is found,
as a run of the base64 of the whole), any other transformation (a hash,
another encoding, characters interleaved, every other character), and the
same secret spread over several values that are each under the bound.
Redact values before cutting or diffing them, so a secret is never cut in
two where no form of it is left to find.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

MIN_SECRET_LENGTH = 4
"""Secret values shorter than this are not redacted as literals (they
would match inside ordinary words)."""

MIN_SLICE = 6
"""The shortest run of a secret's characters scrubbed as a slice of it."""

_KEYWORD = re.compile(r"[a-z0-9_]+")


def slice_bound(value: str) -> int:
    """The shortest run of ``value``'s forms scrubbed as a slice of it:
    half its length, and at least ``MIN_SLICE``."""
    return max(MIN_SLICE, len(value) // 2)


def _keyword(name: str) -> str:
    """The placeholder keyword of a secret named ``name``: ``secret`` when
    the name is not a valid keyword."""
    return name if _KEYWORD.fullmatch(name) else "secret"


def _forms(value: str) -> set[str]:
    """The spellings of ``value`` that report text may hold."""
    forms = {
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        repr(value)[1:-1],
        quote(value, safe=""),
        quote_plus(value, safe=""),
    }
    lines = value.splitlines()
    if len(lines) > 1:
        forms.update(line for line in lines)
        forms.update(line.strip() for line in lines)
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def _encoded(value: str) -> set[str]:
    """What a tool's ordinary transformations make of ``value``: reversed,
    each case, hexadecimal, and base64/base64url of its bytes at each
    alignment, whole (padded) and its whole 3-byte groups only (the last,
    partial one depends on what follows the secret in a longer text)."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = {value[::-1], value.upper(), value.lower(), raw.hex(), raw.hex().upper()}
    for shift in range(3):
        for part in (raw[shift:], raw[shift : len(raw) - (len(raw) - shift) % 3]):
            forms.add(base64.b64encode(part).decode("ascii"))  # padded, when the text ends
            forms.add(base64.urlsafe_b64encode(part).decode("ascii"))
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


class _Slices:
    """Finds every run of at least ``bound`` characters of a text that is a
    substring of one of ``forms``, in time linear in the text.

    Each such run holds a ``q``-gram (``q`` = half the bound) starting at
    a multiple of ``stride`` (``bound - q + 1``), so only those q-grams are
    looked up (a set). Around a hit, a suffix automaton of the forms
    (joined by separators no character equals) gives, at each position,
    the longest substring of a form ending there; each character is fed to
    it at most once."""

    def __init__(self, forms: Iterable[str], bound: int) -> None:
        kept = sorted({form for form in forms if len(form) >= bound})
        self.bound = bound
        self.q = max(3, bound // 2)
        self.stride = bound - self.q + 1
        self.grams = {f[i : i + self.q] for f in kept for i in range(len(f) - self.q + 1)}
        self.width = max((len(form) for form in kept), default=0)
        tokens: list[str | int] = []
        for number, form in enumerate(kept):
            tokens += [*form, -1 - number]  # an int: never a character of a text
        self._next, self._link, self._length = _automaton(tokens)

    def __bool__(self) -> bool:
        return bool(self.grams)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The runs found, merged, as ``(start, end)``, in order."""
        found: list[tuple[int, int]] = []
        nexts, link, length, bound = self._next, self._link, self._length, self.bound
        state = matched = scanned = 0
        for probe in range(0, len(text) - self.q + 1, self.stride):
            if text[probe : probe + self.q] not in self.grams:
                continue
            start = max(probe - self.width, 0)
            if start > scanned:  # a gap: the automaton starts again
                state = matched = 0
                scanned = start
            end = min(probe + self.q + self.width, len(text))
            for at in range(scanned, end):
                char = text[at]
                while state and char not in nexts[state]:
                    state = link[state]
                    matched = length[state]
                if char in nexts[state]:
                    state = nexts[state][char]
                    matched += 1
                else:
                    state = matched = 0
                if matched >= bound:
                    begin = at + 1 - matched
                    if found and begin <= found[-1][1]:
                        found[-1] = (min(found[-1][0], begin), at + 1)
                    else:
                        found.append((begin, at + 1))
            scanned = max(scanned, end)
        return found


def _automaton(
    tokens: list[str | int],
) -> tuple[list[dict[str | int, int]], list[int], list[int]]:
    """The suffix automaton of ``tokens``: transitions, suffix links and
    the longest length of each state (state 0 is the start)."""
    nexts: list[dict[str | int, int]] = [{}]
    link, length = [-1], [0]
    last = 0
    for token in tokens:
        current = len(nexts)
        nexts.append({})
        length.append(length[last] + 1)
        link.append(0)
        state = last
        while state != -1 and token not in nexts[state]:
            nexts[state][token] = current
            state = link[state]
        if state != -1:
            target = nexts[state][token]
            if length[state] + 1 == length[target]:
                link[current] = target
            else:
                clone = len(nexts)
                nexts.append(dict(nexts[target]))
                length.append(length[state] + 1)
                link.append(link[target])
                while state != -1 and nexts[state].get(token) == target:
                    nexts[state][token] = clone
                    state = link[state]
                link[target] = link[current] = clone
        last = current
    return nexts, link, length


def _replaced(text: Any, spans: list[tuple[int, int]], shown: Any) -> Any:
    """``text`` (str or bytes) with each span replaced by ``shown`` (the same type)."""
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], shown]
        at = end
    parts.append(text[at:])
    return text[:0].join(parts)


class KnownSecrets:
    """Real secret values by placeholder keyword (``{"api_key": "sk-..."}``
    for ``<redacted:api_key>``); ``scrub`` replaces every form of each (see
    the module docstring) by its placeholder. Values that are not ``str``
    or are shorter than ``MIN_SECRET_LENGTH`` are ignored. Immutable; safe
    to share between threads."""

    __slots__ = ("_byte_slices", "_bytes", "_keywords", "_slices", "_text", "patterns")

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        by_form: dict[str, str] = {}
        self._slices: list[tuple[_Slices, str]] = []
        self._byte_slices: list[tuple[_Slices, str]] = []
        for name, value in (secrets or {}).items():
            if not isinstance(name, str) or not isinstance(value, str):
                continue
            if len(value) < MIN_SECRET_LENGTH:
                continue
            forms = _forms(value) | _encoded(value)
            for form in forms:
                by_form.setdefault(form, _keyword(name))
            bound = slice_bound(value)
            slices = _Slices(forms, bound)
            if slices:
                self._slices.append((slices, _keyword(name)))
                self._byte_slices.append((_Slices(_as_bytes(forms), bound), _keyword(name)))
        # Longest first: a whole secret is replaced before one of its lines.
        ordered = sorted(by_form, key=lambda form: (-len(form), form))
        self._keywords = by_form
        self.patterns: tuple[tuple[str, str], ...] = tuple(
            (by_form[form], re.escape(form)) for form in ordered
        )
        """``(keyword, regex)`` per form, longest first: ``Redactor``'s
        ``extra_patterns``."""
        self._text = re.compile("|".join(re.escape(form) for form in ordered)) if ordered else None
        encoded: dict[bytes, str] = {}
        for form in ordered:
            for encoding in ("utf-8", "latin-1"):
                try:
                    raw = form.encode(encoding)
                except UnicodeEncodeError:
                    continue
                encoded.setdefault(raw, by_form[form])
        ordered_bytes = sorted(encoded, key=lambda raw: (-len(raw), raw))
        self._bytes = (
            (re.compile(b"|".join(re.escape(raw) for raw in ordered_bytes)), encoded)
            if ordered_bytes
            else None
        )

    def __bool__(self) -> bool:
        return self._text is not None

    def text(self, text: str) -> str:
        """``text`` with every form of every secret replaced by its placeholder."""
        if self._text is None or not text:
            return text
        keywords = self._keywords
        text = self._text.sub(lambda m: f"<redacted:{keywords[m.group(0)]}>", text)
        for slices, keyword in self._slices:
            spans = slices.spans(text)
            if spans:
                text = _replaced(text, spans, f"<redacted:{keyword}>")
        return text

    def data(self, content: bytes) -> bytes:
        """``content`` with every form of every secret, in UTF-8 or
        Latin-1, replaced by its placeholder (in ASCII)."""
        if self._bytes is None or not content:
            return content
        pattern, keywords = self._bytes
        content = pattern.sub(lambda m: f"<redacted:{keywords[m.group(0)]}>".encode(), content)
        for slices, keyword in self._byte_slices:
            spans = slices.spans(content.decode("latin-1"))  # one character a byte
            if spans:
                shown = f"<redacted:{keyword}>".encode()
                content = _replaced(content, spans, shown)
        return content

    def scrub(self, value: Any) -> Any:
        """``value`` with every secret replaced: text and bytes, and inside
        mappings (keys too), lists and tuples; other values unchanged. The
        input is never modified."""
        if self._text is None:
            return value
        return self._scrub(value, 0)

    def _scrub(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (bytes, bytearray)):
            return self.data(bytes(value))
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if depth > _MAX_DEPTH:
            return "<redacted:depth_limit>"
        if isinstance(value, Mapping):
            return {
                self._scrub(key, depth + 1): self._scrub(item, depth + 1)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self._scrub(item, depth + 1) for item in value]
        if isinstance(value, tuple):
            return tuple(self._scrub(item, depth + 1) for item in value)
        # Any other object is shown by its str(): scrubbed as that text.
        try:
            shown = str(value)
        except Exception:
            return value
        scrubbed = self.text(shown)
        return value if scrubbed == shown else scrubbed


_MAX_DEPTH = 200
"""Deeper containers are replaced whole: a cycle cannot overflow the stack."""


def _as_bytes(forms: Iterable[str]) -> set[str]:
    """``forms`` as their UTF-8 and Latin-1 bytes, each byte a character
    (Latin-1 text), as ``KnownSecrets.data`` reads bytes."""
    found: set[str] = set()
    for form in forms:
        for encoding in ("utf-8", "latin-1"):
            try:
                found.add(form.encode(encoding, "surrogatepass").decode("latin-1"))
            except UnicodeEncodeError:
                continue
    return found
