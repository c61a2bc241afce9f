"""What a directory holds, for tests that check nothing changed around a
world: a plain test module, not a conftest (``tests/realtools`` has its own
``conftest``, so ``from conftest import`` would be ambiguous there)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def tree_snapshot(top: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under ``top`` (none when it is missing): its mode and its
    bytes, a link's target for a link, nothing for anything else."""
    entries: dict[str, tuple[int, bytes]] = {}
    if not top.exists():
        return entries
    for directory, subdirs, names in os.walk(top):
        for name in subdirs + names:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                data = Path(path).read_bytes()
            else:
                data = b""
            entries[os.path.relpath(path, top)] = (st.st_mode, data)
    return entries
