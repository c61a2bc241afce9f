"""Workspace: file access confined to one directory tree, safe against races.

A ``Workspace`` may be used to access only the files beneath a single root
directory. Every path given to its methods is relative to that root. If any
component of a path, or of a symbolic link met while resolving it, would
reference a location outside the root, the method raises
``PathOutsideWorkspace`` and touches nothing. A path may name the root itself
(``"."``).

Paths
    Both ``/`` and ``\\`` separate components, so ``..\\..\\x`` climbs and
    ``a\\.env`` names ``.env``. A path is refused, before any file is touched,
    when it is not a ``str`` or is empty (``InvalidPath``); absolute (a leading
    ``/`` or ``\\``, or a drive prefix such as ``C:``) or climbing above the
    root with ``..`` (``PathOutsideWorkspace``); holds a NUL, a component
    longer than 255 bytes, more than 4096 bytes in all, or a component
    starting with ``.toolguard-tmp-`` (reserved for in-flight writes)
    (``InvalidPath``); or names a forbidden file in any component, compared
    case-insensitively (``ForbiddenPath``; ``.env`` by default). When a path
    breaks several rules, the first rule in that order is reported. Paths are
    never URL-decoded or Unicode-normalized: ``%2e%2e`` is a literal name.

Symbolic links
    Methods follow symbolic links, one component at a time, from directory
    descriptors, but a link may not reference a location outside the root:
    a link whose target is absolute, or whose ``..`` climbs above the root,
    raises ``PathOutsideWorkspace``. A link's target is read with the same
    grammar as a path (both separators), and is subject to the same forbidden
    names. A ``..`` is applied to the directory actually reached (as the
    kernel does), never above the root. More than 40 link expansions in one
    resolution raise ``InvalidPath`` (a loop is not an escape).
    ``write_bytes`` and ``delete`` act on the final entry itself: a symlink
    there is replaced or removed, never written through. ``walk`` and
    ``list_dir`` never follow links beneath the directory they start from.

Races
    Each directory is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to
    the descriptor of its parent, starting from a descriptor of the root held
    open since construction, and files are opened with ``O_NOFOLLOW``. A
    symlink swapped in concurrently is therefore either seen and checked, or
    makes the open fail; it cannot redirect an open outside the root. There
    is no check-then-open window.

Hard links and special files
    A regular file with more than one hard link may be a link to a file
    outside the root: reading, overwriting or deleting it raises
    ``ForbiddenPath`` unless ``allow_hardlinks=True``. Reading anything but a
    regular file (FIFO, device, socket) raises ``ForbiddenPath``.

Writes
    ``write_bytes`` is atomic: the new content goes to a temporary file
    (``.toolguard-tmp-<hex>``, created with ``O_EXCL | O_NOFOLLOW`` in the
    same directory), is fsynced, and is renamed over the name; the directory
    is then fsynced. A reader sees the old content or the new, never a torn
    file; on failure the temporary file is removed and the old content stays.
    Temporary files are never listed by ``list_dir`` or ``walk``.

Errors
    Every refusal is a ``SandboxError`` whose ``code`` is an ``ErrorCode``
    and whose ``path`` is the path as the caller gave it. Ordinary misses
    raise ``FileNotFoundError``, ``IsADirectoryError`` or
    ``NotADirectoryError``. No message ever holds an absolute host path: only
    the caller's relative path, or paths relative to the root.

Concurrency
    A Workspace may be used from several threads at once: each operation
    opens and closes its own descriptors and shares only the root's.
    ``close()`` must not race with operations in flight.

What a Workspace does not guarantee
    - The root is the directory opened at construction. If it is moved,
      the Workspace follows it to its new place; ``root`` keeps the old name.
    - A directory moved out of the root while an operation holds it open may
      receive that operation's read or write (the same limit as Go's
      ``os.Root``). ``..`` never reopens a parent, so it cannot be used to
      climb out through such a directory.
    - It does not stop crossing mount points or bind mounts beneath the
      root, and ``resolve``, ``exists`` and ``size`` answer for the moment
      they ran: another process may change the tree right after.
    - The change journal (``on_change``) records file content, not the kind
      of entry: a symlink that is replaced or deleted is recorded as absent
      (``None``), so ``restore`` removes the new file rather than recreating
      the link. Replaced files keep their permission bits, not their owner.
    - Names holding a ``\\`` (legal on POSIX) are listed but cannot be
      addressed, since ``\\`` is a separator here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, TypeAlias

from .contract import ErrorCode

__all__ = [
    "DEFAULT_FORBIDDEN_NAMES",
    "MAX_SYMLINK_EXPANSIONS",
    "TEMP_PREFIX",
    "Entry",
    "ForbiddenPath",
    "InvalidPath",
    "LimitExceeded",
    "OnAccess",
    "OnChange",
    "PathOutsideWorkspace",
    "SandboxError",
    "Workspace",
]

OnChange: TypeAlias = Callable[[str, bytes | None], None]
OnAccess: TypeAlias = Callable[[str], None]
"""``on_access(path)``: a path as a handler gave it to a read, a listing,
``exists``, ``size``, ``resolve``, a write or a delete (before the walk)."""
"""Called as ``on_change(relative_path, previous_bytes_or_None)`` before a
write or delete replaces ``relative_path``; ``None`` means nothing was there."""

DEFAULT_FORBIDDEN_NAMES: tuple[str, ...] = (".env",)
"""Names refused in any path component unless ``forbidden_names`` says otherwise."""

MAX_SYMLINK_EXPANSIONS = 40
"""Symbolic links followed in one resolution before ``InvalidPath`` is raised."""

TEMP_PREFIX = ".toolguard-tmp-"
"""Name prefix of in-flight write files; reserved, hidden from listings."""

_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 4096
_SEPARATORS = re.compile(r"[/\\]")
_DRIVE_PREFIX = re.compile(r"[A-Za-z]:")
_READ_CHUNK = 1 << 16

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not hang; it is refused right after fstat.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


# --------------------------------------------------------------------------- errors


class SandboxError(Exception):
    """A path or operation the workspace refuses.

    ``code`` is the stable ``ErrorCode`` to report; ``path`` is the path as
    the caller gave it. The message never contains an absolute host path.
    """

    code: ClassVar[ErrorCode]

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[type[SandboxError], tuple[str, str]]:
        # Keeps the exception picklable (subprocess isolation sends it back).
        return (type(self), (str(self), self.path))


class PathOutsideWorkspace(SandboxError):
    """The path is absolute, climbs above the root with ``..``, or goes
    through a symbolic link whose target leaves the root."""

    code = ErrorCode.PATH_OUTSIDE_WORKSPACE


class ForbiddenPath(SandboxError):
    """The path names a forbidden file (``.env`` in any component by
    default), a hard-linked regular file, or a file that is not regular."""

    code = ErrorCode.FORBIDDEN_PATH


class InvalidPath(SandboxError):
    """The path is not a usable path: not a str, empty, holding a NUL,
    too long, using the reserved temporary prefix, or looping through
    symbolic links."""

    code = ErrorCode.INVALID_ARGUMENT


class LimitExceeded(SandboxError):
    """A read would return more than the caller's ``max_bytes``."""

    code = ErrorCode.LIMIT_EXCEEDED


