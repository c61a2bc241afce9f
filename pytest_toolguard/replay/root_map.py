"""The recorded workspace root and the root a world gives it, mapped both ways.

A cassette names the absolute root it was recorded in (``/home/ann/proj``);
a directory world rebuilds it elsewhere (``/tmp/toolguard-world-x1/proj``).
``RootMap(recorded, actual)`` rewrites one into the other wherever a value
names it: ``to_world`` before a call (its arguments), ``to_recorded`` after
(its result, its audit row, the files it left), so that what is compared is
spelt as the recording spelt it.

A root is matched on path-component boundaries only: ``/ws`` is found in
``/ws``, ``/ws/a.txt``, ``cd /ws && ls`` and ``"/ws"``, never in ``/ws2``,
``/ws-old``, ``/ws.bak`` or ``/data/ws``. Text, bytes and JSON values
(mappings' keys and values, lists, tuples) are walked; anything else is
returned as it is. Pure: no filesystem access.

The root is also found percent-encoded as ``urllib.parse.quote(root,
safe="")`` spells it (``%2Fws%2Fa.txt``, what a URL's query carries).

A cassette stores the root as ``ROOT_PLACEHOLDER`` (``{toolguard_root}``;
``{toolguard_root%}`` for the percent-encoded spelling): ``RootPlaceholder``
writes it, ``expanded`` reads it back as a given root. A literal
``{toolguard_root}`` in the data (a tool's output that is not a path) is
escaped with one more ``=`` before the closing brace (``{toolguard_root=}``,
``{toolguard_root==}``, ...), and read back with one ``=`` less, so every
text survives the round trip exactly.

Where it stops: a root spelt differently (another case, ``..`` segments,
``~``, JSON-escaped slashes, lower-case percent escapes, a relative
spelling) is not found; nor is a root followed by a ``.`` that ends a
sentence (``saved in /ws.``). Bytes are mapped only when they are UTF-8
text: a binary format would not survive a path of another length.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

_PATH_CHARACTER = r"[\w.\-]"
"""What may continue a path component: ``/ws`` followed by one of these is
another name (``/ws2``, ``/ws-old``, ``/ws.bak``)."""

_BEFORE = r"(?<![\w.\-/])"
"""What may not come before a root: ``/data/ws`` does not name ``/ws``."""

ROOT_PLACEHOLDER = "{toolguard_root}"
"""What a cassette stores where the recorded workspace root was."""

QUOTED_PLACEHOLDER = "{toolguard_root%}"
"""What a cassette stores where the root was percent-encoded (``%2Fws``)."""

_TOKEN = r"\{toolguard_root(%?)(=*)\}"
"""A placeholder (no ``=``) or an escaped literal one (``=`` added)."""


class RootMap:
    """``recorded`` <-> ``actual``, two absolute POSIX paths (see the module
    docstring). The identity map when they are the same path, at no cost.
    ``ValueError`` for a root that is not absolute or is ``/``."""

    def __init__(self, recorded: str, actual: str) -> None:
        self.recorded = _root(recorded)
        self.actual = _root(actual)
        self._to_world = _Rewrite(self.recorded, self.actual)
        self._to_recorded = _Rewrite(self.actual, self.recorded)

    @property
    def identity(self) -> bool:
        """Both roots are the same path: every value maps to itself."""
        return self.recorded == self.actual

    def to_world(self, value: Any) -> Any:
        """``value`` with every mention of the recorded root naming the actual one."""
        return value if self.identity else self._to_world.walk(value)

    def to_recorded(self, value: Any) -> Any:
        """``value`` with every mention of the actual root naming the recorded one."""
        return value if self.identity else self._to_recorded.walk(value)


class _Rewrite:
    """One direction of a ``RootMap``: ``old`` -> ``new``, literal and percent-encoded."""

    def __init__(self, old: str, new: str) -> None:
        replacements = {old: new, quote(old, safe=""): quote(new, safe="")}
        self._text = _Substitution(replacements, lambda _: None)
        self._old = (old, quote(old, safe=""))

    def walk(self, value: Any) -> Any:
        return _walk(value, self._text.apply, self._old)


class _Substitution:
    """Each spelling on component boundaries (and, when ``token`` gives one,
    each placeholder-like token) replaced in one pass over a text."""

    def __init__(self, replacements: Mapping[str, str], token: Callable[[str], str | None]) -> None:
        # Longest first: a realpath that ends with the root is taken whole.
        spellings = sorted(replacements, key=len, reverse=True)
        root = "|".join(re.escape(spelling) for spelling in spellings)
        found = rf"{_BEFORE}(?:{root})(?!{_PATH_CHARACTER})" if spellings else "(?!)"
        self._pattern = re.compile(rf"(?P<root>{found})|{_TOKEN}")
        self._replacements = dict(replacements)
        self._token = token
        self.count = 0
        """How many replacements were made (roots and escaped tokens)."""

    def apply(self, text: str) -> str:
        return self._pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        found = match.group("root")
        if found is not None:
            self.count += 1
            return self._replacements[found]
        escaped = self._token(match.group(0))
        if escaped is None:
            return match.group(0)
        self.count += 1
        return escaped


class RootPlaceholder:
    """Every spelling of ``roots`` (the recorded root and its other
    spellings: its realpath) written as ``ROOT_PLACEHOLDER``, and a literal
    placeholder escaped (see the module docstring). ``stored(value)`` walks
    text, UTF-8 bytes and JSON values; ``expanded(value, root)`` undoes it.
    ``binary`` counts the bytes values left as they were although they name
    a root (not UTF-8: a binary format). With no root, it only escapes.
    ``ValueError`` for a root ``RootMap`` refuses."""

    def __init__(self, roots: Iterable[str]) -> None:
        spelt: dict[str, str] = {}
        for root in roots:
            normal = _root(root)
            spelt.setdefault(normal, ROOT_PLACEHOLDER)
            spelt.setdefault(quote(normal, safe=""), QUOTED_PLACEHOLDER)
        self._substitution = _Substitution(spelt, _escaped)
        self._quick = (*spelt, "{toolguard_root")
        self._binary_spellings = tuple(spelling.encode("utf-8") for spelling in spelt)
        self.binary = 0

    @property
    def placed(self) -> int:
        """How many roots and literal placeholders ``stored`` has rewritten so far."""
        return self._substitution.count

    def stored(self, value: Any) -> Any:
        """``value`` with the roots written as the placeholder."""
        return _walk(value, self._substitution.apply, self._quick, self._count_binary)

    def _count_binary(self, data: bytes) -> None:
        if any(spelling in data for spelling in self._binary_spellings):
            self.binary += 1


def expanded(value: Any, root: str) -> Any:
    """``value`` as ``RootPlaceholder.stored`` wrote it, with ``root`` where
    the placeholder is and each escaped literal one given back. ``root`` is
    taken as it is (not checked): a cassette's own."""
    spelt = {ROOT_PLACEHOLDER: root, QUOTED_PLACEHOLDER: quote(root, safe="")}
    pattern = re.compile(_TOKEN)

    def replace(match: re.Match[str]) -> str:
        quoted, equals = match.group(1), match.group(2)
        if not equals:
            return spelt[match.group(0)]
        return "{toolguard_root" + quoted + equals[1:] + "}"

    def apply(text: str) -> str:
        return pattern.sub(replace, text)

    return _walk(value, apply, ("{toolguard_root",))


