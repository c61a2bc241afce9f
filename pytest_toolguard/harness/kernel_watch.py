"""The directory world's access oracle: what the kernel reports any process
did to the world's files (inotify, through the ``inotify-simple`` binding).

``KernelAccessLog(top)`` watches ``top`` (a directory world's around
directory) and every directory beneath it: inotify watches are per
directory, so a directory made later (by the world, a fault or the tool)
is watched once its creation is read, and what it already holds is
reported as created then. Each event on an entry of a watched directory
(an open, a read, a write, a creation, a removal, a rename, a change of
mode or times) is one ``accesses.Access`` with its ``event``, for any
process: the handler, a C library it calls (sqlite3), a subprocess
(``cat``, ``git``). ``stat``, ``realpath`` and ``readlink`` make no event.

The kernel queues an event at the system call itself, so reading the
queue until it is empty (no wait) after a call gives everything the call
did. The kernel cannot say which process did what: the log keeps only
what was queued while a handler run was open (``opened()`` /
``closed()``, as ``probes.HandlerProbe`` opens them, or ``window()``) and
not inside ``quiet()``. At each of those moments the queue is read to
the end, and what it held is kept or dropped by the window it was queued
in: the world's own set-up, the harness's reads (``tree()``,
``outside()``, ``save_workspace()``) and restores between runs are never
counted.

Where it stops:

- a queue overflow (``IN_Q_OVERFLOW``) while a run is open loses events,
  and so does a directory the kernel will not watch (out of watches): the
  log then says ``unknown`` (and ``outside()`` returns ``UNKNOWN`` first),
  never "nothing happened"; after an overflow the watches are laid again
  over the whole tree;
- what another thread or process does inside ``quiet()``, or after the
  handler answered (a process left running), is dropped as the harness's;
- a file mapped into memory is seen when it is opened, not each read or
  write through the mapping; reads and writes through a descriptor opened
  before the window are seen, its opening is not;
- entries made and removed again inside a directory made during the same
  run, before its creation was read, are never seen;
- nothing outside ``top`` is watched (the tool's own ``$HOME``, ``/etc``).

Without ``inotify-simple`` installed (the ``directory`` extra) nothing is
watched: ``KernelAccessLog.available()`` is False and a directory world
says its accesses are not observed.

Unlike the fake world's ``AccessLog`` this log cannot act between two of a
handler's operations (``can_inject`` is False): setting ``before_access``,
``after_access`` or ``before_growth`` raises ``NotImplementedError``.
"""

from __future__ import annotations

import atexit
import errno
import os
import posixpath
import stat
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from ..registry import ToolSpec
from ..runtime.messages import warn
from .accesses import Access, is_ancestor, is_within
from .effects import undeclared_changes

try:
    import inotify_simple
except ImportError:  # the "directory" extra is not installed
    inotify_simple = None

# The kernel's flags (inotify.h), spelt here so that this module imports
# without the binding.
IN_ACCESS = 0x1
IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_OPEN = 0x20
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000

WATCHED = (
    IN_OPEN
    | IN_ACCESS
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_ATTRIB
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
)
"""The events watched on every directory (an entry's close without a write is not)."""

UNKNOWN = "<unknown: events were lost (a queue overflow, or a directory not watched)>"
"""The path of the access ``outside()`` adds when events were lost."""

_KINDS = (
    (IN_CREATE, "create"),
    (IN_MOVED_TO, "move"),
    (IN_MOVED_FROM, "move"),
    (IN_DELETE, "delete"),
    (IN_MODIFY, "write"),
    (IN_CLOSE_WRITE, "write"),
    (IN_ATTRIB, "attrib"),
    (IN_OPEN, "open"),
    (IN_ACCESS, "read"),
)

_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
"""Why a directory cannot be watched that says it is no longer one."""

_CONTENT = frozenset({"open", "read", "write", "create"})
"""Events that reach a file's content (``Access.opens``)."""


@dataclass(frozen=True, slots=True)
class _Event:
    path: str
    mask: int
    cookie: int = 0

    @property
    def kind(self) -> str:
        return next((kind for flag, kind in _KINDS if self.mask & flag), "other")

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


