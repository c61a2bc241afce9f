"""The resources family's own fault: ``resource_leak``, the failures a
call meets between acquiring a resource and giving it back.

Every cell judges what a call leaves open (``resources``), but only on
the error paths its fault happens to force: a descriptor leaked when the
second ``open`` fails is seen by ``disk_failure`` only when one of its
spread-out k lands there. This fault aims at those paths. A clean run of
the call is watched: before each of its handler's file operations
(``harness.accesses`` in the fake world, ``directory.Operations`` in the
directory world, but those the harness makes starting a process), each
growth of a file (fake world), each recorded HTTP request it makes and
right after each process it starts, what the handler side holds is
taken, each thing by its identity: open files (pyfakefs's open-file
table, or this process's descriptors and what they name), temporary
files (the fake ``/tmp``'s entries, or the paths in the temporary
directory its operations made and did not remove), processes it started
still running, live threads. Each event at which something is held that
was not at the event before (acquired since, and held: a file closed and
another opened between two events counts) is a failure point, and so is
each HTTP request while anything acquired since the handler began is
held. At most ``MAX_POINTS`` of them (the first of each kind, then spread
evenly) each get one call with the failure of its kind:

- a file operation: ``EIO``, as ``disk_failure`` raises it;
- a file's growth: ``ENOSPC``, the disk full as it writes (fake world,
  ``disk.failing_at``);
- an HTTP request: the connection reset (``network.connection_reset``);
- a process started: killed with ``SIGKILL`` as it starts, so it exits
  non-zero (``harness.child_processes.on_start``, as ``process_killed``).

In the directory world a write to an open file is no event; when the
clean run changed the workspace, one more call runs with the workspace's
disk full (``directory.FullDisk`` with no byte left, as ``partial_write``),
what it left open watched from inside that disk's mount namespace.

After each call: what it left open that was not held before it
(``resources.ResourceWatch``, the line naming the failure), and an OK
answer must not claim the work it did not do: after a failed file
operation, write, disk or process, the files a clean run leaves
(``Cell.check_complete``); after a failed request, no claim of success
(``http_claims.false_success``). A thread left running is the cell's own
check. A call that held nothing of its own at any of its events passes:
a failure at any of them has nothing to leave open. A call none of whose
events is seen in this process (a handler relaying to a server process)
is ``n/a`` (nothing to inject), as is one whose clean run failed.

Not forced: a read on a descriptor failing (no event, and no seam
fails it), a failure in the tool's own code between two events (a parse
error), a write failing part way in the directory world (the disk is
full from the start), and the failure points past ``MAX_POINTS`` of a
call that acquires many things.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import posixpath
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from ..contract import ToolResult
from ..harness.child_processes import ChildProcess, ChildProcesses, on_start, processes_of
from ..redaction import Redactor
from .cell import Cell, CleanRun
from .directory import FullDisk, full_disk_unavailable
from .disk import failing_at
from .fault import Fault
from .http_claims import false_success
from .network import connection_reset
from .outcome import NOTHING_TO_INJECT
from .resources import ResourceWatch
from .target import Target

MAX_POINTS = 4
"""At most this many failure points per cell (one call each)."""

INJECTED = "(injected by pytest-toolguard)"

Kind = Literal["operation", "growth", "request", "process", "disk"]

_REMOVALS = frozenset({"os.remove", "os.rmdir", "shutil.rmtree", "os.rename", "shutil.move"})


@dataclass(frozen=True, slots=True)
class FailurePoint:
    """One event of the clean run at which the handler held more than
    before: where one call of the fault fails."""

    kind: Kind
    index: int
    """1-based among the call's events of its kind."""
    what: str
    """The path, request or command of the event, as the problem shows it."""

    def describe(self) -> str:
        """What failed there, for a problem line."""
        if self.kind == "operation":
            return f"EIO on the handler's file operation {self.index} ({self.what})"
        if self.kind == "growth":
            return f"ENOSPC on the handler's write {self.index} (to {self.what})"
        if self.kind == "disk":
            return f"ENOSPC on the handler's first write, {self.what} disk full"
        if self.kind == "request":
            return f"the connection reset on the handler's HTTP request {self.index} ({self.what})"
        return f"the handler's process {self.index} ({self.what}) killed as it started"


