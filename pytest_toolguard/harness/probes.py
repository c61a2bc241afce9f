"""What the oracles of replay, fault cells and the fuzzer look at.

- ``HandlerProbe`` wraps a tool's handler: how often it ran, and for each
  call what its runs did (finished, raised, returned, the threads they
  left running), opening an ``AccessLog``'s window while each run lasts;
  ``probing(registry)`` wraps every tool of a registry;
- ``snapshot_outside`` / ``outside_changes``: every entry of the fake
  filesystem outside the workspace (kind and mode; a file's inode, link
  count, mtime and bytes; a link's target), and what changed between two
  snapshots;
- ``ThreadWatch``: threads started since it was made that are still alive;
- ``still_working``: whether a thread runs work (a thread pool's worker
  waiting for its next task does not);
- ``audit_row_problems``: each call has exactly one finished audit row.

Pytest-free; each problem is said as a line for a report.
"""

from __future__ import annotations

import inspect
import json
import stat
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..audit import AuditRecord
from ..contract import ToolResult
from ..registry import ToolRegistry
from ..runtime.inline import call_tool_code
from .accesses import AccessOracle
from .fake_filesystem import is_real_directory

# -- handler runs ------------------------------------------------------------------


POOL_LOOPS = frozenset(
    {
        ("concurrent.futures.thread", "_worker"),  # concurrent.futures, asyncio's executor
        ("anyio._backends._asyncio", "run"),  # AnyIO's worker threads
        ("pytest_toolguard.isolation", "_loop"),  # the runtime's own
    }
)
"""The loops of thread pools' workers (module, function), which outlive a
task by design: such a thread is working only while a task's own code runs
above its loop."""

_RUNTIME_LOOP = ("pytest_toolguard.isolation", "_loop")

_POOL_MACHINERY = ("concurrent.futures", "queue", "threading", "asyncio", "anyio", "contextvars")
"""What a pool's worker runs between tasks (waiting for one, reporting a
result): not a task's own code."""


