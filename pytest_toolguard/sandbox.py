"""Workspace: file access confined to one directory tree, safe against races.

A ``Workspace`` may be used to access only the files beneath a single root
directory. Every path given to its methods is relative to that root, or an
absolute path spelt beneath it (see "Absolute paths"). If any
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

Absolute paths
    An absolute path whose leading components are the root's, spelt as
    given to the constructor (made absolute) or as its real path, names
    the relative path that follows them: ``/ws/src/a.py`` is ``src/a.py``,
    ``/ws`` is ``.``. Empty and ``.`` components are skipped in that
    comparison (``//ws/./src``), nothing else: the ``..`` and links of the
    remainder are walked from the root's descriptor like any relative path,
    so ``/ws/../ws/x`` climbs above the root and ``/ws/link/x`` goes where
    ``link`` leads. Every other absolute path (``/ws2/x`` beside it,
    ``/tmp/../ws/x``, the root reached through another link) is refused as
    ``PathOutsideWorkspace``, as before. ``relative(path)`` gives the path
    a method walks; an error's ``path`` is that relative path.

Symbolic links
    Methods follow symbolic links, one component at a time, from directory
    descriptors, but a link may not reference a location outside the root:
    a link whose target is absolute, or whose ``..`` climbs above the root,
    raises ``PathOutsideWorkspace``. A link's target is read with the same
    grammar as a path (both separators), and is subject to the same forbidden
    names. A ``..`` is applied to the directory actually reached (as the
    kernel does), never above the root. More than 40 link expansions in one
    resolution raise ``InvalidPath`` (a loop is not an escape).
    ``write_bytes`` never follows a symlink at the final component, nor
    replaces it: it raises ``ForbiddenPath`` (``resolve_write`` says where a
    write lands: the parent resolved, plus the final name). ``delete`` removes
    the link entry itself. ``walk`` and ``list_dir`` never follow links
    beneath the directory they start from.

Races
    Each directory is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to
    the descriptor of its parent, starting from a descriptor of the root held
    open since construction, and files are opened with ``O_NOFOLLOW``. A
    symlink swapped in concurrently is therefore either seen and checked, or
    makes the open fail; it cannot redirect an open outside the root. There
    is no check-then-open window.

Locations: one resolution from the check to the act
    ``locate(path, mode)`` resolves a path once and answers a ``Location``:
    the canonical ``resolved`` path a caller (the policy) judges, and the
    directory holding the entry, kept open. A view made by
    ``with_journal(locations=...)`` serves an operation of that mode on that
    exact ``path`` from the held directory: the path is not resolved again,
    and no symbolic link is followed past the held directory (one met there
    was swapped in after the check: ``ForbiddenPath``, "changed while the
    call ran"). So a swap or rename between the check and the act cannot
    move the act to a directory that was not checked, and the call pays
    for one resolution instead of two. Read locations follow links through
    the final component (a read of a directory holds the directory itself);
    write locations hold the parent and name the final entry. Missing
    directories of a write are made from the held directory, without
    following links. Paths a view was not given locations for are resolved
    as usual.

Rollback: undoing a journaled change
    A journaled view tells ``on_change`` what an entry held before a write
    or delete, and ``on_leave`` what the change will leave (``Leaves``: the
    size and SHA-256 of the bytes written, or None). ``undo`` puts the
    previous state back through the same cursor, following no symbolic link
    at all (the journal records the canonical path, so every directory on
    it was real when the change was made: a link met now was planted since,
    ``ForbiddenPath``), and only while the entry still is what the change
    left, judged through the descriptor it opened and checked once more by
    name right before the act (``RollbackConflict`` otherwise). An entry
    already back to what it held before is left alone.

Hard links and special files
    A regular file with more than one hard link may be a link to a file
    outside the root: reading, overwriting or deleting it raises
    ``ForbiddenPath`` unless ``allow_hardlinks=True``. Reading anything but a
    regular file (FIFO, device, socket) raises ``ForbiddenPath``.

Writes
    ``write_bytes`` is atomic: the new content goes to a temporary file
    (``.toolguard-tmp-<hex>``, or ``.toolguard-tmp-<tag>-<hex>`` through a view
    given a call's ``temp_tag``, created with ``O_EXCL | O_NOFOLLOW`` in the
    same directory), is fsynced, and is renamed over the name; the directory
    is then fsynced. A reader sees the old content or the new, never a torn
    file; on failure the temporary file is removed and the old content stays.
    Temporary files are never listed by ``list_dir`` or ``walk``; those a
    process killed mid-write leaves behind are removed by
    ``remove_temporaries`` (``ToolRuntime.recover`` does, for the calls it
    marks interrupted). A replaced
    file keeps its permission bits (``0o777`` of them), and its temporary
    file is never more open than they are: it is created 0600 and given
    them before any content is written. A new file gets 0666 less the umask.

Errors
    Every refusal is a ``SandboxError`` whose ``code`` is an ``ErrorCode``
    and whose ``path`` is the path as the caller gave it. Ordinary misses
    raise ``FileNotFoundError``, ``IsADirectoryError`` or
    ``NotADirectoryError`` (whose ``filename`` is the caller's path). No
    message ever holds an absolute host path: only the caller's relative
    path, or paths relative to the root. A message quotes and bounds the
    path (``show_path``); ``SandboxError.describe(redact)`` gives it with
    the raw path redacted before that, which is what may be stored.

Concurrency
    A Workspace may be used from several threads at once: each operation
    opens and closes its own descriptors and shares only the root's.
    ``close()`` must not race with operations in flight.

What a Workspace does not guarantee
    - The root is the directory opened at construction. If it is moved,
      the Workspace follows it to its new place; ``root`` keeps the old name.
    - A directory moved out of the root while an operation holds it open may
      receive that operation's read or write (the same limit as Go's
      ``os.Root``); a ``Location`` holds its directory for a whole call, so
      the window is the call. What was checked is the directory, not its
      name: a checked directory renamed elsewhere inside the root (by
      another process) still receives the call. ``..`` never reopens a
      parent, so it cannot be used to climb out through such a directory.
    - It does not stop crossing mount points or bind mounts beneath the
      root, and ``resolve``, ``exists`` and ``size`` answer for the moment
      they ran: another process may change the tree right after.
    - ``undo`` does not lock out other writers: one that renames over the
      entry, or writes into the same inode, in the few system calls between
      its last check and its rename or unlink is not detected (POSIX has no
      compare-and-swap of a directory entry). A directory renamed away after
      ``undo`` opened it still receives the undo, as for any operation.
      Permission bits are not part of what it compares.
    - The change journal (``on_change``) records a regular file's content
      or a symlink's target (``Symlink``, recreated as a link by
      ``restore``), not owners or timestamps; a file over ``keep_at_most``
      bytes is not read nor kept (``Unkept``), so it cannot be restored.
      Replaced files keep their permission bits, not their owner.
    - Names holding a ``\\`` (legal on POSIX) cannot be addressed, since
      ``\\`` is a separator here: ``list_dir``, ``walk`` and ``read_tree``
      leave them out rather than hand back a path that would be split again
      (``public/..\\private\\x`` is one name, not a way up).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import hashlib
import os
import re
import secrets
import stat
import threading
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Literal, NoReturn, TypeAlias

from .contract import ErrorCode
from .errors import ToolguardError
from .file_writes import write_all


@dataclass(frozen=True, slots=True)
class Symlink:
    """A symbolic link as the change journal keeps it: its target, as read."""

    target: str


@dataclass(frozen=True, slots=True)
class Unkept:
    """A regular file too large for the journal to keep (``size`` bytes, over
    the view's ``keep_at_most``): it was never read, and cannot be restored."""

    size: int


Previous: TypeAlias = bytes | Symlink | Unkept | None
"""What an entry held before a write or delete: a regular file's bytes, a
symbolic link (restored as a link), a file too large to keep (``Unkept``),
or None (nothing was there)."""


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a write left at a path, as a rollback checks it is still there:
    the size and SHA-256 (hex) of the bytes written."""

    size: int
    sha256: str

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview) -> Fingerprint:
        return cls(len(data), hashlib.sha256(data).hexdigest())


Leaves: TypeAlias = Fingerprint | None
"""What a write or delete leaves at a path: the fingerprint of the bytes
written, or None (nothing: the entry was deleted)."""


class Unrecorded(enum.Enum):
    """What a change left, when the journal was never told (a view made
    without ``on_leave``): ``undo`` then cannot tell a later change from the
    call's own, and restores without that check."""

    UNRECORDED = "unrecorded"


UNRECORDED = Unrecorded.UNRECORDED

DEFAULT_KEEP_AT_MOST = 16 * 1024 * 1024
"""Bytes of a replaced or deleted file a journaled view keeps, at most."""

AccessMode: TypeAlias = Literal["read", "write"]
"""A read follows links through the final component; a write acts on the
final entry itself (never following nor replacing a link there)."""

OnChange: TypeAlias = Callable[[str, Previous], None]
"""Called as ``on_change(relative_path, previous)`` before a write or delete
replaces ``relative_path``; see ``Previous``."""

OnLeave: TypeAlias = Callable[[str, Leaves], None]
"""Called as ``on_leave(relative_path, leaves)`` right after ``on_change``,
still before the change: what the write or delete will leave there."""

OnAccess: TypeAlias = Callable[[str], None]
"""``on_access(path)``: a path as a handler gave it to a read, a listing,
``exists``, ``size``, ``resolve``, a write or a delete (before the walk)."""

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


class SandboxError(ToolguardError):
    """A path or operation the workspace refuses.

    ``code`` is the stable ``ErrorCode`` to report; ``path`` is the path as
    the caller gave it; ``quoted`` holds the other raw values the message
    shows (link names). The message never contains an absolute host path.
    Where it may be stored, use ``describe(redact)``, not ``str()``.
    """

    code: ClassVar[ErrorCode]

    def __init__(self, message: str, path: str, *, quoted: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.path = path
        self.quoted = quoted

    def describe(self, redact: Callable[[str], str]) -> str:
        """The message with each value it shows through ``show_path`` (the
        path, link names) redacted by ``redact`` *before* it is quoted and
        cut: ``repr`` turns a tab into ``\\t`` and the cut may fall inside a
        secret, after which no pattern would recognise it."""
        text = str(self)
        for raw in dict.fromkeys((self.path, *self.quoted)):
            if isinstance(raw, str) and show_path(raw) in text:
                text = text.replace(show_path(raw), show_path(redact(raw)))
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps the exception picklable (subprocess isolation sends it back).
        return (_rebuild, (type(self), str(self), self.path, self.quoted))


def _rebuild(
    kind: type[SandboxError], message: str, path: str, quoted: tuple[str, ...]
) -> SandboxError:
    return kind(message, path, quoted=quoted)


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
    """A read would return more than the caller's ``max_bytes``, or a
    restore was asked for a file too large to have been kept (``Unkept``)."""

    code = ErrorCode.LIMIT_EXCEEDED


class RollbackConflict(SandboxError):
    """A rollback met a path that is no longer what the call left: a later
    write, delete or rename over it (by another call, session or process).
    ``conflicts`` lists every such path; ``restored`` those already put
    back before the conflict was met (empty unless the workspace changed
    while the rollback ran)."""

    code = ErrorCode.ROLLBACK_CONFLICT

    def __init__(
        self,
        message: str,
        path: str,
        *,
        quoted: tuple[str, ...] = (),
        conflicts: tuple[str, ...] = (),
        restored: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, path, quoted=quoted)
        self.conflicts = conflicts or (path,)
        self.restored = restored

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_conflict, (str(self), self.path, self.conflicts, self.restored))


def _rebuild_conflict(
    message: str, path: str, conflicts: tuple[str, ...], restored: tuple[str, ...]
) -> RollbackConflict:
    return RollbackConflict(message, path, conflicts=conflicts, restored=restored)


class CallCancelled(SandboxError):
    """The call's deadline passed: the runtime has answered TIMEOUT, and the
    handler, still running on its thread, may no longer change files."""

    code = ErrorCode.TIMEOUT


def show_path(path: str) -> str:
    """A path as a message shows it: quoted (``repr``) and bounded to 200
    characters. ``SandboxError.describe`` finds it by this form to redact it
    first: build messages that quote a path with this function."""
    if len(path) > 200:
        path = path[:200] + "..."
    return repr(path)


_show = show_path


def _not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such file or directory in the workspace", path)


def _is_a_directory(path: str) -> IsADirectoryError:
    return IsADirectoryError(errno.EISDIR, "is a directory", path)


def _not_a_directory(path: str) -> NotADirectoryError:
    return NotADirectoryError(errno.ENOTDIR, "not a directory", path)


def _raise_relative(exc: OSError, path: str) -> None:
    """Raise ``exc`` again naming only the caller's relative ``path`` (an
    error without an errno: return, for the caller to re-raise it as it is).

    The OS (and pyfakefs) may put a host path in an error's filename; the
    caller's path is what it needs, and all it may see."""
    if exc.errno is None:
        return
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


def _root_spellings(root: str) -> tuple[list[str], ...]:
    """The components of ``root`` (absolute) and of its real path, each once:
    the spellings ``Workspace.relative`` finds at the start of a path."""
    spellings = (root, os.path.realpath(root))
    return tuple(
        [name for name in spelt.split("/") if name not in ("", ".")]
        for spelt in dict.fromkeys(spellings)
    )


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

    def __init__(
        self,
        root_fd: int,
        rules: _Rules,
        path: str,
        *,
        missing_ok: bool = False,
        base: tuple[str, ...] = (),
        follow_links: bool = True,
        changed: str = "while the call ran",
    ):
        self._root_fd = root_fd  # where the walk starts: the root, or a Location's directory
        self._rules = rules
        self._path = path  # the caller's path, for messages
        self._missing_ok = missing_ok
        self._base = list(base)  # names from the root to root_fd, for rel()
        self._follow_links = follow_links
        self._changed = changed  # when a link met without following was planted
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
        names = self._base + self._names + ([name] if name is not None else [])
        return "/".join(names) or "."

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    # A class, not a generator's context manager: every operation enters one.
    def __enter__(self) -> _Cursor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if isinstance(exc, OSError):
                _raise_relative(exc, self._path)
        finally:
            self.close()

    def detach(self) -> tuple[int | None, tuple[str, ...], tuple[str, ...]]:
        """Hand over the deepest directory entered: (its descriptor, now the
        caller's to close, or None for the starting one; the names from the
        root to it; the virtual names past it)."""
        real = len(self._fds)
        fd = self._fds.pop() if self._fds else None
        names = self._base + self._names
        depth = len(self._base) + real
        return fd, tuple(names[:depth]), tuple(names[depth:])

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
                self._refuse_if_pinned(name)
                pending.extendleft(reversed(opened))

    def follow(self, name: str) -> str | None:
        """The entry ``name`` here was seen as a symlink: move to the
        directory its target names and return the target's final name (None
        when the target is a directory given as ``.``/``..``). If the entry
        is no longer a link, return ``name`` unchanged to be tried again."""
        self._refuse_if_pinned(name)
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

    def _refuse_if_pinned(self, name: str) -> None:
        """Past a ``Location`` (or on a rollback's path, made of the real
        directories a change went through), what was judged is reached
        without a second resolution: a symlink met there was swapped in
        since, wherever it points."""
        if not self._follow_links:
            raise ForbiddenPath(
                f"path {_show(self._path)} changed {self._changed}: "
                f"{_show(self.rel(name))} is now a symbolic link",
                self._path,
                quoted=(self.rel(name),),
            )

    def _leave(self) -> None:
        if not self._names:
            if self._last_link is not None:
                raise PathOutsideWorkspace(
                    f"path {_show(self._path)} leaves the workspace through the symlink "
                    f"{_show(self._last_link)}",
                    self._path,
                    quoted=(self._last_link,),
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
        self._refuse_if_pinned(name)  # before its target is judged: one code for any link
        link = self.rel(name)
        self._last_link = link
        if not target or _is_absolute(target):
            raise PathOutsideWorkspace(
                f"path {_show(self._path)} goes through the symlink {_show(link)}, "
                "whose target is absolute",
                self._path,
                quoted=(link,),
            )
        return _SEPARATORS.split(target)


class _Final:
    """``Workspace._final``'s block: the cursor entered into the parent of a
    path's final component, and that component. A class, not a generator's
    context manager: every read and write enters one."""

    __slots__ = ("_cursor", "_parts", "_make_parents")

    def __init__(self, cursor: _Cursor, parts: list[str], make_parents: bool) -> None:
        self._cursor = cursor
        self._parts = parts
        self._make_parents = make_parents

    def __enter__(self) -> tuple[_Cursor, str | None]:
        cursor, parts = self._cursor, self._parts
        try:
            if not parts or parts[-1] == "..":
                cursor.enter(parts)
                return cursor, None
            cursor.enter(parts[:-1], create=self._make_parents)
            return cursor, parts[-1]
        except BaseException as exc:
            # As the block would: closed, and an OS error naming the path only.
            cursor.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._cursor.__exit__(kind, exc, traceback)


class Location:
    """Where a path resolved, held open: ``Workspace.locate``'s answer.

    ``resolved`` is the canonical relative path, ``size`` the size of the
    regular file it named (None otherwise), both as of the resolution. The
    location holds the directory that contains the entry (or, for a read of
    a directory, that directory) open, so a view made with
    ``with_journal(locations=...)`` reaches that same directory again for
    ``path`` with no second resolution: nothing renamed or swapped in since
    can redirect it. Close it when the call is done; it is also closed when
    garbage collected.
    """

    def __init__(
        self,
        path: str,
        mode: AccessMode,
        resolved: str,
        size: int | None,
        fd: int | None,
        base: tuple[str, ...],
        pending: tuple[str, ...],
        name: str | None,
        handle: _RootHandle,
    ) -> None:
        self.path = path
        self.mode: AccessMode = mode
        self.resolved = resolved
        self.size = size
        self._fd = fd  # None: the root's own descriptor (not ours to close)
        self._handle = handle
        self.base = base
        self.parts = pending + ((name,) if name is not None else ())
        """What remains to walk from the held directory: missing directories
        (made by a write), then the final name (None: the directory itself)."""
        self._closer = (
            weakref.finalize(self, _close_quietly, os.close, fd) if fd is not None else None
        )

    @property
    def fd(self) -> int:
        fd = self._fd if self._fd is not None else self._handle.fd
        if fd is None or (self._closer is not None and not self._closer.alive):
            raise ValueError(f"the location of {show_path(self.path)} is closed")
        return fd

    def close(self) -> None:
        """Release the held directory. Idempotent."""
        if self._closer is not None:
            self._closer()

    def __repr__(self) -> str:
        return f"Location({self.path!r}, {self.mode!r}, resolved={self.resolved!r})"


def _close_quietly(close: Callable[[int], None], fd: int) -> None:
    # ``close`` is the one in use when the descriptor was opened (a fake
    # filesystem's, in replay), which may be gone by a late collection.
    with contextlib.suppress(OSError):
        close(fd)


def _refuse_final_link(cursor: _Cursor, name: str, path: str) -> NoReturn:
    """A write met the symlink ``name`` at its final component: raise what
    following it would (``PathOutsideWorkspace`` for a link leaving the root, a
    loop, a forbidden name), else ``ForbiddenPath``: a write neither follows
    nor replaces a link."""
    cursor.follow(name)
    raise ForbiddenPath(
        f"path {_show(path)} is a symbolic link; a write neither follows nor replaces "
        "a link: write to the file it points to",
        path,
    )


class _Found:
    """What ``undo`` finds at a journaled name, looked at without following
    a link: nothing, a symbolic link (its target), or an entry held open by
    its descriptor (``st`` its ``fstat``; the lstat of what could not be
    opened). A regular file's content is judged through that descriptor."""

    def __init__(
        self,
        path: str,
        *,
        fd: int | None = None,
        st: os.stat_result | None = None,
        link: str | None = None,
    ) -> None:
        self.path = path  # as recorded, for messages
        self.fd = fd
        self.st = st
        self.link = link
        self._digest: str | None = None

    @classmethod
    def look(cls, cursor: _Cursor, name: str, path: str) -> _Found:
        """The entry ``name`` in the cursor's directory. Only a regular file
        is opened (a device or FIFO never is), and kept only if the
        descriptor is the file the ``lstat`` saw."""
        if cursor.virtual:
            return cls(path)
        for _ in range(3):
            try:
                st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
            except FileNotFoundError:
                return cls(path)
            if stat.S_ISLNK(st.st_mode):
                try:
                    return cls(path, link=os.readlink(name, dir_fd=cursor.fd))
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.EINVAL):
                        raise
                    continue  # no longer a link: look again
            if not stat.S_ISREG(st.st_mode):
                return cls(path, st=st)
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=cursor.fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP):
                    continue  # swapped meanwhile: look again
                if exc.errno in (errno.EACCES, errno.EPERM):
                    return cls(path, st=st)  # unreadable: it cannot be judged
                raise
            try:
                opened = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
            if (opened.st_dev, opened.st_ino) == (st.st_dev, st.st_ino):
                return cls(path, fd=fd, st=opened)
            os.close(fd)
        raise RollbackConflict(
            f"rollback conflict: path {_show(path)} kept changing while the rollback looked at it",
            path,
        )

    def __enter__(self) -> _Found:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @property
    def absent(self) -> bool:
        return self.st is None and self.link is None

    @property
    def regular(self) -> bool:
        return self.fd is not None and self.st is not None and stat.S_ISREG(self.st.st_mode)

    @property
    def mode(self) -> int | None:
        """Permission bits a restored file keeps (None: a new file's)."""
        return self.st.st_mode & 0o777 if self.regular and self.st is not None else None

    def holds(self, state: Previous | Fingerprint) -> bool:
        """Whether the entry is ``state``: absent for None, the same link
        target, or a regular file of the same size and SHA-256."""
        if state is None:
            return self.absent
        if isinstance(state, Symlink):
            return self.link == state.target
        if isinstance(state, Unkept) or not self.regular or self.st is None:
            return False
        size = state.size if isinstance(state, Fingerprint) else len(state)
        if self.st.st_size != size:
            return False
        want = state if isinstance(state, Fingerprint) else Fingerprint.of(state)
        return self._sha256() == want.sha256

    def _sha256(self) -> str:
        if self._digest is None:
            assert self.fd is not None and self.st is not None
            digest, total = hashlib.sha256(), 0
            while chunk := os.read(self.fd, _READ_CHUNK):
                digest.update(chunk)
                total += len(chunk)
            if total != self.st.st_size or _modified(os.fstat(self.fd), self.st):
                raise self._changed_meanwhile()
            self._digest = digest.hexdigest()
        return self._digest

    def conflict(self) -> SandboxError:
        """The refusal for an entry that is neither what the change left nor
        what was there before it."""
        if self.link is not None:
            return ForbiddenPath(
                f"path {_show(self.path)} changed since the call: it is now a symbolic link, "
                "which a rollback neither follows nor replaces",
                self.path,
            )
        if self.absent:
            now = "missing"
        elif self.st is not None and stat.S_ISDIR(self.st.st_mode):
            now = "a directory"
        elif self.st is not None and stat.S_ISREG(self.st.st_mode) and self.fd is None:
            now = "unreadable"
        elif not self.regular:
            now = "not a regular file"
        else:
            now = "holding other content"
        return RollbackConflict(
            f"rollback conflict: path {_show(self.path)} is no longer what the call left "
            f"(it is now {now}); restoring it would destroy a later change",
            self.path,
        )

    def refuse_unless_still_there(self, dir_fd: int, name: str) -> None:
        """Right before the act: the name still holds the entry judged, and
        a regular file judged was not modified since (a writer that renamed
        over it, deleted it or wrote into it meanwhile is not overwritten)."""
        try:
            now: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if self.link is not None:
            return  # only with unrecorded leaves: replaced, as restore does
        if self.st is None:  # absent when judged
            if now is not None:
                raise self._changed_meanwhile()
            return
        if (
            now is None
            or (now.st_dev, now.st_ino) != (self.st.st_dev, self.st.st_ino)
            or (self.fd is not None and _modified(os.fstat(self.fd), self.st))
        ):
            raise self._changed_meanwhile()
        if stat.S_ISDIR(self.st.st_mode):
            raise _is_a_directory(self.path)
        if not self.regular:
            raise ForbiddenPath(f"path {_show(self.path)} is not a regular file", self.path)

    def _changed_meanwhile(self) -> RollbackConflict:
        return RollbackConflict(
            f"rollback conflict: path {_show(self.path)} changed while the rollback ran",
            self.path,
        )


