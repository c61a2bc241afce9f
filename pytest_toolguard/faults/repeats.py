"""Faults of a call sent more than once: a double submission
(``duplicate_submission``), a retry after the answer was lost
(``response_lost``)."""

from __future__ import annotations

import threading

from ..contract import ErrorCode, ToolCall, ToolResult
from ..runtime import ToolRuntime
from .cell import JOIN_SECONDS, Cell
from .fault import AfterSuccess

BURST = 8


class DuplicateSubmissionFault(AfterSuccess):
    name = "duplicate_submission"
    injection = (
        f"the call sent twice in a row with one idempotency key, then {BURST} times at once "
        "from threads with another, then twice without a key (unless the tool declares "
        "acts_on_repeat)"
    )
    expected = (
        "one handler run per key; the repeats answer IDEMPOTENT_REPLAY (same data) or "
        "DUPLICATE_CALL; the second keyless run changes no file (for a tool not declared "
        "idempotent, a finding it accepts with acts_on_repeat=True)"
    )

    def inject(self, cell: Cell) -> None:
        key = cell.target.call.idempotency_key or f"toolguard-{cell.target.label}"
        first = cell.execute(cell.call(idempotency_key=key))
        again = cell.execute(cell.call(idempotency_key=key))
        cell.check(cell.handler_calls == 1, f"handler ran {cell.handler_calls} times for one key")
        _check_replay(cell, first, again)

        # Another key, on a runtime without the session's plan: the plan may
        # have moved on after the first call, and is not what this tests.
        burst_key = key + "-burst"
        calls = [cell.call(idempotency_key=burst_key) for _ in range(BURST)]
        results = _at_once(cell, calls, cell.make_runtime(hooks=[]))
        ran = cell.handler_calls - 1
        cell.check(ran == 1, f"{BURST} concurrent submissions ran the handler {ran} times")
        # The one that ran answers its outcome; the others DUPLICATE_CALL, or
        # its stored outcome: IDEMPOTENT_REPLAY, or a failure's own code.
        others = {r.code for r in results if r.code not in _REPEAT_CODES}
        cell.check(
            len(others) <= 1,
            f"{BURST} concurrent submissions: expected one outcome besides IDEMPOTENT_REPLAY "
            f"and DUPLICATE_CALL, got {sorted(r.code.value for r in results)}",
        )

        spec = cell.spec
        if spec is not None and not spec.acts_on_repeat:
            _check_keyless_repeat(cell, declared_idempotent=spec.idempotent)


def _check_keyless_repeat(cell: Cell, *, declared_idempotent: bool) -> None:
    """The call made twice more without a key, as a model repeats one: the
    second run must change no file. A tool declared idempotent promised so;
    for any other it is a finding its author accepts by declaring
    ``acts_on_repeat`` (a repeat is meant to act again)."""
    cell.execute(cell.call())
    once = cell.tree()
    cell.execute(cell.call())
    twice = cell.tree()
    changed = sorted(p for p in set(once) | set(twice) if once.get(p) != twice.get(p))
    if declared_idempotent:
        cell.check(
            not changed,
            "the tool is declared idempotent, but a second run without a key changed "
            + ", ".join(changed[:5]),
        )
        return
    cell.check(
        not changed,
        "the same call repeated without an idempotency key changed "
        + ", ".join(changed[:5])
        + " again (the tool is not declared idempotent): make the repeat change nothing "
        "(and declare idempotent=True), or declare acts_on_repeat=True if a repeat is "
        "meant to act again",
    )


_REPEAT_CODES = (ErrorCode.IDEMPOTENT_REPLAY, ErrorCode.DUPLICATE_CALL)


def _check_replay(cell: Cell, first: ToolResult, again: ToolResult) -> None:
    if first.ok:
        cell.expect(again, ErrorCode.IDEMPOTENT_REPLAY)
        cell.check(again.data == first.data, "the replayed data differs from the first outcome's")
    else:
        cell.check(
            again.code is first.code,
            f"the repeat answered {again.code.value}, the first {first.code.value}",
        )


def _at_once(cell: Cell, calls: list[ToolCall], runtime: ToolRuntime) -> list[ToolResult]:
    """Execute ``calls`` through ``runtime`` from one thread each, released
    together."""
    barrier = threading.Barrier(len(calls))
    results: list[ToolResult | None] = [None] * len(calls)

    def submit(index: int) -> None:
        barrier.wait(JOIN_SECONDS)
        results[index] = cell.execute(calls[index], runtime)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS * 2)
    finished = [r for r in results if r is not None]
    cell.check(len(finished) == len(calls), "a concurrent submission did not return")
    return finished


class ResponseLostFault(AfterSuccess):
    name = "response_lost"
    injection = "the first answer is dropped; the caller retries with the same idempotency key"
    expected = "the retry answers the stored outcome (same data); the handler ran once"

    def inject(self, cell: Cell) -> None:
        key = cell.target.call.idempotency_key or f"toolguard-lost-{cell.target.label}"
        first = cell.execute(cell.call(idempotency_key=key))
        after_first = cell.tree()
        retry = cell.execute(cell.call(idempotency_key=key))
        cell.check(cell.handler_calls == 1, f"the handler ran {cell.handler_calls} times")
        _check_replay(cell, first, retry)
        cell.check_unchanged(after_first, "the retry was a replay")
