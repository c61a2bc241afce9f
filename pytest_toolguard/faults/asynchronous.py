"""Async tools on a running event loop (``async_loop``): the call made the
way an async agent makes it, ``await runtime.aexecute(call)``, where the
handler's coroutine runs on the caller's loop, and what it did there
judged.

Replay and the other cells call an ``async def`` handler through the
thread bridge (``execute``: a worker's loop of its own), where a
coroutine that blocks stalls nobody, and a coroutine never awaited is a
warning nobody reads. Here the target's call runs through ``aexecute``
inside ``asyncio.run``, and:

- the handler made no blocking call on the loop's thread
  (``harness.loop_watch``: ``time.sleep``, a process started, a blocking
  socket, a name lookup, ``urlopen``, a recorded HTTP exchange served to
  a sync client such as ``requests``, a file of ``BIG_FILE_BYTES`` or
  more reached synchronously), judged from what was called, never from
  how long it took;
- no coroutine made during the call was never awaited (the interpreter's
  ``RuntimeWarning``, caught with every warning of the call, after a
  garbage collection), and no task the handler started is still pending
  when the call answers (the loop's end cancels it: its work is lost);
- an OK answer left the files a run through ``execute`` leaves
  (``Cell.clean_run``), and each declared write with a declared content
  argument (``PathAccess.write(..., content=...)``) changed its file,
  unless the file held that content already: an OK write that wrote
  nothing claimed a change it never made.
"""

from __future__ import annotations

import asyncio
import gc
import os
import posixpath
import stat
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..contract import ToolCall, ToolResult
from ..harness.loop_watch import LoopWatch
from ..replay.cassette import VOLATILE_FILE_PREFIX
from ..runtime import ToolRuntime
from .cell import Cell
from .fault import Fault
from .target import Target, relays_to_a_server

BIG_FILE_BYTES = 64 * 1024
"""A file this large, or larger, reached synchronously on the loop is a stall."""

NEVER_AWAITED = "was never awaited"
"""What the interpreter's warning about a coroutine never awaited says."""


@dataclass(slots=True)
class _LoopRun:
    """What one call on a running loop left besides its result."""

    warnings: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


class AsyncLoopFault(Fault):
    name = "async_loop"
    applies_to = "successful calls of async def tools"
    injection = (
        "the call made through ToolRuntime.aexecute on a running event loop (asyncio.run), "
        "the blocking calls its coroutine makes on the loop's thread watched (time.sleep, a "
        "process started, a blocking socket, name lookup or HTTP client, a file of "
        f"{BIG_FILE_BYTES // 1024} KiB or more reached), warnings and pending tasks kept"
    )
    expected = (
        "no blocking call on the loop's thread, no coroutine never awaited, no task of the "
        "handler still pending when it answered; an OK answer leaves the files a run through "
        "execute leaves, and every declared write with a content argument changed its file "
        "(unless it held that content already)"
    )

    def applies(self, target: Target) -> bool:
        spec = target.spec
        return (
            target.handler_can_run
            and spec is not None
            and spec.is_async
            and not relays_to_a_server(spec.handler)
        )

    def inject(self, cell: Cell) -> None:
        clean = cell.clean_run()  # through execute: the thread bridge
        before = cell.tree()
        watch = LoopWatch()
        previous = cell.replace_handler(lambda handler: _watched(handler, watch))
        runtime = cell.make_runtime(hooks=[])
        loop_run = _LoopRun()
        runtime.execute = lambda call: _on_a_running_loop(runtime, call, loop_run)  # type: ignore[method-assign]
        log: Any = None if cell.directory else cell.files.access_log
        if log is not None:
            log.before_access = lambda _index, path: watch.file_operation(path)
        try:
            call = cell.call()
            with _requests_watched(cell, watch):
                result = cell.execute(call, runtime)
        finally:
            if log is not None:
                log.before_access = None
            cell.restore_handler(previous)
        for what in _stalls(cell, watch):
            cell.check(False, f"the handler blocked its event loop: {what} on the loop's thread")
        for message in dict.fromkeys(loop_run.warnings):
            cell.check(False, f"{message} during the call: its work never ran")
        cell.check(
            not loop_run.pending,
            "the handler answered while tasks it started were still pending (never awaited; "
            f"the loop's end cancels them): {', '.join(loop_run.pending[:5])}",
        )
        if not result.ok:
            return
        if clean.result.ok:
            cell.check_complete(clean, "the call answered OK through aexecute on a running loop")
        for path, argument in _declared_writes(cell, call, runtime):
            if VOLATILE_FILE_PREFIX + path in cell.target.cassette.volatile:
                continue  # read for being there, never for its bytes: unchanged by design
            after = cell.tree().get(path)
            content = _content(call.arguments, argument)
            cell.check(
                after != before.get(path) or after == content,
                f"the call answered OK, but {path}, which it declared it writes "
                f"({argument!r} as content), was left as it was",
            )


