"""Real read-only data in the directory world: directories a tool reads but
a cassette does not own (the time-zone database, installed packages'
data, ``toolguard_real_paths``), which a tool there may read and never
write.

``RealData(paths, world=...)`` (a directory world holds one for its
block, ``DirectoryWorld.real_data``) takes the same list as the fake
world (``fake_filesystem.default_real_paths()`` plus the configured ones;
a path overlapping the world, holding it or inside it, is left out, as the
fake world leaves out one overlapping its root) and keeps every write
beneath them by the tool as an ``escapes.Escape``, which replay, fault
cells and the fuzzer report as they report the fake world's refusals
(``escapes()``, in order, only ever growing):

- **in the handler's process**: the Python audit events of a handler run
  that write (``open`` with a write flag, ``os.remove``, ``os.rename``
  (either side), ``os.mkdir``, ``os.rmdir``, ``os.link``, ``os.symlink``,
  ``os.chmod``, ``os.chown``, ``os.utime``, ``os.truncate``, extended
  attributes, ``shutil.copyfile`` / ``copytree`` / ``move`` / ``rmtree``
  and friends, ``sqlite3.connect`` on a file there unless opened read-only
  (``mode=ro``, ``immutable=1``)) landing beneath one, links followed as
  the operation follows them, are refused before they happen
  (``escapes.RealDiskRefused``, ``EROFS``) and kept;
- **in the processes it starts** (``child_processes``), where the machine
  gives them a private mount namespace: each real directory is covered, in
  that namespace only, by an overlay whose upper layer is a scratch
  directory of the world's (``layers``): what the process writes, creates
  or removes there lands in the scratch layer, never in the real
  directory, and each entry it left there is kept (``created``,
  ``changed``, ``removed``). Where the kernel refuses an overlay the
  directory is bound read-only instead (``EROFS``): refused, and not
  reported (a refused write leaves no trace the harness can read), said
  once;
- **by any process, for the configured directories only** (not the
  time-zone database or site-packages: too many directories to watch):
  the kernel's notifications (``kernel_watch``) of a write, creation,
  removal, rename or change of mode while the world runs. This is what
  sees a process started without the namespace (the machine refuses one,
  ``os.system``, ``os.fork``); it is reported, not refused.

Reads are never kept, in either way: a tool may read the real data. Not
seen: Python's own bytecode caches (``__pycache__``), which importing a
module may write; C code writing through its own ``open(2)`` in the
handler's process (a C extension, a ``ctypes`` library) beneath a default
directory; a process started without the namespace writing beneath a
default directory; a handler in process isolation (the audit event is
refused in the child, and kept in the child's memory only); writes by the
test's own code, outside handler runs, beneath a configured directory
while the world runs are reported as the tool's (the kernel does not say
whose they are).
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .child_setup import (
    Cover,
    mangled,
    namespace_command,
    overlay_works,
    say_once,
    scratch_parent,
)
from .escapes import Escape, RealDiskRefused, in_handler_run, is_beneath
from .fake_filesystem import default_real_paths, real_path_list
from .kernel_watch import KernelAccessLog

SCRATCH_PREFIX = "toolguard-real-"
"""The name of every scratch directory (the overlays' upper layers) begins with this."""

BYTECODE_CACHE = "__pycache__"
"""A directory Python writes when it imports: never the tool's write."""

_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

_WRITES = frozenset({"create", "write", "delete", "move-in", "move-out", "attrib"})
"""The kernel's events that change an entry (``kernel_watch``'s kinds)."""

PREMADE = 4
"""Processes whose layers a world makes when it starts, outside any
handler run: a process after them makes its own (one more command)."""

_OVERLAY_UNSAFE = frozenset(",:\\")
"""Characters an overlay's options cannot hold unescaped: such a directory is bound read-only."""


@dataclass(frozen=True, slots=True)
class _Event:
    """Which arguments of an audit event name what it writes, and whether
    the operation follows a link in the last component."""

    positions: tuple[int, ...]
    follow: bool
    dir_fd: int | None = None
    """The argument holding the ``dir_fd`` relative paths start from."""


_EVENTS: dict[str, _Event] = {
    "os.remove": _Event((0,), False, 1),
    "os.rmdir": _Event((0,), False, 1),
    "os.mkdir": _Event((0,), False, 2),
    "os.rename": _Event((0, 1), False),
    "os.link": _Event((1,), False),
    "os.symlink": _Event((1,), False, 2),
    "os.chmod": _Event((0,), True, 2),
    "os.chown": _Event((0,), True, 3),
    "os.chflags": _Event((0,), True),
    "os.utime": _Event((0,), True, 3),
    "os.truncate": _Event((0,), True),
    "os.setxattr": _Event((0,), True),
    "os.removexattr": _Event((0,), True),
    "shutil.copyfile": _Event((1,), True),
    "shutil.copymode": _Event((1,), True),
    "shutil.copystat": _Event((1,), True),
    "shutil.copytree": _Event((1,), False),
    "shutil.move": _Event((0, 1), False),
    "shutil.rmtree": _Event((0,), False, 1),
    "shutil.chown": _Event((0,), True),
    "shutil.make_archive": _Event((0,), False),
    "shutil.unpack_archive": _Event((1,), False),
}
"""Audit events that change what their path names (besides ``open`` and
``sqlite3.connect``, whose arguments say whether they write)."""


@dataclass(frozen=True, slots=True)
class Layer:
    """One real directory as a process the tool starts sees it: covered by
    an overlay whose upper layer is ``upper`` (``work`` its work
    directory), or, both empty, bound read-only."""

    path: str
    upper: str = ""
    work: str = ""


class RealData:
    """The real read-only data of one directory world (see the module
    docstring). A context manager; ``paths`` None is
    ``default_real_paths()``; ``world``: the world's own places (its
    directory, the recorded root), which no real directory may overlap."""

    def __init__(self, paths: Iterable[str] | None = None, *, world: Sequence[str] = ()) -> None:
        defaults = default_real_paths()
        given = defaults if paths is None else real_path_list(paths)
        places = [posixpath.normpath(place) for place in world]
        self.paths: tuple[str, ...] = tuple(
            path
            for path in given
            if not any(is_beneath(path, [place]) or is_beneath(place, [path]) for place in places)
        )
        """The real directories guarded (those overlapping the world left out)."""
        self.configured: tuple[str, ...] = tuple(p for p in self.paths if p not in defaults)
        """Those not among the defaults: watched through the kernel's notifications."""
        self._spellings = tuple(dict.fromkeys([*self.paths, *map(os.path.realpath, self.paths)]))
        self._places = places
        self._lock = threading.Lock()
        self._escapes: list[Escape] = []
        self._seen: set[tuple[str, str]] = set()
        self._layers: list[Layer] = []
        self._processes = 0
        self._scratch: str | None = None
        self._watches: list[KernelAccessLog] = []
        self._directories: tuple[str, ...] | None = None

    # -- the block

    def __enter__(self) -> RealData:
        if self.directories():
            # Beside the world, never in it: what the world's oracles see
            # outside the workspace stays as the world built it.
            self._scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=scratch_parent())
            for process in range(PREMADE):
                for path in _layer_places(self._scratch, process, len(self.directories())):
                    os.makedirs(path)
            if namespace_command() is None:
                say_once(
                    "processes tools start in the directory world have no mount namespace: "
                    "their writes into real read-only data reach the real disk, reported "
                    "only beneath toolguard_real_paths (inotify), not in the time-zone "
                    "database or installed packages"
                )
        _HOOK.install(self)
        for path in self.configured:
            if os.path.isdir(path):
                try:
                    log = KernelAccessLog(path).start()
                except (OSError, RuntimeError):
                    continue  # not observed: the audit hook and the namespace still hold
                log.opened()
                self._watches.append(log)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._collect()
        finally:
            _HOOK.remove(self)
            for log in self._watches:
                log.close()
            self._watches = []
            scratch, self._scratch = self._scratch, None
            if scratch is not None:
                _remove(scratch)

    # -- what replay, cells and the fuzzer read

    def escapes(self) -> tuple[Escape, ...]:
        """Every write beneath the real data kept so far, in order."""
        self._collect()
        with self._lock:
            return tuple(self._escapes)

    # -- what ``child_processes`` uses

    def directories(self) -> tuple[str, ...]:
        """The guarded directories that exist, none inside another (it is
        covered with the one holding it)."""
        if self._directories is None:
            real = [path for path in self.paths if os.path.isdir(path)]
            self._directories = tuple(
                path for path in real if not any(is_beneath(path, [o]) for o in real if o != path)
            )
        return self._directories

    def cover(self) -> Cover | None:
        """How one process's namespace covers the real data
        (``child_setup.RootBinding.wrap``): each real directory under an
        overlay with an upper layer of its own, or bound read-only where the
        kernel refuses overlays (said once); None when there is nothing to
        cover. Touches no
        file (a handler's Python-level file operations stay its own, as
        the fault matrix counts them): the first ``PREMADE`` processes'
        layers are made when the world starts, later processes make their own."""
        directories = self.directories()
        scratch = self._scratch
        if not directories or scratch is None:
            return None
        overlay = overlay_works()
        if not overlay:
            say_once(
                "the kernel refuses an overlay here: processes tools start in the directory "
                "world get the real read-only data bound read-only (EROFS); their writes "
                "there are refused, and not reported (a refused write leaves no trace)"
            )
        with self._lock:
            process = self._processes
            self._processes += 1
            places = _layer_places(scratch, process, len(directories))
            place = places[0]
            made = [] if process < PREMADE else [place]
            lines: list[str] = []
            for index, path in enumerate(directories):
                if not overlay or _OVERLAY_UNSAFE & set(path):
                    lines.append(f"{mangled(path)} {mangled(path)} none bind,ro 0 0")
                    continue
                upper, work = places[1 + 2 * index], places[2 + 2 * index]
                if process >= PREMADE:
                    made.extend((upper, work))
                self._layers.append(Layer(path, upper, work))
                options = f"lowerdir={path},upperdir={upper},workdir={work}"
                lines.append(f"toolguard {mangled(path)} overlay {mangled(options)} 0 0")
        return Cover(place, "".join(line + "\n" for line in lines), tuple(made))

    # -- internals

    def check(self, event: str, path: Any, *, follow: bool, dir_fd: Any = None) -> None:
        """Refuse and keep a write by ``event`` to ``path`` when it lands
        beneath the real data."""
        landed = _landing(path, follow, dir_fd)
        if landed is None or BYTECODE_CACHE in landed.split("/"):
            return
        root = is_beneath(landed, self._spellings)
        if root is None:
            return
        message = (
            f"{event} {landed}: {root} is real data the directory world maps "
            "read-only (toolguard_real_paths); a tool may read it, never write it"
        )
        with self._lock:
            self._escapes.append(Escape(event, landed, message))
        raise RealDiskRefused(errno.EROFS, message)

    def _keep(self, escape: Escape) -> None:
        """Keep what a look at the layers or the kernel's log found, once
        per path and source (each look finds it again)."""
        with self._lock:
            key = (escape.event if escape.event == "process" else "kernel", escape.detail)
            if key not in self._seen:
                self._seen.add(key)
                self._escapes.append(escape)

    def _collect(self) -> None:
        """What processes left in the overlays' upper layers, and what the
        kernel saw written beneath the configured directories."""
        with self._lock:
            layers = list(self._layers)
        for layer in layers:
            for path, how in _layer_changes(layer):
                self._keep(
                    Escape(
                        "process",
                        path,
                        f"a process the tool started {how} {path}: {layer.path} is real "
                        "data the directory world maps read-only (toolguard_real_paths); "
                        "the write went to a scratch layer, never to the real directory",
                    )
                )
        for log in self._watches:
            for access in log.accesses:
                if access.event not in _WRITES or BYTECODE_CACHE in access.path.split("/"):
                    continue
                self._keep(
                    Escape(
                        access.event,
                        access.path,
                        f"{access.event} {access.path}: {log.top} is real data the "
                        "directory world maps read-only (toolguard_real_paths); written "
                        "on the real disk by a process outside the world's mount namespace",
                    )
                )


