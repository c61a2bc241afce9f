"""Running a handler under a deadline: in a thread, or in a killable process.

Thread mode (the default, and the only mode replay can use, because a fake
filesystem lives in this process's memory) cannot kill a handler: Python
threads are not killable. A handler that overruns its deadline is answered
TIMEOUT at once and its thread is *tracked* as an orphan; ``close()`` joins
orphans with a bound and reports any still alive, so a test can fail loudly
instead of letting a late write hit the real disk after teardown. Worker
threads are reused between calls (a new thread per call costs more than the
rest of the pipeline) and are daemons, so a hung handler never blocks the
interpreter's exit.

Coroutines (``async def`` handlers, or handlers returning an awaitable).
``ThreadIsolation.run`` and the process child run them to completion with
``CoroutineRunner``, on an event loop of their own; at the deadline the
runtime cancels the coroutine through it (``task.cancel`` on that loop, from
the caller's thread). ``ThreadIsolation.run_async`` runs one as a task on
the caller's running loop instead (``ToolRuntime.aexecute``): at the
deadline the task is cancelled and given ``cancel_grace`` seconds to stop; a
task still running after that is tracked like an orphaned thread. A
coroutine can only be cancelled at an ``await``: one that blocks its loop
(``time.sleep`` in ``async def``) blocks the caller's loop too under
``run_async``.

Process mode forks a child in its own process group and kills the group with
SIGKILL at the deadline: a handler that sleeps past its timeout and then
writes leaves nothing. The child inherits the workspace's descriptors; the
result (JSON-like data, or the exception) comes back through a pipe, pickled.
What the child must report even if it is killed (the rollback journal: what
each file held before it changed) goes through a ``ChildLog`` instead,
written before each change. The fork waits until no thread is inside the
audit store (``pytest_toolguard.forking``), so a child never inherits
SQLite's locks held by another thread; a call whose deadline passes while
the store stays busy is answered TIMEOUT without forking. Caveats: POSIX
only; the child must not touch the audit store; a handler that depends on
locks other code of the process held in other threads at the fork (a
library's own mutexes, a lock of yours) may hang until killed at its
deadline.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .errors import ToolguardError
from .forking import FORK_GATE

if TYPE_CHECKING:  # imported where used: asyncio costs ~15 ms, paid by async callers only
    import asyncio

IsolationMode = Literal["thread", "process"]


class HandlerTimeout(ToolguardError):
    """The handler overran its deadline."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"handler did not finish within {seconds:g} s")
        self.seconds = seconds


class HandlerCrashed(ToolguardError):
    """Process mode: the child died without sending a result, or sent an
    exception that could not be carried back as itself."""


class Isolation(Protocol):
    def run(self, fn: Callable[[], Any], timeout: float, name: str) -> Any: ...

    def close(self, join_timeout: float = 5.0) -> list[str]: ...


@dataclass(slots=True)
class _Job:
    fn: Callable[[], Any]
    value: Any = None
    error: BaseException | None = None
    finished: bool = False


