"""Every path the fake filesystem resolves while a handler runs: the
access oracle's evidence, and the seam faults use to act between two of a
handler's filesystem operations.

pyfakefs resolves every path a fake ``open``, ``os.stat``, ``os.lstat``,
``os.listdir``, ``os.scandir``, ``os.readlink``, ``os.path.exists``,
``os.path.realpath`` (and everything ``pathlib`` and ``shutil`` build on
them) is given through two methods of its ``FakeFilesystem``:
``resolve_path`` (links followed) and ``lresolve`` (the last component not
followed). ``AccessLog.install()`` wraps both on the running filesystem;
while at least one handler run is open (``opened()`` / ``closed()``, which
``probes.HandlerProbe`` calls), each outermost resolution is one
``Access``: the absolute path it reached (where the links led, or the
normalised path when it failed) and its 1-based ``index`` among the
handler's accesses.

Writes are seen where pyfakefs accounts for a file's growth
(``change_disk_usage`` with a positive change: a flush, a write, a
truncate upwards): ``before_growth(index, path)`` is called before the
k-th growth of a handler run and may raise an ``OSError`` (``ENOSPC``),
which the write that caused it raises.

pyfakefs reading a real directory mapped in (``add_real_directory`` and
its kin, the first time the directory is looked at) is not recorded.

A change of the directory tree (``rename``, ``remove``, ``rmdir``,
``makedir``, ``makedirs``, a symlink or hard link made, ``chmod``,
``utime``) is one access, counted before it starts, with each path it
names: the kernel makes it atomically, so nothing is injected halfway
through pyfakefs's own steps.

Two callbacks act on the k-th access: ``before_access(index, path)`` may
raise an ``OSError`` to fail that operation (a disk error on the k-th
operation), ``after_access(index, path)`` runs once it resolved (a
symlink swapped in between a handler's check of a path and its next
open). Both run with recording paused on their thread, so what they do to
the filesystem is neither recorded nor counted.

Guarantees: resolutions made outside an open run, or on a thread inside
``quiet()``, are not recorded; ``uninstall()`` puts pyfakefs's methods
back.

Outside the workspace means: an ``open`` (of a file or directory, read
or write) that reached a path outside, or any operation *given* a path
outside (``stat``, ``exists``, ``realpath``, ``listdir`` of
``/root/.ssh``), except beneath the ``exempt`` directories (the real ones
a world maps in read-only: the time-zone database, installed packages;
a write there is refused and reported by ``harness.escapes``), or any
operation but ``realpath`` given a path inside that a link carried
outside: a ``stat``, ``exists``, ``listdir`` or ``scandir`` through a
linked directory reaches the outside entry (its size, times, names)
whatever the result holds. A ``realpath`` of a path inside that a link
carries outside says where it leads (the check that looks refuses it):
what it resolves on the way, and a later look at where it led, are
recorded, not judged.

``os.listdir(fd)`` lists the directory the descriptor is open on, as the
kernel does (pyfakefs would resolve its path again, through a link
swapped in since).

``os.open(path, O_NOFOLLOW)`` of a symbolic link is one access of
the link itself, as the kernel refuses it (ELOOP) without looking at the
target; pyfakefs's own ``open`` looks first, which is not the handler's
doing. Not seen: reads and writes on a descriptor already open (no path
is resolved), and anything outside the process.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_open import FakeFileOpen
from pyfakefs.fake_os import FakeOsModule
from pyfakefs.fake_path import FakePathModule

_O_NOFOLLOW = getattr(__import__("os"), "O_NOFOLLOW", 0)


@dataclass(frozen=True, slots=True)
class Access:
    """One path a handler's filesystem operation resolved."""

    index: int
    """1-based position among the handler's accesses."""
    path: str
    """Absolute path reached (links followed where the operation follows them)."""
    follows_links: bool
    """False for an ``lstat``-like resolution (the last component not followed)."""
    opens: bool = False
    """Part of an ``open``: the content is reached, not only looked at."""
    given: str = ""
    """The path the operation was given, normalised, no link followed."""
    event: str = ""
    """What the kernel reported (``kernel_watch``: ``open``, ``read``,
    ``write``, ``create``, ``delete``, ``move``, ``attrib``); empty in the
    fake world, where the operation is not told apart."""
    resolves: bool = False
    """A ``realpath``: it says where a path leads and reaches nothing there
    (the check that looks, before it refuses)."""