class _Hook:
    """The process's one audit hook for real data (``sys.addaudithook``
    cannot be undone: added once, idle while no world runs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.guards: list[RealData] = []
        self.hooked = False

    def install(self, guard: RealData) -> None:
        with self.lock:
            if not self.hooked:
                sys.addaudithook(_audit)
                self.hooked = True
            self.guards.append(guard)

    def remove(self, guard: RealData) -> None:
        with self.lock:
            if guard in self.guards:
                self.guards.remove(guard)


_HOOK = _Hook()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    guards = _HOOK.guards
    if not guards:  # the fast path: no directory world runs
        return
    checks = _checks(event, args)
    if not checks or not in_handler_run():
        return
    guard = guards[-1]
    for path, follow, dir_fd in checks:
        guard.check(event, path, follow=follow, dir_fd=dir_fd)


def _checks(event: str, args: tuple[Any, ...]) -> list[tuple[Any, bool, Any]]:
    """The paths ``event`` writes (with whether it follows a last link and
    its ``dir_fd``); empty for a read."""
    if event == "open":
        if len(args) < 3 or not isinstance(args[2], int) or not args[2] & _WRITING:
            return []
        return [(args[0], not args[2] & getattr(os, "O_NOFOLLOW", 0), None)]
    if event == "sqlite3.connect":
        database = _database(args[0]) if args else None
        return [] if database is None else [(database, True, None)]
    described = _EVENTS.get(event)
    if described is None:
        return []
    dir_fd = None
    if described.dir_fd is not None and described.dir_fd < len(args):
        dir_fd = args[described.dir_fd]
    return [
        (args[position], described.follow, dir_fd)
        for position in described.positions
        if position < len(args)
    ]


def _layer_places(scratch: str, process: int, count: int) -> list[str]:
    """A process's place in the scratch directory, then the upper layer
    and work directory of each of its ``count`` real directories."""
    place = posixpath.join(scratch, str(process))
    places = [place]
    for index in range(count):
        places.extend(
            (posixpath.join(place, f"{index}-upper"), posixpath.join(place, f"{index}-work"))
        )
    return places


def _database(name: Any) -> str | None:
    """The file ``sqlite3.connect`` may write; None for a database in
    memory or one opened read-only."""
    if not isinstance(name, (str, bytes, os.PathLike)):
        return None
    text = os.fsdecode(name)
    if text in ("", ":memory:"):
        return None
    if text.startswith("file:"):
        parts = urlsplit(text)
        query = parse_qs(parts.query)
        if parts.path in ("", ":memory:") or "memory" in query.get("mode", []):
            return None
        if query.get("mode") == ["ro"] or query.get("immutable") == ["1"]:
            return None
        return parts.path
    return text


def _landing(path: Any, follow: bool, dir_fd: Any) -> str | None:
    """Where ``path`` leads (its links followed, the last one only when
    ``follow``), or None for a descriptor or what is not a path."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None
    try:
        text = os.fsdecode(path)
        if not text.startswith("/"):
            base = os.readlink(f"/proc/self/fd/{dir_fd}") if isinstance(dir_fd, int) else None
            text = posixpath.join(base or os.getcwd(), text)
        text = posixpath.normpath(text)
        if follow:
            return os.path.realpath(text)
        head, tail = posixpath.split(text)
        return posixpath.join(os.path.realpath(head), tail) if tail else text
    except (OSError, TypeError, ValueError):
        return None


