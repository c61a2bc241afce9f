"""Resources a call leaves open: an invariant every cell shares.

A handler that opens a file, makes a temporary file or starts a process
must give it back however the call ends, on its error paths too. Every
fault that forces an error path (``disk_failure``'s EIO, ``partial_write``'s
ENOSPC, ``timeout``'s cancellation, ``network_error``, ...) therefore judges
this as well: ``ResourceWatch`` is made just before the fault injects and
asked, once the cell's runtimes are closed (``Cell.finish``), what is still
held that was not held before:

- **open files**: in the fake world, pyfakefs's own open-file table (a fake
  file object stays in it until it is closed: the garbage collector never
  closes one); in the directory world, this process's descriptors
  (``/proc/self/fd``) that name a file in the world or in the temporary
  directory, counted again after a garbage collection, so that a file
  object nothing references any more is not one. A file reachable only
  from the exception a handler raised counts: the harness keeps that
  exception, as a caller that logs it does, and CPython would close the
  file only when the last reference went (with a ``ResourceWarning``);
- **temporary files**: entries added to the temporary directory
  (``tempfile.gettempdir()``) that are still there. In the fake world the
  fake ``/tmp`` is listed (no other process writes it); in the directory
  world, where other processes share ``/tmp``, only paths a handler run
  opened or made there (``directory.Operations``) count;
- **child processes**: in the directory world, a process a handler run
  started (``harness.child_processes``) still running; a process serving
  the world (an MCP server a bridge starts, on a thread
  ``probes.serving_the_world`` names) is the world's, not the call's, and
  so is a file such a server keeps (``probes.file_serving_the_world``). In the
  fake world no process runs (``harness.escapes`` refuses them);
- **threads**: the cell's own check (``Cell.finish``: a thread a handler run
  started and left working), which every cell shares already.

Each problem names the family (``left open:``) and what was left. A
resource a line of the fault's already names (``resource_leak`` judges
each of its calls, and names the failure that left it) is not named again.

Not seen: descriptors outside the world and the temporary directory
(sockets, pipes: a process left running is reported instead), a process
started with ``os.fork``, ``os.posix_spawn`` or ``os.system`` (not through
``subprocess.Popen``), and a resource a tool keeps open on purpose across
calls is reported like any other (close it, or open it outside the
handler).
"""

from __future__ import annotations

import contextlib
import gc
import os
import posixpath
import re
import tempfile
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from pyfakefs.fake_file import FakeFileWrapper

from ..harness.child_processes import ChildProcess, on_start
from ..harness.probes import is_serving_the_world, world_descriptors
from .cell import Cell

LEFT_OPEN = "left open: "
"""How each problem of this invariant begins."""

_LISTED = 5

_REMOVALS = frozenset({"os.remove", "os.rmdir", "shutil.rmtree", "os.rename", "shutil.move"})
"""Operations that take a temporary file away (``os.unlink`` raises ``os.remove``)."""