class _Holdings:
    """What the handler side holds, taken the same way at every event of
    one clean run, and the events at which it held something it did not
    hold at the event before: an acquisition since (a file closed and
    another opened between two events is one too)."""

    def __init__(self, cell: Cell) -> None:
        self._cell = cell
        self._temporary = tempfile.gettempdir()
        self._lock = threading.Lock()
        self._last: frozenset[tuple[str, object]] | None = None
        self._first: frozenset[tuple[str, object]] = frozenset()
        self._made: set[str] = set()
        """Directory world: temporary entries the handler's operations made."""
        self._seen_operations = 0
        self._first_operation = cell.operations.count if cell.operations is not None else 0
        self.points: list[FailurePoint] = []
        self.events = 0
        """Events of the handler's seen."""

    def start(self) -> None:
        """The handler begins: what it holds is taken from here."""
        with self._lock:
            if self._last is None:
                self._last = self._first = self._held(pending=False)

    def note(self, kind: Kind, index: int, what: str) -> None:
        """An event: a failure point when something is held that was not
        at the event before."""
        with self._lock:
            if self._last is None:
                return  # not the handler's (it has not started)
            self.events += 1
            held = self._held(pending=kind == "operation")
            # A request is a point while anything acquired since the start is
            # held: a cleanup that covers file errors may miss the client's.
            if held - self._last or (kind == "request" and held - self._first):
                self.points.append(FailurePoint(kind, index, what))
            if kind != "process":  # taken after the start: the next event must see it new
                self._last = held

    def _held(self, *, pending: bool) -> frozenset[tuple[str, object]]:
        """Each file, temporary file, process and thread held now, by
        identity; taken quietly: the harness's looks are never the
        handler's operations. ``pending``: the last operation noted has
        not happened yet."""
        with self._cell.files.quiet():
            return frozenset(self._taken(pending))

    def _taken(self, pending: bool) -> Iterator[tuple[str, object]]:
        cell = self._cell
        for thread in threading.enumerate():
            yield "thread", thread.ident
        if not cell.directory:
            for number, wrappers in enumerate(list(cell.fs.open_files)):
                if wrappers:
                    yield "file", (number, id(wrappers[0]))
            with contextlib.suppress(OSError):
                for name in os.listdir(self._temporary):
                    yield "temporary", name
            return
        with contextlib.suppress(OSError):
            for name in os.listdir("/proc/self/fd"):
                with contextlib.suppress(OSError):
                    yield "file", (name, os.readlink(f"/proc/self/fd/{name}"))
        for made in self._temporary_made(pending):
            yield "temporary", made
        processes = processes_of(cell.world)
        for child in processes.started if processes is not None else ():
            if not child.exited():
                yield "process", child.pid

    def _temporary_made(self, pending: bool) -> set[str]:
        """Entries of the temporary directory the handler's operations made
        and have not removed so far (others share the directory: only
        these count); ``pending``: but the last one, not made yet."""
        operations = self._cell.operations
        assert operations is not None
        first = self._first_operation + self._seen_operations
        last = min(len(operations.events), len(operations.paths)) - (1 if pending else 0)
        events, paths = operations.events[first:last], operations.paths[first:last]
        self._seen_operations += len(events)
        prefix = self._temporary.rstrip("/") + "/"
        for event, path in zip(events, paths, strict=False):
            if not path:
                continue
            absolute = os.path.abspath(path)
            if not absolute.startswith(prefix):
                continue
            top = posixpath.join(self._temporary, absolute[len(prefix) :].split("/", 1)[0])
            if event in _REMOVALS:
                self._made.discard(top)
            else:
                self._made.add(top)
        return self._made