def _layer_changes(layer: Layer) -> list[tuple[str, str]]:
    """What an overlay's upper layer holds: each entry a process wrote
    beneath ``layer.path``, with how (``created``, ``changed``,
    ``removed``); directories copied up on the way are no change."""
    found: list[tuple[str, str]] = []
    if not layer.upper:
        return found
    pending = [""]
    while pending:
        relative = pending.pop()
        here = posixpath.join(layer.upper, relative) if relative else layer.upper
        try:
            entries = sorted(os.scandir(here), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            inside = posixpath.join(relative, entry.name) if relative else entry.name
            if entry.name == BYTECODE_CACHE:
                continue
            real = posixpath.join(layer.path, inside)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout
                found.append((real, "removed"))
            elif stat.S_ISDIR(st.st_mode):
                if not os.path.isdir(real):
                    found.append((real + "/", "created"))
                elif _opaque(entry.path):
                    found.append((real + "/", "replaced"))
                pending.append(inside)
            else:
                found.append((real, "changed" if os.path.lexists(real) else "created"))
    return found


def _opaque(path: str) -> bool:
    """Whether an overlay's upper directory hides the lower one's entries
    (removed and made again)."""
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _remove(top: str) -> None:
    """Remove a scratch directory, even the overlays' work directories the
    kernel left without permissions."""
    for directory, subdirectories, _files in os.walk(top):
        for name in subdirectories:  # before os.walk enters them
            with suppress(OSError):
                os.chmod(posixpath.join(directory, name), 0o700)
    shutil.rmtree(top, ignore_errors=True)