class KernelAccessLog:
    """What any process did under ``top`` while a handler run was open
    (see the module docstring). Thread-safe; one per world; ``start()``
    before use, ``close()`` after."""

    can_inject = False
    """It cannot fail or act on a handler's k-th operation (the fake world's can)."""

    def __init__(self, top: str, exempt: tuple[str, ...] = ()) -> None:
        self.top = posixpath.normpath(top)
        self.exempt = exempt
        """Directories whose accesses are never outside."""
        self._lost = False
        self.unwatched: list[str] = []
        """Directories the kernel refused to watch (out of watches): what
        happens in them is never seen, so the log is ``unknown`` for good."""
        self.overflows = 0
        """Queue overflows seen, in or out of a window."""
        self.dropped = 0
        """Events dropped inside ``quiet()`` while a handler run was open
        (the harness's own work, and whatever the run did meanwhile)."""
        self._accesses: list[Access] = []
        self._growths = 0
        self._open_runs = 0
        self._quiet = 0
        self._lock = threading.RLock()
        self._notify: Any = None
        self._paths: dict[int, str] = {}

    @property
    def unknown(self) -> bool:
        """Events of an open run were lost since the last ``reset`` (a
        queue overflow), or a directory is not watched: what was kept is
        not all that happened."""
        return self._lost or bool(self.unwatched)

    @staticmethod
    def available() -> bool:
        """Whether the binding is installed (the ``directory`` extra)."""
        return inotify_simple is not None

    # -- life

    def start(self) -> KernelAccessLog:
        """Watch ``top`` and every directory beneath it. ``RuntimeError``
        without the binding, ``OSError`` when the kernel refuses (no
        inotify, out of instances or watches)."""
        if inotify_simple is None:
            raise RuntimeError("inotify-simple is not installed: pip install inotify-simple")
        with self._lock:
            self._notify = _instance()
            try:
                self._watch_tree(self.top, [])
            except BaseException:
                self.close()
                raise
        return self

    def close(self) -> None:
        """Stop watching (before the world is removed: its removal is never read)."""
        with self._lock:
            notify, self._notify = self._notify, None
            watches, self._paths = list(self._paths), {}
            if notify is not None:
                _give_back(notify, watches)

    # -- windows (as ``AccessLog``'s)

    def opened(self) -> None:
        """A handler run started: what was queued before is not its doing."""
        with self._lock:
            self._drain()
            self._open_runs += 1

    def closed(self) -> None:
        """A handler run ended: what was queued until now is kept."""
        with self._lock:
            self._drain()
            self._open_runs = max(0, self._open_runs - 1)

    @contextmanager
    def window(self) -> Iterator[None]:
        """``opened()`` ... ``closed()`` around a block."""
        self.opened()
        try:
            yield
        finally:
            self.closed()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """What is queued within the block is the harness's doing and is
        dropped (for every process: the kernel does not say whose it is)."""
        with self._lock:
            self._drain()
            self._quiet += 1
        try:
            yield
        finally:
            with self._lock:
                self._drain()
                self._quiet -= 1

    def reset(self) -> None:
        """Forget every access (and a past overflow), count from zero again."""
        with self._lock:
            self._drain()
            self._accesses = []
            self._growths = 0
            self._lost = False

    # -- what the oracles read

    @property
    def accesses(self) -> list[Access]:
        """Every access kept since the last ``reset``, in the kernel's order."""
        with self._lock:
            self._drain()
            return list(self._accesses)

    @property
    def count(self) -> int:
        """Accesses kept since the last ``reset``."""
        with self._lock:
            self._drain()
            return len(self._accesses)

    @property
    def growths(self) -> int:
        """Writes kept since the last ``reset``."""
        with self._lock:
            self._drain()
            return self._growths

    def outside(self, root: str, *, since: int = 0) -> list[Access]:
        """The accesses to entries outside ``root`` (directories above it
        are not outside, nor those beneath ``exempt``) after the first
        ``since`` (a ``count`` taken earlier), and one ``UNKNOWN`` access
        first when events were lost."""
        found = [
            access
            for access in self.accesses[since:]
            if not is_within(access.path, root)
            and not is_ancestor(access.path, root)
            and not any(is_within(access.path, directory) for directory in self.exempt)
        ]
        if self.unknown:
            found.insert(0, Access(0, UNKNOWN, True, True, UNKNOWN, "unknown"))
        return found

    def changed(self, root: str, *, since: int = 0) -> list[str]:
        """The files beneath ``root`` (relative to it) the kept accesses
        after the first ``since`` changed: written, created, removed,
        renamed or given new modes or times, less those made and removed
        (or renamed away) again: a temporary file cleaned up is no change.
        A directory that was there and was removed or moved away is listed
        as ``<path>/`` (the files it held went with it)."""
        return sorted(path for path, state in self._states(root, since).items() if state)

    def created(self, root: str, *, since: int = 0) -> list[str]:
        """The files beneath ``root`` (relative to it) the kept accesses
        after the first ``since`` created (or renamed there), and that are
        still there now (the runtime's rollback may have removed them):
        what a call that failed must not leave, such as its temporary files."""
        return sorted(
            path
            for path, state in self._states(root, since).items()
            if state == "created" and os.path.lexists(posixpath.join(root, path))
        )

    def watched(self) -> list[str]:
        """The directories watched now."""
        with self._lock:
            return sorted(self._paths.values())

    # -- the fake world's seams, which the kernel cannot offer

    @property
    def before_access(self) -> None:
        return None

    @before_access.setter
    def before_access(self, value: object) -> None:
        _refuse_injection(value)

    @property
    def after_access(self) -> None:
        return None

    @after_access.setter
    def after_access(self, value: object) -> None:
        _refuse_injection(value)

    @property
    def before_growth(self) -> None:
        return None

    @before_growth.setter
    def before_growth(self, value: object) -> None:
        _refuse_injection(value)

    # -- internals

    def _states(self, root: str, since: int) -> dict[str, str]:
        """Per entry beneath ``root``: "created", "changed", "removed", or
        "" (made and gone again), from the kept accesses in order. A
        directory counts only when one that was there is removed or moved
        away (its files went with it, unseen): as "<path>/"."""
        root = root.rstrip("/")
        states: dict[str, str] = {}
        made: set[str] = set()  # directories made by the kept accesses
        for access in self.accesses[since:]:
            if not access.path.startswith(root + "/"):
                continue
            path, kind = access.path[len(root) + 1 :], access.event
            if access.given.endswith("/"):
                if kind in ("create", "move-in"):
                    made.add(path)
                elif kind in ("delete", "move-out") and path not in made:
                    states[path + "/"] = "removed"
                continue
            state = states.get(path)
            if kind in ("create", "move-in"):
                states[path] = "changed" if state == "removed" else "created"
            elif kind in ("delete", "move-out"):
                states[path] = "" if state in ("created", "") else "removed"
            elif kind in ("write", "attrib") and not state:
                states[path] = "changed"
        return states

    def _keeping(self) -> bool:
        return self._open_runs > 0 and self._quiet == 0

    def _drain(self) -> None:
        """Read the queue to its end (never waiting), keep or drop what it
        held by the window now open, and follow the tree's directories."""
        notify = self._notify
        if notify is None:
            return
        raw: list[Any] = []
        while True:
            batch = notify.read(timeout=0)
            if not batch:
                break
            raw.extend(batch)
        if not raw:
            return
        keep = self._keeping()
        if not keep and self._open_runs > 0:
            self.dropped += len(raw)
        moved_from: dict[int, tuple[str, list[int]]] = {}  # cookie: old path, its watches
        overflowed = False
        for item in raw:
            mask = int(item.mask)
            if mask & IN_Q_OVERFLOW:
                overflowed = True
                continue
            if mask & IN_IGNORED:
                self._paths.pop(item.wd, None)
                continue
            directory = self._paths.get(item.wd)
            name = item.name
            if directory is None or not name:
                continue  # a directory's own event: its parent's watch reports it too
            path = posixpath.join(directory, os.fsdecode(name))
            event = _Event(path, mask, int(item.cookie))
            found: list[_Event] = []
            if event.is_dir and mask & IN_MOVED_FROM:
                moved_from[event.cookie] = (path, self._beneath(path))
            elif event.is_dir and mask & IN_MOVED_TO and event.cookie in moved_from:
                old, watches = moved_from.pop(event.cookie)
                for wd in watches:  # a watch follows its directory
                    if wd in self._paths:
                        self._paths[wd] = path + self._paths[wd][len(old) :]
            elif event.is_dir and mask & (IN_CREATE | IN_MOVED_TO):
                self._watch_tree(path, found)
            if keep:
                self._keep(event)
                for made in found:
                    self._keep(made)
        for _old, watches in moved_from.values():  # renamed out of the watched tree
            for wd in watches:
                self._paths.pop(wd, None)
                with suppress(OSError):  # already gone with its directory
                    self._notify.rm_watch(wd)
        if overflowed:
            self.overflows += 1
            if self._open_runs > 0:  # lost events may be a run's, even inside quiet()
                self._lost = True
            self._watch_tree(self.top, [])  # directories made meanwhile

    def _keep(self, event: _Event) -> None:
        kind = event.kind
        if kind == "move":
            kind = "move-in" if event.mask & IN_MOVED_TO else "move-out"
        if kind == "write":
            self._growths += 1
        given = event.path + ("/" if event.is_dir else "")
        opens = kind in _CONTENT
        self._accesses.append(Access(len(self._accesses) + 1, event.path, True, opens, given, kind))

    def _watch_tree(self, top: str, found: list[_Event]) -> None:
        """Watch ``top`` and the directories beneath it (never through a
        link); what they hold goes to ``found`` as created. The kernel
        gives a directory already watched its own watch back: a path's old
        watch (a directory moved away) is never taken for the new one."""
        pending = [top]
        while pending:
            directory = pending.pop()
            try:
                wd = self._notify.add_watch(directory, WATCHED | IN_ONLYDIR | IN_DONT_FOLLOW)
            except OSError as exc:
                if directory == self.top:
                    raise
                if exc.errno not in _GONE:
                    self.unwatched.append(directory)
                continue  # gone, or not a directory any more: its removal is reported
            self._paths[int(wd)] = directory
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in sorted(entries, key=lambda entry: entry.name):
                try:
                    is_dir = stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode)
                except OSError:
                    continue
                found.append(_Event(entry.path, IN_CREATE | (IN_ISDIR if is_dir else 0)))
                if is_dir:
                    pending.append(entry.path)

    def _beneath(self, top: str) -> list[int]:
        """The watches of ``top`` and the directories beneath it (taken when
        it moves: its path may be reused before the move's other half)."""
        return [wd for wd, path in self._paths.items() if path == top or path.startswith(top + "/")]