class _Worker:
    """A daemon thread that runs one job at a time until told to stop.

    A job is handed over through two locks the worker keeps for its life,
    both held while nothing is pending: ``hand`` releases ``_start`` (the
    worker, blocked acquiring it, takes the job), and the worker releases
    ``_done`` when the job has ended. A raw lock is the cheapest wait there
    is (a timed acquire is several times cheaper than ``Event.wait``), and
    no lock or queue entry is made per call. Every ``hand`` is
    consumed by the worker before the next: a job is handed only to a
    worker waiting for one (idle, or new), the stop only to one that will
    not run another job."""

    def __init__(self, pool: ThreadIsolation) -> None:
        self._pool = pool
        self.orphaned = False
        self.label = ""
        self._job: _Job | None = None
        self._start = threading.Lock()
        self._start.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self.thread = threading.Thread(target=self._loop, name="toolguard-worker", daemon=True)
        self.thread.start()

    def hand(self, job: _Job | None) -> None:
        """Run ``job`` next; None: stop."""
        self._job = job
        self._start.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the job handed ended within ``timeout`` seconds (None: wait
        for it). Each ending is waited for once."""
        if timeout is None:
            return self._done.acquire()
        return self._done.acquire(timeout=timeout)

    def _loop(self) -> None:
        try:
            while True:
                self._start.acquire()
                job, self._job = self._job, None
                if job is None:
                    return
                try:
                    job.value = job.fn()
                except BaseException as exc:  # carried back to the caller
                    job.error = exc
                job.finished = True
                self._done.release()
                if self._pool._leave_after_job(self):
                    return
        finally:
            close_thread_loop()


CANCEL_GRACE = 1.0
"""Seconds ``run_async`` waits, after cancelling a task at its deadline, for
it to stop before answering (cleanup in ``finally`` blocks, usually one turn
of the loop)."""


class ThreadIsolation:
    """Runs handlers on reusable daemon worker threads with a deadline, and
    coroutines on the caller's running loop (``run_async``)."""

    def __init__(self, max_idle: int = 8, *, cancel_grace: float = CANCEL_GRACE) -> None:
        self._max_idle = max_idle
        self.cancel_grace = cancel_grace
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        """Workers running a job within its deadline."""
        self._orphans: list[_Worker] = []
        self._closed = False
        self._tasks: dict[asyncio.Task[Any], str] = {}
        """Tasks of ``run_async`` still running past their deadline."""
        self._lock = threading.Lock()
        self._task_ended = threading.Condition(self._lock)

    def run(self, fn: Callable[[], Any], timeout: float, name: str) -> Any:
        """Return ``fn()``'s value, re-raise its exception, or raise
        ``HandlerTimeout`` at the deadline (leaving the thread tracked)."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is not None:
                self._busy.add(worker)
        if worker is None:
            worker = _Worker(self)
            with self._lock:
                self._busy.add(worker)
        job = _Job(fn)
        worker.label = name
        worker.hand(job)
        if not worker.wait(timeout):
            with self._lock:
                if not job.finished:
                    self._busy.discard(worker)
                    worker.orphaned = True
                    self._orphans.append(worker)
                    raise HandlerTimeout(timeout)
            # It ended as the deadline passed: its release is on its way,
            # and is taken here, not by the worker's next job.
            worker.wait()
        self._return(worker)
        if job.error is not None:
            raise job.error
        return job.value

    async def run_async(
        self,
        fn: Callable[[], Coroutine[Any, Any, Any]],
        timeout: float,
        name: str,
        cancel: Callable[[], None],
    ) -> Any:
        """Await ``fn()`` as a task on the running loop and return its value
        (or re-raise its exception). At the deadline: call ``cancel()``,
        cancel the task, wait up to ``cancel_grace`` s for it to stop, and
        raise ``HandlerTimeout`` (a task still running is tracked). When the
        caller's own task is cancelled meanwhile, the same happens without
        the wait and ``CancelledError`` propagates."""
        import asyncio

        # The loop first: without one, fn() is never called (no unawaited coroutine).
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(fn())
        try:
            done, _ = await asyncio.wait((task,), timeout=timeout)
            if done:
                return task.result()
            cancel()
            task.cancel()
            await asyncio.wait((task,), timeout=self.cancel_grace)
        except asyncio.CancelledError:  # the caller's task: the handler goes with it
            cancel()
            task.cancel()
            self._track(task, name)
            raise
        self._track(task, name)
        raise HandlerTimeout(timeout)

    def _track(self, task: asyncio.Task[Any], name: str) -> None:
        with self._lock:
            if task.done():
                return
            self._tasks[task] = name
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        with self._task_ended:
            self._tasks.pop(task, None)
            self._task_ended.notify_all()

    def _return(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(worker)
                return
        worker.hand(None)

    def _leave_after_job(self, worker: _Worker) -> bool:
        # Under the lock, so a deadline that passes just as the job ends
        # either sees the job done or marks the worker before it reads this.
        # After close() no worker waits for another job.
        with self._lock:
            if worker.orphaned:
                self._orphans.remove(worker)
            return worker.orphaned or self._closed

    def orphans(self) -> list[str]:
        """Labels of handlers still running past their deadline."""
        with self._lock:
            threads = [w.label for w in self._orphans if w.thread.is_alive()]
            return threads + [name for task, name in self._tasks.items() if not task.done()]

    def close(self, join_timeout: float = 5.0) -> list[str]:
        """Stop idle workers and wait up to ``join_timeout`` seconds in all for
        handlers still running to end: orphaned ones, and busy ones still
        within their deadline (each worker stops once its job ends). Returns
        the labels of those still alive. A task on the loop running in the
        calling thread cannot end while this blocks, so it is reported
        without waiting. Later ``run`` calls still work, each on a worker of
        its own that stops after the job."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            running = list(self._orphans) + list(self._busy)
        for worker in idle:
            worker.hand(None)
        deadline = time.monotonic() + join_timeout
        for worker in running:
            worker.thread.join(max(0.0, deadline - time.monotonic()))
        for worker in idle:
            worker.thread.join(max(0.0, deadline - time.monotonic()))
        still_alive = [w.label for w in running if w.thread.is_alive()]
        own_loop = _running_loop()
        with self._task_ended:
            while any(not task.done() and task.get_loop() is not own_loop for task in self._tasks):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._task_ended.wait(remaining)
            return still_alive + [name for task, name in self._tasks.items() if not task.done()]