def _module_of(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else ""


def _within(module: str, packages: Sequence[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


_WORLD_SERVICES: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def serving_the_world(thread: threading.Thread) -> None:
    """Count ``thread`` as the world's, not as a handler's: it serves every
    call of the world (a server a bridge starts on the first call and the
    world's end stops), so it is never a thread a handler left running."""
    _WORLD_SERVICES.add(thread)


def is_serving_the_world(thread: threading.Thread) -> bool:
    """Whether ``serving_the_world`` named ``thread``."""
    return thread in _WORLD_SERVICES


_WORLD_FILES: weakref.WeakSet[Any] = weakref.WeakSet()


def file_serving_the_world(handle: Any) -> None:
    """Count the open file ``handle`` as the world's, not as a handler's:
    a server a bridge starts on the first call keeps it (its error output)
    for every call of the world, so it is never a file a call left open."""
    _WORLD_FILES.add(handle)


def world_descriptors() -> set[int]:
    """The descriptors of the files ``file_serving_the_world`` named that
    are still open."""
    held = set()
    for handle in list(_WORLD_FILES):
        if not handle.closed:
            held.add(handle.fileno())
    return held


ASYNCIO_REAPER = "asyncio-waitpid-"
"""How asyncio names the thread that reaps a child process it started
(``ThreadedChildWatcher``): it ends by itself once the child has, maybe a
moment after the awaited ``wait()`` returned, so it is waited for, bounded."""

REAPER_SECONDS = 1.0
"""How long a reaper thread is waited for: longer means its child still runs."""


def still_working(thread: threading.Thread) -> bool:
    """Whether ``thread`` is alive and running work: any thread but a pool's
    worker (``POOL_LOOPS``) waiting for its next task. The runtime's own
    workers never count: the runtime reports a handler past its deadline
    itself (``ToolRuntime.close``); nor do threads serving the world
    (``serving_the_world``)."""
    if not thread.is_alive() or thread in _WORLD_SERVICES:
        return False
    frame = sys._current_frames().get(thread.ident or 0)
    above: list[FrameType] = []
    while frame is not None:
        place = (_module_of(frame), frame.f_code.co_name)
        if place in POOL_LOOPS:
            if place == _RUNTIME_LOOP:
                return False
            return any(not _within(_module_of(f), _POOL_MACHINERY) for f in above)
        above.append(frame)
        frame = frame.f_back
    return True  # not a pool's worker (or not running Python yet): alive is working


@dataclass
class HandlerRuns:
    """What a handler's runs did during one call."""

    calls: int = 0
    """Runs that started (a coroutine counts once its body starts)."""
    finished: int = 0
    raised: BaseException | None = None
    outputs: list[Any] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    """Threads a run started that were alive when it ended."""

    def leftover_threads(self) -> list[str]:
        """The names of ``threads`` still working now (no waiting: a handler
        that answered has no business still running work): ``still_working``,
        so a thread pool's worker (AnyIO's, ``concurrent.futures``',
        asyncio's) counts while it runs a task, not while it waits, idle,
        for the next one."""
        for thread in self.threads:
            if thread.name.startswith(ASYNCIO_REAPER) and thread.is_alive():
                thread.join(REAPER_SECONDS)
        return sorted(thread.name for thread in self.threads if still_working(thread))


class HandlerProbe:
    """A handler wrapper that counts its runs and records, per call, what
    they did (thread-safe). Put it in a tool with ``spec.with_handler(probe)``:
    it stays async when the tool is. ``handler`` is the wrapped handler and
    may be replaced between calls (a fault wraps it); ``start_call()``
    begins a new ``HandlerRuns``.

    A run is counted when it starts: a plain handler when it is called, a
    coroutine (what an ``async def`` handler, or a handler returning an
    awaitable, gives) when its body starts; an awaitable closed unstarted
    (the deadline passed first) never ran. It ends when its value is there."""

    def __init__(self, handler: Callable[..., Any], accesses: AccessOracle | None = None) -> None:
        self.handler = handler
        self._made_with = handler
        self.accesses = accesses
        """The access log (either world's) whose window each run opens (None: none)."""
        self.on_start: Callable[[], None] | None = None
        """Called as each run starts, before the handler (quietly)."""
        self.calls = 0
        """Runs since the probe was made (or ``reset``)."""
        self.current = HandlerRuns()
        self.every_call: list[HandlerRuns] = []
        """Every call's record, in order (``start_call`` adds one)."""
        self._lock = threading.Lock()

    @property
    def prepare(self) -> Callable[..., Any] | None:
        """The handler's ``prepare``, which the runtime runs before the
        call's deadline starts (None when it has none): the one the probe
        was made with when a fault's wrapper (which calls it) has none."""
        for handler in (self.handler, self._made_with):
            prepare: Callable[..., Any] | None = getattr(handler, "prepare", None)
            if callable(prepare):
                return prepare
        return None

    def start_call(self) -> HandlerRuns:
        """A new record for the next call's runs."""
        self.current = HandlerRuns()
        self.every_call.append(self.current)
        return self.current

    def leftover_threads(self) -> list[str]:
        """Threads any run of this probe left that are still alive."""
        runs = [*self.every_call, self.current]
        return sorted({name for run in runs for name in run.leftover_threads()})

    def reset(self) -> None:
        """Count from zero again."""
        with self._lock:
            self.calls = 0

    def __call__(self, ctx: Any, **arguments: Any) -> Any:
        runs = self.current  # the call this run belongs to, even if it overruns
        handler = self.handler
        if inspect.iscoroutinefunction(handler) or (
            not inspect.isroutine(handler) and inspect.iscoroutinefunction(type(handler).__call__)
        ):
            return _Settling(self, runs, handler(ctx, **arguments), before=None)
        before = self._started(runs)
        try:
            value = call_tool_code(handler, ctx, **arguments)  # only there may a deadline land
        except BaseException as exc:
            self._finished(runs, before, raised=exc)
            raise
        if inspect.isawaitable(value):
            return _Settling(self, runs, value, before=before)  # the runtime awaits it
        self._finished(runs, before, value=value)
        return value

    def _started(self, runs: HandlerRuns) -> set[threading.Thread]:
        """Count the run in; the threads alive as it starts."""
        with self._lock:
            runs.calls += 1
            self.calls += 1
        before = set(threading.enumerate())
        if self.on_start is not None:
            self.on_start()
        if self.accesses is not None:
            self.accesses.opened()
        return before

    def _finished(
        self,
        runs: HandlerRuns,
        before: set[threading.Thread],
        *,
        value: Any = None,
        raised: BaseException | None = None,
    ) -> None:
        if self.accesses is not None:
            self.accesses.closed()
        # The thread a run ends on may not be the one it started on (inline, an
        # awaitable the handler returned is run on a worker thread).
        started = [
            thread
            for thread in threading.enumerate()
            if thread not in before
            and thread is not threading.current_thread()
            and not isinstance(thread, threading._DummyThread)
        ]
        with self._lock:
            runs.threads.extend(started)
            runs.finished += 1
            if raised is not None:
                runs.raised = raised
            else:
                runs.outputs.append(value)


def probing(
    registry: ToolRegistry, accesses: AccessOracle | None = None
) -> tuple[ToolRegistry, list[HandlerProbe]]:
    """A copy of ``registry`` whose every tool's handler is wrapped in a
    ``HandlerProbe`` (over ``accesses``), and the probes."""
    probes: list[HandlerProbe] = []
    specs = []
    for spec in registry:
        probe = HandlerProbe(spec.handler, accesses)
        probes.append(probe)
        specs.append(spec.with_handler(probe))
    return ToolRegistry(specs, world=registry.world), probes


class _Settling:
    """The awaitable a probed handler returns: awaits the handler's own and
    records how it ended; closed unstarted, it closes the handler's (no
    "never awaited" warning) and the run never started."""

    def __init__(
        self,
        probe: HandlerProbe,
        runs: HandlerRuns,
        awaitable: Awaitable[Any],
        *,
        before: set[threading.Thread] | None,
    ) -> None:
        self._probe = probe
        self._runs = runs
        self._awaitable = awaitable
        self._before = before
        """The threads alive as the run started (None: it starts when awaited)."""
        self._awaited = False

    def __await__(self) -> Any:
        return self._body().__await__()

    async def _body(self) -> Any:
        self._awaited = True
        before = self._before
        if before is None:  # a coroutine function's run starts here
            before = self._before = self._probe._started(self._runs)
        try:
            value = await self._awaitable
        except BaseException as exc:
            self._probe._finished(self._runs, before, raised=exc)
            raise
        self._probe._finished(self._runs, before, value=value)
        return value

    def close(self) -> None:
        if not self._awaited:
            close = getattr(self._awaitable, "close", None)
            if close is not None:
                close()


# -- outside the workspace ----------------------------------------------------------

OutsideSnapshot = dict[str, tuple[Any, ...]]
"""Path -> what it is: ("directory", mode), ("symlink", target bytes) or
("file", mode, inode, links, mtime, bytes)."""


def snapshot_outside(fs: Any, root: str) -> OutsideSnapshot:
    """Every entry of the fake filesystem ``fs`` outside the workspace
    ``root``, read from pyfakefs's objects (a walk through ``os`` costs ten
    times more and changes access times). A real directory mapped in
    read-only is one entry, not walked (its contents would be read from
    the real disk; ``harness.escapes`` refuses every write there)."""
    entries: OutsideSnapshot = {}
    pending: list[tuple[str, Any]] = [("", fs.root)]
    while pending:
        prefix, directory = pending.pop()
        for name, item in directory.entries.items():
            path = f"{prefix}/{name}"
            if path == root:
                continue
            mode = item.st_mode
            if stat.S_ISDIR(mode):
                entries[path] = ("directory", mode)
                if not is_real_directory(item):
                    pending.append((path, item))
            elif stat.S_ISLNK(mode):
                entries[path] = ("symlink", item.byte_contents)
            else:
                entries[path] = (
                    "file",
                    mode,
                    item.st_ino,
                    item.st_nlink,
                    item.st_mtime,
                    item.byte_contents,
                )
    return entries


@dataclass(frozen=True, slots=True)
class OutsideChanges:
    """What changed outside the workspace between two snapshots."""

    created: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.created or self.removed or self.modified)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every changed path, sorted."""
        return tuple(sorted((*self.created, *self.removed, *self.modified)))

    def describe(self, listed: int = 5) -> str:
        """``created /a; modified /b`` ('' when nothing changed), at most
        ``listed`` paths named per kind."""
        parts = []
        for verb, paths in (
            ("created", self.created),
            ("removed", self.removed),
            ("modified", self.modified),
        ):
            if paths:
                shown = ", ".join(paths[:listed])
                more = f" and {len(paths) - listed} more" if len(paths) > listed else ""
                parts.append(f"{verb} {shown}{more}")
        return "; ".join(parts)


def outside_changes(before: OutsideSnapshot, after: OutsideSnapshot) -> OutsideChanges:
    """What ``after`` created, removed and modified since ``before``."""
    return OutsideChanges(
        created=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        modified=tuple(sorted(p for p in before.keys() & after.keys() if before[p] != after[p])),
    )


# -- threads ------------------------------------------------------------------------


class ThreadWatch:
    """Remembers the threads alive when it is made; ``leftover(wait)``
    names those started since that are still alive after waiting up to
    ``wait`` seconds in all for them to end."""

    def __init__(self) -> None:
        self._before = set(threading.enumerate())

    def leftover(self, wait: float) -> list[str]:
        deadline = time.monotonic() + wait
        alive = []
        for thread in threading.enumerate():
            if (
                thread in self._before
                or thread in _WORLD_SERVICES
                or thread is threading.current_thread()
                or isinstance(thread, threading._DummyThread)  # not joinable; not started by us
            ):
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                alive.append(thread.name)
        return sorted(alive)


# -- audit rows ---------------------------------------------------------------------


def audit_row_problems(
    rows: Sequence[AuditRecord],
    call_ids: Iterable[str],
    *,
    may_lack_row: Iterable[str] = (),
    exclusive: bool = False,
) -> list[str]:
    """For each call id (in order), a line when it has not exactly one
    audit row, or when its row is not finished; a call in ``may_lack_row``
    (the store was down when it started) may have none. ``exclusive``: rows
    of any other call are a problem too (a world where only these calls
    were made)."""
    call_ids = list(call_ids)
    by_call: dict[str, list[AuditRecord]] = {}
    for row in rows:
        by_call.setdefault(row.call_id, []).append(row)
    exempt = set(may_lack_row)
    problems = []
    for call_id in call_ids:
        mine = by_call.get(call_id, [])
        if call_id in exempt and not mine:
            continue
        if len(mine) != 1:
            problems.append(f"{call_id}: expected one audit row, found {len(mine)}")
        unfinished = [row.state.value for row in mine if not row.state.finished]
        if unfinished:
            problems.append(f"{call_id}: audit row left {', '.join(unfinished)}")
    if exclusive:
        strays = sorted({row.call_id for row in rows} - set(call_ids))
        if strays:
            problems.append(f"audit rows of calls never made: {', '.join(strays)}")
    return problems


def holds_marker(marker: str, results: Iterable[ToolResult], *others: Any) -> bool:
    """Whether ``marker`` is in any result's data or message, or in any of
    ``others`` as JSON (outputs a handler returned)."""
    texts = [json.dumps([result.data, result.message], default=str) for result in results]
    texts += [json.dumps(other, ensure_ascii=False, default=repr) for other in others]
    return any(marker in text for text in texts)