def watching(top: str) -> KernelAccessLog | None:
    """A started log of ``top``, or None when the binding is missing or
    the kernel refuses one: said once per process (a RuntimeWarning),
    since every directory world would say it again."""
    global _noted
    if KernelAccessLog.available():
        try:
            return KernelAccessLog(top).start()
        except OSError as exc:
            why = f"the kernel refused to watch it ({exc})"
    else:
        why = "inotify-simple is not installed (pip install 'pytest-toolguard[directory]')"
    if not _noted:
        _noted = True
        warn(f"the directory world's accesses are not observed: {why}")
    return None


_noted = False
"""Whether ``watching`` said that accesses are not observed."""


# -- instances, kept for the next world ------------------------------------------------

MAX_IDLE = 4
"""Instances kept for later worlds. Closing an instance that had watches
waits for the kernel to retire them (milliseconds: most of a small world's
cost); removing the watches one by one does not."""

_idle: list[Any] = []
_idle_pid = os.getpid()
_idle_lock = threading.Lock()


def _instance() -> Any:
    """An inotify instance with no watch and an empty queue."""
    global _idle_pid
    with _idle_lock:
        if _idle_pid != os.getpid():  # a forked child: its parent's are not its own
            _idle.clear()
            _idle_pid = os.getpid()
        notify = _idle.pop() if _idle else None
    if notify is None:
        return inotify_simple.INotify(nonblocking=True)
    while notify.read(timeout=0):  # what its last watches left (their removal)
        pass
    return notify


