"""Blocking calls an ``async def`` handler makes on its event loop's
thread: the evidence of a loop stall, seen without timing anything.

A coroutine that calls ``time.sleep``, ``subprocess.run`` or a blocking
socket, or reads a big file synchronously, holds every other task on its
loop for as long as the call lasts; how long that is, is timing luck, but
that the call was made on the loop's thread while the handler's coroutine
ran is not. ``LoopWatch.watching()``, entered inside the coroutine (on
the loop), marks its context (``contextvars``: tasks it creates inherit
it; a thread ``asyncio.to_thread`` starts runs elsewhere and is not
judged) and the loop's thread; the interpreter's audit events on that
thread in that context are kept as ``Blocking`` calls:

- ``time.sleep`` of more than 0 s (however it was bound: a profile
  function sees the call on that thread while the watch is entered;
  from Python 3.12 its audit event too);
- a process started (``subprocess.Popen``, ``os.system``,
  ``os.posix_spawn``, ``os.exec``, ``os.fork``), unless asyncio's own
  subprocess transport starts it (``asyncio.create_subprocess_exec``);
- ``socket.connect`` of a blocking socket, ``socket.getaddrinfo``,
  ``socket.gethostbyname`` and kin (a name looked up on the loop),
  ``urllib.Request`` (``urlopen``);
- an HTTP request a recorded exchange answers (``request``, which the
  caller's playback calls: no socket is opened then) made by a sync
  client, such as ``requests`` or ``urllib``, called from the coroutine;
- ``open`` of a path (``path`` set): whether the file was big enough to
  matter is for the caller to judge once the call ended (its size then);
  in the fake filesystem ``open`` raises no audit event, and the caller
  reports the loop's file operations itself (``file_operation``).

``sys.addaudithook`` cannot be undone: the hook is added once per
process, the first time a watch is entered, and costs a context lookup
per event afterwards. Not seen: a blocking call that raises no audit
event (``select``, ``Lock.acquire``, a C library's own I/O), and reads on
a descriptor already open.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork", "os.spawn"}
)
NAME_EVENTS = frozenset(
    {
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "urllib.Request",
    }
)


@dataclass(frozen=True, slots=True)
class Blocking:
    """One blocking call made on the loop's thread while the handler ran."""

    what: str
    """As a person reads it: ``time.sleep``, ``subprocess.Popen ['ls']``."""
    path: str | None = None
    """For a file opened: the path (its size is judged after the call)."""


class LoopWatch:
    """Collects the blocking calls (``blocking``) made on the loop's thread
    within ``watching()`` blocks (see the module docstring)."""

    def __init__(self) -> None:
        self.blocking: list[Blocking] = []
        self._thread: int | None = None
        self._lock = threading.Lock()

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Within the block (entered on the loop's thread, inside the
        handler's coroutine), blocking calls of this context on this
        thread are kept."""
        _install()
        self._thread = threading.get_ident()
        token = _WATCH.set(self)
        profile = sys.getprofile()
        sys.setprofile(_sleeping)
        try:
            yield
        finally:
            sys.setprofile(profile)
            _WATCH.reset(token)

    def on_the_loop(self) -> bool:
        """Whether the caller runs on the loop's thread, in a watched context."""
        return _WATCH.get(None) is self and threading.get_ident() == self._thread

    def file_operation(self, path: str) -> None:
        """A file operation the caller saw (the fake filesystem's, which
        raises no audit event): kept when made on the loop."""
        if self.on_the_loop():
            self._keep(Blocking(f"open {path}", path))

    def request(self, what: str) -> None:
        """An HTTP request the caller served (a recorded exchange played
        back, where no socket is opened): kept when made on the loop by a
        blocking client, that is, when the nearest coroutine up the stack
        is not an async client's (``httpx``, ``aiohttp``, vcrpy's async
        stubs) but the handler's own, which called a sync client."""
        if self.on_the_loop() and _called_synchronously():
            self._keep(Blocking(f"a blocking HTTP request ({what})"))

    def _keep(self, blocking: Blocking) -> None:
        with self._lock:
            self.blocking.append(blocking)

    def _event(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "time.sleep":
            if args and isinstance(args[0], int | float) and args[0] > 0:
                self._keep(Blocking("time.sleep"))
        elif event in PROCESS_EVENTS:
            if not _started_by_asyncio():
                shown = repr(args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1])
                if len(shown) > _SHOWN:
                    shown = shown[: _SHOWN - 3] + "..."
                self._keep(Blocking(f"{event} {shown}"))
        elif event in NAME_EVENTS:
            self._keep(Blocking(f"{event} {args[:2]!r}"))
        elif event == "socket.connect":
            sock = args[0] if args else None
            if sock is not None and getattr(sock, "getblocking", lambda: False)():
                self._keep(Blocking(f"socket.connect {args[1]!r} on a blocking socket"))
        elif event == "open" and args and isinstance(args[0], str | bytes):
            path = args[0] if isinstance(args[0], str) else args[0].decode(errors="replace")
            self._keep(Blocking(f"open {path}", path))


ASYNC_CLIENTS = ("vcr.", "httpx.", "httpcore.", "aiohttp.", "anyio.", "asyncio.")
"""Modules whose coroutines make a request without blocking the loop."""
_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR

_HARNESS = __name__.rsplit(".", 1)[0]
_SHOWN = 120
"""Characters of a started process's arguments a ``Blocking`` shows."""

_SLEEP = time.sleep

_WATCH: contextvars.ContextVar[LoopWatch] = contextvars.ContextVar("toolguard_loop_watch")
_installed = threading.Lock()
_hooked = False

_EVENTS = PROCESS_EVENTS | NAME_EVENTS | {"time.sleep", "socket.connect", "open"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _EVENTS:
        return
    watch = _WATCH.get(None)
    if watch is not None and threading.get_ident() == watch._thread:
        watch._event(event, args)


def _sleeping(_frame: Any, event: str, function: Any) -> None:
    """A profile function (on the loop's thread while a watch is entered):
    ``time.sleep`` however it was bound (``from time import sleep``);
    Python before 3.12 raises no audit event for it."""
    if event == "c_call" and function is _SLEEP:
        watch = _WATCH.get(None)
        if watch is not None and threading.get_ident() == watch._thread:
            watch._keep(Blocking("time.sleep"))


def _install() -> None:
    global _hooked
    with _installed:
        if not _hooked:
            sys.addaudithook(_audit)
            _hooked = True


def _called_synchronously() -> bool:
    """Whether the nearest coroutine frame up the stack belongs to no
    async client (``ASYNC_CLIENTS``): a sync client, called from it, runs
    the request."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_flags & _ASYNC_FLAGS:
            module = str(frame.f_globals.get("__name__", ""))
            return not module.startswith(ASYNC_CLIENTS)
        frame = frame.f_back
    return False


def _started_by_asyncio() -> bool:
    """Whether asyncio's subprocess transport is starting the process
    (``create_subprocess_exec`` runs ``Popen`` on the loop, without
    waiting): the first caller outside ``subprocess``, ``os`` and the
    harness (which wraps a started process in the directory world) is asyncio's."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module not in ("subprocess", "os") and not module.startswith(_HARNESS):
            return module.startswith("asyncio.")
        frame = frame.f_back
    return False
