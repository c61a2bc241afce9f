"""``fcntl.flock`` between threads in the fake world, as the kernel does it.

pyfakefs replaces ``fcntl`` with a module whose ``flock`` does nothing, so
in the fake world a tool that locks a file to serialise its
read-modify-write is not serialised at all: two calls at once would lose
an update that the real kernel prevents. ``FakeFlocks`` (a context
manager) gives the fake ``flock`` the kernel's semantics while it is
installed: a lock belongs to the open file (each ``open`` its own, shared
by nothing else here), ``LOCK_EX`` excludes every other open file's lock
on the same file, ``LOCK_SH`` excludes only an exclusive one, ``LOCK_NB``
raises ``BlockingIOError`` instead of waiting, ``LOCK_UN`` or closing the
file releases it. A thread that has to wait tells ``on_blocked`` (its
``threading.get_ident()``) first, once per wait: whoever scheduled it
learns at once that it cannot go on until another thread lets go.

Not given: ``lockf`` and ``fcntl(F_SETLK...)`` stay no-ops (POSIX record
locks belong to the process: the kernel does not exclude two threads of
one process with them either), and locks of descriptors duplicated with
``os.dup`` are not shared with the original.
"""

from __future__ import annotations

import errno
import fcntl
import threading
from collections.abc import Callable
from typing import Any

from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_io import FakeFcntlModule

POLL_SECONDS = 0.005
"""How often a waiting thread looks again whether the holder closed its file
(a close releases the lock without telling anyone)."""


class FakeFlocks:
    """The kernel's ``flock`` for one fake filesystem while installed (see
    the module docstring). One at a time per process."""

    def __init__(self, fs: FakeFilesystem, on_blocked: Callable[[int], None] | None = None) -> None:
        self.fs = fs
        self.on_blocked = on_blocked
        """Called with the thread's ident as it starts to wait for a lock."""
        self._condition = threading.Condition()
        self._held: dict[int, list[tuple[Any, bool]]] = {}
        """Per file object (its id): the open files holding a lock on it,
        and whether the lock is exclusive."""
        self._original: Any = None

    def __enter__(self) -> FakeFlocks:
        self._original = vars(FakeFcntlModule)["flock"]
        locks = self
        original = self._original

        def flock(module: Any, fd: Any, operation: int) -> None:
            if object.__getattribute__(module, "filesystem") is not locks.fs:
                return original(module, fd, operation)  # type: ignore[no-any-return]
            locks.flock(fd, operation)
            return None

        setattr(FakeFcntlModule, "flock", flock)  # noqa: B010 (a method replaced)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is not None:
            setattr(FakeFcntlModule, "flock", self._original)  # noqa: B010
            self._original = None
        with self._condition:
            self._held.clear()

    def flock(self, fd: Any, operation: int) -> None:
        """``fcntl.flock(fd, operation)`` on the fake filesystem."""
        number = fd if isinstance(fd, int) else fd.fileno()
        opened = self.fs.get_open_file(number)
        key = id(opened.get_object())
        if operation & fcntl.LOCK_UN:
            with self._condition:
                self._release(key, opened)
                self._condition.notify_all()
            return
        exclusive = bool(operation & fcntl.LOCK_EX)
        told = False
        with self._condition:
            while True:
                holders = [
                    (holder, ex)
                    for holder, ex in self._held.get(key, [])
                    if holder is not opened and self._open(holder)
                ]
                self._held[key] = holders + [
                    (holder, ex) for holder, ex in self._held.get(key, []) if holder is opened
                ]
                if not any(ex or exclusive for _holder, ex in holders):
                    break
                if operation & fcntl.LOCK_NB:
                    raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
                if not told and self.on_blocked is not None:
                    told = True
                    self.on_blocked(threading.get_ident())
                self._condition.wait(POLL_SECONDS)
            self._release(key, opened)
            self._held.setdefault(key, []).append((opened, exclusive))

    def _release(self, key: int, opened: Any) -> None:
        kept = [(holder, ex) for holder, ex in self._held.get(key, []) if holder is not opened]
        if kept:
            self._held[key] = kept
        else:
            self._held.pop(key, None)

    def _open(self, holder: Any) -> bool:
        """Whether ``holder`` (an open file of the fake filesystem) is still open."""
        number = getattr(holder, "filedes", None)
        files = self.fs.open_files
        if not isinstance(number, int) or not 0 <= number < len(files):
            return False
        return any(entry is holder for entry in files[number] or ())
