"""Where directory worlds are made, and finding the ones a run left.

``world_parent()`` answers for every world (``DirectoryWorld``, the
fuzzer's containers) unless a caller names a parent; ``world_directories()``
lists what is left there.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

WORLD_PREFIX = "toolguard-world-"
"""The name of every around directory begins with this (``mkdtemp``'s prefix)."""

WORLD_DIR = "TOOLGUARD_WORLD_DIR"
"""The environment variable naming where worlds are made (``world_parent``)."""

MEMORY_DIR = "/dev/shm"
MEMORY_DIR_FREE = 1 << 30
"""A memory filesystem worlds go on by default, and the free space it must
have for that: a world is small, but ``large_input`` grows files."""


def world_parent() -> str:
    """Where worlds are made when nobody says: ``$TOOLGUARD_WORLD_DIR``;
    else the temporary directory when ``TMPDIR`` (or ``TEMP``, ``TMP``)
    names one; else ``/dev/shm`` when it is a writable tmpfs that allows
    programs and has 1 GiB free; else the temporary directory.

    Why memory first: a world is made, filled and removed for every cell,
    and on a journaled disk (ext4 here) the directories' removal alone
    costs a few milliseconds each, which doubles a cell's cost; a world
    never needs to outlive its block. An explicit ``TMPDIR`` is a choice
    someone made, so it is kept."""
    chosen = os.environ.get(WORLD_DIR)
    if chosen:
        return chosen
    if any(os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")):
        return tempfile.gettempdir()
    return MEMORY_DIR if _memory_dir_usable() else tempfile.gettempdir()


def _memory_dir_usable() -> bool:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            entries = [line.split() for line in mounts]
        options = next(
            entry[3].split(",")
            for entry in reversed(entries)  # the last mount at a place is the one seen
            if len(entry) > 3 and entry[1] == MEMORY_DIR and entry[2] == "tmpfs"
        )
        space = os.statvfs(MEMORY_DIR)
    except (OSError, StopIteration):
        return False
    return (
        "noexec" not in options
        and os.access(MEMORY_DIR, os.W_OK | os.X_OK)
        and space.f_bavail * space.f_frsize >= MEMORY_DIR_FREE
    )


def world_directories(parent: str | None = None) -> Iterator[str]:
    """The around directories of directory worlds in ``parent`` (default:
    ``world_parent()``): what a run left behind, if anything."""
    where = parent or world_parent()
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(where)):
            if name.startswith(WORLD_PREFIX):
                yield os.path.join(where, name)