class ResourceLeakFault(Fault):
    name = "resource_leak"
    applies_to = (
        "successful calls of tools that write, touch paths or HTTP, or run in the directory world"
    )
    injection = (
        "a clean run watched for the events at which the handler holds something it did not "
        "hold at the event before (an open file, a temporary file, a process, a thread); at "
        f"each (at most {MAX_POINTS}, one call each) that event fails: EIO on the file "
        "operation, ENOSPC on the write, the connection reset on the HTTP request, the process "
        "killed as it starts; in the directory world, one more call on a full disk when the "
        "call writes"
    )
    expected = (
        "nothing left open that the call acquired (no file, temporary file, process or "
        "thread); an OK answer leaves exactly the files of a clean run, and after a failed "
        "request claims no success; n/a when no event of the handler's is seen in this process"
    )

    def applies(self, target: Target) -> bool:
        spec = target.spec
        if spec is None or not target.handler_can_run:
            return False
        return (
            target.writes
            or bool(spec.paths)
            or bool(target.interaction.http)
            or target.world == "directory"
            or bool(target.path_arguments)
        )

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        holdings = _Holdings(cell)
        with _watching(cell, holdings):
            clean = cell.clean_run()
        if not clean.result.ok:
            cell.problems.append(
                f"{NOTHING_TO_INJECT}: the call failed with nothing injected "
                f"({clean.result.code.value}), so no error path of its own was left to force"
            )
            return
        if not holdings.events:
            cell.problems.append(
                f"{NOTHING_TO_INJECT}: no file operation, write, HTTP request or process "
                "start of the handler's was seen in this process"
            )
            return
        # Nothing held at any of its events: no failure there can leave anything open.
        points = _spread(holdings.points, MAX_POINTS)
        if cell.directory and clean.tree != before and full_disk_unavailable() is None:
            # Its writes to an open file are no event here: the whole disk fills up instead.
            points.append(FailurePoint("disk", 1, "the workspace's"))
        saved = cell.world.save_workspace()
        for point in points:
            cell.world.restore_workspace(saved)
            self._fail_at(cell, point, clean)

    @staticmethod
    def _fail_at(cell: Cell, point: FailurePoint, clean: CleanRun) -> None:
        why = point.describe()
        if point.kind == "disk":
            result, left = _on_a_full_disk(cell, why)
        else:
            watch = ResourceWatch(cell)
            with watch, _failing(cell, point):
                result = cell.execute(cell.call())
            left = watch.left_open(after=why)
        if result.ok and point.kind == "request":
            recorded = cell.target.interaction.result.data
            claim = false_success(Redactor().redact(result.data), result.message, recorded)
            cell.check(
                claim is None,
                f"{why}: answered {result.code.value} {claim}, as if the request had succeeded",
            )
        elif result.ok:
            cell.check_complete(clean, f"{why} and the call answered OK")
        cell.problems.extend(left)


@contextmanager
def _watching(cell: Cell, holdings: _Holdings) -> Iterator[None]:
    """Within the block, every event of the handler's is noted in
    ``holdings`` (the handler's start first)."""
    with ExitStack() as stack:
        previous = cell.replace_handler(_starting(holdings.start))
        stack.callback(cell.restore_handler, previous)
        processes = [0]

        def started(child: ChildProcess) -> None:
            processes[0] += 1
            holdings.note("process", processes[0], " ".join(child.argv[:3]))

        stack.enter_context(on_start(cell.world, started))
        if cell.http is not None and cell.target.interaction.http:
            stack.enter_context(cell.http.injected(_noting(holdings)))
        handlers = _HandlerOperations(cell)
        stack.enter_context(handlers.watched(lambda k, what: holdings.note("operation", k, what)))
        log = cell.files.access_log
        if not cell.directory and log is not None:
            growths, root = log.growths, cell.root
            log.before_growth = lambda index, path: holdings.note(
                "growth", index - growths, _shown(path, root)
            )
            stack.callback(setattr, log, "before_growth", None)
        yield


def _failing(cell: Cell, point: FailurePoint) -> AbstractContextManager[Any]:
    """Within the block, the call's event ``point`` fails."""
    if point.kind == "operation":
        return _HandlerOperations(cell).failing(point.index)
    if point.kind == "growth":
        return failing_at(cell, "write", errno.ENOSPC, point.index)
    if point.kind == "request":
        if cell.http is None:
            return nullcontext()
        return cell.http.injected(_reset_at(point.index))
    if point.kind == "process":
        return _killing_at(cell, point.index)
    return nullcontext()  # the full disk is no context: ``_fail_at`` runs it


