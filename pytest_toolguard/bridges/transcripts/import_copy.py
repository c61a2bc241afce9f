"""The copy an imported session is re-executed in, kept apart from the
directory the user named.

``toolguard import`` runs a transcript's calls again in a copy of a
workspace directory. The calls name their files as the session did, often
by absolute paths into the very directory the user named. ``IntoCopy``
maps those to the copy before each call; ``named_by_root`` maps the copy's
path to the root the cassette names in what was recorded; ``entries`` and
``changed_entries`` tell whether a directory changed while the calls ran
(the import then writes no cassette).
"""

from __future__ import annotations

import json
import os
import posixpath
import secrets
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...replay.cassette import Cassette, loads, to_dict
from ...replay.root_map import RootMap


def session_roots(workspace: Path, root: str | None, cwd: str | None) -> list[str]:
    """The absolute paths by which a session's calls may name its
    workspace: the directory named (made absolute, and its real path), the
    root the cassette is to name and the one the session ran in, longest
    first (a root beneath another is mapped before it). ``/`` is left out:
    it names every path, so nothing could be told apart."""
    spellings = [os.path.abspath(workspace), os.path.realpath(workspace)]
    spellings += [path for path in (root, cwd) if isinstance(path, str) and path.startswith("/")]
    normal = {posixpath.normpath(path) for path in spellings}
    return sorted((path for path in normal if path.strip("/")), key=len, reverse=True)


class IntoCopy:
    """A call's arguments with every mention of the session's workspace
    naming the copy instead. A string that is a path leading into the
    directory named, by any spelling the kernel resolves there (``//ws/x``,
    ``/ws/./x``, another link to it), is that place in the copy; in other
    text each of the session's roots is found on path-component boundaries
    (``RootMap``: ``cd /ws && make``). Roots go first to a placeholder no
    path holds, then to the copy, so that a root which is a prefix of the
    copy's own path (``/tmp``) never maps the copy a second time."""

    def __init__(self, named: str, roots: Sequence[str], copy: str) -> None:
        self._named, self._copy_path = named, copy
        placeholder = f"/toolguard-import-root-{secrets.token_hex(12)}"
        self._maps = [RootMap(root, placeholder) for root in roots]
        self._copy = RootMap(placeholder, copy)

    def __call__(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        value: Any = self._resolved(arguments)
        for mapping in self._maps:
            value = mapping.to_world(value)
        mapped: Mapping[str, Any] = self._copy.to_world(value)
        return mapped

    def _resolved(self, value: Any) -> Any:
        if isinstance(value, str):
            inside = self._inside(value)
            return value if inside is None else self._copy_path + inside
        if isinstance(value, Mapping):
            return {key: self._resolved(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._resolved(item) for item in value]
        return value

    def _inside(self, text: str) -> str | None:
        """What follows the directory named in the place ``text`` leads to
        (``""`` for the directory itself), or None when ``text`` is no
        absolute path or leads elsewhere. The final name is not followed: a
        link in the workspace is the same link in the copy."""
        if not str.startswith(text, "/") or "\0" in text or "\n" in text:
            return None
        text = str.__str__(text)
        head, name = posixpath.split(text)
        try:
            # The final name kept, when its directory is in the workspace;
            # else followed (a link elsewhere that leads into it).
            spellings = [os.path.realpath(text)]
            if name not in ("", ".", ".."):
                spellings.insert(0, posixpath.join(os.path.realpath(head), name))
        except (OSError, ValueError):
            return None
        base = self._named.rstrip("/")
        for real in spellings:
            if real == self._named:
                return ""
            if real.startswith(base + "/"):
                return real[len(base) :]
        return None


def named_by_root(cassette: Cassette, copy: str, root: str, *, source: str) -> Cassette:
    """``cassette`` with the copy's path (as made, or its real path) naming
    ``root`` wherever the recording spelt it: arguments, results, audit rows
    and files then name the root the cassette holds, which replay maps to
    its own world. A root ``RootMap`` cannot take (``/``, a redacted one)
    leaves the cassette as it is."""
    body: Any = to_dict(cassette)
    try:
        maps = [RootMap(root, spelt) for spelt in dict.fromkeys((copy, os.path.realpath(copy)))]
    except ValueError:
        return cassette
    mapped = body
    for mapping in maps:
        mapped = mapping.to_recorded(mapped)
    if mapped == body:
        return cassette
    return loads(json.dumps(mapped), source=source)


_Entry = tuple[int, int, int, int, str | None]
"""An entry as ``entries`` sees it: type and permission bits, size,
modification time (ns), inode, and a link's target."""


def entries(directory: str, *, skip: str | None = None) -> dict[str, _Entry]:
    """Every entry beneath ``directory`` (links not followed; ``skip`` and
    what it holds left out), keyed by relative path. Metadata only: the
    import compares it before and after the calls: a write changes the
    modification time, size or inode of what it touched, or of the
    directory it created or removed an entry in."""
    found: dict[str, _Entry] = {}
    for here, subdirs, names in os.walk(directory):
        subdirs[:] = [name for name in subdirs if os.path.join(here, name) != skip]
        for name in subdirs + names:
            path = os.path.join(here, name)
            if path == skip:
                continue
            try:
                st = os.lstat(path)
                target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            except OSError:
                continue  # removed meanwhile: absent from this snapshot
            found[os.path.relpath(path, directory)] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                st.st_ino,
                target,
            )
    return found


def changed_entries(before: Mapping[str, _Entry], after: Mapping[str, _Entry]) -> list[str]:
    """The paths whose entry was created, removed or changed."""
    return sorted(
        path for path in before.keys() | after.keys() if before.get(path) != after.get(path)
    )