def _modified(now: os.stat_result, then: os.stat_result) -> bool:
    """Whether an open file's ``fstat`` shows a write (or chmod) since ``then``."""
    return (now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (
        then.st_size,
        then.st_mtime_ns,
        then.st_ctime_ns,
    )


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
        self._on_leave: OnLeave | None = None
        self._keep_at_most = DEFAULT_KEEP_AT_MOST
        self._pins: dict[tuple[str, AccessMode], Location] = {}
        self._on_access: OnAccess | None = None
        self._cancelled: threading.Event | None = None
        self._temp_tag = ""
        self._handle = _RootHandle(_open_root(self.root))
        self._roots = _root_spellings(self.root)
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
        keep_at_most: int = DEFAULT_KEEP_AT_MOST,
        locations: Iterable[Location] = (),
        on_access: OnAccess | None = None,
        temp_tag: str = "",
        on_leave: OnLeave | None = None,
    ) -> Workspace:
        """A view of the same root (same descriptor, same rules) whose writes
        and deletes first call ``on_change(relative_path, previous)``.
        ``allow_hardlinks`` overrides that one rule for the view (a tool that
        opts in). Once ``cancelled`` is set, writes and deletes through the
        view raise ``CallCancelled`` before touching anything (not even a
        missing parent directory is made). A replaced or deleted file larger
        than ``keep_at_most`` bytes is never read: ``previous`` is then
        ``Unkept(size)`` (a 1-byte write over a 3 GiB file costs no 3 GiB of
        memory). For each of ``locations`` (``locate``'s answers, kept open
        by the caller), an operation of its mode on exactly its ``path``
        starts from the directory it holds instead of resolving the path
        again, and follows no symbolic link from there. ``on_access(path)``
        hears every path the view is asked about, as given, before it is
        walked (what a recorder keeps). ``temp_tag`` (hex, from
        ``pytest_toolguard.audit.lease.call_tag``) goes into the names of the
        view's temporary files, so that ``remove_temporaries`` can find those
        of one call. ``on_leave(relative_path, leaves)`` hears, right after
        ``on_change``, what the change will leave (``Leaves``): what ``undo``
        checks is still there before it puts ``previous`` back. Closing the
        view does not close the root."""
        if temp_tag and not all(c in "0123456789abcdef" for c in temp_tag):
            raise ValueError(f"temp_tag must be lowercase hex, got {temp_tag!r}")
        view = object.__new__(Workspace)
        view.root = self.root
        view._rules = (
            self._rules
            if allow_hardlinks is None
            else _Rules(forbidden=self._rules.forbidden, allow_hardlinks=allow_hardlinks)
        )
        view._on_change = on_change
        view._on_leave = on_leave
        view._keep_at_most = keep_at_most
        view._pins = {(location.path, location.mode): location for location in locations}
        view._on_access = on_access
        view._cancelled = cancelled
        view._temp_tag = temp_tag
        view._handle = self._handle
        view._roots = self._roots
        view._owns_handle = False
        view._closed = False
        return view

    @property
    def allow_hardlinks(self) -> bool:
        """Whether hard-linked regular files may be used."""
        return self._rules.allow_hardlinks

    # ----------------------------------------------------------------- paths

    def relative(self, path: str) -> str:
        """The path the methods walk for ``path``: an absolute path spelt
        beneath the root (as given, or as its real path; empty and ``.``
        components skipped) becomes what follows the root (``"."`` for the
        root itself), its ``..`` and links kept for the walk; any other path
        is returned as it is (an absolute one is then refused). Text alone:
        nothing is touched. See "Absolute paths" in the module docstring."""
        if not isinstance(path, str) or not str.startswith(path, "/"):
            return path
        parts = str.split(path, "/")
        # Where each name of the path ends, empty and "." parts skipped: the
        # root is matched on those, the rest is kept as spelt (a "\\" part
        # is a separator to the walk, so "." before it is no mere spelling).
        ends = [end for end, part in enumerate(parts, start=1) if part not in ("", ".")]
        for root in self._roots:
            if [parts[end - 1] for end in ends[: len(root)]] == root:
                rest = "/".join(parts[ends[len(root) - 1] :]) if root else path
                return rest.lstrip("/") or "."
        return path

    def normalize(self, path: str) -> str:
        """The normalized relative POSIX path (``"."`` for the root), from the
        text alone: no file is touched and symlinks are not considered.

        Raises ``InvalidPath``, ``PathOutsideWorkspace`` or ``ForbiddenPath``
        per the path rules of the module docstring.
        """
        path = self.relative(path)
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
        path = self.relative(path)
        self._accessed(path)
        return self._resolve(path)[0]

    def resolve_with_size(self, path: str) -> tuple[str, int | None]:
        """``resolve``, and in the same walk the size in bytes of the regular
        file the path names (None when it is missing, a directory or not a
        regular file). The answer holds for the moment of the call only."""
        path = self.relative(path)
        self._accessed(path)
        resolved, st = self._resolve(path)
        size = st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None
        return resolved, size

    def resolve_write(self, path: str) -> str:
        """Where a write or delete of ``path`` acts: its parent directory
        resolved (symlinks followed), plus the final name, which is never
        followed. Raises ``ForbiddenPath`` when the final entry is a symbolic
        link (``write_bytes`` neither writes through nor replaces one), and
        what ``resolve`` raises for the parent. The answer holds for the
        moment of the call only."""
        path = self.relative(path)
        self._accessed(path)
        return self._resolve(path, follow_final=False)[0]

    def locate(self, path: str, mode: AccessMode = "read") -> Location:
        """Resolve ``path`` for a read (symlinks followed; the final
        directory of a path naming one) or a write (parent resolved, final
        name not followed, a symlink there refused as by ``resolve_write``),
        and hold the directory reached open: see ``Location``. The policy
        judges ``resolved``; the handler's view reaches the same directory.
        Raises what ``resolve`` / ``resolve_write`` raise."""
        path = self.relative(path)
        parts = _split(path, self._rules)
        with self._cursor(path, missing_ok=True) as cursor:
            name, final = _settle(cursor, parts, path, follow_final=mode == "read")
            if (
                mode == "read"
                and name is not None
                and final is not None
                and stat.S_ISDIR(final.st_mode)
            ):
                cursor.enter([name])  # a read of a directory holds the directory itself
                name, final = None, None
            resolved = cursor.rel(name)
            size = final.st_size if final is not None and stat.S_ISREG(final.st_mode) else None
            fd, base, pending = cursor.detach()
        return Location(path, mode, resolved, size, fd, base, pending, name, self._handle)

    def _pin(self, path: str, mode: AccessMode) -> Location | None:
        return self._pins.get((path, mode)) if self._pins else None

    def _resolve(
        self, path: str, *, follow_final: bool = True
    ) -> tuple[str, os.stat_result | None]:
        pin = self._pin(path, "read" if follow_final else "write")
        parts = list(pin.parts) if pin is not None else _split(path, self._rules)
        with self._cursor(path, missing_ok=True, at=pin) as cursor:
            name, final = _settle(cursor, parts, path, follow_final=follow_final)
            return cursor.rel(name), final

    def exists(self, path: str) -> bool:
        """Whether ``path`` names something, symlinks followed. False when it
        (or a directory on the way) is missing; raises for refused paths."""
        path = self.relative(path)
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
        path = self.relative(path)
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
        path = self.relative(path)
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

    def write_bytes(self, path: str, data: bytes, *, make_parents: bool = True) -> bool:
        """Replace ``path`` with ``data`` atomically (see the module docstring).

        Missing parent directories are made when ``make_parents``. Raises
        ``ForbiddenPath`` for a symbolic link at the final name (never
        written through, never replaced), a hard-linked or special file there,
        ``IsADirectoryError`` for a directory, ``FileNotFoundError`` for a
        missing parent without ``make_parents``. On any failure the old
        content stays and no temporary file is left. Returns True when
        nothing was at the name before (the file was created).
        """
        path = self.relative(path)
        self._accessed(path)
        self._refuse_if_cancelled(path)
        return self._write(path, data, make_parents=make_parents, journal=True)

    def write_text(
        self, path: str, text: str, *, encoding: str = "utf-8", make_parents: bool = True
    ) -> bool:
        """``write_bytes`` of ``text`` encoded."""
        return self.write_bytes(path, text.encode(encoding), make_parents=make_parents)

    def delete(self, path: str) -> None:
        """Remove the file (or symlink entry) ``path``; the journal hears of
        it first. Raises ``FileNotFoundError``, ``IsADirectoryError`` for a
        directory, ``ForbiddenPath`` for a hard-linked or special file."""
        path = self.relative(path)
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

    def restore(self, path: str, previous: Previous) -> None:
        """Put back what a journal recorded: write ``previous``'s bytes,
        recreate its symbolic link, or remove the entry when it is None
        (already absent is fine). Whatever entry is there now (a file or a
        link) is replaced, and links on the way are followed as by
        ``write_bytes``: a rollback uses ``undo``, which checks both.
        ``on_change`` is not called. Raises as ``write_bytes``/``delete`` do."""
        path = self.relative(path)
        if previous is None:
            self._delete(path, journal=False, missing_ok=True)
        elif isinstance(previous, Symlink):
            self._restore_link(path, previous.target)
        elif isinstance(previous, Unkept):
            raise LimitExceeded(
                f"path {_show(path)} held {previous.size} bytes, more than the journal "
                "kept: it cannot be restored",
                path,
            )
        else:
            self._write(path, previous, make_parents=True, journal=False)

    def undo(
        self,
        path: str,
        previous: Previous,
        leaves: Leaves | Unrecorded,
        *,
        check_only: bool = False,
    ) -> bool:
        """Undo one journaled change: put ``previous`` back at ``path`` (the
        relative path the journal recorded, links already resolved) when the
        entry still is what the change left (``leaves``). Returns True when
        the entry was changed (with ``check_only``: would be; nothing is
        touched then), False when it already holds ``previous`` (left alone).

        No symbolic link is followed, from the root on: the directories of a
        recorded path were real ones when the change was made, so a link met
        now was planted since, wherever it points (``ForbiddenPath``,
        "changed since the call"), and a link in the entry's place is neither
        followed nor replaced (``ForbiddenPath``). The entry is judged through
        the descriptor it is opened by (size and SHA-256 against ``leaves``),
        and right before the act the name must still hold that very file,
        unmodified. A missing directory is made again without following a
        link. Raises ``RollbackConflict`` when the entry is neither what the
        change left nor ``previous`` (a later write, delete or rename over it,
        a directory or special file there), ``LimitExceeded`` for ``Unkept``.
        With ``UNRECORDED`` leaves there is no such check: the entry, a link
        included, is replaced as ``restore`` would.
        """
        path = self.relative(path)
        if isinstance(previous, Unkept):
            raise LimitExceeded(
                f"path {_show(path)} held {previous.size} bytes, more than the journal "
                "kept: it cannot be restored",
                path,
            )
        parts = _split(path, self._rules)
        if not parts or parts[-1] == "..":
            raise _is_a_directory(path)
        name = parts[-1]
        for create in (False, True):
            since = "since the call"
            with self._cursor(path, missing_ok=not create, planted_since=since) as cursor:
                cursor.enter(parts[:-1], create=create)
                with _Found.look(cursor, name, path) as found:
                    if found.holds(previous):
                        return False
                    if leaves is not UNRECORDED and not found.holds(leaves):
                        raise found.conflict()
                    if check_only:
                        return True
                    if cursor.virtual:
                        continue  # make the missing directories, then judge again
                    found.refuse_unless_still_there(cursor.fd, name)
                    if previous is None:
                        os.unlink(name, dir_fd=cursor.fd)
                    elif isinstance(previous, Symlink):
                        _link_atomically(cursor.fd, name, previous.target, self._temp_tag)
                    else:
                        _replace_atomically(cursor.fd, name, previous, found.mode, self._temp_tag)
                    return True
        raise AssertionError("unreachable: the second pass met no missing directory")

    # ----------------------------------------------------------------- listing

    def list_dir(self, path: str = ".") -> list[Entry]:
        """The entries of the directory ``path`` names, sorted by name.

        Symlinks inside are described, not followed. In-flight temporary
        files, forbidden names and names holding a ``\\`` (which cannot be
        addressed: it separates components here) are left out. Raises
        ``NotADirectoryError`` and ``FileNotFoundError`` for the ordinary
        cases.
        """
        path = self.relative(path)
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
        in-flight temporary files, forbidden names and names holding a
        ``\\`` are left out (as in ``list_dir``)."""
        path = self.relative(path)
        self._accessed(path)
        return [relative for _, _, relative, _ in self._tree(path)]

    def walk_entries(self, path: str = ".") -> list[Entry]:
        """``walk``, each file with the size the walk itself saw (no path is
        resolved a second time)."""
        path = self.relative(path)
        self._accessed(path)
        return [
            Entry(name=name, path=relative, is_dir=False, is_symlink=False, size=st.st_size)
            for _, name, relative, st in self._tree(path)
        ]

    def read_tree(
        self, path: str = ".", *, max_bytes: int | None = None
    ) -> Generator[tuple[str, bytes], None, None]:
        """``(relative path, content)`` of every file ``walk`` lists, in its
        order, each read from the directory descriptor the walk holds: a
        name is never resolved again, so nothing swapped in meanwhile is
        followed. Files ``read_bytes`` would refuse (hard-linked, over
        ``max_bytes``, no longer a regular file) are skipped. Close the
        iterator (``contextlib.closing``) when not reading it to the end."""
        path = self.relative(path)
        self._accessed(path)
        return self._read_tree(path, max_bytes)

    def _read_tree(
        self, path: str, max_bytes: int | None
    ) -> Generator[tuple[str, bytes], None, None]:
        for dir_fd, name, relative, st in self._tree(path):
            if st.st_nlink > 1 and not self._rules.allow_hardlinks:
                continue
            if max_bytes is not None and st.st_size > max_bytes:
                continue
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP):
                    continue  # removed, or swapped for a link: not followed
                raise
            try:
                content = self._read_fd(fd, relative, max_bytes)
            except SandboxError:
                continue
            finally:
                os.close(fd)
            yield relative, content

    # ----------------------------------------------------------------- internals

    def _root_fd(self) -> int:
        fd = self._handle.fd
        if self._closed or fd is None:
            raise ValueError("the workspace is closed")
        return fd

    def _cursor(
        self,
        path: str,
        *,
        missing_ok: bool = False,
        at: Location | None = None,
        planted_since: str | None = None,
    ) -> _Cursor:
        """A cursor at the root, or at a ``Location``'s directory (then no
        symlink is followed: one met there was swapped in since). With
        ``planted_since`` (what the path was last checked by), no symlink is
        followed from the root either. Use it in a ``with`` block: the block
        closes it and re-raises OS errors naming ``path`` only."""
        if planted_since is not None:
            return _Cursor(
                self._root_fd(),
                self._rules,
                path,
                missing_ok=missing_ok,
                follow_links=False,
                changed=planted_since,
            )
        if at is None:
            return _Cursor(self._root_fd(), self._rules, path, missing_ok=missing_ok)
        self._root_fd()  # a closed workspace refuses its views' pins too
        return _Cursor(
            at.fd, self._rules, path, missing_ok=missing_ok, base=at.base, follow_links=False
        )

    def _final(self, path: str, *, make_parents: bool = False, mode: AccessMode = "read") -> _Final:
        """Enter the parent of ``path``'s final component; the ``with`` block
        gets the cursor and that component (None when the path names a
        directory by ``.``, ``..`` or the root). A pinned path starts from
        its ``Location``."""
        pin = self._pin(path, mode)
        parts = list(pin.parts) if pin is not None else _split(path, self._rules)
        return _Final(self._cursor(path, at=pin), parts, make_parents)

    @contextmanager
    def _directory(self, path: str) -> Iterator[_Cursor]:
        """Enter the directory ``path`` names, symlinks followed (from its
        ``Location`` when pinned for reading)."""
        pin = self._pin(path, "read")
        parts = list(pin.parts) if pin is not None else _split(path, self._rules)
        with self._cursor(path, at=pin) as cursor:
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

    def _read_fd(
        self, fd: int, path: str, max_bytes: int | None, st: os.stat_result | None = None
    ) -> bytes:
        """The content of the open file ``fd``, judged by ``st`` (its
        ``fstat``, already checked regular) or by a ``fstat`` made here."""
        if st is None:
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
            if len(chunk) < want and total >= st.st_size > 0:
                # A regular file read short at or past its size has ended: no
                # empty read to confirm it (one system call fewer per file). A
                # size of 0 (procfs) proves nothing: read on to the empty read.
                break
        if max_bytes is not None and total > max_bytes:
            raise LimitExceeded(
                f"path {_show(path)} grew past the limit of {max_bytes} bytes while read", path
            )
        return b"".join(chunks)

    def _previous(
        self, dir_fd: int, name: str, path: str, *, want_content: bool
    ) -> tuple[Previous, int | None]:
        """What the entry ``name`` holds before it is replaced or removed:
        (``Previous``, permission bits of a regular file or None). Content
        and link targets are read only when ``want_content``; a symbolic
        link is reported as ``Symlink`` either way."""
        if want_content:
            return self._previous_content(dir_fd, name, path)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None, None
        if stat.S_ISLNK(st.st_mode):
            return Symlink(""), None
        self._check_regular(st, path)
        # Permission bits only: setuid/setgid must not survive a rewrite by
        # another owner (the new file is ours), nor sticky.
        return None, st.st_mode & 0o777

    def _previous_content(self, dir_fd: int, name: str, path: str) -> tuple[Previous, int | None]:
        """``_previous`` with the content: the entry opened first (no link
        followed, a FIFO not waited for) and judged by ``fstat``, one
        ``stat`` fewer than looking first; a link is read where the open
        refuses it."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            try:
                return Symlink(os.readlink(name, dir_fd=dir_fd)), None
            except OSError as again:
                if again.errno in (errno.ENOENT, errno.EINVAL):
                    return None, None  # replaced meanwhile
                raise
        try:
            st = os.fstat(fd)
            self._check_regular(st, path)
            mode = st.st_mode & 0o777  # permission bits only, as above
            try:
                return self._read_fd(fd, path, self._keep_at_most, st), mode
            except LimitExceeded:  # judged by fstat first: never read (or grew while read)
                return Unkept(max(os.fstat(fd).st_size, self._keep_at_most + 1)), mode
        finally:
            os.close(fd)

    def _write(self, path: str, data: bytes, *, make_parents: bool, journal: bool) -> bool:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        notify = self._on_change if journal else None
        with self._final(path, make_parents=make_parents, mode="write") as (cursor, name):
            if name is None:
                raise _is_a_directory(path)
            previous, mode = self._previous(cursor.fd, name, path, want_content=notify is not None)
            if journal and isinstance(previous, Symlink):
                _refuse_final_link(cursor, name, path)
            if notify is not None:
                notify(cursor.rel(name), previous)
                if self._on_leave is not None:
                    self._on_leave(cursor.rel(name), Fingerprint.of(data))
            _replace_atomically(cursor.fd, name, data, mode, self._temp_tag)
            return previous is None

    def _restore_link(self, path: str, target: str) -> None:
        with self._final(path, make_parents=True, mode="write") as (cursor, name):
            if name is None:
                raise _is_a_directory(path)
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise _is_a_directory(path)
            _link_atomically(cursor.fd, name, target, self._temp_tag)

    def _delete(self, path: str, *, journal: bool, missing_ok: bool) -> None:
        notify = self._on_change if journal else None
        try:
            with self._final(path, mode="write") as (cursor, name):
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
                    if self._on_leave is not None:
                        self._on_leave(cursor.rel(name), None)
                os.unlink(name, dir_fd=cursor.fd)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def remove_temporaries(self, tags: Iterable[str]) -> list[str]:
        """Remove the temporary files of the calls ``tags`` name (see
        ``with_journal``) anywhere beneath the root, left by a process killed
        mid-write; returns their relative paths, sorted. Symbolic links to
        directories are not followed; a file that vanishes meanwhile is
        skipped. Call it only for calls that can no longer write (``recover``
        does, for those it marked interrupted)."""
        prefixes = tuple(f"{TEMP_PREFIX}{tag}-" for tag in tags if tag)
        if not prefixes:
            return []
        removed: list[str] = []
        self._remove_temporaries(self._root_fd(), "", prefixes, removed)
        return sorted(removed)

    def _remove_temporaries(
        self, dir_fd: int, prefix: str, prefixes: tuple[str, ...], removed: list[str]
    ) -> None:
        for name in os.listdir(dir_fd):
            if name.startswith(prefixes):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
                    removed.append(prefix + name)
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # not a directory, a link, or gone: nothing beneath to clean
            try:
                self._remove_temporaries(child, prefix + name + "/", prefixes, removed)
            finally:
                os.close(child)

    def _hidden(self, name: str) -> bool:
        return (
            name.startswith(TEMP_PREFIX) or "\\" in name or name.casefold() in self._rules.forbidden
        )

    def _tree(self, path: str) -> Iterator[tuple[int, str, str, os.stat_result]]:
        """Every regular file beneath the directory ``path`` names, as
        ``(its directory's descriptor, its name, its relative path, its
        lstat)`` in the order of sorted paths; see ``walk``. A descriptor is
        valid until the next item is asked for."""
        with self._directory(path) as cursor:
            prefix = cursor.rel()
            yield from self._tree_fd(cursor.fd, "" if prefix == "." else prefix + "/")

    def _tree_fd(self, dir_fd: int, prefix: str) -> Iterator[tuple[int, str, str, os.stat_result]]:
        found: list[tuple[str, str, os.stat_result]] = []
        for name in os.listdir(dir_fd):
            if self._hidden(name):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((name, name, st))
            elif stat.S_ISDIR(st.st_mode):
                # Sorting "d/" among its siblings sorts the paths beneath d
                # as sorted() sorts whole paths ("a-b" before "a/c").
                found.append((name + "/", name, st))
        for key, name, st in sorted(found, key=lambda item: item[0]):
            if not key.endswith("/"):
                yield dir_fd, name, prefix + name, st
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    continue  # removed or swapped for a link meanwhile: not followed
                raise
            try:
                yield from self._tree_fd(child, prefix + name + "/")
            finally:
                os.close(child)


