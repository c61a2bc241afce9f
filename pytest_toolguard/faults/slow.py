"""A world where time runs (``slow_world``): the clock moves forward as a
handler works, so a tool's own time budget runs out part way, and what it
answers then is judged.

A frozen clock never lets a budget run out: a search that stops on its
deadline and still claims it is complete passes every other cell. Here
the clock (``harness.clock.stepping_clock``: ``time.time``,
``time.monotonic``, ``time.perf_counter``, ``datetime.now``) moves
``STEP_SECONDS`` forward before each of the handler's filesystem
operations (the seam ``disk_failure`` and ``symlink_race`` use:
``AccessLog.before_access`` in the fake world, ``Operations.before`` in
the directory world, whichever API made the operation) and each HTTP
request it makes (``HttpPlayback.injected``).

The oracle compares with a run with the clock standing still. A tool
that made as many operations as that run did not cut its work: nothing
to judge (a tool that never reads the clock always lands here). One that
made fewer was cut by the clock, the only thing that differs; it must
then fail, or answer something that says so. An OK answer equal to the
still run's, or differing from it only in list items and counts (fewer
matches, a smaller total), says nothing, and is a problem. What says so:
a key only the cut answer has (``truncated``, ``next_cursor``: one only
the full answer has went with the content, as in a dict keyed by item),
a flag, text or null that changed (``complete: false``, ``status``), a
number that was 0 and is not (``skipped``, ``remaining``), two numbers
that were equal where one fell short of the other (``searched`` under an
unchanged ``total``), another message. Fields that change with the
clock alone (a timestamp, an elapsed time) are found by a third run
whose clock moves a microsecond per operation, and do not count.

Runs go slow first: a tool that caches what it did makes fewer operations
the second time, which must not look like a cut."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from types import FunctionType, MethodType, ModuleType
from typing import Any

from ..contract import ToolResult
from ..harness.clock import stepping_clock
from .cell import Cell
from .fault import Fault
from .outcome import NOTHING_TO_INJECT
from .target import Target, relays_to_a_server

STEP_SECONDS = 3600.0
"""How far the clock moves per operation: a budget under an hour runs out
at the first look after an operation."""

CONTROL_STEP_SECONDS = 1e-6
"""A control run's step: an elapsed time changes, no budget runs out."""


_CLOCK_MODULES = ("time", "datetime")
"""An event loop's clock (``loop.time``, ``asyncio.timeout``) stays real: not stepped."""


class SlowWorldFault(Fault):
    name = "slow_world"
    applies_to = "successful calls of tools whose code can read a clock"
    injection = (
        f"the clock (time, monotonic, perf_counter, datetime.now) moves {STEP_SECONDS:.0f} s "
        "forward before each of the handler's filesystem operations and HTTP requests, so a "
        "time budget runs out part way"
    )
    expected = (
        "the work a run with the clock standing still does, or a failure, or an OK answer that "
        "says it was cut (a field, flag, status or message a full answer lacks); an OK answer "
        "equal to the full one, or differing only in fewer items and counts, after fewer "
        "operations is a problem"
    )

    def applies(self, target: Target) -> bool:
        return (
            target.handler_can_run
            and target.spec is not None
            and can_read_a_clock(target.spec.handler)
        )

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        saved = cell.world.save_workspace()
        moment = getattr(cell.world, "frozen_at", None)
        with stepping_clock(moment) as advance:
            slow, slow_operations = _counted_run(cell, lambda: advance(STEP_SECONDS))
            slow_tree = cell.tree()
            cell.world.restore_workspace(saved)
            still, operations = _counted_run(cell, None)
            still_tree = cell.tree()
            cell.world.restore_workspace(saved)
            if operations == 0:
                cell.problems.append(
                    f"{NOTHING_TO_INJECT}: the handler made no file operation or HTTP request in "
                    "this process for the clock to move at"
                )
                return
            if slow_operations >= operations or not still.ok:
                return  # not cut by the clock, or no full answer to compare with
            if not slow.ok:
                _check_old_or_new(cell, before, still_tree, slow_tree)
                return
            # Fields the clock alone changes, found by two runs no budget
            # runs out in: one moved by a microsecond an operation (an
            # elapsed time), one hours later standing still (a timestamp,
            # at any resolution).
            ticking, _ = _counted_run(cell, lambda: advance(CONTROL_STEP_SECONDS))
            cell.world.restore_workspace(saved)
            advance(STEP_SECONDS * (operations + 1))
            later, _ = _counted_run(cell, None)
            cell.world.restore_workspace(saved)
        volatile = set(_differences(still.data, ticking.data))
        volatile |= set(_differences(still.data, later.data))
        if _signals(still, slow, volatile):
            return
        how = (
            "the same answer as the full run"
            if slow.data == still.data
            else "an answer that differs from the full run's only in fewer items and counts"
        )
        cell.check(
            False,
            f"the clock moved {STEP_SECONDS:.0f} s with each operation and the handler stopped "
            f"after {slow_operations} of the {operations} operations a run with the clock "
            f"standing still made, yet answered OK with {how}: nothing says the work was cut "
            "(no field, flag, status or message the full answer lacks)",
        )


def _check_old_or_new(
    cell: Cell, before: dict[str, bytes], full: dict[str, bytes], cut: dict[str, bytes]
) -> None:
    """A call cut by the clock that failed left every file old, or as the full run left it."""
    bad = sorted(
        path
        for path in set(before) | set(full) | set(cut)
        if cut.get(path) not in (before.get(path), full.get(path))
    )
    cell.check(
        not bad,
        "the clock ran out the handler's time and the call failed, leaving files neither "
        "old nor new (torn, half done or left behind): " + ", ".join(bad[:5]),
    )


