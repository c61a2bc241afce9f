"""The real secrets a test gives (``toolguard_secrets``), as report text may
spell them, and their removal from anything a report shows.

Replay and fault cells send real secrets in place of a cassette's
placeholders, so what a tool does with one (writes it to a file, returns
it, names a file after it, puts it in an error or a URL) can reach a
failure report, a pytest log or a report file. ``KnownSecrets.scrub`` puts
the placeholder back, wherever the value occurs, in each form text takes
on the way to a report:

- as it is;
- JSON-escaped (``\\"``, ``\\n``, ``\\u00e9``, with and without ASCII
  escapes), as ``repr`` quotes it, and URL-encoded (``%2B`` and ``+``);
- each line of a secret that holds line breaks, at least
  ``MIN_SECRET_LENGTH`` long (a diff shows a multi-line value line by line).

Where it stops: a value shorter than ``MIN_SECRET_LENGTH`` is left alone
(it would match inside ordinary words), and so is any other transformation
a tool applies (base64, a hash, a slice, another case): only the forms
above are found. Redact values before cutting or diffing them, so a secret
is never cut in two where no form of it is left to find.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["MIN_SECRET_LENGTH", "KnownSecrets"]

MIN_SECRET_LENGTH = 4
"""Secret values shorter than this are not redacted as literals (they
would match inside ordinary words)."""

_KEYWORD = re.compile(r"[a-z0-9_]+")


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


class KnownSecrets:
    """Real secret values by placeholder keyword (``{"api_key": "sk-..."}``
    for ``<redacted:api_key>``); ``scrub`` replaces every form of each (see
    the module docstring) by its placeholder. Values that are not ``str``
    or are shorter than ``MIN_SECRET_LENGTH`` are ignored. Immutable; safe
    to share between threads."""

    __slots__ = ("_bytes", "_keywords", "_text", "patterns")

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        by_form: dict[str, str] = {}
        for name, value in (secrets or {}).items():
            if isinstance(name, str) and isinstance(value, str):
                for form in _forms(value):
                    by_form.setdefault(form, _keyword(name))
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
        return self._text.sub(lambda m: f"<redacted:{keywords[m.group(0)]}>", text)

    def data(self, content: bytes) -> bytes:
        """``content`` with every form of every secret, in UTF-8 or
        Latin-1, replaced by its placeholder (in ASCII)."""
        if self._bytes is None or not content:
            return content
        pattern, keywords = self._bytes
        return pattern.sub(lambda m: f"<redacted:{keywords[m.group(0)]}>".encode(), content)

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