def _settle(
    cursor: _Cursor, parts: list[str], path: str, *, follow_final: bool
) -> tuple[str | None, os.stat_result | None]:
    """Enter the parent of ``parts``' final component and settle that
    component: (its name, or None when the path names a directory by
    ``.``/``..``/a link to one; its lstat, None when missing). With
    ``follow_final`` symlinks there are followed, else refused."""
    if not parts or parts[-1] == "..":
        cursor.enter(parts)
        return None, None
    cursor.enter(parts[:-1])
    name: str | None = parts[-1]
    while name is not None and not cursor.virtual:
        try:
            st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
        except FileNotFoundError:
            return name, None
        if not stat.S_ISLNK(st.st_mode):
            return name, st
        if not follow_final:
            _refuse_final_link(cursor, name, path)
        name = cursor.follow(name)
    return name, None


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


def _temp_name(tag: str) -> str:
    """A new temporary file name, carrying the call's tag when there is one."""
    random = secrets.token_hex(8)
    return f"{TEMP_PREFIX}{tag}-{random}" if tag else TEMP_PREFIX + random


def _link_atomically(dir_fd: int, name: str, target: str, tag: str = "") -> None:
    """Make ``name`` in ``dir_fd`` a symbolic link to ``target``, replacing
    what is there in one rename."""
    temp = _temp_name(tag)
    os.symlink(target, temp, dir_fd=dir_fd)
    try:
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def _replace_atomically(
    dir_fd: int, name: str, data: bytes, mode: int | None, tag: str = ""
) -> None:
    """Write ``data`` to a fresh temporary file in ``dir_fd``, fsync it, and
    rename it over ``name``; remove the temporary file if anything fails.

    Replacing a file (``mode`` given), the temporary file is created
    owner-only (0600) and only then given ``mode``: created with 0666 less
    the umask, another user could open it before the chmod and read the new
    content of a file kept at 0600. A new file gets 0666 less the umask,
    as ``open()`` would, from the start: no wider than it ends up."""
    temp = _temp_name(tag)
    fd = os.open(temp, _TEMP_FLAGS, 0o666 if mode is None else 0o600, dir_fd=dir_fd)
    renamed = False
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            write_all(fd, data)
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