def _give_back(notify: Any, watches: list[int]) -> None:
    """Remove ``watches`` and keep ``notify`` for a later world (or close it)."""
    try:
        for wd in watches:
            with suppress(OSError):  # gone with its directory
                notify.rm_watch(wd)
        while notify.read(timeout=0):
            pass
    except OSError:
        notify.close()
        return
    with _idle_lock:
        if len(_idle) < MAX_IDLE and _idle_pid == os.getpid():
            _idle.append(notify)
            return
    notify.close()


@atexit.register
def _close_idle() -> None:
    """The kept instances closed as the process ends (no ResourceWarning)."""
    with _idle_lock:
        while _idle:
            _idle.pop().close()


def _refuse_injection(value: object) -> None:
    if value is not None:
        raise NotImplementedError(
            "the kernel's notifications cannot act between a handler's operations"
        )


def call_problems(
    log: KernelAccessLog,
    root: str,
    since: int,
    spec: ToolSpec,
    arguments: Any,
    variables: Mapping[str, str],
    write_roots: Sequence[str],
    *,
    failed: bool,
    resolve: Callable[[str], str | None] | None = None,
) -> list[str]:
    """What one call of ``spec`` did that its declarations do not allow,
    from the accesses ``log`` kept after the first ``since``: an access
    outside ``root`` (a decoy read, opened, written, or made beside it);
    a change of a file its declarations do not cover or outside the write
    roots (``effects.undeclared_changes``: a READ tool changing anything,
    seen even when the bytes came back the same); for a call that
    ``failed``, each file it created and left (a temporary file). Lost
    events are a problem too: the call's accesses are unknown."""
    problems: list[str] = []
    outside = log.outside(root, since=since)
    if outside and outside[0].path == UNKNOWN:
        problems.append(f"the call's accesses are unknown: {UNKNOWN}")
        outside = outside[1:]
    reached: dict[str, set[str]] = {}
    for access in outside:
        reached.setdefault(access.path, set()).add(access.event)
    for path, events in sorted(reached.items()):
        problems.append(f"accessed outside the workspace: {path} ({', '.join(sorted(events))})")
    changed = log.changed(root, since=since)
    problems.extend(undeclared_changes(spec, arguments, variables, write_roots, changed, resolve))
    if failed:
        left = log.created(root, since=since)
        if left:
            problems.append(f"the call failed and left files it created: {', '.join(left[:5])}")
    return problems