def _counted_run(cell: Cell, step: Callable[[], None] | None) -> tuple[ToolResult, int]:
    """The target's call through a runtime of its own (no plan), ``step``
    called before each of its handler's filesystem operations and HTTP
    requests; the result and how many there were."""
    count = [0]

    def operation(*_where: Any) -> None:
        count[0] += 1
        if step is not None:
            step()

    with _before_each_operation(cell, operation):
        result = cell.execute(cell.call(), cell.make_runtime(hooks=[]))
    return result, count[0]


@contextmanager
def _before_each_operation(cell: Cell, operation: Callable[..., None]) -> Iterator[None]:
    log: Any = cell.operations if cell.directory else cell.files.access_log
    http = cell.http

    def answer(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        operation()
        return response

    if log is not None:
        log.before = operation if cell.directory else None
        if not cell.directory:
            log.before_access = operation
    try:
        if http is not None:
            with http.injected(answer):
                yield
        else:
            yield
    finally:
        if log is not None:
            if cell.directory:
                log.before = None
            else:
                log.before_access = None


# -- what an answer says


def _walk(value: Any, where: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every place outside lists in a JSON-like value, with what is there
    (a list is one leaf: its items are the content that shrinks)."""
    yield where, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*where, key))


def _differences(one: Any, other: Any) -> Iterator[tuple[Any, ...]]:
    """The places (outside lists) where two answers differ."""
    mine = dict(_walk(one))
    theirs = dict(_walk(other))
    for where in mine.keys() | theirs.keys():
        if mine.get(where, _MISSING) != theirs.get(where, _MISSING):
            yield where


_MISSING = object()


def _signals(full: ToolResult, cut: ToolResult, volatile: set[tuple[Any, ...]]) -> bool:
    """Whether ``cut`` says it is not the whole answer ``full`` is (see
    the module docstring), places in ``volatile`` aside."""
    if full.message != cut.message:
        return True
    before, after = dict(_walk(full.data)), dict(_walk(cut.data))
    for where in (before.keys() | after.keys()) - volatile:
        old, new = before.get(where, _MISSING), after.get(where, _MISSING)
        if old == new or any(where[: len(place)] == place for place in volatile if place):
            continue
        if new is _MISSING:
            continue  # gone with the content (a dict keyed by item: {"paris": ...})
        if old is _MISSING:
            return True  # a field only the cut answer has
        if isinstance(old, list) or isinstance(new, list) or isinstance(old, dict):
            continue  # the content, or a dict whose fields are judged one by one
        if _number(old) and _number(new):
            if old == 0:
                return True  # nothing skipped then, something now
            continue
        return True  # a flag, text or null that changed
    return _equal_pair_parted(full.data, cut.data)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal_pair_parted(full: Any, cut: Any) -> bool:
    """Two numbers of one object equal in ``full``, one of them the same in
    ``cut`` and the other not (``searched`` under an unchanged ``total``):
    progress short of a whole. Two counts that were equal by chance and
    both fell say nothing."""
    before, after = dict(_walk(full)), dict(_walk(cut))
    for where, value in before.items():
        other = after.get(where)
        if not isinstance(value, dict) or not isinstance(other, dict):
            continue
        numbers = [key for key, item in value.items() if _number(item) and _number(other.get(key))]
        for index, first in enumerate(numbers):
            for second in numbers[index + 1 :]:
                if value[first] != value[second]:
                    continue
                kept = {other[first], other[second]} & {value[first]}
                if kept and other[first] != other[second]:
                    return True  # the whole stayed, the progress fell short of it
    return False


# -- where it applies


def can_read_a_clock(handler: Callable[..., Any]) -> bool:
    """Whether the handler, or a function or class it names or holds in
    its closure (three steps deep), names a clock among its globals
    (``time``, ``datetime``, or a function or class of theirs). A handler
    relaying to an MCP server does not: the server's clock is its own."""
    seen: set[int] = set()
    frontier: list[Any] = [handler]
    for _depth in range(4):
        reached: list[Any] = []
        for item in frontier:
            for function in _functions_of(item):
                if id(function) in seen:
                    continue
                seen.add(id(function))
                if relays_to_a_server(function):
                    return False
                names = _names(function)
                if any(_is_clock(function.__globals__.get(name)) for name in names):
                    return True
                reached += [
                    function.__globals__[name] for name in names if name in function.__globals__
                ]
                reached += [
                    cell.cell_contents for cell in function.__closure__ or () if _filled(cell)
                ]
        frontier = [item for item in reached if callable(item)]
    return False


def _functions_of(value: Any) -> list[FunctionType]:
    """The Python functions a callable runs: itself (unwrapped), a
    method's function, an object's ``__call__``, a class's methods."""
    if isinstance(value, type):
        if value.__module__ in ("builtins", *_CLOCK_MODULES):
            return []
        return [item for item in vars(value).values() if isinstance(item, FunctionType)]
    value = inspect.unwrap(value)
    if isinstance(value, MethodType):
        value = value.__func__
    if isinstance(value, FunctionType):
        return [value]
    call = vars(type(value)).get("__call__")
    return [call] if isinstance(call, FunctionType) else []


def _names(function: FunctionType) -> set[str]:
    """The global (and attribute) names ``function``'s code, nested code included, uses."""
    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(const for const in code.co_consts if inspect.iscode(const))
    return names


def _filled(cell: Any) -> bool:
    try:
        return cell.cell_contents is not _MISSING
    except ValueError:  # a closure variable not bound yet
        return False


def _is_clock(value: Any) -> bool:
    if isinstance(value, ModuleType):
        return value.__name__ in _CLOCK_MODULES
    if isinstance(value, type):
        return issubclass(value, date)
    owner = getattr(value, "__module__", None)
    return callable(value) and owner in ("time", "freezegun.api") and value is not time.sleep