class _HandlerOperations:
    """The handler's own file operations, counted from 1 in each call:
    the fake world's accesses, or the directory world's Python-level
    operations but those the harness makes while it starts a process (it
    probes the machine the first time only: counted, they would move every
    later index of the clean run)."""

    def __init__(self, cell: Cell) -> None:
        self._cell = cell
        self._count = 0
        self._lock = threading.Lock()

    def _next(self) -> int | None:
        if _starting_a_process():
            return None
        with self._lock:
            self._count += 1
            return self._count

    @contextmanager
    def _before(self, act: Callable[[int, str], None]) -> Iterator[None]:
        """Within the block, ``act(k, what)`` runs before the handler's k-th
        operation (and may raise, to fail it)."""
        cell, root = self._cell, self._cell.root
        operations = cell.operations
        if operations is not None:

            def before(_index: int, event: str, path: str) -> None:
                k = self._next()
                if k is not None:
                    act(k, f"{event} {_shown(path, root)}".strip())

            operations.before = before
            try:
                yield
            finally:
                operations.before = None
            return
        log = cell.files.access_log
        if log is None:
            yield
            return

        def before_access(_index: int, path: str) -> None:
            k = self._next()
            if k is not None:
                act(k, _shown(path, root))

        log.before_access = before_access
        try:
            yield
        finally:
            log.before_access = None

    def watched(self, note: Callable[[int, str], None]) -> AbstractContextManager[None]:
        """Within the block, ``note(k, what)`` before each of the handler's operations."""
        return self._before(note)

    def failing(self, k: int) -> AbstractContextManager[None]:
        """Within the block, the handler's k-th operation raises EIO, as
        ``disk_failure``'s does."""

        def fail(index: int, what: str) -> None:
            if index == k:
                raise OSError(errno.EIO, f"{os.strerror(errno.EIO)} {INJECTED}", what)

        return self._before(fail)


def _starting_a_process() -> bool:
    """Whether this thread is inside ``ChildProcesses.start`` (the harness
    wrapping a process the handler starts)."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code is _START:
            return True
        frame = frame.f_back
    return False


_START = ChildProcesses.start.__code__


def _on_a_full_disk(cell: Cell, why: str) -> tuple[ToolResult, list[str]]:
    """The call through a runtime made for it on a disk with no byte left
    (``directory.FullDisk``, as ``partial_write``), and what it left open,
    watched from there (a descriptor on that disk names its file only in
    its mount namespace; the disk's own are held before the call)."""
    world = cell.world
    disk = FullDisk(cell.root, world.save_workspace, world.restore_workspace)

    def body() -> tuple[ToolResult, list[str]]:
        runtime = cell.make_runtime()
        watch = ResourceWatch(cell)
        with watch:
            result = cell.execute(cell.call(), runtime)
        return result, watch.left_open(after=why)

    return disk.run(0, body)


@contextmanager
def _killing_at(cell: Cell, nth: int) -> Iterator[None]:
    """Within the block, the ``nth`` process a handler run starts is
    killed (``SIGKILL``) as it starts."""
    processes = processes_of(cell.world)
    seen = [0]

    def kill(child: ChildProcess) -> None:
        seen[0] += 1
        if seen[0] == nth and processes is not None:
            processes.kill(child)

    with on_start(cell.world, kill):
        yield


def _noting(holdings: _Holdings) -> Callable[[Any, dict[str, Any]], dict[str, Any]]:
    """An HTTP answer that notes each request and serves its recorded response."""
    count = [0]
    lock = threading.Lock()

    def answer(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        with lock:
            count[0] += 1
            index = count[0]
        holdings.note("request", index, f"{request.method} {request.uri}")
        return response

    return answer


def _reset_at(nth: int) -> Callable[[Any, dict[str, Any]], dict[str, Any]]:
    """An HTTP answer that resets the connection of the ``nth`` request
    and serves every other its recorded response."""
    count = [0]
    lock = threading.Lock()

    def answer(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        with lock:
            count[0] += 1
            index = count[0]
        if index == nth:
            return connection_reset(request, response)
        return response

    return answer


def _starting(start: Callable[[], None]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A handler wrapper that calls ``start()`` as the handler's body begins."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(handler):

            async def run_async(ctx: Any, **arguments: Any) -> Any:
                start()
                return await handler(ctx, **arguments)

            return run_async

        def run(ctx: Any, **arguments: Any) -> Any:
            start()
            return handler(ctx, **arguments)

        return run

    return wrap


def _spread(points: list[FailurePoint], most: int) -> list[FailurePoint]:
    """``points``, or ``most`` of them: the first of each kind, then the
    others spread evenly (the first and the last first), in call order."""
    if len(points) <= most:
        return points
    firsts = {point.kind: index for index, point in reversed(list(enumerate(points)))}
    last = len(points) - 1
    even = [round(i * last / (most - 1)) for i in range(most)]
    chosen: set[int] = set()
    for index in [*sorted(firsts.values()), 0, last, *even, *range(len(points))]:
        if len(chosen) == most:
            break
        chosen.add(index)
    return [points[index] for index in sorted(chosen)]


def _shown(path: str, root: str) -> str:
    """``path`` relative to the workspace when it lies there."""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path
