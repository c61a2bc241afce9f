"""A tool's handler run in fresh interpreters of chosen hash seeds.

A running interpreter's hash seed cannot change, and a set of strings is
iterated in an order its seed decides: a handler that answers a set's
order (``list(set(tags))``) answers one order per process. The only sound
way to see that is to run the same call in interpreters of other seeds.
``SeededInterpreter(seed)`` is one such interpreter, started once per
process with ``PYTHONHASHSEED=<seed>`` and the test process's
``sys.path`` and environment, and kept: it imports a handler's module the
first time it is asked for it (an import costs a second or more; a call,
what the handler costs), so the matrix pays each start once.
``run_in_seeds(request, seeds)`` sends one call to each at once and
answers what each one's handler returned and left.

What a request holds: the handler as ``module`` and ``qualname`` (the
interpreter imports the module and takes the attribute; a ``ToolSpec``
there gives its handler), the workspace's entries (the worker rebuilds them
in a fresh real directory of its own: the fake filesystem is this
process's alone), the arguments, variables and call id, the frozen time
of the cassette. The worker's directory is mapped to the workspace root of
the request both ways (``RootMap``), so the answers of several workers
compare as they are.

Started with ``os.posix_spawn`` and talked to through raw pipes (fds 3
and 4 in the worker), with functions taken from ``os`` at import: a fake
filesystem may be active in this process (pyfakefs patches ``os`` and
``io`` in every module while a world runs, and its pipes are its own),
and the directory world watches only ``subprocess``'s process starts. The
worker's stdin, stdout and stderr are ``/dev/null``: a handler's prints
never reach the protocol.

Not guaranteed: a handler defined inside a function, a lambda or a bound
method cannot be imported by name (``importable`` says why); a module
whose import has side effects has them once in each worker; a handler's
HTTP exchanges are not served there. The workers end when this process
exits (``atexit``) or when one overran its deadline (killed).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import importlib
import importlib.util
import inspect
import json
import os
import select
import stat
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ..replay.root_map import RootMap

_REAL = SimpleNamespace(
    pipe=os.pipe,
    read=os.read,
    write=os.write,
    close=os.close,
    spawn=os.posix_spawn,
    wait=os.waitpid,
    no_hang=os.WNOHANG,
    kill=os.kill,
    getcwd=os.getcwd,
    dup2=os.POSIX_SPAWN_DUP2,
    open=os.POSIX_SPAWN_OPEN,
    read_write=os.O_RDWR,
)
"""The real ``os`` functions, taken at import: pyfakefs patches ``os`` and
every module-level name bound to one of its functions while a world runs,
but not an object's attributes."""

REQUESTS_FD = 3
ANSWERS_FD = 4

STARTUP_SECONDS = 120.0
"""What a worker's first call may take besides the handler's deadline:
starting, and importing the handler's module (pytest, the project)."""


CLOSE_SECONDS = 5.0
"""How long a worker has, at exit, to remove its directory and end."""


@dataclass(frozen=True, slots=True)
class SeededAnswer:
    """What a handler returned and left in one seeded interpreter."""

    seed: int
    output: Any = None
    """The handler's return value as JSON (``repr`` for what is not)."""
    error: str | None = None
    """The exception it raised, or why the worker could not run it."""
    files: Mapping[str, bytes] | None = None
    """Every regular file under the workspace afterwards, by relative path."""
    lost: bool = False
    """Whether the worker gave no answer (stuck, or gone): it says nothing
    of what the handler does."""


