"""The process's working directory moved into a world for a block.

``working_directory(path)`` is what ``DirectoryWorld`` enters last: while a
world runs, a relative path resolves in its workspace, for the handler, the
C code it calls and the processes it starts (they inherit it), never in the
project the test run started in.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator


class _Left:
    """The directory a ``working_directory`` block left, held open: put
    back by descriptor, so that it is found even when its path no longer
    leads to it (renamed, or removed by the test)."""

    __slots__ = ("descriptor",)

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor


_BLOCKS: list[_Left] = []
"""The ``working_directory`` blocks running in this process, in the order they began."""
_BLOCKS_LOCK = threading.Lock()


@contextlib.contextmanager
def working_directory(path: str) -> Iterator[None]:
    """The process's working directory is ``path`` while the block runs:
    a relative path (``open("notes.txt")``, ``sqlite3.connect("crm.db")``,
    a process started with no ``cwd``) resolves there, never in the
    directory the process was in. When the block ends, even by
    ``KeyboardInterrupt``, that directory is the working directory again.

    The working directory is the process's, not a thread's: blocks on
    several threads at once change it for each other. Blocks ended out of
    order still end where the first began (the block that began inside an
    ended one goes back where the ended one came from)."""
    left = _Left(os.open(".", getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY))
    with _BLOCKS_LOCK:
        _BLOCKS.append(left)
    try:
        os.chdir(path)
        yield
    finally:
        _leave(left)


def _leave(left: _Left) -> None:
    with _BLOCKS_LOCK:
        index = next(i for i, block in enumerate(_BLOCKS) if block is left)
        del _BLOCKS[index]
        if index < len(_BLOCKS):  # a later block still runs: it goes back where this one came from
            later = _BLOCKS[index]
            os.close(later.descriptor)
            later.descriptor = left.descriptor
            return
        try:
            os.fchdir(left.descriptor)
        finally:
            os.close(left.descriptor)
