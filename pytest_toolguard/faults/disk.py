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
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from ..contract import CallState, ErrorCode, ToolResult
from ..jsondata import strings_of
from .cell import Cell, CleanRun
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

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        saved = cell.world.save_workspace()
        log = cell.world.accesses
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
        log = cell.world.accesses
        plans = [("EIO", errno.EIO, k, "access") for k in _steps(clean.accesses)]
        plans += [("ENOSPC", errno.ENOSPC, k, "write") for k in _steps(clean.growths)]
        for label, code, k, kind in plans:
            cell.world.restore_workspace(saved)
            if kind == "access":  # counted on from the log's total so far
                log.before_access = _failing(code, log.count + k)
            else:
                log.before_growth = _failing(code, log.growths + k)
            call = cell.call()
            try:
                result = cell.execute(call)
            finally:
                log.before_access = log.before_growth = None
            why = f"{label} on the handler's {kind} {k}"
            if result.ok:
                cell.check_complete(clean, f"{why} and the call answered OK")
                continue
            cell.check_old_or_new(before, clean, why)
            self._retry(cell, call.idempotency_key, before, clean, why, result)

    @staticmethod
    def _retry(
        cell: Cell,
        key: str | None,
        before: dict[str, bytes],
        clean: CleanRun,
        why: str,
        failed: ToolResult,
    ) -> None:
        after_failure = cell.tree()
        if key:
            cell.execute(cell.call(idempotency_key=key))
            cell.check_unchanged(after_failure, f"{why}; the retry with the same key")
        spec = cell.spec
        landed = after_failure != before
        if landed and not (spec is not None and spec.idempotent):
            return  # part of the effect landed: a retry of a non-idempotent tool may repeat it
        retry = cell.execute(cell.call(idempotency_key=None))
        if retry.ok:
            cell.check_complete(clean, f"{why}; retried without a key")