class CoroutineRunner:
    """Runs one awaitable to completion on the calling thread's event loop
    (a worker thread, or the process child), and lets another thread
    cancel it: ``cancel()`` cancels the task on that loop, or makes ``run``
    close the awaitable unstarted when the loop is not running yet.

    The loop is kept for the thread's next call (``asyncio.run`` made and
    closed one per call: about ten times the cost of running on an open
    loop). Nothing of one call reaches the next: the tasks a call leaves
    are cancelled before ``run`` returns, as ``asyncio.run`` does, and a
    call that leaves anything else on the loop (a timer, a callback, an
    async generator, work still running in the default executor's
    threads) has the loop closed as ``asyncio.run`` closes it, waiting for
    those threads within the call. The default executor's idle threads
    are kept with the loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """The awaitable's value; its exception, or ``CancelledError`` once
        cancelled, propagates."""
        import asyncio

        async def main() -> Any:
            with self._lock:
                if self._cancelled:
                    close = getattr(awaitable, "close", None)
                    if close is not None:  # a coroutine never started: no "never awaited"
                        close()
                    raise asyncio.CancelledError
                self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
            try:
                return await awaitable
            finally:
                with self._lock:
                    self._loop = self._task = None

        from .thread_loops import cancel_left_tasks, holds_more, thread_loop

        loop = thread_loop()
        asyncio.set_event_loop(loop)  # as asyncio.run: get_event_loop() finds it meanwhile
        try:
            return loop.run_until_complete(main())
        finally:
            try:
                cancel_left_tasks(loop)
                if holds_more(loop):
                    close_thread_loop()
            finally:
                asyncio.set_event_loop(None)

    def cancel(self) -> None:
        """Cancel the coroutine (from any thread); harmless once it ended."""
        with self._lock:
            self._cancelled = True
            if self._loop is not None and self._task is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    self._loop.call_soon_threadsafe(self._task.cancel)


def close_thread_loop() -> None:
    """Close this thread's ``CoroutineRunner`` loop, if it made one, as
    ``asyncio.run`` closes its own (a thread ends with its loop closed:
    an open one warns when it is collected)."""
    loops = sys.modules.get(f"{__package__}.thread_loops")
    if loops is not None:  # no coroutine ever ran in this process: no loop
        loops.close_thread_loop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread (None without asyncio loaded)."""
    if "asyncio" not in sys.modules:
        return None
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ProcessIsolation:
    """Runs each handler in a forked child, killed with its process group at
    the deadline."""

    def __init__(self) -> None:
        self._running: dict[int, str] = {}
        """Children whose caller waits for them (pid -> label), until reaped."""
        self._changed = threading.Condition()

    def run(self, fn: Callable[[], Any], timeout: float, name: str) -> Any:
        deadline = time.monotonic() + timeout
        read_end, write_end = os.pipe()
        # Forked only while no thread is inside the audit store: a child never
        # inherits SQLite's locks held (see pytest_toolguard.forking).
        pid = FORK_GATE.while_closed(os.fork, timeout)
        if pid is None:  # the store stayed busy past the deadline: nothing ran
            os.close(read_end)
            os.close(write_end)
            raise HandlerTimeout(timeout)
        if pid == 0:  # the child: run, report, and leave without cleanup handlers
            os.close(read_end)
            _child(fn, write_end)
        os.close(write_end)
        with self._changed:
            self._running[pid] = name
        try:
            return self._wait(pid, read_end, deadline, timeout)
        finally:
            with self._changed:
                del self._running[pid]
                self._changed.notify_all()

    def _wait(self, pid: int, read_end: int, deadline: float, timeout: float) -> Any:
        """The child's value (or exception), once it answered and was reaped."""
        with contextlib.suppress(OSError):  # the child may already have done it, or exited
            os.setpgid(pid, pid)
        try:
            payload = _read_until(read_end, deadline)
        except BaseException:
            _kill_group(pid)  # never leave a child running past a failure here
            raise
        finally:
            os.close(read_end)
        if payload is None:
            _kill_group(pid)
            raise HandlerTimeout(timeout)
        _reap(pid)
        if not payload:
            raise HandlerCrashed("the handler's process died without a result")
        kind, value = pickle.loads(payload)
        if kind == "ok":
            return value
        raise value

    def close(self, join_timeout: float = 5.0) -> list[str]:
        """Wait up to ``join_timeout`` s for the children other threads are
        still waiting for (each is killed at its own deadline at the
        latest), and return the labels of those still running."""
        end = time.monotonic() + join_timeout
        with self._changed:
            while self._running:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return list(self._running.values())