class CallCancelled(SandboxError):
    """The call's deadline passed: the runtime has answered TIMEOUT, and the
    handler, still running on its thread, may no longer change files."""

    code = ErrorCode.TIMEOUT


def _show(path: str) -> str:
    """The caller's path as it may appear in a message: quoted, bounded."""
    if len(path) > 200:
        path = path[:200] + "..."
    return repr(path)


def _not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such file or directory in the workspace", path)


def _is_a_directory(path: str) -> IsADirectoryError:
    return IsADirectoryError(errno.EISDIR, "is a directory", path)


def _not_a_directory(path: str) -> NotADirectoryError:
    return NotADirectoryError(errno.ENOTDIR, "not a directory", path)


@contextmanager
def _relative_errors(path: str) -> Iterator[None]:
    """Re-raise OS errors naming only the caller's relative path.

    The OS (and pyfakefs) may put a host path in an error's filename; the
    caller's path is what it needs, and all it may see.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno is None:
            raise
        try:
            clean = type(exc)(exc.errno, exc.strerror, path)
        except Exception:  # an OSError subclass with another constructor
            clean = OSError(exc.errno, exc.strerror, path)
        raise clean from None


# --------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a directory listing. Symbolic links are described, not
    followed: ``is_dir`` is False for a link to a directory."""

    name: str
    path: str
    """Relative POSIX path from the workspace root."""
    is_dir: bool
    is_symlink: bool
    size: int | None
    """Size in bytes of a regular file; None for anything else."""


