"""pyfakefs's ``resolve_path`` and ``get_object_from_normpath`` answered
from the directory objects, for a plain path that meets no link.

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
POSIX one, ``/dev/null``, or a path holding ``/..`` (pyfakefs then looks
up each prefix before it, through ``resolve_path`` again: calls the access
log records) goes to pyfakefs's own method, which answers or raises as
always. The answer is the same in every case, and so are the calls pyfakefs
makes of the methods the harness wraps: only the string work differs.

``get_object_from_normpath`` (the object at a path ``resolve_path``
answered) is walked the same way when the fake user is root (pyfakefs then
checks no permission): every component found, through directories and no
link, gives the object pyfakefs would give; anything else (missing, a file
or a link on the way, another user) goes to pyfakefs, which raises or
follows as always.

Installed on the filesystem object (an attribute of the instance, as
``harness.accesses`` and ``harness.escapes`` wrap it, and before they do,
so that they record and guard what it answers); ``uninstall`` puts
pyfakefs's method back.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from typing import Any

from pyfakefs import helpers as fake_helpers
from pyfakefs.fake_file import FakeDirectory
from pyfakefs.fake_filesystem import FakeFilesystem

from .fake_filesystem import plain_components

_S_IFLNK = stat.S_IFLNK
_S_IFMT = 0o170000


def install_plain_walks(fs: FakeFilesystem) -> Callable[[], None]:
    """Make ``fs.resolve_path`` and ``fs.get_object_from_normpath`` walk
    the directory objects for a plain absolute path (see the module
    docstring); returns the function that puts pyfakefs's own methods back."""
    original_resolve = fs.resolve_path
    original_get = fs.get_object_from_normpath

    def resolve_path(file_path: Any, allow_fd: bool = False) -> Any:
        if type(file_path) is str and _settled(fs, file_path):
            return file_path
        return original_resolve(file_path, allow_fd)

    def get_object_from_normpath(
        file_path: Any,
        check_read_perm: bool = True,
        check_exe_perm: bool = True,
        check_owner: bool = False,
    ) -> Any:
        if type(file_path) is str:
            found = _found(fs, file_path)
            if found is not None:
                return found
        return original_get(file_path, check_read_perm, check_exe_perm, check_owner)

    installed = {
        "resolve_path": resolve_path,
        "get_object_from_normpath": get_object_from_normpath,
    }
    for name, method in installed.items():
        setattr(fs, name, method)

    def uninstall() -> None:
        for name, method in installed.items():
            if fs.__dict__.get(name) is method:
                del fs.__dict__[name]

    return uninstall


def _settled(fs: FakeFilesystem, path: str) -> bool:
    """Whether pyfakefs's ``resolve_path(path)`` is ``path`` itself, known
    without its string work: a plain absolute path walked to its end, or to
    a missing component or a file, through no link, in a case-sensitive
    POSIX filesystem. False when unsure (pyfakefs answers then)."""
    names = plain_components(path)
    if names is None or path == fs.devnull or "/.." in path:
        # "/.." anywhere (a name starting with "..", "..%2f"): pyfakefs asks
        # whether each prefix before it exists, through the very
        # resolve_path the access log records; let it.
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


def _found(fs: FakeFilesystem, path: str) -> Any:
    """The object pyfakefs's ``get_object_from_normpath(path)`` gives, when
    known by a walk through directories only, as root (no permission
    checked) in a case-sensitive POSIX filesystem; None when unsure."""
    if not fake_helpers.is_root():
        return None
    names = plain_components(path)
    if names is None or path == fs.devnull:
        return None
    if fs.is_windows_fs or fs.is_macos or not fs.is_case_sensitive:
        return None
    current: Any = fs.root
    for name in names:
        if not (isinstance(current, FakeDirectory) and stat.S_ISDIR(current.st_mode)):
            return None  # a file (ENOTDIR) or a link (followed) on the way
        current = current.entries.get(name)
        if current is None:
            return None  # ENOENT
    return current
