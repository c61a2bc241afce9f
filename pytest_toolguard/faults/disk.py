"""Faults in the disk under a handler: the disk filling up as it writes
(``partial_write``), and one of its filesystem operations failing, each in
turn (``disk_failure``).

Both compare with a clean run of the same call (``Cell.clean_run``): a
call that answers OK under the fault must leave exactly the files the
clean run left (a handler that swallows the error, or retries and doubles
its effect, does not); a call that fails must leave every file with its
old content or its new one, never torn, doubled or a temporary file.
Failures are injected through ``harness.accesses``: ENOSPC before the
k-th growth of a file, EIO before the k-th path the handler resolves.

In the directory world the disk fills up for real: the call runs in a
private mount namespace where the workspace is a tmpfs with k pages left
(``directory.FullDisk``), so SQLite, a started process and Python alike
get ``ENOSPC`` from the kernel; EIO is raised before the handler's k-th
Python-level file operation (``directory.Operations``). Where mount
namespaces are not permitted, ``partial_write`` is skipped with the reason
and ``disk_failure`` injects EIO only.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..jsondata import strings_of
from ..registry import WorldKind
from ..runtime import ToolRuntime
from .cell import Cell, CleanRun
from .directory import PAGE, FullDisk, full_disk_unavailable
from .fault import Fault
from .target import Target

MAX_STEPS = 8
"""At most this many k per kind of failure (``disk_failure``): spread
evenly over the clean run's operations, the first and the last included."""


def _failing(code: int, at: int) -> Callable[[int, str], None]:
    def fail(index: int, path: str) -> None:
        if index == at:
            raise OSError(code, f"{os.strerror(code)} (injected by pytest-toolguard)", path)

    return fail


def _steps(count: int) -> list[int]:
    """1..count, or ``MAX_STEPS`` of them spread evenly (first and last kept)."""
    if count <= MAX_STEPS:
        return list(range(1, count + 1))
    return sorted({1 + round(i * (count - 1) / (MAX_STEPS - 1)) for i in range(MAX_STEPS)})


