"""Files pytest-toolguard writes for itself (cassettes, reports, the audit
database): written whole or not at all, never through a link, and private
unless told otherwise.

``write_atomically`` writes a temporary file in the target's directory and
renames it over the target. The temporary file has a random name and is
created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a file or link planted at a
name someone predicted is never opened, so its target is never written. The
rename replaces the target's directory entry itself: when the target is a
symbolic link, the link is replaced by a regular file and what it pointed
to is left untouched. A new file gets ``new_mode`` (``PRIVATE_MODE`` by
default; the umask may narrow it), an existing regular file keeps its
permission bits (without setuid, setgid or sticky), so a file someone chose
to share stays shared. The temporary file is never wider than the file it
becomes: created 0600 and only then given an existing file's bits.

What it does not do: the target's directory is the caller's (created when
missing, followed when it is a link); another process may rename something
else over the target afterwards.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

PRIVATE_MODE = 0o600
"""The mode of a new cassette or audit database: only its owner reads it.
Cassettes hold recorded workspace files and the audit database every
call's arguments; on a shared machine neither is for other users."""

SHARED_MODE = 0o666
"""The mode ``open()`` gives a new file, narrowed by the umask: for what is
meant to be read by others (a fault matrix report)."""

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME_KEPT = 100
"""Characters of the target's name kept in its temporary file's name."""


def write_atomically(
    path: str | os.PathLike[str], data: bytes | str, *, new_mode: int = PRIVATE_MODE
) -> None:
    """Replace the file at ``path`` by ``data`` (text is written as UTF-8),
    atomically: a reader sees the old file or the new one, never half. See
    the module docstring for links and modes. ``OSError`` when it cannot be
    written; the temporary file is then removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    content = data.encode("utf-8") if isinstance(data, str) else data
    kept = _regular_mode(target)
    temporary = target.with_name(f".{target.name[:_NAME_KEPT]}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, _TEMP_FLAGS, new_mode if kept is None else PRIVATE_MODE)
    renamed = False
    try:
        try:
            if kept is not None:
                os.fchmod(fd, kept)
            write_all(fd, content)
        finally:
            os.close(fd)
        os.replace(temporary, target)
        renamed = True
    finally:
        if not renamed:
            with contextlib.suppress(OSError):  # the first error is the one to report
                os.unlink(temporary)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to ``fd`` and flush it to the disk: ``os.write``
    may write less than it is given (a signal, a pipe, a full disk that
    frees up)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def create_private(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty with ``PRIVATE_MODE`` when it does not exist
    (before SQLite opens it: SQLite creates a database 0644, and its
    ``-wal`` and ``-shm`` files with the database's mode). An existing file
    is neither changed nor truncated; a failure is left for whoever opens
    the file next to report."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_MODE))


def _regular_mode(target: Path) -> int | None:
    """The permission bits of ``target`` when it is a regular file (a link
    is not followed), else None."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else None
