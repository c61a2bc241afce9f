"""What faults use in the directory world, where the fake filesystem's
seams (``harness.accesses``) do not exist: the handler's Python-level
file operations, seen through the interpreter's audit events, and a real
disk that fills up, in a private mount namespace.

``Operations`` counts the file operations a handler run makes through
Python, its own and those ``ctx.workspace`` makes for it (``open``,
``os.listdir``, ``os.scandir``, ``os.rename``, ``os.remove``, ``os.mkdir``,
``os.symlink``, ``os.chmod``, ``shutil.*``, ``sqlite3.connect``, starting a
process, ...: ``OPERATION_EVENTS``) while it is installed, and calls
``before(index, event, path)`` before the k-th one happens: the
callback may act on the real tree (``symlink_race`` swaps a link in) or
raise an ``OSError``, which the operation then raises (``disk_failure``'s
EIO). A look that raises no audit event (``os.stat``, ``os.lstat``,
``os.access``, ``os.readlink``, ``os.path.realpath``, and what builds on
them: ``os.path.exists``, ``isdir``, ``pathlib``'s ``stat``, ``exists``,
``resolve``) is counted too, through ``METADATA_CALLS`` replaced on the
``os`` modules while installed: a check-then-use race needs a swap point
between the check and the use, whichever API made each. One call is one
operation (``realpath``'s own ``lstat``s are not counted again); a handler
that bound ``from os import stat`` before is not seen. Threads a handler
run starts count as the handler's (and threads they start, while the
object is installed). Where a ``stat``, ``lstat`` or ``access`` given a
path (not one relative to a ``dir_fd``) reached, its links followed as
the call follows them, is kept (``looks``): the kernel reports no event
for them, nor for an ``open`` of a file that is not there (kept too, when
given an absolute path), and ``outside_looks`` says which reached outside
the workspace (through a link inside, or given a path beside it). Not seen: reads and
writes on an open descriptor,
a C library's own ``open(2)`` (SQLite's after ``connect``) and what a
started process does (its start is seen); a thread of a pool made before
the handler ran is not the handler's.

``FullDisk`` runs a block on a thread of its own in a private mount
namespace where the workspace is a tmpfs of a given size: the handler's
threads and every process it starts there write to a disk that fills up
for real (``ENOSPC`` from the kernel, for C libraries and other processes
alike). The workspace is copied in before and out after; the real
directory under the mount is never written while it lasts. It needs
``unshare(CLONE_NEWNS)`` and ``mount`` (root, or a user namespace that
allows them): ``full_disk_unavailable()`` says why not, once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import posixpath
import stat
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from ..harness.accesses import is_ancestor, is_within
from ..harness.directory_world import DirectoryWorld
from ..harness.escapes import in_handler_run
from ..harness.files import harness_at_work, harness_work
from ..harness.world import FakeWorld
from ..replay.cassette import VOLATILE_FILE_PREFIX

OPERATION_EVENTS: dict[str, int] = {
    "open": 0,
    "os.listdir": 0,
    "os.scandir": 0,
    "os.rename": 0,
    "os.remove": 0,
    "os.rmdir": 0,
    "os.mkdir": 0,
    "os.symlink": 0,
    "os.link": 1,
    "os.chmod": 0,
    "os.chown": 0,
    "os.utime": 0,
    "os.truncate": 0,
    "os.chdir": 0,
    "shutil.copyfile": 0,
    "shutil.copytree": 0,
    "shutil.move": 0,
    "shutil.rmtree": 0,
    "sqlite3.connect": 0,
    "subprocess.Popen": 1,
    "os.posix_spawn": 0,
    "os.exec": 0,
    "os.system": 0,
}
"""The audit events that are one operation of a handler, and which of
their arguments is the path (or what the process runs)."""

METADATA_CALLS: tuple[tuple[Any, str, str], ...] = (
    (os, "stat", "os.stat"),
    (os, "lstat", "os.lstat"),
    (os, "access", "os.access"),
    (os, "readlink", "os.readlink"),
    (os.path, "realpath", "os.path.realpath"),
)
"""Looks at the filesystem that raise no audit event: (module, attribute,
operation name), each replaced while an ``Operations`` is installed and
counted like an audit event (its first argument the path)."""

REACHING_LOOKS = frozenset({"os.stat", "os.lstat", "os.access"})
"""The looks of ``METADATA_CALLS`` that reach the entry they are given
(its size, times, kind, mode): where each reached is kept. A
``realpath`` or ``readlink`` only says where a path leads."""

_REALPATH = os.path.realpath  # the real one, whatever is installed later

T = TypeVar("T")

VOLATILE_CONTENT = b"<volatile: compared for being there, not for its bytes>"


class Operations:
    """The handler runs' Python-level file operations, counted while
    installed (a context manager; see the module docstring). One at a
    time per process: the audit hook cannot be removed, so it is added
    once and does nothing while none is installed."""

    def __init__(self) -> None:
        self.count = 0
        """Operations seen since this object was made."""
        self.opened: list[str] = []
        """The absolute paths the handler's ``open`` events named, in order."""
        self.paths: list[str] = []
        """The path each counted operation named (``paths[k - 1]`` for the
        k-th; absolute when given so, empty when it named none)."""
        self.looks: list[tuple[str, str, str]] = []
        """(operation, path given made absolute, path reached) of each
        ``REACHING_LOOKS`` call of a handler run, and each ``open`` of an
        absolute path (as given: the kernel sees where one that is there led)."""
        self.events: list[str] = []
        """The event of each counted operation (``events[k - 1]``, beside ``paths``)."""
        self.before: Callable[[int, str, str], None] | None = None
        """Called before the k-th operation (index, event, path); may raise
        ``OSError`` to fail it."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        """Threads a handler run started (and threads they started)."""
        self._start: Callable[[threading.Thread], None] | None = None
        self._starting: Callable[[threading.Thread], None] | None = None
        self._replaced: list[tuple[Any, str, Any, Any]] = []
        """(module, attribute, original, replacement) of ``METADATA_CALLS``."""

    def __enter__(self) -> Operations:
        with _HOOK.lock:
            if not _HOOK.added:
                sys.addaudithook(_audit)
                _HOOK.added = True
            _HOOK.current = self
            self._start = threading.Thread.start
            operations = self

            def starting(thread: threading.Thread) -> None:
                if operations._handlers():
                    operations._threads.add(thread)
                start = operations._start
                assert start is not None  # set while this wrapper is installed
                start(thread)

            self._starting = starting
            setattr(threading.Thread, "start", starting)  # noqa: B010 (a method replaced)
            for module, attribute, name in METADATA_CALLS:
                original = getattr(module, attribute)
                counted = self._counting(original, name)
                self._replaced.append((module, attribute, original, counted))
                setattr(module, attribute, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        with _HOOK.lock:
            if _HOOK.current is self:
                _HOOK.current = None
            if vars(threading.Thread).get("start") is self._starting:  # not replaced since
                setattr(threading.Thread, "start", self._start)  # noqa: B010
            for module, attribute, original, counted in reversed(self._replaced):
                if getattr(module, attribute) is counted:  # not replaced since
                    setattr(module, attribute, original)
            self._replaced = []

    def _counting(self, original: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``original`` counted as one operation named ``name`` (what it
        calls inside is part of it, not counted again)."""
        local = self._local

        def counted(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", 0):
                return original(*args, **kwargs)
            self._seen(name, args)
            local.inside = 1
            try:
                return original(*args, **kwargs)
            finally:
                if name in REACHING_LOOKS:
                    self._reached(name, args, kwargs)
                local.inside = 0

        counted.__wrapped__ = original  # type: ignore[attr-defined]
        return counted

    def _reached(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Keep where a look reached (called inside it: its own lookups
        are not counted)."""
        if (
            getattr(self._local, "quiet", 0)
            or harness_at_work()
            or not args
            or not self._handlers()
        ):
            return
        value = args[0]
        if kwargs.get("dir_fd") is not None or not isinstance(value, (str, bytes, os.PathLike)):
            return
        given = os.path.abspath(os.fsdecode(value))
        follows = name != "os.lstat" and kwargs.get("follow_symlinks", True)
        if follows:
            reached = _REALPATH(given)
        else:
            reached = os.path.join(_REALPATH(os.path.dirname(given)), os.path.basename(given))
        with self._lock:
            self.looks.append((name, given, reached))

    def outside_looks(self, root: str, top: str) -> list[str]:
        """The paths looks kept since ``forget_looks`` reached outside
        ``root`` (directories above it are not outside): given a path
        inside that a link carried outside, or reaching an entry of
        ``top`` (the world's own directory) beside the workspace."""
        roots = (root, _REALPATH(root))
        found: list[str] = []
        for _name, given, reached in list(self.looks):
            if any(is_within(reached, where) or is_ancestor(reached, where) for where in roots):
                continue
            inside = any(is_within(given, where) for where in roots)
            if inside or is_within(reached, top) or is_within(reached, _REALPATH(top)):
                found.append(reached)
        return list(dict.fromkeys(found))

    def look_problems(self, root: str, top: str) -> list[str]:
        """The cell's problem when a look reached outside (``outside_looks``):
        the kernel reports no ``stat``, so the access oracle cannot."""
        looks = self.outside_looks(root, top)
        if not looks:
            return []
        shown = ", ".join(looks[:5]) + (f" and {len(looks) - 5} more" if len(looks) > 5 else "")
        return [
            "the handler looked outside the workspace (a stat, exists or access, or an open "
            f"of a path there): {shown}"
        ]

    def forget_looks(self) -> None:
        """Forget the looks kept so far (those of the runs before a target's)."""
        with self._lock:
            self.looks = []

    def _handlers(self) -> bool:
        """Whether the calling code is a handler run's, or runs on a thread one started."""
        return threading.current_thread() in self._threads or in_handler_run()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Within the block, this thread's operations are not counted (the
        harness's own work)."""
        depth = getattr(self._local, "quiet", 0)
        self._local.quiet = depth + 1
        try:
            yield
        finally:
            self._local.quiet = depth

    def _seen(self, event: str, args: tuple[Any, ...]) -> None:
        local = self._local
        if getattr(local, "quiet", 0) or getattr(local, "inside", 0) or harness_at_work():
            return
        if not self._handlers():
            return
        if event == "open" and args and isinstance(args[0], int):
            return  # a descriptor wrapped (os.fdopen): no path is resolved, nothing can fail
        path = _path_of(event, args)
        with self._lock:
            self.count += 1
            index = self.count
            self.paths.append(path)
            self.events.append(event)
            if event == "open" and path:
                self.opened.append(os.path.abspath(path))
                if path.startswith("/"):  # one beside the workspace that is not there: no event
                    self.looks.append((event, os.path.normpath(path), os.path.normpath(path)))
        before = self.before
        if before is not None:
            with self.quiet():
                before(index, event, path)


class WorldFiles:
    """The files of a cell's world as the harness reaches them (never
    counted as the handler's): the same calls in the fake world (pyfakefs,
    quietly for its ``AccessLog``) and in the directory world (real files,
    quietly for ``operations``)."""

    def __init__(self, world: FakeWorld | DirectoryWorld, fault_name: str = "") -> None:
        self.world = world
        self.fault_name = fault_name
        self.operations: Operations | None = None
        """The directory world's ``Operations`` while a cell runs, else None."""

    @property
    def directory(self) -> bool:
        """Whether the world is a directory world (real files)."""
        return isinstance(self.world, DirectoryWorld)

    @property
    def fs(self) -> Any:
        """The pyfakefs ``FakeFilesystem`` (for ``set_disk_usage``, ...);
        ``LookupError`` in the directory world, which has none."""
        if isinstance(self.world, DirectoryWorld):
            raise LookupError(
                f"{self.fault_name}: cell.fs is the fake filesystem's; this cell runs in the "
                "directory world (real files: use os, cell.files.write_file)"
            )
        return self.world.fs

    @property
    def access_log(self) -> Any:
        """The world's oracle of accesses (``harness.accesses.AccessLog`` in
        the fake world), or None when nothing observes them: "not
        observed", never "nothing happened"."""
        return getattr(self.world, "accesses", None)

    def quiet(self) -> AbstractContextManager[None]:
        """A block whose filesystem operations on this thread are the
        harness's, never counted as the handler's."""
        if self.operations is not None:
            return self.operations.quiet()
        quiet = getattr(self.access_log, "quiet", None)
        return quiet() if quiet is not None else nullcontext()

    def tree(self, volatile: Sequence[str] = ()) -> dict[str, bytes]:
        """Every regular file under the workspace, by relative path, never
        counted as the handler's (even when read as a handler starts); a
        file ``volatile`` names (``files.<path>``: git's index, which holds
        inode numbers) reads as ``VOLATILE_CONTENT`` whatever its bytes."""
        with self.quiet():
            files = self.world.tree()
        for entry in volatile:
            path = entry[len(VOLATILE_FILE_PREFIX) :]
            if entry.startswith(VOLATILE_FILE_PREFIX) and path in files:
                files[path] = VOLATILE_CONTENT
        return files

    def directories(self) -> frozenset[str]:
        """Every directory under the workspace (relative paths; a link to
        one is a link), as ``save_workspace`` would list them, without
        reading a file: in the directory world, a walk of ``lstat``s."""
        if not isinstance(self.world, DirectoryWorld):  # pyfakefs's objects: cheap
            entries = self.world.save_workspace()
            return frozenset(relative for relative, mode, _data in entries if stat.S_ISDIR(mode))
        found: list[str] = []
        pending = [""]
        with self.quiet(), harness_work():
            while pending:
                prefix = pending.pop()
                for name in os.listdir(posixpath.join(self.world.root, prefix)):
                    relative = prefix + name
                    if stat.S_ISDIR(os.lstat(posixpath.join(self.world.root, relative)).st_mode):
                        found.append(relative)
                        pending.append(relative + "/")
        return frozenset(found)

    def exists(self, path: str) -> bool:
        """Whether ``path`` (absolute, in this world) is there, as a link or not."""
        if isinstance(self.world, DirectoryWorld):
            return os.path.lexists(path)
        with self.quiet():
            return bool(self.world.fs.exists(path, check_link=True))

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` (absolute, in this world) is a directory."""
        if isinstance(self.world, DirectoryWorld):
            return os.path.isdir(path)
        with self.quiet():
            return bool(self.world.fs.isdir(path))

    def write_file(self, path: str, content: bytes | str) -> None:
        """Create or replace ``path`` (absolute, in this world; parents
        made) holding ``content``."""
        data = content.encode() if isinstance(content, str) else content
        if isinstance(self.world, DirectoryWorld):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
            return
        fs = self.world.fs
        with self.quiet():
            if fs.exists(path):
                fs.remove_object(path)
            fs.create_file(path, contents=data)


def operation_paths(log: Any, first: int, last: int) -> tuple[tuple[str, ...], ...]:
    """The paths of operations ``first + 1`` to ``last`` of ``log``, one
    tuple each: the directory world's ``Operations`` (the path it named)
    or the fake world's ``AccessLog`` (what it was given and reached);
    absolute as the world spells them, a relative one as given."""
    if isinstance(log, Operations):
        return tuple((path,) for path in log.paths[first:last])
    named: list[list[str]] = [[] for _ in range(last - first)]
    for access in list(getattr(log, "accesses", ())):
        if first < access.index <= last:
            named[access.index - first - 1] += [access.given, access.path]
    return tuple(tuple(dict.fromkeys(path for path in paths if path)) for paths in named)


class _Hook:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.added = False
        self.current: Operations | None = None


_HOOK = _Hook()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    current = _HOOK.current
    if current is None or event not in OPERATION_EVENTS:
        return
    current._seen(event, args)


def _path_of(event: str, args: tuple[Any, ...]) -> str:
    try:
        value = args[OPERATION_EVENTS.get(event, 0)]
    except (IndexError, KeyError):
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value) if isinstance(os.fspath(value), str) else ""
    return str(value) if value is not None and not isinstance(value, int) else ""


# -- a real disk that fills up -----------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_MS_REMOUNT = 32

PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096
"""tmpfs counts its size in pages."""


def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


_UNAVAILABLE: list[str | None] = []


def full_disk_unavailable() -> str | None:
    """Why ``FullDisk`` cannot run on this machine (None when it can);
    found out once per process, on a thread that then ends."""
    if not _UNAVAILABLE:
        reason: list[str | None] = [None]

        def probe() -> None:
            if not sys.platform.startswith("linux"):
                reason[0] = "Linux only"
                return
            try:
                libc = _libc()
                _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
                _check(
                    libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
                    "mount --make-rprivate /",
                )
            except OSError as exc:
                reason[0] = f"not permitted here ({exc})"

        thread = threading.Thread(target=probe, name="toolguard-namespace-probe")
        thread.start()
        thread.join()
        _UNAVAILABLE.append(reason[0])
    return _UNAVAILABLE[0]


class FullDisk:
    """``run(free, body)`` calls ``body`` on a thread of its own in a
    private mount namespace where ``root`` is a tmpfs holding what
    ``save()`` gave with ``free`` bytes (whole pages) left; after it,
    ``save()`` of the tmpfs is what ``load`` gets back, with the real
    directory untouched below. Threads and processes started by
    ``body``'s thread live in the namespace too."""

    def __init__(
        self,
        root: str,
        save: Callable[[], Any],
        load: Callable[[Any], None],
    ) -> None:
        self.root = root
        self._save, self._load = save, load

    def run(self, free: int, body: Callable[[], T]) -> T:
        """``body()`` with ``free`` bytes left on the workspace's disk;
        raises what it raised."""
        entries = self._save()
        outcome: dict[str, Any] = {}

        def inside() -> None:
            libc = _libc()
            try:
                _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
                _check(
                    libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
                    "mount --make-rprivate /",
                )
                target = os.fsencode(self.root)
                _check(
                    libc.mount(b"tmpfs", target, b"tmpfs", 0, b"mode=0755"),
                    f"mount tmpfs on {self.root}",
                )
                self._load(entries)
                # Then shrunk to what the workspace holds plus ``free``: the
                # kernel counts the pages, whatever the files' sizes.
                usage = os.statvfs(self.root)
                used = (usage.f_blocks - usage.f_bfree) * usage.f_frsize
                size = max(used + -(-free // PAGE) * PAGE, PAGE)
                _check(
                    libc.mount(
                        b"tmpfs", target, b"tmpfs", _MS_REMOUNT, f"size={size},mode=0755".encode()
                    ),
                    f"remount tmpfs on {self.root} at {size} bytes",
                )
                try:
                    outcome["value"] = body()
                finally:
                    outcome["entries"] = self._save()
                    libc.umount2(os.fsencode(self.root), _MNT_DETACH)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = exc

        thread = threading.Thread(target=inside, name="toolguard-full-disk")
        thread.start()
        thread.join()
        if "entries" in outcome:
            self._load(outcome["entries"])
        if "error" in outcome:
            raise outcome["error"]
        value: T = outcome["value"]
        return value
