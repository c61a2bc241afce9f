"""The process's working directory moved into a world for a block.

``working_directory(path)`` is what ``DirectoryWorld`` enters last: while a
world runs, a relative path resolves in its workspace, for the handler, the
C code it calls and the processes it starts (they inherit it), never in the
project the test run started in.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator


class _Left:
    """What a ``working_directory`` block left: the directory, held open
    (put back by descriptor, so that it is found even when its path no
    longer leads to it: renamed, or removed by the test), ``$PWD``, and the
    relative entries of ``sys.path`` it spelt absolute."""

    __slots__ = ("descriptor", "pwd", "imports")

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor
        self.pwd: str | None = None
        self.imports: list[tuple[int, str, str]] = []
        """(index in ``sys.path``, the entry as it was, as it is spelt now)."""


_BLOCKS: list[_Left] = []
"""The ``working_directory`` blocks running in this process, in the order they began."""
_BLOCKS_LOCK = threading.Lock()


@contextlib.contextmanager
def working_directory(path: str) -> Iterator[None]:
    """The process's working directory is ``path`` while the block runs:
    a relative path (``open("notes.txt")``, ``sqlite3.connect("crm.db")``,
    a process started with no ``cwd``) resolves there, never in the
    directory the process was in; ``$PWD``, when set, names ``path`` too
    (shells and scripts read it). When the block ends, even by
    ``KeyboardInterrupt``, that directory is the working directory again.

    A relative entry of ``sys.path`` (``""`` in ``python -c`` or a
    notebook) is spelt absolute for the block: a module imported meanwhile
    comes from where it came from before, never from the world's files.

    The working directory is the process's, not a thread's: blocks on
    several threads at once change it for each other. Blocks ended out of
    order still end where the first began (the block that began inside an
    ended one goes back where the ended one came from)."""
    left = _Left(os.open(".", getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY))
    try:
        with _BLOCKS_LOCK:
            _BLOCKS.append(left)
            _spell_imports_absolute(left)
            os.chdir(path)
            left.pwd = os.environ.get("PWD")
            if left.pwd is not None:
                os.environ["PWD"] = path
        yield
    finally:
        _leave(left)


def _spell_imports_absolute(left: _Left) -> None:
    here: str | None = None
    for index, entry in enumerate(sys.path):
        if not isinstance(entry, str) or os.path.isabs(entry):
            continue
        if here is None:
            try:
                here = os.getcwd()
            except OSError:  # the directory is gone: nothing to import from it
                return
        spelt = os.path.join(here, entry) if entry else here
        sys.path[index] = spelt
        left.imports.append((index, entry, spelt))


def _leave(left: _Left) -> None:
    with _BLOCKS_LOCK:
        index = next((i for i, block in enumerate(_BLOCKS) if block is left), None)
        if index is None:  # interrupted before it began
            os.close(left.descriptor)
            return
        del _BLOCKS[index]
        if index < len(_BLOCKS):  # a later block still runs: it goes back where this one came from
            later = _BLOCKS[index]
            os.close(later.descriptor)
            later.descriptor = left.descriptor
            later.pwd = left.pwd
            later.imports = left.imports + later.imports
            return
        try:
            os.fchdir(left.descriptor)
        finally:
            os.close(left.descriptor)
            if left.pwd is not None:
                os.environ["PWD"] = left.pwd
            for position, entry, spelt in reversed(left.imports):
                if position < len(sys.path) and sys.path[position] == spelt:
                    sys.path[position] = entry