def _escaped(token: str) -> str:
    """A literal placeholder-like token with one more ``=``."""
    return token[:-1] + "=}"


def _walk(
    value: Any,
    apply: Callable[[str], str],
    quick: tuple[str, ...],
    binary: Callable[[bytes], None] | None = None,
) -> Any:
    """``value`` with ``apply`` run over every text that holds one of
    ``quick`` (mappings' keys too); bytes only when they are UTF-8 (others
    go to ``binary``, then are left as they are). A JSON value whose text
    holds none of ``quick`` is given back as it is, unwalked: a cassette's
    interactions mostly name no root, and ``json`` reads them at C speed."""

    def has(text: str) -> bool:
        return any(part in text for part in quick)

    def walk(value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return apply(value) if has(value) else value
        if kind is dict:
            return {walk(key): walk(item) for key, item in value.items()}
        if kind is list:
            return [walk(item) for item in value]
        if value is None or kind is int or kind is float or kind is bool:
            return value
        return other(value)

    def other(value: Any) -> Any:
        if isinstance(value, str):
            return apply(value) if has(value) else value
        if isinstance(value, (bytes, bytearray)):
            data = bytes(value)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                if binary is not None:
                    binary(data)
                return data
            return apply(text).encode("utf-8") if has(text) else data
        if isinstance(value, Mapping):
            return {walk(key): walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(walk(item) for item in value)
        return value

    def named(value: Any) -> bool:
        """Whether ``value`` may hold one of ``quick``: False only when its JSON text says so."""
        if type(value) not in (dict, list) or not safe:
            return True
        try:
            text = json.dumps(value, ensure_ascii=False, check_circular=False)
        except (TypeError, ValueError, RecursionError):
            return True
        return has(text)

    safe = all(json.dumps(part, ensure_ascii=False)[1:-1] == part for part in quick)
    if not named(value):
        return value
    if type(value) is list:
        return [walk(item) if named(item) else item for item in value]
    if type(value) is dict:
        return {walk(key): walk(item) if named(item) else item for key, item in value.items()}
    return walk(value)


def _root(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"a workspace root must be an absolute path, not {path!r}")
    normal = posixpath.normpath(path)
    if normal in ("/", "//"):
        raise ValueError("a workspace root cannot be / itself: nothing could be mapped apart")
    return normal