class AccessOracle(Protocol):
    """What the oracles read of a world's accesses, in either world: the
    fake world's ``AccessLog`` and the directory world's
    ``kernel_watch.KernelAccessLog``. Only the fake world's can act on a
    handler's k-th operation (``before_access``, ``after_access``,
    ``before_growth``)."""

    exempt: tuple[str, ...]

    @property
    def accesses(self) -> list[Access]:
        """Every access kept since the last ``reset``, in order."""

    @property
    def count(self) -> int:
        """Accesses kept since the last ``reset``."""

    @property
    def growths(self) -> int:
        """Writes kept since the last ``reset``."""

    def opened(self) -> None:
        """A handler run started."""

    def closed(self) -> None:
        """A handler run ended."""

    def reset(self) -> None:
        """Forget every access."""

    def quiet(self) -> AbstractContextManager[None]:
        """The harness's own work within the block is not kept."""

    def outside(self, root: str) -> list[Access]:
        """The accesses that left ``root``."""


def is_within(path: str, root: str) -> bool:
    """Whether the absolute ``path`` is ``root`` or beneath it (plain string
    work on normalised POSIX paths: ``/a/b2`` is not within ``/a/b``)."""
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


def is_ancestor(path: str, root: str) -> bool:
    """Whether ``path`` is a directory above ``root`` (``/`` for any root)."""
    root = root.rstrip("/")
    return path == "/" or root.startswith(path.rstrip("/") + "/")


