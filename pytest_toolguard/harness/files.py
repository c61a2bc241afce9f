"""Reading a tree of files back, in the fake filesystem or the real one;
and telling the harness's own file work from a handler's."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pyfakefs import helpers as fake_helpers
from pyfakefs.fake_filesystem import FakeFilesystem

from ..errors import ToolguardError


class _SlowPath(ToolguardError):
    """The fake filesystem's objects cannot answer as ``os`` would."""


def read_tree(root: str) -> dict[str, bytes]:
    """Every regular file beneath ``root`` (never following links), by
    POSIX path relative to it. Works in the fake filesystem and the real one.

    In a running fake filesystem the answer is read from pyfakefs's objects
    (a walk through the fake ``os`` costs about ten times more), unless a
    permission could refuse a read there: then through ``os``, as always."""
    fs = getattr(os, "filesystem", None)  # set when pyfakefs patched this module
    if isinstance(fs, FakeFilesystem):
        try:
            return _read_fake_tree(fs, root)
        except _SlowPath:
            pass
    return read_tree_through_os(root)


def read_tree_through_os(root: str) -> dict[str, bytes]:
    """``read_tree`` by walking ``root`` through ``os`` (what ``read_tree``
    answers as, in any filesystem)."""
    files: dict[str, bytes] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                files[os.path.relpath(path, root).replace(os.sep, "/")] = handle.read()
    return files


def _read_fake_tree(fs: FakeFilesystem, root: str) -> dict[str, bytes]:
    """``read_tree`` from pyfakefs's objects, in the same order: each
    directory's files by name, then its subdirectories by name."""
    try:
        top = fs.resolve(root)  # os.walk follows a link given as its top
    except PermissionError:
        raise _SlowPath from None
    except OSError:
        return {}  # os.walk yields nothing for a missing top
    if not stat.S_ISDIR(top.st_mode):
        return {}
    as_root = fake_helpers.is_root()
    files: dict[str, bytes] = {}

    def walk(directory: Any, prefix: str) -> None:
        if not as_root and not directory.has_permission(
            fake_helpers.PERM_READ | fake_helpers.PERM_EXE
        ):
            raise _SlowPath
        entries: dict[str, Any] = directory.entries
        subdirs = []
        for name in sorted(entries):
            entry = entries[name]
            mode = entry.st_mode
            if stat.S_ISDIR(mode):
                subdirs.append((name, entry))
            elif stat.S_ISREG(mode):
                if not as_root and not entry.has_permission(fake_helpers.PERM_READ):
                    raise _SlowPath
                content = entry.byte_contents
                if not isinstance(content, bytes):  # pyfakefs's large-file mode
                    raise _SlowPath
                files[prefix + name] = content
            # symlinks, FIFOs, devices: never read, as in the walk through os
        for name, entry in subdirs:
            walk(entry, prefix + name + "/")

    walk(top, "")
    return files


def read_files(paths: Mapping[str, bytes]) -> dict[str, bytes | None]:
    """The current bytes of each absolute path (None when missing)."""
    current: dict[str, bytes | None] = {}
    for path in paths:
        try:
            with open(path, "rb") as handle:
                current[path] = handle.read()
        except OSError:
            current[path] = None
    return current


_AT_WORK = threading.local()


@contextmanager
def harness_work() -> Iterator[None]:
    """A block of the harness's own file work on this thread (a world
    planting, reading, saving or restoring its files): no handler runs
    inside it, so ``harness_at_work()`` says so without asking the stack."""
    _AT_WORK.depth = getattr(_AT_WORK, "depth", 0) + 1
    try:
        yield
    finally:
        _AT_WORK.depth -= 1


def harness_at_work() -> bool:
    """Whether this thread is inside ``harness_work()``."""
    return getattr(_AT_WORK, "depth", 0) > 0
