"""Reaching the real disk from the fake world: refused before it happens,
and reported.

pyfakefs replaces ``os``, ``open``, ``io``, ``shutil`` and ``pathlib``
inside this process. What reaches files without them sees the real disk:
SQLite's C library, a process a handler starts (and all it runs), a file
Python opens itself (``io.FileIO``). Such a tool needs the directory world
(``world="directory"``), not the fake one.

``guarding(log)`` (a ``FakeWorld`` holds it while it runs) watches the Python
audit events those reaches raise, and refuses the ones a handler run makes:

=========================================================  ==================================
event                                                       refused
=========================================================  ==================================
``sqlite3.connect``                                         a database file (``:memory:``,
                                                            ``""`` and memory URIs are not)
``subprocess.Popen``, ``os.system``, ``os.exec``,           always
``os.posix_spawn``, ``os.spawn``, ``os.startfile``
``os.fork``, ``os.forkpty``                                 always
``open``                                                    for writing (pyfakefs's own opens
                                                            never raise it: this is a real one)
=========================================================  ==================================

The event raises ``RealDiskRefused`` where the handler made it (a
``PermissionError``: ``except OSError`` sees an I/O failure), before the
operation happens, and the ``Escape`` is kept in ``log`` whether or not the
handler swallows the exception: replay, fault cells and the fuzzer report
it. Its message says what happened and what to do:
``sqlite3.connect opened /tmp/x/crm.db outside the fake filesystem;
declare world="directory"``.

A handler run is code below the runtime's call of a handler
(``HandlerRun``'s frames on the stack: probed or not, on a worker thread,
inline, or a coroutine on the handler's own loop), and every thread such
code starts (``threading.Thread.start`` is wrapped while a guard runs;
threads they start in turn count too). Toolguard's own work is never
refused: an event whose nearest frame outside the standard library is
toolguard-owned (``runtime.inline.owned``: the audit store opening its
database file on a worker thread) passes, and so does the import system
writing a module's byte-code cache. Code outside a handler run (a
test's own code around a played-back cassette, the harness) passes.

``ReadOnlyPaths`` keeps the real directories mapped into the fake
filesystem (``FakeFilesystems.real_paths``: the time-zone database, installed
packages) read-only for everyone while the world runs: opening for
writing, creating, removing, renaming, linking, ``chmod``, ``utime`` or
``truncate`` beneath one raises ``RealDiskRefused`` (``EROFS``) and is
kept in the log too. pyfakefs's own ``read_only`` does not hold for root.

In the directory world nothing is refused: ``starting_processes(starter)``
(``harness.child_processes``, for the world's whole block) has a handler
run's ``subprocess.Popen`` start through the world's starter instead (the
recorded time and root, a session of its own, killed at the deadline plus
a bound), with the handler run it belongs to (``handler_run_here``).

Not seen: a write a handler makes through the import system's own
functions (``importlib._bootstrap_external``); C code that opens files
itself (a library loaded through ``ctypes``, a C extension calling
``open(2)``) raises no audit event; ``multiprocessing``'s ``spawn`` and
``forkserver`` start methods start their process with none (Python 3.11); a thread of a pool made
before the handler ran, or a task a coroutine handler hands to the
caller's event loop (``aexecute``), is not the handler's. A process a
handler starts before the world (none can: the world starts first) is not
watched. ``sys.addaudithook`` cannot be undone: the hook is added once per
process and does nothing while no guard runs.
"""

from __future__ import annotations

import errno
import os
import posixpath
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_open import FakeFileOpen
from pyfakefs.fake_os import FakeOsModule

from ..errors import ToolguardError
from ..runtime.inline import owned
from ..runtime.invocation import HandlerRun

DECLARE = 'declare world="directory"'
"""What every refused reach tells the tool's author to do."""

_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass(frozen=True, slots=True)
class Escape:
    """One reach of the real disk a world refused."""

    event: str
    """The audit event (``sqlite3.connect``, ``subprocess.Popen``, ...), or
    the operation on a read-only real path (``open``, ``remove``, ...)."""
    detail: str
    """What it reached: the database, the command, the path."""
    message: str
    """A line for a report: what happened and what to do."""

    def __str__(self) -> str:
        return self.message