class SeededInterpreter:
    """One interpreter started with ``PYTHONHASHSEED=seed``, kept to run
    calls one at a time (``ask``)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        requests_read, requests_write = _REAL.pipe()
        answers_read, answers_write = _REAL.pipe()
        environment = dict(os.environ)
        environment["PYTHONHASHSEED"] = str(seed)
        # The test process's sys.path, a relative entry ("" in python -c) spelt
        # against its real working directory (a fake world has its own).
        here = _REAL.getcwd()
        paths = [os.path.join(here, entry) for entry in sys.path if isinstance(entry, str)]
        environment["PYTHONPATH"] = os.pathsep.join(paths)
        actions = [
            (_REAL.dup2, requests_read, REQUESTS_FD),
            (_REAL.dup2, answers_write, ANSWERS_FD),
            *((_REAL.open, fd, os.devnull, _REAL.read_write, 0) for fd in (0, 1, 2)),
        ]
        # Without "" (the working directory, which -c puts first): a file of
        # the workspace never shadows a module the handler imports.
        # (There is none under PYTHONSAFEPATH.)
        code = (
            "import sys; sys.path[:] = filter(None, sys.path); "
            f"from {__name__} import serve; serve()"
        )
        try:
            self.pid = _REAL.spawn(
                sys.executable,
                [sys.executable, "-c", code],
                environment,
                file_actions=actions,
                setsid=True,
            )
        except BaseException:
            _REAL.close(requests_write)
            _REAL.close(answers_read)
            raise
        finally:
            _REAL.close(requests_read)
            _REAL.close(answers_write)
        self._requests, self._answers = requests_write, answers_read
        self._pending = b""
        self.alive = True
        self.started = False
        """Whether a request was sent (the first pays the start and imports)."""

    def send(self, request: Mapping[str, Any]) -> None:
        """Send one request (one JSON line)."""
        data = (json.dumps(request) + "\n").encode()
        while data:
            data = data[_REAL.write(self._requests, data) :]

    def receive(self, seconds: float) -> dict[str, Any] | None:
        """The answer to the last request, or None when none came within
        ``seconds`` (the worker is then killed: it is stuck or gone)."""
        deadline = time.monotonic() + seconds
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            ready = select.select([self._answers], [], [], max(left, 0))[0] if left > 0 else []
            chunk = _REAL.read(self._answers, 1 << 20) if ready else b""
            if not chunk:
                self.close()
                return None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self, grace: float = 0.0) -> None:
        """End the worker: its requests closed (it removes its directory
        and exits), killed when it has not within ``grace`` seconds, reaped."""
        if not self.alive:
            return
        self.alive = False
        for fd in (self._requests, self._answers):
            _REAL.close(fd)
        deadline = time.monotonic() + grace
        try:
            while _REAL.wait(self.pid, _REAL.no_hang) == (0, 0):
                if time.monotonic() >= deadline:
                    _REAL.kill(self.pid, 9)
                    _REAL.wait(self.pid, 0)
                    return
                select.select([], [], [], 0.01)
        except ChildProcessError:
            pass  # reaped already


class SeededInterpreters:
    """The seeded interpreters of this process, started the first time a
    seed is asked for and closed at exit."""

    def __init__(self) -> None:
        self._workers: dict[int, SeededInterpreter] = {}
        atexit.register(self.close)

    def worker(self, seed: int) -> SeededInterpreter:
        current = self._workers.get(seed)
        if current is None or not current.alive:
            current = self._workers[seed] = SeededInterpreter(seed)
        return current

    def run(
        self, request: Mapping[str, Any], seeds: Sequence[int], seconds: float
    ) -> list[SeededAnswer]:
        """``request`` run in an interpreter of each seed, at once; each
        answer within ``seconds`` (plus ``STARTUP_SECONDS`` for a worker's
        first call), else an error saying so."""
        workers = []
        answers = []
        for seed in seeds:
            try:
                worker = self._sent(seed, request)
            except OSError as exc:  # it could not be started, or died twice
                answers.append(SeededAnswer(seed, error=f"not started: {exc}", lost=True))
                continue
            workers.append((worker, seconds + (0.0 if worker.started else STARTUP_SECONDS)))
            worker.started = True
        for worker, limit in workers:
            raw = worker.receive(limit)
            if raw is None:
                lost = f"no answer within {limit:.0f} s"
                answers.append(SeededAnswer(worker.seed, error=lost, lost=True))
                continue
            files = {path: base64.b64decode(data) for path, data in raw.get("files", {}).items()}
            answers.append(SeededAnswer(worker.seed, raw.get("output"), raw.get("error"), files))
        return answers

    def _sent(self, seed: int, request: Mapping[str, Any]) -> SeededInterpreter:
        """The worker of ``seed``, ``request`` sent to it; a worker that died
        since its last call (its pipe is closed) is started again, once."""
        worker = self.worker(seed)
        try:
            worker.send(request)
        except OSError:
            worker.close()
            worker = self.worker(seed)
            worker.send(request)
        return worker

    def close(self) -> None:
        """End every worker, each given a few seconds to clean up."""
        for worker in self._workers.values():
            worker.close(grace=CLOSE_SECONDS)
        self._workers.clear()


_INTERPRETERS: list[SeededInterpreters] = []


def seeded_interpreters() -> SeededInterpreters:
    """This process's ``SeededInterpreters`` (made on first use): the
    interpreters are a cost the whole run shares, as the fake filesystem's
    patcher is."""
    if not _INTERPRETERS:
        _INTERPRETERS.append(SeededInterpreters())
    return _INTERPRETERS[0]


def importable(handler: Any) -> tuple[str, str] | str:
    """``(module, qualname)`` a fresh interpreter imports ``handler``
    by, or why it cannot: the attribute found there must be the handler, or
    a ``ToolSpec`` whose handler it is."""
    module = getattr(handler, "__module__", None)
    qualname = getattr(handler, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return f"the handler {handler!r} has no module and name to be imported by"
    if "<" in qualname or module == "__main__":
        return (
            f"the handler {module}.{qualname} is defined in a function, a lambda or a "
            "script: define it at module level"
        )
    found = _attribute(sys.modules.get(module), qualname)
    if found is handler or getattr(found, "handler", None) is handler:
        return module, qualname
    return f"{module}.{qualname} is not the handler (it was replaced or wrapped after it was made)"


def _attribute(target: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target


# -- the worker's side


def serve() -> None:
    """The worker's loop: one JSON request per line on fd 3, one answer
    per line on fd 4, until fd 3 ends."""
    requests = os.fdopen(REQUESTS_FD, "rb", buffering=0)
    answers = os.fdopen(ANSWERS_FD, "wb", buffering=0)
    home = tempfile.mkdtemp(prefix="toolguard-seed-")
    try:
        _serve(requests, answers, home)
    finally:
        _remove(home)


def _serve(requests: Any, answers: Any, home: str) -> None:
    serial = 0
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = requests.read(1 << 20)
            if not chunk:
                return
            pending += chunk
        line, _, pending = pending.partition(b"\n")
        serial += 1
        root = os.path.join(home, str(serial), "workspace")
        try:
            answer = _run(json.loads(line), root)
        except BaseException as exc:  # whatever happens, the parent gets an answer
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            _remove(os.path.dirname(root))
        data = (json.dumps(answer) + "\n").encode()
        while data:
            data = data[answers.write(data) :]


def _run(request: Mapping[str, Any], root: str) -> dict[str, Any]:
    from ..capabilities import Capabilities
    from ..context import ToolContext, workspace_of_call
    from ..sandbox import Workspace
    from .clock import frozen_clock

    handler = _load(request["module"], request["qualname"])
    mapping = RootMap(request["root"], root)
    _fill(root, request["entries"])
    workspace = Workspace(root)
    ctx = ToolContext(
        call_id=request["call_id"],
        session_id="toolguard-hash-seed",
        actor="toolguard",
        workspace=workspace,
        capabilities=Capabilities(),
        variables=dict(request["variables"]),
    )
    arguments = mapping.to_world(request["arguments"])
    os.chdir(root)
    answer: dict[str, Any] = {}
    with frozen_clock(request["frozen_at"]), workspace_of_call(workspace):
        try:
            output = handler(ctx, **arguments)
            if inspect.isawaitable(output):
                output = asyncio.run(_awaited(output))
            answer["output"] = json.loads(json.dumps(mapping.to_recorded(output), default=repr))
        except Exception as exc:  # the handler's: answered, as the runtime would
            answer["error"] = f"{type(exc).__name__}: {exc}"
    os.chdir(os.path.dirname(root))
    answer["files"] = {
        path: base64.b64encode(mapping.to_recorded(data)).decode()
        for path, data in _tree(root).items()
    }
    return answer


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _load(module: str, qualname: str) -> Any:
    found = _attribute(importlib.import_module(module), qualname)
    return getattr(found, "handler", found)


def _fill(root: str, entries: Sequence[Sequence[Any]]) -> None:
    os.makedirs(root)
    for relative, mode, data in entries:
        path = os.path.join(root, relative)
        content = base64.b64decode(data)
        if stat.S_ISDIR(mode):
            os.makedirs(path, exist_ok=True)
        elif stat.S_ISLNK(mode):
            os.symlink(os.fsdecode(content), path)
        else:
            with open(path, "wb") as handle:
                handle.write(content)
            os.chmod(path, stat.S_IMODE(mode))


def _tree(root: str) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for directory, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    files[os.path.relpath(path, root)] = handle.read()
    return files


def _remove(directory: str) -> None:
    for parent, dirs, names in os.walk(directory, topdown=False):
        for name in names:
            os.unlink(os.path.join(parent, name))
        for name in dirs:
            path = os.path.join(parent, name)
            os.unlink(path) if os.path.islink(path) else os.rmdir(path)
    if os.path.isdir(directory):
        os.rmdir(directory)