class ResourceWatch:
    """What the handler side holds, taken as it is made; ``left_open()``
    says what is held now that was not then. A context manager: in its
    block, the processes handler runs start are noted."""

    def __init__(self, cell: Cell) -> None:
        self._cell = cell
        self._directory = cell.directory
        self._temporary = tempfile.gettempdir()
        self._around = str(getattr(cell.world, "around", "")) if self._directory else ""
        self._children: list[ChildProcess] = []
        self._closed: weakref.WeakSet[Any] = weakref.WeakSet()
        """Fake files whose ``close`` was asked: pyfakefs keeps one whose
        flush failed open, where Python closes the descriptor anyway."""
        self._files = self._open_files()
        self._entries = self._temporary_entries()
        operations = cell.operations
        self._first_operation = len(operations.paths) if operations is not None else 0
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ResourceWatch:
        self._stack.enter_context(on_start(self._cell.world, self._started))
        if not self._directory:
            self._stack.enter_context(_closings(self._closed))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _started(self, child: ChildProcess) -> None:
        if not is_serving_the_world(threading.current_thread()):
            with self._lock:
                self._children.append(child)

    # -- what is held

    def _open_files(self) -> dict[int, str]:
        """Descriptor -> what it names: the fake filesystem's open files, or
        this process's descriptors naming the world or the temporary
        directory."""
        if not self._directory:
            held: dict[int, str] = {}
            for number, wrappers in enumerate(list(self._cell.fs.open_files)):
                # One descriptor may have several wrappers (``os.fdopen`` of
                # ``mkstemp``'s): closing any of them closes the descriptor.
                if wrappers and not any(wrapper in self._closed for wrapper in wrappers):
                    held[number] = str(getattr(wrappers[0], "file_path", "?"))
            return held
        worlds = world_descriptors()
        return {
            number: target
            for number, target in _descriptors().items()
            if number not in worlds and self._watched(target.removesuffix(" (deleted)"))
        }

    def _watched(self, path: str) -> bool:
        places = [self._temporary]
        if self._around:
            places.append(self._around)
        return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)

    def _temporary_entries(self) -> set[str]:
        """The temporary directory's entries (names)."""
        try:
            return set(os.listdir(self._temporary))
        except OSError:
            return set()

    # -- the judgement

    def left_open(self, after: str = "", reported: Sequence[str] = ()) -> list[str]:
        """A problem line per kind of resource still held that was not
        held when the watch was made (empty: nothing), ending with
        `` (after ...)`` when ``after`` says what failed. A resource a line
        of ``reported`` names already (a fault judged it after its own
        injection) is not named again. What something holds only until the
        garbage collector reaches it (a file object nothing references any
        more, GitPython's ``git cat-file`` helpers, ended with their
        ``Repo``) is looked at again after a collection."""
        files, children = self._new_files(), self._running()
        if files or children:
            gc.collect()
            files, children = self._new_files(), self._running()
        said = {_bare(item) for line in reported for item in _named(line)}

        def unsaid(items: list[str]) -> list[str]:
            return [item for item in items if _bare(item) not in said]

        shown = [" ".join(child.argv) + f" (pid {child.pid})" for child in children]
        found = {
            "files still open when the call ended": unsaid(files),
            "temporary files never removed": unsaid(self._new_temporary()),
            "processes still running": unsaid(shown),
        }
        cause = f" (after {after})" if after else ""
        return [
            LEFT_OPEN + f"{what}: {_list(items)}{cause}" for what, items in found.items() if items
        ]

    def _running(self) -> list[ChildProcess]:
        with self._lock:
            return [child for child in self._children if not child.exited()]

    def _new_files(self) -> list[str]:
        now = self._open_files()
        return sorted(
            {target for number, target in now.items() if self._files.get(number) != target}
        )

    def _new_temporary(self) -> list[str]:
        added = self._temporary_entries() - self._entries
        paths = {posixpath.join(self._temporary, name) for name in added}
        operations = self._cell.operations
        if operations is not None:  # shared with other processes: the handler's only
            first = self._first_operation
            named = list(zip(operations.events[first:], operations.paths[first:], strict=False))
            paths &= {_top(path, self._temporary) for _event, path in named if path}
            # A removal tried counts as done: the fault may be what made it fail.
            paths -= {_top(path, self._temporary) for event, path in named if event in _REMOVALS}
        around = self._around.rstrip("/") + "/"
        return sorted(path for path in paths if not (self._around and path.startswith(around)))


@contextlib.contextmanager
def _closings(closed: weakref.WeakSet[Any]) -> Iterator[None]:
    """Within the block, every fake file whose ``close`` is asked is added
    to ``closed`` (pyfakefs's ``FakeFileWrapper.close_fd``, wrapped)."""
    original = FakeFileWrapper.close_fd

    def close_fd(wrapper: FakeFileWrapper, fd: int | None) -> None:
        closed.add(wrapper)
        original(wrapper, fd)

    FakeFileWrapper.close_fd = close_fd  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        if FakeFileWrapper.close_fd is close_fd:  # not replaced since
            FakeFileWrapper.close_fd = original  # type: ignore[method-assign]


def _top(path: str, directory: str) -> str:
    """The entry of ``directory`` that ``path`` is or lies beneath ('' for none)."""
    path = os.path.abspath(path)
    prefix = directory.rstrip("/") + "/"
    if not path.startswith(prefix):
        return ""
    return posixpath.join(directory, path[len(prefix) :].split("/", 1)[0])


def _descriptors() -> dict[int, str]:
    """This process's open descriptors and what each names (``/proc/self/fd``)."""
    held: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return held
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            held[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return held


def _named(line: str) -> list[str]:
    """The resources a ``left_open`` line names (none for another line)."""
    if not line.startswith(LEFT_OPEN):
        return []
    listed = line.partition(": ")[2].partition(": ")[2].split(" (after ", 1)[0]
    return re.sub(r" and \d+ more$", "", listed).split(", ")


def _bare(item: str) -> str:
    """A resource as named before the world removed it."""
    return item.removesuffix(" (deleted)")


def _list(items: list[str]) -> str:
    more = f" and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return ", ".join(items[:_LISTED]) + more