class RealDiskRefused(ToolguardError, PermissionError):
    """A handler in the fake world reached the real disk (or wrote beneath
    a read-only real directory); the operation did not happen. Its message
    is the ``Escape``'s."""


class EscapeLog:
    """The escapes of one world, in order (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._escapes: list[Escape] = []

    def add(self, escape: Escape) -> None:
        with self._lock:
            self._escapes.append(escape)

    def escapes(self) -> tuple[Escape, ...]:
        """Every escape so far."""
        with self._lock:
            return tuple(self._escapes)


# -- the audit hook ----------------------------------------------------------------


def _command(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return repr([_text(part) for part in value])
    return repr(_text(value))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, os.PathLike):
        return _text(os.fspath(value))
    return str(value)


def _database(args: tuple[Any, ...]) -> str | None:
    """The file ``sqlite3.connect`` opens; None for a database in memory
    (or SQLite's private temporary one, ``""``)."""
    name = _text(args[0]) if args else ""
    if name in ("", ":memory:"):
        return None
    if name.startswith("file:"):
        parts = urlsplit(name)
        if parts.path in ("", ":memory:") or "memory" in parse_qs(parts.query).get("mode", []):
            return None
    return name


def _written(args: tuple[Any, ...]) -> str | None:
    """The path a real ``open`` opens for writing; None for a read (an
    import, a traceback's source line) or a descriptor already open."""
    if len(args) < 3 or not isinstance(args[0], (str, bytes, os.PathLike)):
        return None
    flags = args[2] if isinstance(args[2], int) else 0
    return _text(args[0]) if flags & _WRITING else None


_WATCHED: dict[str, tuple[str, Callable[[tuple[Any, ...]], str | None]]] = {
    "sqlite3.connect": ("opened {}", _database),
    "open": ("opened {} for writing", _written),
    "subprocess.Popen": ("ran {}", lambda args: _command(args[1])),
    "os.system": ("ran {}", lambda args: _command(args[0])),
    "os.exec": ("ran {}", lambda args: _command(args[1])),
    "os.posix_spawn": ("ran {}", lambda args: _command(args[1])),
    "os.spawn": ("ran {}", lambda args: _command(args[2])),
    "os.startfile": ("ran {}", lambda args: _command(args[0])),
    "os.fork": ("forked the process{}", lambda args: ""),
    "os.forkpty": ("forked the process{}", lambda args: ""),
}
"""Event -> (what it did, with ``{}`` the detail; the detail from the
event's arguments, None when it is allowed)."""

_HANDLER_CODES = frozenset(
    method.__code__
    for method in (HandlerRun.run, HandlerRun.call_inline, HandlerRun.settle, HandlerRun.arun)
)
"""Where the runtime calls a handler, or runs what it returned: a frame
of one of these below is a handler run."""

_HERE = __name__


class _Guard:
    """The process's one audit hook and what it needs. Process-wide because
    the hook is (``sys.addaudithook`` cannot be undone)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: list[EscapeLog] = []
        """The running guards' logs; the last one gets what is refused."""
        self.hooked = False
        self.threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        """Threads a handler run started (and threads they started)."""
        self.start: Callable[[threading.Thread], None] | None = None
        """``threading.Thread.start`` as it was before the guard wrapped it."""
        self.popen_init: Callable[..., None] | None = None
        """``subprocess.Popen.__init__`` as it was before the guard wrapped it."""
        self.starters: list[ProcessStarter] = []
        """The running directory worlds' starters (``starting_processes``);
        the last one starts what a handler run starts."""
        self.thread_runs: weakref.WeakKeyDictionary[threading.Thread, HandlerRun] = (
            weakref.WeakKeyDictionary()
        )
        """The handler run that started each thread of ``threads`` (when known)."""

    @property
    def active(self) -> bool:
        """Whether a fake world's guard or a directory world's starter runs."""
        return bool(self.logs or self.starters)


_GUARD = _Guard()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _GUARD.logs:  # the fast path: no world runs
        return
    watched = _WATCHED.get(event)
    if watched is None:
        return
    what, describe = watched
    try:
        detail = describe(args)
    except Exception:  # noqa: BLE001 - arguments of an unexpected shape
        detail = "?"
    if (
        detail is not None
        and in_handler_run()
        and not _owned_caller(sys._getframe(1))
        and not importing()
    ):
        _refuse(event, what, detail)


def _refuse(event: str, what: str, detail: str) -> None:
    """Keep the escape in the innermost guard's log, and raise it."""
    message = f"{event} {what.format(detail)} outside the fake filesystem; {DECLARE}"
    escape = Escape(event, detail, message)
    logs = _GUARD.logs
    if logs:
        logs[-1].add(escape)
    raise RealDiskRefused(errno.EACCES, message)


def _popen_init(popen: Any, args: Any, *more: Any, **options: Any) -> None:
    """``subprocess.Popen.__init__``. In the fake world, refusing a handler
    run's process before the pipes it asks for are made: under pyfakefs
    they fail (or recurse) before the ``subprocess.Popen`` event, with an
    error that does not say why. In a directory world, a handler run's
    process is started by the world's ``ProcessStarter``."""
    init = _GUARD.popen_init
    assert init is not None  # set while this wrapper is installed
    if _GUARD.active and in_handler_run() and not _owned_caller(sys._getframe(1)):
        if _GUARD.logs:
            _refuse("subprocess.Popen", "ran {}", _command(args))
        starters = _GUARD.starters
        if starters:
            starters[-1](init, popen, args, more, options, handler_run_here())
            return
    init(popen, args, *more, **options)


def importing() -> bool:
    """Whether the calling code runs inside the import system: a module
    imported during a handler run writes its byte-code cache beside its
    source, the interpreter's work rather than the tool's."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def in_handler_run() -> bool:
    """Whether the calling code runs in a handler run (see the module
    docstring)."""
    if threading.current_thread() in _GUARD.threads:
        return True
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _HANDLER_CODES:
            return True
        frame = frame.f_back
    return False


def handler_run_here() -> HandlerRun | None:
    """The handler run the calling code belongs to (its frame on the stack,
    or the run that started this thread), or None."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _HANDLER_CODES:
            run = frame.f_locals.get("self")
            return run if isinstance(run, HandlerRun) else None
        frame = frame.f_back
    return _GUARD.thread_runs.get(threading.current_thread())


def _owned_caller(frame: FrameType | None) -> bool:
    """Whether the nearest frame from ``frame`` down that is outside the
    standard library and this module (what called ``sqlite3.connect``,
    ``subprocess.run``, ...) is toolguard-owned."""
    stdlib = sys.stdlib_module_names
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if not isinstance(name, str):
            return False
        if name != _HERE and name.partition(".")[0] not in stdlib:
            return owned(name)
        frame = frame.f_back
    return False


def _starting(thread: threading.Thread) -> None:
    """``threading.Thread.start``, remembering a thread a handler run starts
    before it runs."""
    if _GUARD.active and in_handler_run():
        _GUARD.threads.add(thread)
        run = handler_run_here()
        if run is not None:
            _GUARD.thread_runs[thread] = run
    start = _GUARD.start
    assert start is not None  # set while this wrapper is installed
    start(thread)


@contextmanager
def guarding(log: EscapeLog) -> Iterator[EscapeLog]:
    """Refuse and record in ``log`` what handler runs reach of the real disk
    until the block ends (see the module docstring). Guards nest: the
    innermost one's log gets what is refused."""
    with _GUARD.lock:
        if not _GUARD.hooked:
            sys.addaudithook(_audit)
            _GUARD.hooked = True
        _wrap()
        _GUARD.logs.append(log)
    try:
        yield log
    finally:
        with _GUARD.lock:
            _GUARD.logs.remove(log)
            _unwrap()


class ProcessStarter(Protocol):
    """What starts a handler run's process in a directory world:
    ``(Popen.__init__, the Popen, args, the other positional arguments,
    the keyword arguments, the handler run or None)``; it must call
    ``init`` exactly once, or raise."""

    def __call__(
        self,
        init: Callable[..., None],
        popen: Any,
        args: Any,
        more: tuple[Any, ...],
        options: dict[str, Any],
        run: HandlerRun | None,
    ) -> None: ...


@contextmanager
def starting_processes(starter: ProcessStarter) -> Iterator[None]:
    """Until the block ends, a process a handler run starts through
    ``subprocess.Popen`` (``subprocess.run``, ``check_output``, ``os.popen``,
    asyncio's subprocesses) is started by ``starter`` (a directory world's:
    ``harness.child_processes``). Blocks nest: the innermost one starts.
    A fake world's guard, when one runs too, refuses instead."""
    with _GUARD.lock:
        _wrap()
        _GUARD.starters.append(starter)
    try:
        yield
    finally:
        with _GUARD.lock:
            _GUARD.starters.remove(starter)
            _unwrap()


def _wrap() -> None:
    """Wrap ``Thread.start`` and ``Popen.__init__`` when the first guard or
    starter begins (the guard's lock held)."""
    if not _GUARD.active:
        _GUARD.start = threading.Thread.start
        setattr(threading.Thread, "start", _starting)  # noqa: B010 (a method replaced)
        _GUARD.popen_init = subprocess.Popen.__init__
        setattr(subprocess.Popen, "__init__", _popen_init)  # noqa: B010


def _unwrap() -> None:
    """Put them back when the last one ended, unless someone replaced them
    meanwhile (the guard's lock held)."""
    if _GUARD.active:
        return
    if _GUARD.start is not None:
        if vars(threading.Thread)["start"] is _starting:  # not replaced since
            setattr(threading.Thread, "start", _GUARD.start)  # noqa: B010
        _GUARD.start = None
    if _GUARD.popen_init is not None:
        if vars(subprocess.Popen)["__init__"] is _popen_init:
            setattr(subprocess.Popen, "__init__", _GUARD.popen_init)  # noqa: B010
        _GUARD.popen_init = None


# -- read-only real directories ------------------------------------------------------


def is_beneath(path: str, roots: Sequence[str]) -> str | None:
    """The first of ``roots`` that ``path`` is or lies beneath (normalised
    absolute POSIX paths), else None."""
    for root in roots:
        root = root.rstrip("/") or "/"
        if path == root or path.startswith(root + "/") or root == "/":
            return root
    return None


_TREE_CHANGES = {
    "rename": (0, 1),
    "remove": (0,),
    "rmdir": (0,),
    "makedir": (0,),
    "makedirs": (0,),
    "create_symlink": (0,),
    "link": (1,),
    "chmod": (0,),
    "utime": (0,),
}
"""FakeFilesystem methods that change an entry -> the arguments naming it."""

_FOLLOWED = frozenset({"chmod", "utime"})
"""Of those, the ones that follow a link in the last component."""

REAL_LOADERS = ("add_real_directory", "add_real_file", "add_real_symlink")
"""FakeFilesystem methods that read a mapped real directory's entries in,
the first time it is looked at: pyfakefs's doing, not a write."""


class ReadOnlyPaths:
    """Writes beneath ``paths`` in ``fs`` refused (``EROFS``) and kept in
    ``log`` while installed (see the module docstring). Install it before
    the ``AccessLog`` of the same world (each puts back what it found)."""

    def __init__(self, fs: FakeFilesystem, paths: Sequence[str], log: EscapeLog) -> None:
        self.fs = fs
        self.paths = tuple(paths)
        self.log = log
        self._installed: dict[str, Any] = {}
        self._local = threading.local()

    def install(self) -> None:
        if self._installed or not self.paths:
            return
        fs, guard = self.fs, self
        for name, positions in _TREE_CHANGES.items():
            method = getattr(fs, name)
            self._installed[name] = method
            setattr(fs, name, self._changing(name, method, positions))
        for name in REAL_LOADERS:
            method = getattr(fs, name)
            self._installed[name] = method
            setattr(fs, name, self._loading(method))

        fake_open: Any = FakeOsModule.open

        def opening(
            fake_os: Any,
            path: Any,
            flags: int,
            mode: int | None = None,
            *,
            dir_fd: int | None = None,
        ) -> Any:
            if fake_os.filesystem is fs and flags & _WRITING:
                path = guard._absolute(path, dir_fd)
                dir_fd = None
                guard._check("open", path, follow=not flags & getattr(os, "O_NOFOLLOW", 0))
            if dir_fd is None:
                return fake_open(fake_os, path, flags, mode)
            return fake_open(fake_os, path, flags, mode, dir_fd=dir_fd)

        file_open: Any = FakeFileOpen.call

        def opening_file(opener: Any, file_: Any, *args: Any, **kwargs: Any) -> Any:
            mode = kwargs.get("mode", args[0] if args else "r")
            if (
                opener.filesystem is fs
                and kwargs.get("open_modes") is None  # os.open's, checked there
                and isinstance(mode, str)
                and any(letter in mode for letter in "wax+")
                and isinstance(file_, (str, bytes, os.PathLike))
            ):
                guard._check("open", file_, follow=True)
            return file_open(opener, file_, *args, **kwargs)

        truncate: Any = FakeOsModule.truncate

        def truncating(fake_os: Any, path: Any, length: int) -> Any:
            if fake_os.filesystem is fs and isinstance(path, (str, bytes, os.PathLike)):
                guard._check("truncate", path, follow=True)
            return truncate(fake_os, path, length)

        for owner, name, wrapper, original in (
            (FakeOsModule, "open", opening, fake_open),
            (FakeFileOpen, "call", opening_file, file_open),
            (FakeOsModule, "truncate", truncating, truncate),
        ):
            self._installed[f"{owner.__name__}.{name}"] = (owner, name, original)
            setattr(owner, name, wrapper)

    def uninstall(self) -> None:
        """Put pyfakefs's methods back."""
        for key, value in self._installed.items():
            if "." in key:
                owner, name, original = value
                setattr(owner, name, original)
            else:
                self.fs.__dict__.pop(key, None)
        self._installed = {}

    # -- internals

    def _changing(
        self, name: str, method: Callable[..., Any], positions: tuple[int, ...]
    ) -> Callable[..., Any]:
        def changing(*args: Any, **kwargs: Any) -> Any:
            for position in positions:
                if position < len(args) and isinstance(args[position], (str, bytes, os.PathLike)):
                    self._check(name, args[position], follow=name in _FOLLOWED)
            return method(*args, **kwargs)

        return changing

    def _loading(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def loading(*args: Any, **kwargs: Any) -> Any:
            local: Any = self._local
            local.loading = getattr(local, "loading", 0) + 1
            try:
                return method(*args, **kwargs)
            finally:
                local.loading -= 1

        return loading

    def _check(self, operation: str, path: Any, *, follow: bool) -> None:
        if getattr(self._local, "loading", 0) or importing():
            return
        landed = self._landing(path, follow)
        root = is_beneath(landed, self.paths)
        if root is None:
            return
        message = (
            f"{operation} {landed}: {root} is a real directory mapped read-only into "
            "the fake filesystem (toolguard_real_paths); a tool may read it, never write it"
        )
        self.log.add(Escape(operation, landed, message))
        raise RealDiskRefused(errno.EROFS, message)

    def _landing(self, path: Any, follow: bool) -> str:
        """Where ``path`` leads: its links followed (the last one only when
        ``follow``), normalised; the lexical path when that fails."""
        fs = self.fs
        text = _text(path)
        if not text.startswith("/"):
            text = posixpath.join(_text(fs.cwd), text)
        text = posixpath.normpath(text)
        try:
            if follow:
                return _text(fs.resolve_path(text))
            head, tail = posixpath.split(text)
            return posixpath.join(_text(fs.resolve_path(head)), tail) if tail else text
        except (OSError, TypeError, ValueError):
            return text

    def _absolute(self, path: Any, dir_fd: int | None) -> Any:
        if dir_fd is None or not isinstance(path, (str, bytes)) or _text(path).startswith("/"):
            return path
        opened: Any = self.fs.get_open_file(dir_fd).get_object()
        return _text(opened.path).rstrip("/") + "/" + _text(path)