def _watched(handler: Callable[..., Any], watch: LoopWatch) -> Callable[..., Any]:
    """``handler`` (an ``async def``) run with its context watched."""

    async def on_the_loop(ctx: Any, **arguments: Any) -> Any:
        with watch.watching():
            return await handler(ctx, **arguments)

    return on_the_loop


@contextmanager
def _requests_watched(cell: Cell, watch: LoopWatch) -> Iterator[None]:
    """Within the block, each recorded HTTP exchange served tells ``watch``
    (a blocking client on the loop is a stall) and is served as recorded."""
    if cell.http is None:
        yield
        return

    def served(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        watch.request(f"{request.method} {request.uri}")
        return response

    with cell.http.injected(served):
        yield


def _on_a_running_loop(runtime: ToolRuntime, call: ToolCall, loop_run: _LoopRun) -> ToolResult:
    """``await runtime.aexecute(call)`` in ``asyncio.run``, with the
    warnings of the call (a garbage collection included) and the tasks
    still pending when it answered kept in ``loop_run``."""

    async def agent() -> ToolResult:
        known = asyncio.all_tasks()
        result = await runtime.aexecute(call)
        this = asyncio.current_task()
        for task in asyncio.all_tasks():
            if task not in known and task is not this and not task.done():
                loop_run.pending.append(getattr(task.get_coro(), "__qualname__", repr(task)))
        return result

    gc.collect(1)  # what code before the call left behind is never blamed on it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = asyncio.run(agent())
        # A coroutine dropped in a cycle is freed by a collection: the two
        # young generations hold what the call made (a full pass costs ~50 ms).
        gc.collect(1)
    loop_run.warnings += [
        str(warning.message)
        for warning in caught
        if issubclass(warning.category, RuntimeWarning) and NEVER_AWAITED in str(warning.message)
    ]
    return result


def _stalls(cell: Cell, watch: LoopWatch) -> list[str]:
    """The blocking calls ``watch`` kept, as a person reads them; a file
    only when it is (now) a regular file of ``BIG_FILE_BYTES`` or more."""
    found: list[str] = []
    sizes: dict[str, int] | None = None
    for blocking in watch.blocking:
        if blocking.path is None:
            found.append(blocking.what)
            continue
        if sizes is None:
            sizes = {path: len(data) for path, data in cell.tree().items()}
        shown, size = _sized(cell, blocking.path, sizes)
        if size >= BIG_FILE_BYTES:
            found.append(f"a synchronous operation on {shown} ({size} bytes)")
    return list(dict.fromkeys(found))[:5]


def _sized(cell: Cell, path: str, sizes: Mapping[str, int]) -> tuple[str, int]:
    """A path a handler opened, as shown, and its file's size (0 when it is
    no regular file). A relative one (opened beside a directory's
    descriptor, as ``Workspace`` does) is the workspace's file it ends."""
    if not path.startswith("/"):
        ends = [name for name in sizes if name == path or name.endswith("/" + path)]
        return (ends[0], sizes[ends[0]]) if len(ends) == 1 else (path, 0)
    relative = _relative(cell, path)
    if relative in sizes:
        return relative, sizes[relative]
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return path, 0
    return path, info.st_size if stat.S_ISREG(info.st_mode) else 0


def _relative(cell: Cell, path: str) -> str:
    if path.startswith(cell.root.rstrip("/") + "/"):
        return posixpath.relpath(path, cell.root)
    return path


def _declared_writes(cell: Cell, call: ToolCall, runtime: ToolRuntime) -> list[tuple[str, str]]:
    """(workspace-relative path, content argument) of each declared write
    of ``call`` with a content argument holding text."""
    spec = cell.spec
    arguments = call.arguments
    if spec is None or not isinstance(arguments, Mapping):
        return []
    found: list[tuple[str, str]] = []
    for access in spec.paths:
        if access.mode != "write" or not access.content:
            continue
        if not isinstance(arguments.get(access.content), str):
            continue
        try:
            paths = access.expand(arguments, runtime.variables)
        except Exception:  # a template the call does not fill: the runtime refused it
            continue
        for path in paths:
            found.append((posixpath.normpath(_relative(cell, path)), access.content))
    return found


def _content(arguments: Any, argument: str) -> bytes | None:
    value = arguments.get(argument) if isinstance(arguments, Mapping) else None
    return value.encode() if isinstance(value, str) else None