class PartialWriteFault(Fault):
    name = "partial_write"
    applies_to = "successful calls of tools that write"
    injection = (
        "the disk is full for the handler's first write (ENOSPC as a file first grows, "
        "whatever its old size)"
    )
    expected = (
        "EXECUTION_ERROR, state FAILED, every file holds its old content (no torn file, no "
        "temporary file left); or OK with exactly the files a clean run leaves"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and target.writes and bool(strings_of(target.arguments))

    def cannot_run_in(self, world: WorldKind) -> str | None:
        if world != "directory":
            return None
        why = full_disk_unavailable()
        return None if why is None else f"a full disk needs a private mount namespace: {why}"

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        saved = cell.world.save_workspace()
        if cell.directory:
            result, _runtime = _on_full_disk(cell, 0, cell.call())
        else:
            log = cell.files.access_log
            log.before_growth = _failing(errno.ENOSPC, log.growths + 1)
            try:
                result = cell.execute(cell.call())
            finally:
                log.before_growth = None
        if result.ok:  # then, and only then, compare with a clean run
            faulted = cell.world.save_workspace()
            cell.world.restore_workspace(saved)
            clean = cell.clean_run()
            cell.world.restore_workspace(faulted)
            cell.check_complete(clean, "the disk was full and the call answered OK")
            return
        cell.expect(result, ErrorCode.EXECUTION_ERROR, state=CallState.FAILED)
        cell.check_unchanged(before, "the write was interrupted")


class DiskFailureFault(Fault):
    name = "disk_failure"
    applies_to = "successful calls of tools that write"
    injection = (
        "the k-th filesystem operation of the handler fails (EIO on the k-th path it "
        "resolves, ENOSPC on its k-th write), for each k over a clean run's operations "
        f"(at most {MAX_STEPS} of each); each failed call retried with its key, then without"
    )
    expected = (
        "OK with exactly the files of a clean run, or a failure leaving every file old or "
        "new (never torn, doubled or a temporary file); the retry with the key changes "
        "nothing, the retry without it leaves the clean run's files"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and target.writes

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        saved = cell.world.save_workspace()
        clean = cell.clean_run()
        if not clean.result.ok:
            return  # nothing to compare with: the other cells judge the call
        plans = [("EIO", errno.EIO, k, "access") for k in _steps(clean.accesses)]
        if not cell.directory:
            plans += [("ENOSPC", errno.ENOSPC, k, "write") for k in _steps(clean.growths)]
        elif full_disk_unavailable() is None:
            plans += [("ENOSPC", errno.ENOSPC, k, "page") for k in _steps(_pages(before, clean))]
        for label, code, k, kind in plans:
            cell.world.restore_workspace(saved)
            call = cell.call()
            runtime: ToolRuntime | None = None
            if kind == "page":  # the disk full after k-1 more pages
                result, runtime = _on_full_disk(cell, (k - 1) * PAGE, call)
                why = f"ENOSPC with {k - 1} pages left on the disk"
            else:
                with failing_at(cell, kind, code, k):
                    result = cell.execute(call)
                what = "Python-level file operation" if cell.directory else kind
                why = f"{label} on the handler's {what} {k}"
            if result.ok:
                cell.check_complete(clean, f"{why} and the call answered OK")
                continue
            cell.check_old_or_new(before, clean, why)
            self._retry(cell, call.idempotency_key, before, clean, why, result, runtime)

    @staticmethod
    def _retry(
        cell: Cell,
        key: str | None,
        before: dict[str, bytes],
        clean: CleanRun,
        why: str,
        failed: ToolResult,
        runtime: ToolRuntime | None = None,
    ) -> None:
        after_failure = cell.tree()
        if key:
            cell.execute(cell.call(idempotency_key=key), runtime)
            cell.check_unchanged(after_failure, f"{why}; the retry with the same key")
        spec = cell.spec
        landed = after_failure != before
        if landed and not (spec is not None and spec.idempotent):
            return  # part of the effect landed: a retry of a non-idempotent tool may repeat it
        retry = cell.execute(cell.call(idempotency_key=None), runtime)
        if retry.ok:
            cell.check_complete(clean, f"{why}; retried without a key")


@contextmanager
def failing_at(cell: Cell, kind: str, code: int, k: int) -> Iterator[None]:
    """Within the block, the handler's k-th operation of ``kind`` fails
    with ``code``: a path it resolves (``access``) or a file's growth
    (``write``) in the fake world, a Python-level file operation in the
    directory world (``directory.Operations``)."""
    if cell.operations is not None:
        operations = cell.operations
        at = operations.count + k

        def fail(index: int, _event: str, path: str) -> None:
            if index == at:
                raise OSError(code, f"{os.strerror(code)} (injected by pytest-toolguard)", path)

        operations.before = fail
        try:
            yield
        finally:
            operations.before = None
        return
    log = cell.files.access_log
    if kind == "access":  # counted on from the log's total so far
        log.before_access = _failing(code, log.count + k)
    else:
        log.before_growth = _failing(code, log.growths + k)
    try:
        yield
    finally:
        log.before_access = log.before_growth = None


def _on_full_disk(cell: Cell, free: int, call: ToolCall) -> tuple[ToolResult, ToolRuntime]:
    """``call`` through a runtime made for it on a disk with ``free`` bytes
    left (``directory.FullDisk``: its worker threads, and every process
    they start, see that disk); the runtime, for a retry."""
    world = cell.world
    disk = FullDisk(cell.root, world.save_workspace, world.restore_workspace)

    def body() -> tuple[ToolResult, ToolRuntime]:
        runtime = cell.make_runtime()
        return cell.execute(call, runtime), runtime

    return disk.run(free, body)


def _pages(before: dict[str, bytes], clean: CleanRun) -> int:
    """The pages of the files a clean run created or changed (at least one):
    the points at which a disk can fill up under it."""
    changed = [data for path, data in clean.tree.items() if before.get(path) != data]
    return max(1, sum(-(-len(data) // PAGE) or 1 for data in changed))
