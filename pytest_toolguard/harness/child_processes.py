"""Processes a tool starts while it runs in the directory world.

A handler in the directory world may start processes (``git``, a
compiler, a server in another language). ``ChildProcesses`` (the directory
world holds one for its whole block, ``DirectoryWorld.processes``) starts
each process a handler run starts through ``subprocess.Popen`` (so
``subprocess.run``, ``check_output``, ``os.popen`` and asyncio's
subprocesses) with its arguments, environment, working directory and
standard streams as asked, and:

- **the recorded time**: when libfaketime is installed (the distribution's
  ``faketime`` package; ``find_libfaketime``), the process gets
  ``LD_PRELOAD`` and ``FAKETIME`` set to the world's frozen time, the clock
  stopped (``date``, ``git``'s commit dates and a Python child all read
  it); the monotonic clock stays real, so timeouts still pass. Without it
  the process sees the real clock, and a ``ChildProcessWarning`` says so
  once per process. Statically linked programs and Go programs ignore
  ``LD_PRELOAD``: they see the real clock.
- **the recorded root**: where the machine allows a private mount
  namespace (``namespace_command``: ``unshare -m`` as root, ``unshare -U
  -r -m`` otherwise; asked once), the process runs in its own, where the
  world's workspace is bind-mounted at the recorded root: a tool that
  hard-codes it reaches the world. When the recorded root does not exist on
  this machine, its nearest existing parent is covered, in that namespace
  only, by a memory file system holding the parent's own entries (each
  bound back) and the missing directories down to the root; when that
  parent is ``/`` (``/workspace``), the process gets a root of its own
  made that way (``chroot``) at ``STAGE``, an empty directory of the
  world's. Nothing is made on the real disk outside the world. Not done,
  and said once (the process then runs with the root mapped in its
  arguments only, as without namespaces): when the recorded root is a file
  or holds the world, or when the program itself lies beneath the
  recorded root. Unprivileged (``unshare -U -r``), the process runs as
  root of its user namespace.
- **the real data covered**: in that namespace, the world's real read-only
  data (``real_data``) is under an overlay: a write there is kept and reported.
- **its own session** (``start_new_session``): at the call's deadline plus
  ``kill_after`` seconds, a process still running is killed with its
  process group and every process of its session (``SIGKILL``); when the
  world ends, every process any of them started that is still running,
  double-forked ones included (found in ``/proc`` by session or by the
  ``MARKER`` variable they inherit), is killed too.
- **a file size limit** when one is set (``limit_file_size``):
  ``RLIMIT_FSIZE``, so that a write past it fails (``EFBIG``, or the
  process is killed by ``SIGXFSZ`` unless it ignores it).

Not seen: a process started with ``os.system``, ``os.posix_spawn``,
``os.fork`` or ``multiprocessing`` (they do not go through ``Popen``) is
neither wrapped nor tracked; a process started in process isolation's
child is killed when the world ends, not at the deadline plus the bound;
a process started outside a handler run (a server started before the
world) is not the world's.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import posixpath
import resource
import select
import shutil
import signal
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..runtime.invocation import HandlerRun
from .child_setup import (
    NO_FAKETIME,
    RootBinding,
    find_libfaketime,
    frozen_seconds,
    open_pidfd,
    root_binding,
    say_once,
)
from .escapes import is_beneath, starting_processes
from .real_data import RealData

KILL_AFTER_SECONDS = 1.0
"""How long after its call's deadline a process the call started may run
before it is killed."""

WATCH_SECONDS = 0.02
"""How often the watcher looks at deadlines and exits while processes run."""

STAGE = ".toolguard-root"
"""The empty directory of the world's own directory (beside the workspace)
where a process's new root is made when the recorded root's top directory
does not exist on this machine (``/workspace``)."""

MARKER = "TOOLGUARD_WORLD"
"""The environment variable every process started in a directory world gets
(``<the world's directory>#<n>``, n counting the processes started): what
it starts inherits it, double-forked or not."""

# -- tracking -----------------------------------------------------------------------


class _Cancelled(Protocol):
    def is_set(self) -> bool: ...


@dataclass(eq=False, slots=True)
class ChildProcess:
    """One process a handler run started in a directory world."""

    pid: int
    argv: tuple[str, ...]
    """What it runs (before any wrapping)."""
    cancelled: _Cancelled | None
    """Its call's deadline flag (``ctx.cancelled``), None when unknown."""
    pidfd: int | None = None
    marker: str = ""
    """Its ``MARKER`` value, which the processes it starts inherit."""
    overdue: int = 0
    """Watch slices since its call's deadline passed."""
    killed: bool = False
    """Killed by the world (deadline plus the bound, ``kill``, the end)."""

    def exited(self) -> bool:
        """Whether it has ended (a zombie has)."""
        if self.pidfd is not None:
            readable, _, _ = select.select([self.pidfd], [], [], 0)
            return bool(readable)
        return _state(self.pid) in (None, "Z", "X")


@dataclass(slots=True)
class _Limits:
    file_size: int | None = None


@dataclass(slots=True)
class _Hooks:
    started: list[Callable[[ChildProcess], None]] = field(default_factory=list)


class ChildProcesses:
    """The processes handler runs start in one directory world (see the
    module docstring). A context manager: in its block, ``Popen`` in a
    handler run starts through ``start``; when it ends, every process still
    running is killed. ``faketime`` / ``namespace`` False leave that part
    out (as on a machine without it)."""

    def __init__(
        self,
        *,
        around: str,
        world_root: str,
        recorded_root: str,
        frozen_at: str | None,
        faketime: bool = True,
        namespace: bool = True,
        kill_after: float = KILL_AFTER_SECONDS,
        real_data: RealData | None = None,
    ) -> None:
        self.around = around
        self.world_root = world_root
        self.recorded_root = recorded_root
        self.frozen_at = frozen_at
        self.kill_after = kill_after
        self._faketime = faketime
        self._namespace = namespace
        self._lock = threading.Lock()
        self._children: list[ChildProcess] = []
        self._all: list[ChildProcess] = []
        self._sessions: set[int] = set()
        self._stack = contextlib.ExitStack()
        self._environment: dict[str, str] | None = None
        self._binding: RootBinding | None = None
        self.real_data = real_data
        self.limits = _Limits()
        self.hooks = _Hooks()
        self._forked = False
        """This process forked while the world ran (process isolation runs a
        handler in a child, whose processes this object never sees): the
        world's end then looks for them in ``/proc``."""

    @classmethod
    def of(cls, world: Any, **options: Any) -> ChildProcesses:
        """The processes of a running ``DirectoryWorld``."""
        return cls(
            around=world.around,
            world_root=world.root,
            recorded_root=world.recorded_root,
            frozen_at=world.frozen_at,
            real_data=getattr(world, "real_data", None),
            **options,
        )

    # -- the block

    def __enter__(self) -> ChildProcesses:
        _RUNNING.add(self)
        self._environment = self._extra_environment()
        self._binding = self._root_binding()
        _WATCHER.ensure_started()  # here, before any handler runs: never a handler's thread
        self._stack.enter_context(starting_processes(self.start))
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._stack.close()
        finally:
            _RUNNING.discard(self)
            self.kill_all()

    @property
    def started(self) -> tuple[ChildProcess, ...]:
        """Every process started in this world so far, in order."""
        with self._lock:
            return tuple(self._all)

    @property
    def faketime(self) -> bool:
        """Whether processes get the recorded time."""
        return bool(self._environment and "FAKETIME" in self._environment)

    @property
    def mounted(self) -> bool:
        """Whether processes see the world at the recorded root."""
        return self._binding is not None

    # -- starting

    def start(
        self,
        init: Callable[..., None],
        popen: Any,
        args: Any,
        more: tuple[Any, ...],
        options: dict[str, Any],
        run: HandlerRun | None,
    ) -> None:
        """``Popen.__init__(popen, args, *more, **options)`` for a handler
        run's process, wrapped (see the module docstring)."""
        try:
            bound = inspect.signature(init).bind(popen, args, *more, **options)
        except TypeError:
            init(popen, args, *more, **options)  # Popen itself says what is wrong
            return
        given = dict(bound.arguments)
        given.pop("self", None)
        given.update(given.pop("kwargs", {}))
        command = self._argv(given)
        if command is None:  # a program that cannot be found: Popen raises as it would
            init(popen, **given)
            return
        argv, program = command
        with self._lock:
            marker = f"{self.around}#{len(self._all) + 1}"
        given["env"] = self._environment_for(given.get("env"), marker)
        if not given.get("start_new_session") and given.get("process_group") is None:
            given["start_new_session"] = True
        limit = self.limits.file_size
        if limit is not None:
            given["preexec_fn"] = _with_file_size_limit(given.get("preexec_fn"), limit)
        given["shell"] = False
        given["args"], given["executable"] = self._wrapped(argv, program, given)
        original = args
        init(popen, **given)
        popen.args = original  # what the tool asked for, in its errors (CalledProcessError)
        cancelled = run.ctx.cancelled if run is not None else None
        child = ChildProcess(popen.pid, tuple(argv), cancelled, open_pidfd(popen.pid), marker)
        with self._lock:
            self._children.append(child)
            self._all.append(child)
            with contextlib.suppress(OSError):
                if os.getsid(popen.pid) == popen.pid:  # its own: never the test's session
                    self._sessions.add(popen.pid)
        _WATCHER.watch(child, self.kill_after)
        for hook in list(self.hooks.started):
            hook(child)

    def _argv(self, given: dict[str, Any]) -> tuple[list[str], str | None] | None:
        """The command as an argv and the program to run when it is not
        ``argv[0]`` (``executable``; a shell command through ``/bin/sh
        -c``), or None when the program is not found (Popen then raises
        ``FileNotFoundError`` itself)."""
        args = given.get("args")
        if isinstance(args, (str, bytes, os.PathLike)):
            argv = [os.fsdecode(args)]
        else:
            argv = [os.fsdecode(part) for part in args or ()]
        if not argv:
            return None
        executable = given.get("executable")
        program = os.fsdecode(executable) if executable else None
        if given.get("shell"):
            argv = ["/bin/sh", "-c", *argv]
        found = program or argv[0]
        if "/" not in found:
            env = given.get("env")
            path = (env if env is not None else os.environ).get("PATH", os.defpath)
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if shutil.which(found, path=path) is None:
                return None
        return argv, program

    def _wrapped(
        self, argv: list[str], program: str | None, given: dict[str, Any]
    ) -> tuple[list[str], str | None]:
        """The argv and executable Popen gets: the command in the mount
        namespace when there is one."""
        binding = self._binding
        if binding is None:
            return argv, program
        found = program or argv[0]
        if "/" not in found:
            env = given.get("env") or {}
            found = shutil.which(found, path=env.get("PATH", os.defpath)) or found
        elif not found.startswith("/"):
            found = posixpath.join(os.fsdecode(given.get("cwd") or os.getcwd()), found)
        if is_beneath(posixpath.normpath(found), [self.recorded_root]):
            say_once(
                f"{found} lies beneath the recorded root {self.recorded_root}: "
                "it runs without the world mounted there"
            )
            return argv, program
        return binding.wrap(argv, program), None

    def _extra_environment(self) -> dict[str, str]:
        extra: dict[str, str] = {}
        if not self._faketime or self.frozen_at is None:
            return extra
        library = find_libfaketime()
        if library is None:
            why = (
                f"{NO_FAKETIME} is set"
                if os.environ.get(NO_FAKETIME)
                else ("libfaketime is not installed (the faketime package)")
            )
            say_once(f"{why}: processes tools start in the directory world see the real clock")
            return extra
        extra.update(
            {
                "LD_PRELOAD": library,
                "FAKETIME": str(frozen_seconds(self.frozen_at)),
                "FAKETIME_FMT": "%s",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "DONT_FAKE_MONOTONIC": "1",  # the spelling of libfaketime before 0.9.8
            }
        )
        return extra

    def _environment_for(self, env: Any, marker: str) -> dict[Any, Any]:
        base = dict(os.environ if env is None else env)
        extra = {**(self._environment or {}), MARKER: marker}
        if base and isinstance(next(iter(base)), bytes):
            merged: dict[Any, Any] = dict(base)
            for key, value in extra.items():
                merged[os.fsencode(key)] = os.fsencode(value)
            preload = b"LD_PRELOAD"
            if preload in base and "LD_PRELOAD" in extra:
                merged[preload] = os.fsencode(extra["LD_PRELOAD"]) + b":" + base[preload]
            return merged
        merged = {**base, **extra}
        if "LD_PRELOAD" in base and "LD_PRELOAD" in extra:
            merged["LD_PRELOAD"] = f"{extra['LD_PRELOAD']}:{base['LD_PRELOAD']}"
        return merged

    def _root_binding(self) -> RootBinding | None:
        if not self._namespace:
            return None
        stage = posixpath.join(self.around, STAGE)
        binding = root_binding(self.world_root, self.recorded_root, stage, self.real_data)
        if isinstance(binding, str):
            say_once(binding)
            return None
        return binding

    # -- killing

    def kill(self, child: ChildProcess) -> None:
        """Kill ``child`` now with its process group and session (``SIGKILL``)."""
        child.killed = True
        _kill_session(child)

    def kill_all(self) -> list[int]:
        """Kill every process started in this world that is still running,
        and every process of their sessions or carrying this world's
        ``MARKER`` (double-forked ones); returns the pids killed."""
        with self._lock:
            children, self._children = list(self._children), []
            sessions = set(self._sessions)
            anything = bool(self._all) or self._forked
        _WATCHER.forget(children)  # before their descriptors are closed below
        for child in children:
            if not child.exited():
                child.killed = True
            _kill_group(child.pid)
        killed = _kill_members(sessions, f"{self.around}#") if anything else []
        for child in children:
            if child.pidfd is not None:
                os.close(child.pidfd)
                child.pidfd = None
        return killed


class _Watcher:
    """One thread for the whole process (started by the first world, before
    any handler runs, and idle while no process runs): kills a process
    ``kill_after`` seconds after its call's deadline and forgets the ones
    that ended. Counted in slices of ``WATCH_SECONDS``, not read from a
    clock: a frozen clock must not stop it."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._children: dict[ChildProcess, int] = {}
        """Each process watched -> the slices it may run past its deadline."""
        self._thread: threading.Thread | None = None

    def ensure_started(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="toolguard-child-processes", daemon=True
                )
                self._thread.start()

    def watch(self, child: ChildProcess, kill_after: float) -> None:
        with self._lock:
            self._children[child] = max(1, round(kill_after / WATCH_SECONDS))
        self._wake.set()

    def forget(self, children: list[ChildProcess]) -> None:
        with self._lock:
            for child in children:
                self._children.pop(child, None)

    def _run(self) -> None:
        idle = threading.Event()  # never set: a wait on it is a pause
        while True:
            with self._lock:
                watching = bool(self._children)
            if not watching:
                self._wake.wait()
                self._wake.clear()
                continue
            idle.wait(WATCH_SECONDS)
            with self._lock:  # ``forget`` waits: a descriptor is never closed under a check
                for child, slices in list(self._children.items()):
                    if child.exited():
                        del self._children[child]
                    elif child.cancelled is not None and child.cancelled.is_set():
                        child.overdue += 1
                        if child.overdue > slices:
                            child.killed = True
                            _kill_session(child)


_WATCHER = _Watcher()
os.register_at_fork(after_in_child=_WATCHER._reset)  # a child has no watcher thread, nor its lock


_RUNNING: weakref.WeakSet[ChildProcesses] = weakref.WeakSet()
"""The worlds' ``ChildProcesses`` in their blocks (for the fork hook)."""


def _forking() -> None:
    for processes in list(_RUNNING):
        processes._forked = True


os.register_at_fork(before=_forking)


# -- what the other parts of the harness use -----------------------------------------


def processes_of(world: object) -> ChildProcesses | None:
    """The ``ChildProcesses`` of a running directory world, None for a
    fake world (or a directory world without them)."""
    processes = getattr(world, "processes", None)
    return processes if isinstance(processes, ChildProcesses) else None


@contextlib.contextmanager
def limit_file_size(world: object, max_bytes: int) -> Iterator[bool]:
    """Until the block ends, processes handler runs start in ``world`` get
    ``RLIMIT_FSIZE`` of ``max_bytes``: a write past it fails with
    ``EFBIG`` (or ``SIGXFSZ`` kills the process). Yields False, doing
    nothing, for a world that starts no processes (the fake world)."""
    processes = processes_of(world)
    if processes is None:
        yield False
        return
    previous = processes.limits.file_size
    processes.limits.file_size = max_bytes
    try:
        yield True
    finally:
        processes.limits.file_size = previous


@contextlib.contextmanager
def on_start(world: object, hook: Callable[[ChildProcess], None]) -> Iterator[bool]:
    """Until the block ends, ``hook(child)`` runs right after each process a
    handler run starts in ``world`` (on the thread that started it). Yields
    False, doing nothing, for a world that starts no processes."""
    processes = processes_of(world)
    if processes is None:
        yield False
        return
    processes.hooks.started.append(hook)
    try:
        yield True
    finally:
        processes.hooks.started.remove(hook)


def _with_file_size_limit(preexec: Callable[[], Any] | None, limit: int) -> Callable[[], None]:
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if preexec is not None:
            preexec()

    return limited


def _state(pid: int) -> str | None:
    """A process's state letter from ``/proc``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    return text.rpartition(")")[2].split()[0] if ")" in text else None


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _kill_session(child: ChildProcess) -> None:
    """``child``'s group, then every process of its session or carrying
    its marker (what it started, double-forked or in a session of its own)."""
    try:
        session = os.getsid(child.pid)
    except OSError:
        session = None
    _kill_group(child.pid)
    # Its own session only: never the test's.
    sessions = {session} if session is not None and session == child.pid else set()
    _kill_members(sessions, child.marker or None, exact=True)


def _kill_members(sessions: set[int], marker: str | None, *, exact: bool = False) -> list[int]:
    """Kill every process (never this one) in one of ``sessions`` or whose
    environment holds ``MARKER=marker`` (``exact``) or ``MARKER=marker...``;
    returns their pids."""
    me = os.getpid()
    wanted = None if marker is None else f"{MARKER}={marker}".encode()
    killed: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return killed
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if _state(pid) in (None, "Z", "X"):
            continue
        mine = False
        with contextlib.suppress(OSError):
            mine = os.getsid(pid) in sessions
        if not mine and wanted is not None:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
                mine = any(
                    entry == wanted if exact else entry.startswith(wanted) for entry in entries
                )
        if mine:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    continue
            killed.append(pid)
    return killed
