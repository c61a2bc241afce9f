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

Where it stops: a root spelt differently (another case, ``..`` segments,
``~``, percent- or JSON-escaped slashes, a relative spelling) is not found;
nor is a root followed by a ``.`` that ends a sentence (``saved in /ws.``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

_PATH_CHARACTER = r"[\w.\-]"
"""What may continue a path component: ``/ws`` followed by one of these is
another name (``/ws2``, ``/ws-old``, ``/ws.bak``)."""


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
    """One direction of a ``RootMap``."""

    def __init__(self, old: str, new: str) -> None:
        pattern = rf"(?<![\w.\-/]){re.escape(old)}(?!{_PATH_CHARACTER})"
        self._text = re.compile(pattern)
        self._bytes = re.compile(pattern.encode("utf-8"))
        self._new = new
        self._new_bytes = new.encode("utf-8")
        self._old = old
        self._old_bytes = old.encode("utf-8")

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text.sub(lambda _: self._new, value) if self._old in value else value
        if isinstance(value, (bytes, bytearray)):
            data = bytes(value)
            if self._old_bytes not in data:
                return data
            return self._bytes.sub(lambda _: self._new_bytes, data)
        if isinstance(value, Mapping):
            return {self.walk(key): self.walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.walk(item) for item in value)
        return value


def _root(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"a workspace root must be an absolute path, not {path!r}")
    normal = posixpath.normpath(path)
    if normal in ("/", "//"):
        raise ValueError("a workspace root cannot be / itself: nothing could be mapped apart")
    return normal