@dataclass(frozen=True, slots=True)
class _Rules:
    forbidden: frozenset[str]  # casefolded
    allow_hardlinks: bool


class _RootHandle:
    """The root's descriptor, shared by a Workspace and its journal views."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


# --------------------------------------------------------------------------- lexical rules


def _is_absolute(path: str) -> bool:
    return path[:1] in ("/", "\\") or _DRIVE_PREFIX.match(path) is not None


def _check_valid(name: str, path: str) -> None:
    """Refuse one component that cannot be a file name here."""
    if "\0" in name:
        raise InvalidPath(f"path {_show(path)} contains a NUL character", path)
    try:
        size = len(os.fsencode(name))
    except UnicodeError:
        raise InvalidPath(f"path {_show(path)} cannot be encoded as a file name", path) from None
    if size > _MAX_NAME_BYTES:
        raise InvalidPath(
            f"path {_show(path)} has a component of {size} bytes; the limit is {_MAX_NAME_BYTES}",
            path,
        )
    if name.startswith(TEMP_PREFIX):
        raise InvalidPath(
            f"path {_show(path)} uses the prefix {TEMP_PREFIX!r}, reserved for in-flight writes",
            path,
        )


def _check_allowed(name: str, rules: _Rules, path: str) -> None:
    """Refuse one component that is a forbidden name."""
    if name.casefold() in rules.forbidden:
        raise ForbiddenPath(f"path {_show(path)} names the forbidden file {name!r}", path)


def _split(path: object, rules: _Rules) -> list[str]:
    """Validate ``path`` lexically and return its components, ``.`` and
    empty ones dropped, ``..`` kept (they are applied while walking)."""
    if not isinstance(path, str):
        raise InvalidPath(f"a path must be a str, not {type(path).__name__}", repr(path)[:200])
    if not path:
        raise InvalidPath("the path is empty; use '.' for the workspace root", path)
    if _is_absolute(path):
        raise PathOutsideWorkspace(
            "absolute paths are not allowed; give a path relative to the workspace root", path
        )
    parts = [part for part in _SEPARATORS.split(path) if part not in ("", ".")]
    depth = 0
    for part in parts:
        depth += -1 if part == ".." else 1
        if depth < 0:
            raise PathOutsideWorkspace(
                f"path {_show(path)} climbs above the workspace root with '..'", path
            )
    names = [part for part in parts if part != ".."]
    for name in names:
        _check_valid(name, path)
    if len(os.fsencode(path)) > _MAX_PATH_BYTES:
        raise InvalidPath(f"path {_show(path)} is longer than {_MAX_PATH_BYTES} bytes", path)
    for name in names:
        _check_allowed(name, rules, path)
    return parts


# --------------------------------------------------------------------------- resolution


class _Cursor:
    """A resolution in progress: the stack of directories entered from the
    root, each held open, so ``..`` pops instead of reopening a parent.

    With ``missing_ok`` (used by ``resolve``), components past the first
    missing directory are kept by name only ("virtual").
    """

    def __init__(self, root_fd: int, rules: _Rules, path: str, *, missing_ok: bool = False):
        self._root_fd = root_fd
        self._rules = rules
        self._path = path  # the caller's path, for messages
        self._missing_ok = missing_ok
        self._fds: list[int] = []
        self._names: list[str] = []
        self._expansions = 0
        self._last_link: str | None = None

    @property
    def fd(self) -> int:
        """Descriptor of the deepest directory entered."""
        return self._fds[-1] if self._fds else self._root_fd

    @property
    def virtual(self) -> bool:
        """True once a missing directory was passed (``missing_ok`` only)."""
        return len(self._names) > len(self._fds)

    def rel(self, name: str | None = None) -> str:
        """Relative POSIX path of the current directory, or of ``name`` in it."""
        names = self._names + ([name] if name is not None else [])
        return "/".join(names) or "."

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    def check(self, name: str) -> None:
        """Refuse a name met while walking (a link's target included)."""
        _check_valid(name, self._path)
        _check_allowed(name, self._rules, self._path)

    def enter(self, parts: Iterable[str], *, create: bool = False) -> None:
        """Enter each directory of ``parts`` in turn, following symlinks that
        stay inside; with ``create``, make missing directories."""
        pending = deque(parts)
        while pending:
            name = pending.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                self._leave()
                continue
            self.check(name)
            if self.virtual:
                self._names.append(name)
                continue
            opened = self._open_dir(name)
            if opened is None and create:
                with contextlib.suppress(FileExistsError):  # made meanwhile: use it
                    os.mkdir(name, dir_fd=self.fd)
                opened = self._open_dir(name)
            if opened is None:
                if not self._missing_ok:
                    raise _not_found(self._path)
                self._names.append(name)
            elif isinstance(opened, int):
                self._fds.append(opened)
                self._names.append(name)
            else:
                pending.extendleft(reversed(opened))

    def follow(self, name: str) -> str | None:
        """The entry ``name`` here was seen as a symlink: move to the
        directory its target names and return the target's final name (None
        when the target is a directory given as ``.``/``..``). If the entry
        is no longer a link, return ``name`` unchanged to be tried again."""
        target = self._read_link(name)
        if target is None:
            return name
        parts = [part for part in target if part != "."]
        if not parts or parts[-1] == "..":
            self.enter(parts)
            return None
        self.enter(parts[:-1])
        self.check(parts[-1])
        return parts[-1]

    def _leave(self) -> None:
        if not self._names:
            if self._last_link is not None:
                raise PathOutsideWorkspace(
                    f"path {_show(self._path)} leaves the workspace through the symlink "
                    f"{self._last_link!r}",
                    self._path,
                )
            raise PathOutsideWorkspace(
                f"path {_show(self._path)} climbs above the workspace root with '..'", self._path
            )
        if not self.virtual:
            os.close(self._fds.pop())
        self._names.pop()

    def _open_dir(self, name: str) -> int | list[str] | None:
        """Open the directory ``name`` here without following a link.

        Returns its descriptor, the components of the link's target when
        ``name`` is a symlink, or None when it does not exist.
        """
        while True:
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return None
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = self._read_link(name)
                if target is not None:
                    return target
                # Not a link at the moment readlink looked. If a directory or
                # a link is there now, the entry is being swapped: try again
                # (bounded by the count _read_link keeps). Anything else is
                # a file used as a directory.
                try:
                    st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                except FileNotFoundError:
                    return None
                if not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                    raise _not_a_directory(self._path) from None

    def _read_link(self, name: str) -> list[str] | None:
        """Components of the symlink ``name``'s target, checked; None if
        ``name`` is not (or no longer) a symlink. Counts as one expansion."""
        self._expansions += 1
        if self._expansions > MAX_SYMLINK_EXPANSIONS:
            raise InvalidPath(
                f"path {_show(self._path)} goes through more than "
                f"{MAX_SYMLINK_EXPANSIONS} symbolic links (a loop?)",
                self._path,
            )
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return None
            raise
        link = self.rel(name)
        self._last_link = link
        if not target or _is_absolute(target):
            raise PathOutsideWorkspace(
                f"path {_show(self._path)} goes through the symlink {link!r}, "
                "whose target is absolute",
                self._path,
            )
        return _SEPARATORS.split(target)


# --------------------------------------------------------------------------- the workspace


class Workspace:
    """File access confined beneath ``root``; see the module docstring for
    exactly what is guaranteed.

    ``forbidden_names`` are refused in any path component (case-insensitive).
    ``allow_hardlinks`` lets regular files with several links be read,
    overwritten and deleted. ``on_change(relative_path, previous)`` is called
    before every write or delete with the bytes it replaces (None: absent);
    if it raises, nothing is changed.

    Raises ``FileNotFoundError``/``NotADirectoryError`` (naming the host
    path: this is the operator's own input) when ``root`` is not a directory.
    """

    root: str
    """The root's host path, for the operator's own use; never shown in messages."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        forbidden_names: Iterable[str] = DEFAULT_FORBIDDEN_NAMES,
        allow_hardlinks: bool = False,
        on_change: OnChange | None = None,
    ) -> None:
        if isinstance(forbidden_names, str):
            raise TypeError("forbidden_names must be an iterable of names, not one str")
        self.root = os.path.abspath(os.fspath(root))
        self._rules = _Rules(
            forbidden=frozenset(name.casefold() for name in forbidden_names),
            allow_hardlinks=allow_hardlinks,
        )
        self._on_change = on_change
        self._on_access: OnAccess | None = None
        self._cancelled: threading.Event | None = None
        self._handle = _RootHandle(_open_root(self.root))
        self._owns_handle = True
        self._closed = False

    # ----------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Release the root's descriptor. Idempotent. A view made by
        ``with_journal`` only closes itself; the root stays open for the
        Workspace that opened it. Operations after close raise ValueError."""
        self._closed = True
        if self._owns_handle:
            self._handle.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def with_journal(
        self,
        on_change: OnChange,
        *,
        allow_hardlinks: bool | None = None,
        cancelled: threading.Event | None = None,
        on_access: OnAccess | None = None,
    ) -> Workspace:
        """A view of the same root (same descriptor, same rules) whose writes
        and deletes first call ``on_change(relative_path, previous)``.
        ``allow_hardlinks`` overrides that one rule for the view (a tool that
        opts in). Once ``cancelled`` is set, writes and deletes through the
        view raise ``CallCancelled`` before touching anything (not even a
        missing parent directory is made). ``on_access(path)`` hears every
        path the view is asked about, as given, before it is walked (what a
        recorder keeps). Closing the view does not close the root."""
        view = object.__new__(Workspace)
        view.root = self.root
        view._rules = (
            self._rules
            if allow_hardlinks is None
            else _Rules(forbidden=self._rules.forbidden, allow_hardlinks=allow_hardlinks)
        )
        view._on_change = on_change
        view._on_access = on_access
        view._cancelled = cancelled
        view._handle = self._handle
        view._owns_handle = False
        view._closed = False
        return view

    @property
    def allow_hardlinks(self) -> bool:
        """Whether hard-linked regular files may be used."""
        return self._rules.allow_hardlinks

    # ----------------------------------------------------------------- paths

    def normalize(self, path: str) -> str:
        """The normalized relative POSIX path (``"."`` for the root), from the
        text alone: no file is touched and symlinks are not considered.

        Raises ``InvalidPath``, ``PathOutsideWorkspace`` or ``ForbiddenPath``
        per the path rules of the module docstring.
        """
        names: list[str] = []
        for part in _split(path, self._rules):
            if part == "..":
                names.pop()  # _split refused climbing above the root
            else:
                names.append(part)
        return "/".join(names) or "."

    def resolve(self, path: str) -> str:
        """The canonical relative POSIX path of what ``path`` really names,
        symlinks followed (``"."`` for the root). Missing trailing components
        are allowed (a path about to be written); past the first missing
        directory, ``..`` just drops the name before it. This is where a
        read lands, and where ``write_bytes`` lands unless the final entry is
        itself a symlink (a write replaces the link). The answer holds for
        the moment of the call only.

        Raises what ``normalize`` raises, ``PathOutsideWorkspace`` for a link
        leading outside, ``InvalidPath`` for a link loop, and
        ``NotADirectoryError`` when a file is used as a directory.
        """
        self._accessed(path)
        return self._resolve(path)[0]

    def resolve_with_size(self, path: str) -> tuple[str, int | None]:
        """``resolve``, and in the same walk the size in bytes of the regular
        file the path names (None when it is missing, a directory or not a
        regular file). The answer holds for the moment of the call only."""
        self._accessed(path)
        resolved, st = self._resolve(path)
        size = st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None
        return resolved, size

    def _resolve(self, path: str) -> tuple[str, os.stat_result | None]:
        parts = _split(path, self._rules)
        with self._cursor(path, missing_ok=True) as cursor:
            if not parts or parts[-1] == "..":
                cursor.enter(parts)
                return cursor.rel(), None
            cursor.enter(parts[:-1])
            name: str | None = parts[-1]
            final: os.stat_result | None = None
            while name is not None and not cursor.virtual:
                try:
                    st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
                except FileNotFoundError:
                    break
                if not stat.S_ISLNK(st.st_mode):
                    final = st
                    break
                name = cursor.follow(name)
            return cursor.rel(name), final

    def exists(self, path: str) -> bool:
        """Whether ``path`` names something, symlinks followed. False when it
        (or a directory on the way) is missing; raises for refused paths."""
        self._accessed(path)
        try:
            self._stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def size(self, path: str) -> int | None:
        """Size in bytes of the regular file ``path`` names, None if nothing
        is there. Raises ``IsADirectoryError`` for a directory and
        ``ForbiddenPath`` for a special file. A hard-linked file's size is
        given (``list_dir`` shows it too); its content is what is refused."""
        self._accessed(path)
        try:
            st = self._stat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise _is_a_directory(path)
        if not stat.S_ISREG(st.st_mode):
            raise ForbiddenPath(f"path {_show(path)} is not a regular file", path)
        return st.st_size

    # ----------------------------------------------------------------- reading

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The content of the regular file ``path`` names, symlinks followed.

        Raises ``LimitExceeded`` when the file holds more than ``max_bytes``
        (never reading more than ``max_bytes + 1``), ``ForbiddenPath`` for a
        hard-linked or special file, ``FileNotFoundError`` and
        ``IsADirectoryError`` for the ordinary cases.
        """
        self._accessed(path)
        with self._final(path) as (cursor, name):
            fd = self._open_final_for_read(cursor, name, path)
            try:
                return self._read_fd(fd, path, max_bytes)
            finally:
                os.close(fd)

    def read_text(self, path: str, *, max_bytes: int | None = None, encoding: str = "utf-8") -> str:
        """``read_bytes`` decoded; ``UnicodeDecodeError`` if it is not valid text."""
        return self.read_bytes(path, max_bytes=max_bytes).decode(encoding)

    # ----------------------------------------------------------------- writing

    def write_bytes(self, path: str, data: bytes, *, make_parents: bool = True) -> None:
        """Replace ``path`` with ``data`` atomically (see the module docstring).

        Missing parent directories are made when ``make_parents``. A symlink
        at the final name is replaced, not written through. Raises
        ``ForbiddenPath`` for a hard-linked or special file there,
        ``IsADirectoryError`` for a directory, ``FileNotFoundError`` for a
        missing parent without ``make_parents``. On any failure the old
        content stays and no temporary file is left.
        """
        self._accessed(path)
        self._refuse_if_cancelled(path)
        self._write(path, data, make_parents=make_parents, journal=True)

    def write_text(
        self, path: str, text: str, *, encoding: str = "utf-8", make_parents: bool = True
    ) -> None:
        """``write_bytes`` of ``text`` encoded."""
        self.write_bytes(path, text.encode(encoding), make_parents=make_parents)

    def delete(self, path: str) -> None:
        """Remove the file (or symlink entry) ``path``; the journal hears of
        it first. Raises ``FileNotFoundError``, ``IsADirectoryError`` for a
        directory, ``ForbiddenPath`` for a hard-linked or special file."""
        self._accessed(path)
        self._refuse_if_cancelled(path)
        self._delete(path, journal=True, missing_ok=False)

    def _accessed(self, path: str) -> None:
        if self._on_access is not None:
            self._on_access(path)

    def _refuse_if_cancelled(self, path: str) -> None:
        if self._cancelled is not None and self._cancelled.is_set():
            raise CallCancelled(
                f"the call timed out: its handler may not change {_show(path)}", path
            )

    def restore(self, path: str, previous: bytes | None) -> None:
        """Put back what a journal recorded: write ``previous``, or remove
        the file when it is None (already absent is fine). ``on_change`` is
        not called. Raises as ``write_bytes``/``delete`` do."""
        if previous is None:
            self._delete(path, journal=False, missing_ok=True)
        else:
            self._write(path, previous, make_parents=True, journal=False)

    # ----------------------------------------------------------------- listing

    def list_dir(self, path: str = ".") -> list[Entry]:
        """The entries of the directory ``path`` names, sorted by name.

        Symlinks inside are described, not followed. In-flight temporary
        files and forbidden names are left out. Raises ``NotADirectoryError``
        and ``FileNotFoundError`` for the ordinary cases.
        """
        self._accessed(path)
        entries: list[Entry] = []
        with self._directory(path) as cursor:
            for name in sorted(os.listdir(cursor.fd)):
                if self._hidden(name):
                    continue
                try:
                    st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed since the listing
                regular = stat.S_ISREG(st.st_mode)
                entries.append(
                    Entry(
                        name=name,
                        path=cursor.rel(name),
                        is_dir=stat.S_ISDIR(st.st_mode),
                        is_symlink=stat.S_ISLNK(st.st_mode),
                        size=st.st_size if regular else None,
                    )
                )
        return entries

    def walk(self, path: str = ".") -> list[str]:
        """Every regular file beneath the directory ``path`` names, as sorted
        relative POSIX paths. Symlinks beneath it are never followed;
        in-flight temporary files and forbidden names are left out."""
        self._accessed(path)
        found: list[str] = []
        with self._directory(path) as cursor:
            prefix = cursor.rel()
            self._walk_fd(cursor.fd, "" if prefix == "." else prefix + "/", found, path)
        return sorted(found)

    # ----------------------------------------------------------------- internals

    def _root_fd(self) -> int:
        fd = self._handle.fd
        if self._closed or fd is None:
            raise ValueError("the workspace is closed")
        return fd

    @contextmanager
    def _cursor(self, path: str, *, missing_ok: bool = False) -> Iterator[_Cursor]:
        cursor = _Cursor(self._root_fd(), self._rules, path, missing_ok=missing_ok)
        try:
            with _relative_errors(path):
                yield cursor
        finally:
            cursor.close()

    @contextmanager
    def _final(
        self, path: str, *, make_parents: bool = False
    ) -> Iterator[tuple[_Cursor, str | None]]:
        """Enter the parent of ``path``'s final component; yield the cursor
        and that component (None when the path names a directory by ``.``,
        ``..`` or the root)."""
        parts = _split(path, self._rules)
        with self._cursor(path) as cursor:
            if not parts or parts[-1] == "..":
                cursor.enter(parts)
                yield cursor, None
            else:
                cursor.enter(parts[:-1], create=make_parents)
                yield cursor, parts[-1]

    @contextmanager
    def _directory(self, path: str) -> Iterator[_Cursor]:
        """Enter the directory ``path`` names, symlinks followed."""
        parts = _split(path, self._rules)
        with self._cursor(path) as cursor:
            cursor.enter(parts)
            yield cursor

    def _stat(self, path: str) -> os.stat_result:
        """Stat what ``path`` names, symlinks followed."""
        with self._final(path) as (cursor, name):
            while name is not None:
                try:
                    st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
                except FileNotFoundError:
                    raise _not_found(path) from None
                if not stat.S_ISLNK(st.st_mode):
                    return st
                name = cursor.follow(name)
            return os.fstat(cursor.fd)

    def _open_final_for_read(self, cursor: _Cursor, name: str | None, path: str) -> int:
        while name is not None:
            try:
                return os.open(name, _READ_FLAGS, dir_fd=cursor.fd)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise _not_found(path) from None
                if exc.errno != errno.ELOOP:
                    raise
            name = cursor.follow(name)
        raise _is_a_directory(path)

    def _check_regular(self, st: os.stat_result, path: str) -> None:
        """Refuse anything but a regular file with one link (unless allowed)."""
        if stat.S_ISDIR(st.st_mode):
            raise _is_a_directory(path)
        if not stat.S_ISREG(st.st_mode):
            raise ForbiddenPath(f"path {_show(path)} is not a regular file", path)
        if st.st_nlink > 1 and not self._rules.allow_hardlinks:
            raise ForbiddenPath(
                f"path {_show(path)} is a hard-linked file ({st.st_nlink} links); "
                "it may share its content with a file outside the workspace",
                path,
            )

    def _read_fd(self, fd: int, path: str, max_bytes: int | None) -> bytes:
        st = os.fstat(fd)
        self._check_regular(st, path)
        if max_bytes is not None and st.st_size > max_bytes:
            raise LimitExceeded(
                f"path {_show(path)} is {st.st_size} bytes, over the limit of {max_bytes}", path
            )
        # The file may grow after fstat: never read past max_bytes + 1.
        budget = None if max_bytes is None else max_bytes + 1
        chunks: list[bytes] = []
        total = 0
        while budget is None or total < budget:
            want = _READ_CHUNK if budget is None else min(_READ_CHUNK, budget - total)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise LimitExceeded(
                f"path {_show(path)} grew past the limit of {max_bytes} bytes while read", path
            )
        return b"".join(chunks)

    def _previous(
        self, dir_fd: int, name: str, path: str, *, want_content: bool
    ) -> tuple[bytes | None, int | None]:
        """What the entry ``name`` holds before it is replaced or removed:
        (content or None, permission bits or None). Only regular files have
        content; a symlink entry counts as absent."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None, None
        if stat.S_ISLNK(st.st_mode):
            return None, None
        self._check_regular(st, path)
        mode = stat.S_IMODE(st.st_mode)
        if not want_content:
            return None, mode
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):
                return None, None  # replaced meanwhile; it held no file content we saw
            raise
        try:
            return self._read_fd(fd, path, None), mode
        finally:
            os.close(fd)

    def _write(self, path: str, data: bytes, *, make_parents: bool, journal: bool) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        notify = self._on_change if journal else None
        with self._final(path, make_parents=make_parents) as (cursor, name):
            if name is None:
                raise _is_a_directory(path)
            previous, mode = self._previous(cursor.fd, name, path, want_content=notify is not None)
            if notify is not None:
                notify(cursor.rel(name), previous)
            _replace_atomically(cursor.fd, name, data, mode)

    def _delete(self, path: str, *, journal: bool, missing_ok: bool) -> None:
        notify = self._on_change if journal else None
        try:
            with self._final(path) as (cursor, name):
                if name is None:
                    raise _is_a_directory(path)
                try:
                    st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
                except FileNotFoundError:
                    raise _not_found(path) from None
                if stat.S_ISDIR(st.st_mode):
                    raise _is_a_directory(path)
                previous, _ = self._previous(cursor.fd, name, path, want_content=notify is not None)
                if notify is not None:
                    notify(cursor.rel(name), previous)
                os.unlink(name, dir_fd=cursor.fd)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def _hidden(self, name: str) -> bool:
        return name.startswith(TEMP_PREFIX) or name.casefold() in self._rules.forbidden

    def _walk_fd(self, dir_fd: int, prefix: str, found: list[str], path: str) -> None:
        for name in os.listdir(dir_fd):
            if self._hidden(name):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append(prefix + name)
            elif stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                        continue  # removed or swapped for a link meanwhile: not followed
                    raise
                try:
                    self._walk_fd(child, prefix + name + "/", found, path)
                finally:
                    os.close(child)


def _open_root(root: str) -> int:
    """The root's descriptor; a missing or non-directory root raises the
    same error types with a message that says what to do."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT,
            f"the workspace directory {root} does not exist: create it first "
            "(a Workspace or ToolRuntime never creates its root)",
            root,
        ) from None
    except NotADirectoryError:
        raise NotADirectoryError(
            errno.ENOTDIR, f"the workspace {root} is not a directory: give a directory", root
        ) from None


def _replace_atomically(dir_fd: int, name: str, data: bytes, mode: int | None) -> None:
    """Write ``data`` to a fresh temporary file in ``dir_fd``, fsync it, and
    rename it over ``name``; remove the temporary file if anything fails."""
    temp = TEMP_PREFIX + secrets.token_hex(8)
    fd = os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=dir_fd)
    renamed = False
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        renamed = True
    finally:
        if not renamed:
            # Best effort: the original error is the one to report.
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
    os.fsync(dir_fd)