class AccessLog:
    """The accesses of handler runs in one fake filesystem (see the module
    docstring). Thread-safe; one per world."""

    def __init__(self, fs: FakeFilesystem, exempt: tuple[str, ...] = ()) -> None:
        self.fs = fs
        self.exempt = exempt
        """Directories whose accesses are never outside (see the module docstring)."""
        self.accesses: list[Access] = []
        self.before_access: Callable[[int, str], None] | None = None
        """Called before the k-th access resolves; may raise ``OSError``."""
        self.after_access: Callable[[int, str], None] | None = None
        """Called after the k-th access resolved."""
        self.before_growth: Callable[[int, str], None] | None = None
        """Called before the k-th growth of a file; may raise ``OSError``."""
        self.growths = 0
        """Growths seen since the last ``reset``."""
        self._open_runs = 0
        self._count = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._installed: dict[str, Any] = {}

    # -- windows

    def opened(self) -> None:
        """A handler run started: record from now on."""
        with self._lock:
            self._open_runs += 1

    def closed(self) -> None:
        """A handler run ended."""
        with self._lock:
            self._open_runs = max(0, self._open_runs - 1)

    def reset(self) -> None:
        """Forget every access, and count from zero again."""
        with self._lock:
            self.accesses = []
            self._count = 0
            self.growths = 0

    @property
    def count(self) -> int:
        """Accesses recorded since the last ``reset``."""
        return self._count

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Within the block, this thread's resolutions are not recorded
        (the harness's own work during a handler run)."""
        depth = getattr(self._local, "quiet", 0)
        self._local.quiet = depth + 1
        try:
            yield
        finally:
            self._local.quiet = depth

    def outside(self, root: str) -> list[Access]:
        """The accesses that left ``root``: an open that reached outside,
        an operation given a path outside, unless a ``realpath`` from
        inside led there first (``Path.resolve()`` stats where ``realpath``
        led), or any operation but a ``realpath`` given a path inside that
        a link carried outside. Directories above the root are not outside."""

        exempt = self.exempt

        def out(path: str) -> bool:
            return (
                bool(path)
                and not is_within(path, root)
                and not is_ancestor(path, root)
                and not any(is_within(path, directory) for directory in exempt)
            )

        carried: set[str] = set()  # where links from inside led (a stat there is theirs)
        found = []
        for access in list(self.accesses):
            opened_outside = access.opens and out(access.path)
            linked_outside = (
                bool(access.given)
                and not access.resolves
                and not out(access.given)
                and out(access.path)
            )
            given_outside = out(access.given) and access.given not in carried
            if opened_outside or linked_outside or given_outside:
                found.append(access)
            elif not out(access.given) and out(access.path):
                carried.add(access.path)
        return found

    # -- installing

    def install(self) -> None:
        """Wrap the filesystem's methods (see the module docstring)."""
        if self._installed:
            return
        fs = self.fs
        resolve_path, lresolve = fs.resolve_path, fs.lresolve

        def recording_resolve_path(file_path: Any, allow_fd: bool = False) -> Any:
            return self._resolve(resolve_path, (file_path, allow_fd), file_path, True)

        def recording_lresolve(path: Any) -> Any:
            return self._resolve(lresolve, (path,), path, False)

        fake_open: Any = FakeOsModule.open
        log = self

        def opening(
            fake_os: Any,
            path: Any,
            flags: int,
            mode: int | None = None,
            *,
            dir_fd: int | None = None,
        ) -> Any:
            if fake_os.filesystem is not fs:
                return fake_open(fake_os, path, flags, mode, dir_fd=dir_fd)
            # The path made absolute here, as pyfakefs does: its own check of
            # dir_fd support compares the function, which this wrapper replaced.
            path = log._absolute(path, dir_fd)

            def run() -> Any:
                return fake_open(fake_os, path, flags, mode)

            if log._state() != "top":
                return run()
            if flags & _O_NOFOLLOW and log._is_link(path):
                # ELOOP, from the link alone: pyfakefs's look at the target is not recorded
                return log._counted(path, False, lambda: log._quietly(run), opens=True)
            return log._counted(path, True, run, opens=True)

        file_open: Any = FakeFileOpen.call

        def opening_file(fake_open_object: Any, file_: Any, *args: Any, **kwargs: Any) -> Any:
            def run() -> Any:
                return file_open(fake_open_object, file_, *args, **kwargs)

            if fake_open_object.filesystem is not fs or log._state() != "top":
                return run()
            if isinstance(file_, int):  # a descriptor wrapped (os.fdopen): no path resolved
                return run()
            return log._counted(file_, True, run, opens=True)

        real_path: Any = FakePathModule.realpath

        def realpath(fake_path: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
            def run() -> Any:
                return real_path(fake_path, filename, *args, **kwargs)

            if fake_path.filesystem is not fs or log._state() != "top":
                return run()
            return log._counted(filename, True, run, resolves=True)

        change_disk_usage = fs.change_disk_usage

        def growing(usage_change: int, file_path: Any, st_dev: int) -> None:
            if usage_change > 0 and self._state() == "top":
                with self._lock:
                    self.growths += 1
                    index = self.growths
                before = self.before_growth
                if before is not None:
                    with self.quiet():
                        before(index, _text(file_path))
            change_disk_usage(usage_change, file_path, st_dev)

        listdir = fs.listdir

        def listing(target_directory: Any) -> Any:
            # pyfakefs lists a descriptor by its path, resolved again (links
            # swapped in since followed); the kernel lists the directory it
            # is open on: the entries of that very object.
            if not isinstance(target_directory, int):
                return listdir(target_directory)
            with self.quiet():
                directory: Any = fs.get_open_file(target_directory).get_object()
            entries = getattr(directory, "entries", None)
            if entries is None:  # not a directory: as pyfakefs answers
                return listdir(target_directory)

            def run() -> Any:
                return list(entries.keys())

            if self._state() != "top":
                return run()
            return self._counted(target_directory, True, run)

        wrappers: dict[str, Callable[..., Any]] = {
            "resolve_path": recording_resolve_path,
            "lresolve": recording_lresolve,
            "change_disk_usage": growing,
            "listdir": listing,
        }
        for name in _ATOMIC:
            wrappers[name] = self._atomic(getattr(fs, name))
        for name in _REAL_LOADERS:
            wrappers[name] = self._quiet(getattr(fs, name))
        for name, wrapper in wrappers.items():
            self._installed[name] = getattr(fs, name)
            setattr(fs, name, wrapper)
        self._installed["open"] = fake_open
        self._installed["call"] = file_open
        self._installed["realpath"] = real_path
        setattr(FakePathModule, "realpath", realpath)  # noqa: B010
        setattr(FakeOsModule, "open", opening)  # noqa: B010 (a method replaced)
        setattr(FakeFileOpen, "call", opening_file)  # noqa: B010

    def uninstall(self) -> None:
        """Put pyfakefs's own methods back."""
        fake_open = self._installed.pop("open", None)
        if fake_open is not None:
            setattr(FakeOsModule, "open", fake_open)  # noqa: B010
        file_open = self._installed.pop("call", None)
        if file_open is not None:
            setattr(FakeFileOpen, "call", file_open)  # noqa: B010
        real_path = self._installed.pop("realpath", None)
        if real_path is not None:
            setattr(FakePathModule, "realpath", real_path)  # noqa: B010
        for name in self._installed:
            self.fs.__dict__.pop(name, None)
        self._installed = {}

    # -- internals

    def _atomic(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` as one access (see the module docstring)."""

        def operation(*args: Any, **kwargs: Any) -> Any:
            def run() -> Any:
                return method(*args, **kwargs)

            if self._state() != "top":
                return run()
            return self._counted(args[0] if args else "?", False, run)

        return operation

    def _quiet(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` with recording paused on its thread."""

        def quietly(*args: Any, **kwargs: Any) -> Any:
            with self.quiet():
                return method(*args, **kwargs)

        return quietly

    def _state(self) -> str:
        """ "off" (no run open, or quiet), "inner" (inside a counted access)
        or "top"."""
        local: Any = self._local
        quiet = int(getattr(local, "quiet", 0))
        if self._open_runs <= 0 or quiet:
            return "off"
        return "inner" if getattr(local, "inside", 0) else "top"

    def _quietly(self, run: Callable[[], Any]) -> Any:
        with self.quiet():
            return run()

    def _absolute(self, path: Any, dir_fd: int | None) -> Any:
        """``path`` joined to the directory ``dir_fd`` is open on (as given
        when there is none, or it is absolute)."""
        if dir_fd is None or not isinstance(path, (str, bytes)):
            return path
        text = _text(path)
        if text.startswith("/"):
            return path
        with self.quiet():
            opened: Any = self.fs.get_open_file(dir_fd).get_object()
            directory = _text(opened.path)
        joined = directory.rstrip("/") + "/" + text
        return joined.encode("utf-8", "surrogateescape") if isinstance(path, bytes) else joined

    def _is_link(self, path: Any) -> bool:
        with self.quiet():
            try:
                return bool(self.fs.islink(path))
            except Exception:
                return False

    def _resolve(
        self, method: Callable[..., Any], args: tuple[Any, ...], given: Any, follows: bool
    ) -> Any:
        state = self._state()
        if state == "off":
            return method(*args)
        if state == "inner":  # part of a counted access: recorded under its index
            local: Any = self._local
            index, opens = local.inside, local.opens
            try:
                value = method(*args)
            except BaseException:
                self._record(index, self._guess(given), follows, opens)
                raise
            self._record(index, self._reached(value, given), follows, opens)
            return value
        return self._counted(given, follows, lambda: method(*args))

    def _counted(
        self,
        given: Any,
        follows: bool,
        run: Callable[[], Any],
        *,
        opens: bool = False,
        resolves: bool = False,
    ) -> Any:
        """One access: counted, the callbacks asked (quietly), ``run()``
        recorded, with what it resolves inside recorded under its index."""
        local: Any = self._local
        with self._lock:
            self._count += 1
            index = self._count
        before = self.before_access
        if before is not None:
            with self.quiet():
                before(index, self._guess(given))
        local.inside, local.opens = index, opens
        lexical = self._guess(given)
        try:
            value = run()
        except BaseException:
            self._record(index, lexical, follows, opens, lexical, resolves)
            raise
        finally:
            local.inside, local.opens = 0, False
        reached = self._reached(value, given)
        self._record(index, reached, follows, opens, lexical, resolves)
        after = self.after_access
        if after is not None:
            with self.quiet():
                after(index, reached)
        return value

    def _record(
        self,
        index: int,
        path: str,
        follows: bool,
        opens: bool = False,
        given: str = "",
        resolves: bool = False,
    ) -> None:
        with self._lock:
            self.accesses.append(Access(index, path, follows, opens, given, resolves=resolves))

    def _reached(self, value: Any, given: Any) -> str:
        if isinstance(value, (str, bytes)):
            return _text(value)
        path = getattr(value, "path", None)  # a FakeFile from lresolve
        return _text(path) if isinstance(path, (str, bytes)) else self._guess(given)

    def _guess(self, given: Any) -> str:
        """The normalised absolute path of what was given (no link followed)."""
        try:
            if isinstance(given, int):
                opened: Any = self.fs.get_open_file(given).get_object()
                return _text(opened.path)
            text = _text(given if isinstance(given, (str, bytes)) else str(given))
            if not text.startswith("/"):
                text = posixpath.join(_text(self.fs.cwd), text)
            return posixpath.normpath(text)
        except Exception:
            return "?"


_ATOMIC = (
    "rename",
    "remove",
    "rmdir",
    "makedir",
    "makedirs",
    "create_symlink",
    "link",
    "chmod",
    "utime",
)
"""FakeFilesystem methods that change the tree: one access each."""

_REAL_LOADERS = ("add_real_directory", "add_real_file", "add_real_symlink")
"""FakeFilesystem methods that read a real directory mapped in the first
time it is looked at: pyfakefs's doing, never counted (a fault failing the
k-th access must not break it halfway, nor count it in one run and not in
the next)."""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)