class ChildLog:
    """Records a forked child sends its parent, kept in an unnamed temporary
    file (mode 0600) made before the fork. ``send`` returns once the record
    is in the kernel, so every record a child sent before it was killed at
    its deadline, or crashed, is read back by ``receive``; a record cut by
    the kill is dropped (whatever it announced had not started). Any size:
    a pipe would block a child whose parent is not reading yet."""

    _HEADER = 8

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())

    def send(self, record: Any) -> None:
        data = pickle.dumps(record)
        view = memoryview(len(data).to_bytes(self._HEADER, "big") + data)
        fd = self._file.fileno()
        while view:
            view = view[os.write(fd, view) :]

    def receive(self) -> list[Any]:
        """Every whole record sent, in order."""
        fd = self._file.fileno()
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data, records, at = b"".join(chunks), [], 0
        while at + self._HEADER <= len(data):
            size = int.from_bytes(data[at : at + self._HEADER], "big")
            end = at + self._HEADER + size
            if end > len(data):
                break
            records.append(pickle.loads(data[at + self._HEADER : end]))
            at = end
        return records

    def close(self) -> None:
        self._file.close()


def _child(fn: Callable[[], Any], write_end: int) -> None:
    code = 0
    try:
        os.setpgid(0, 0)
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:
            try:
                payload = pickle.dumps(("error", exc))
            except Exception:
                payload = pickle.dumps(("error", HandlerCrashed(f"{type(exc).__name__}: {exc}")))
        view = memoryview(payload)
        while view:
            view = view[os.write(write_end, view) :]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything written to ``fd`` until EOF, or None at the deadline."""
    chunks: list[bytes] = []
    poller = select.poll()  # not select(): it fails for descriptors >= 1024
    poller.register(fd, select.POLLIN)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if not poller.poll(max(1, int(remaining * 1000))):
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _kill_group(pid: int) -> None:
    # The group first (the handler may have started children), then the
    # child itself in case it died before joining its own group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def make_isolation(mode: IsolationMode) -> Isolation:
    if mode == "thread":
        return ThreadIsolation()
    if mode == "process":
        if not hasattr(os, "fork"):
            raise ValueError("isolation='process' needs os.fork (POSIX)")
        return ProcessIsolation()
    raise ValueError(f"isolation must be 'thread' or 'process', not {mode!r}")
