"""pyfakefs's ``resolve_path`` answered from the directory objects when the
answer is the path itself.

pyfakefs resolves a path as a string many times over: it normalises it,
splits it, validates it, walks the components and joins them again (about
a dozen helper calls, each reading the filesystem's OS settings). Every
fake system call resolves its path several times, so this is a large share
of a fault cell. For a plain absolute path (``plain_components``: no
``.``, ``..``, empty or trailing component) that meets no symbolic link,
the answer is the path itself: the walk stops unchanged at a missing
component or at a file on the way, and appends the rest as given.

``install_plain_walks(fs)`` makes ``fs.resolve_path`` walk the directory
objects for such a path (``entries``, as pyfakefs reads them: a real
directory mapped in is loaded the same way) and return it; any other
argument, a link met on the way, a filesystem that is not a case-sensitive
POSIX one, or ``/dev/null`` goes to pyfakefs's own method, which answers
or raises as always. The answer is the same in every case: only the
number of string operations differs.

Installed on the filesystem object (an attribute of the instance, as
``harness.accesses`` and ``harness.escapes`` wrap it, and before they do,
so that they record and guard what it answers); ``uninstall`` puts
pyfakefs's method back.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from typing import Any

from pyfakefs.fake_file import FakeDirectory
from pyfakefs.fake_filesystem import FakeFilesystem

from .fake_filesystem import plain_components

_S_IFLNK = stat.S_IFLNK
_S_IFMT = 0o170000


def install_plain_walks(fs: FakeFilesystem) -> Callable[[], None]:
    """Make ``fs.resolve_path`` walk the directory objects for a plain
    absolute path (see the module docstring); returns the function that
    puts pyfakefs's own method back."""
    original = fs.resolve_path

    def resolve_path(file_path: Any, allow_fd: bool = False) -> Any:
        if type(file_path) is str and _settled(fs, file_path):
            return file_path
        return original(file_path, allow_fd)

    fs.resolve_path = resolve_path  # type: ignore[method-assign]

    def uninstall() -> None:
        if fs.__dict__.get("resolve_path") is resolve_path:
            del fs.__dict__["resolve_path"]

    return uninstall


def _settled(fs: FakeFilesystem, path: str) -> bool:
    """Whether pyfakefs's ``resolve_path(path)`` is ``path`` itself, known
    without its string work: a plain absolute path walked to its end, or to
    a missing component or a file, through no link, in a case-sensitive
    POSIX filesystem. False when unsure (pyfakefs answers then)."""
    names = plain_components(path)
    if names is None or path == fs.devnull:
        return False
    if fs.is_windows_fs or fs.is_macos or not fs.is_case_sensitive:
        return False
    current: Any = fs.root
    for name in names:
        if not isinstance(current, FakeDirectory):
            return True  # a file on the way: pyfakefs appends the rest as given
        entry = current.entries.get(name)
        if entry is None:
            return True  # missing: the rest appended as given
        if entry.st_mode & _S_IFMT == _S_IFLNK:
            return False  # a link: pyfakefs follows it
        current = entry
    return True
