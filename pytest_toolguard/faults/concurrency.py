"""Faults of two state-changing calls of a session at once: the call with
itself under another idempotency key (or none), and with the session's
nearest other call that changes state (``concurrent_calls``).

``duplicate_submission`` sends one key in a burst, so only one handler
runs; nothing else runs two handlers that change state together. A
read-modify-write without a lock (a counter, an index list appended to, a
ledger's balance, a "next id") passes every serial cell and loses an
update as soon as two calls overlap.

The interleaving is forced, never left to timing: the harness counts each
handler run's filesystem operations (the paths it resolves in the fake
world, ``harness.accesses``; its Python-level file operations in the
directory world, ``directory.Operations``), and holds one call (P)
between its k-th operation and the next (what it read through a
descriptor it has read by then) while the other (Q) runs to its end,
then lets P go on. The k are the operations of P, run alone first, that
named a file the calls change (or a directory above one): right after a
read, before the write that depends on it. Every run of a pair makes the
same two calls (ids, keys), each through a runtime of its own.

Q may be unable to end while P is held (it waits for P's lock, or for a
slot the runtime keeps for P): it counts as blocked once its threads used
no CPU time, nor waited runnable for a processor (a starved machine delays
a thread, it does not block it), for ``BLOCKED_SECONDS`` (at once, in the
fake world, when it waits for a file lock: ``harness.file_locks`` gives
``fcntl.flock`` the kernel's semantics there), and P is let go; a tool that locks properly
then runs serially and passes. That bound is the only clock here: a call
that is slow but runs (its threads use CPU time) is waited for, up to
``JOIN_SECONDS``.

The files the two calls leave are judged against every serial order, each
run first in the same starting state. Both calls answered OK: the files
are as A then B, or B then A, leave them. A call failed (it told its
caller, and what it left is the failure cells' to judge): no file holds
content no serial run leaves (torn, mixed), and a call that answered OK
keeps its changes. Otherwise a problem names the calls, where P was held,
and the files. Handlers are assumed deterministic, as ``disk_failure``
assumes: a file named or filled from a random value differs between any
two runs.

Not seen: operations of threads a handler starts, and of another process
(an MCP server over stdio: nothing to hold in this process; such a cell
is ``n/a``); an ``async def`` handler's (its runs are not told apart).
"""

from __future__ import annotations

import inspect
import os
import posixpath
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from ..capabilities import Risk
from ..contract import ToolCall, ToolResult
from ..harness.accesses import is_ancestor
from ..harness.file_locks import FakeFlocks
from ..harness.probes import HandlerProbe
from ..harness.session import with_secrets
from ..replay.cassette import Interaction
from .cell import JOIN_SECONDS, Cell
from .fault import Fault
from .outcome import NOTHING_TO_INJECT
from .target import Target

MAX_PARTNERS = 1
"""At most this many other calls of the session, the nearest first (each
adds both serial orders and their holds)."""

MAX_HOLDS = 3
"""At most this many points per order at which the first call is held
(spread evenly, the first and the last kept)."""

BLOCKED_SECONDS = 0.1
"""A call whose threads used no CPU time this long is blocked (on a lock
the held call has): the held call is let go."""

POLL_SECONDS = 0.002


@dataclass(slots=True)
class _Run:
    """What the gate saw of one call: its handler's threads and operations."""

    threads: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    """The path each of its operations named, in order."""
    blocked: bool = False
    """It waited for a file lock (``FakeFlocks``)."""


class _Gate:
    """Counts each call's operations by the thread its handler runs on, and
    holds one call after its k-th operation until ``release``."""

    def __init__(self) -> None:
        self.runs: dict[str, _Run] = {}
        self._by_thread: dict[int, str] = {}
        self._lock = threading.Lock()
        self.held_call = ""
        self.hold_after = 0
        self.holding = threading.Event()
        """Set once the held call waits at its hold."""
        self.released = threading.Event()

    def arm(self, call_id: str, after: int) -> None:
        self.runs = {}
        self.held_call, self.hold_after = call_id, after
        self.holding.clear()
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def started(self, call_id: str) -> None:
        """A handler run of ``call_id`` starts on this thread."""
        with self._lock:
            self._by_thread[threading.get_ident()] = call_id
            self.runs.setdefault(call_id, _Run()).threads.append(threading.get_ident())

    def ended(self) -> None:
        with self._lock:
            self._by_thread.pop(threading.get_ident(), None)

    def blocked(self, ident: int) -> None:
        call_id = self._by_thread.get(ident)
        if call_id is not None:
            self.runs.setdefault(call_id, _Run()).blocked = True

    def before_access(self, _index: int, path: str) -> None:
        """The fake world's ``AccessLog.before_access``."""
        self._operation(path)

    def before_operation(self, _index: int, _event: str, path: str) -> None:
        """The directory world's ``Operations.before``."""
        self._operation(path)

    def _operation(self, path: str) -> None:
        """Before an operation: the held call waits here when it made
        ``hold_after`` operations already."""
        call_id = self._by_thread.get(threading.get_ident())
        if call_id is None:
            return  # a thread the handler started, or another call's harness work
        run = self.runs.setdefault(call_id, _Run())
        done = len(run.paths)
        run.paths.append(path)
        if call_id == self.held_call and done == self.hold_after and not self.released.is_set():
            self.holding.set()
            self.released.wait(JOIN_SECONDS * 2)


@dataclass(frozen=True, slots=True)
class _Serial:
    """The two calls run one after the other from the same start."""

    first: str
    """The label of the call that ran first."""
    after_first: dict[str, bytes]
    after_both: dict[str, bytes]
    first_paths: list[str]


class ConcurrentCallsFault(Fault):
    name = "concurrent_calls"
    applies_to = "successful calls of tools that write"
    injection = (
        "the call run at once with itself (another idempotency key) and with the session's "
        "nearest other call that changes state: one held between its k-th filesystem "
        "operation (one that named a file the calls change) and its next while the other "
        f"runs to its end or blocks on a lock (at most {MAX_HOLDS} k per order, both orders)"
    )
    expected = (
        "both OK: the files as a serial order leaves them (A then B, or B then A); a call "
        "failed: no file torn or mixed, and a call that answered OK keeps its changes (no "
        "lost update)"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and target.writes

    def inject(self, cell: Cell) -> None:
        gate = _Gate()
        saved = cell.world.save_workspace()
        before = cell.tree()
        held_any = False
        with _installed(cell, gate), _flocks(cell, gate):
            for pair, (index, other) in enumerate([(-1, None), *_partners(cell)], 1):
                with _counted(cell, gate, other, pair) as make_call:
                    labels = (cell.target.label, _label_of(index, other) if other else "itself")
                    held_any |= _pair(cell, gate, saved, before, make_call, labels)
        cell.world.restore_workspace(saved)
        if not held_any:
            cell.problems.append(
                f"{NOTHING_TO_INJECT}: no handler run made a filesystem operation in this "
                "process on a file the calls change (a server in another process makes its own)"
            )


def _pair(
    cell: Cell,
    gate: _Gate,
    saved: Any,
    before: dict[str, bytes],
    make_call: Callable[[bool], ToolCall],
    labels: tuple[str, str],
) -> bool:
    """The target with one other call (``make_call(True)``; the target
    again when ``labels[1]`` is ``itself``): both serial orders, then every
    hold. Whether a hold landed."""
    itself = labels[1] == "itself"
    orders = [_serial(cell, gate, saved, make_call, labels, swap=False)]
    if not itself:
        orders.append(_serial(cell, gate, saved, make_call, labels, swap=True))
    changed = sorted(
        {
            path
            for order in orders
            for path in set(before) | set(order.after_both)
            if before.get(path) != order.after_both.get(path)
        }
    )
    if not changed:
        return False
    held_any = False
    for swap, order in enumerate(orders):
        for k in _hold_points(cell, order.first_paths, changed):
            cell.world.restore_workspace(saved)
            first, second = make_call(bool(swap)), make_call(not swap)
            results, held = _held(cell, gate, first, second, k)
            held_any |= held
            if results is None:
                return held_any
            held_label, ran_label = labels[::-1] if swap else labels
            if not _judge(cell, before, orders, results, (held_label, ran_label), k=k):
                return held_any  # one problem per pair: the first interleaving that broke
    return held_any


def _serial(
    cell: Cell,
    gate: _Gate,
    saved: Any,
    make_call: Callable[[bool], ToolCall],
    labels: tuple[str, str],
    *,
    swap: bool,
) -> _Serial:
    cell.world.restore_workspace(saved)
    runtime = cell.make_runtime(hooks=[], isolation="inline")
    first = make_call(swap)
    gate.arm("", 0)
    cell.execute(first, runtime)
    after_first = cell.tree()
    paths = list(gate.runs.get(first.call_id, _Run()).paths)
    cell.execute(make_call(not swap), runtime)
    return _Serial(labels[1] if swap else labels[0], after_first, cell.tree(), paths)


def _held(
    cell: Cell, gate: _Gate, first: ToolCall, second: ToolCall, k: int
) -> tuple[tuple[ToolResult, ToolResult] | None, bool]:
    """``first`` held after its k-th operation while ``second`` runs; their
    results (None when one did not return), and whether the hold landed."""
    runtime = cell.make_runtime(hooks=[], isolation="inline")
    gate.arm(first.call_id, k)
    results: dict[str, ToolResult] = {}
    done = {first.call_id: threading.Event(), second.call_id: threading.Event()}

    def submit(call: ToolCall) -> None:
        try:
            results[call.call_id] = cell.execute(call, runtime)
        finally:
            done[call.call_id].set()

    threads = [threading.Thread(target=submit, args=(call,)) for call in (first, second)]
    # The waits' reads of /proc are the harness's: never asked whether a handler made them.
    with cell.files.quiet():
        threads[0].start()
        _wait(gate, first.call_id, done[first.call_id], threads[0], until=gate.holding)
        held = gate.holding.is_set() and not done[first.call_id].is_set()
        threads[1].start()
        _wait(gate, second.call_id, done[second.call_id], threads[1])
    gate.release()
    for thread in threads:
        thread.join(JOIN_SECONDS * 2)
    if len(results) < 2:
        cell.problems.append(f"{first.call_id} and {second.call_id} at once: a call did not return")
        return None, held
    return (results[first.call_id], results[second.call_id]), held


def _wait(
    gate: _Gate,
    call_id: str,
    done: threading.Event,
    submitter: threading.Thread,
    *,
    until: threading.Event | None = None,
) -> None:
    """Until the call ends, ``until`` is set, or the call is blocked: it
    waits for a file lock, or its threads (the one that submitted it, its
    handler's) used no CPU time for ``BLOCKED_SECONDS`` (bounded by
    ``JOIN_SECONDS`` in all)."""
    start = still = time.monotonic()
    spent: tuple[float, int] | None = None
    while not done.wait(POLL_SECONDS):
        if until is not None and until.is_set():
            return
        run = gate.runs.get(call_id)
        if run is not None and run.blocked:
            return
        now = time.monotonic()
        handler = run.threads if run is not None else []
        threads = [submitter.ident or 0, *handler]
        # A thread the machine starves waits runnable: not blocked.
        used = (_cpu_time(threads), _waited_for_a_processor(threads))
        if used != spent:
            spent, still = used, now
        elif now - still >= BLOCKED_SECONDS or now - start >= JOIN_SECONDS:
            return


_REAL = SimpleNamespace(open=os.open, read=os.read, close=os.close)
"""The real disk's calls, taken before any fake filesystem: ``/proc`` is
read while a fake world runs."""


def _waited_for_a_processor(threads: Sequence[int]) -> int:
    """Nanoseconds ``threads`` (idents) have spent runnable but not running
    (the kernel's ``schedstat`` run delay): it grows for a thread the
    machine starves, never for one asleep on a lock. 0 where ``/proc``
    does not say."""
    natives = {thread.ident: thread.native_id for thread in threading.enumerate()}
    total = 0
    for ident in threads:
        native = natives.get(ident)
        if native is None:
            continue
        try:
            fd = _REAL.open(f"/proc/self/task/{native}/schedstat", os.O_RDONLY)
            try:
                total += int(_REAL.read(fd, 256).split()[1])
            finally:
                _REAL.close(fd)
        except (OSError, IndexError, ValueError):
            continue
    return total


def _cpu_time(threads: Sequence[int]) -> float:
    total = 0.0
    for ident in threads:
        try:
            total += time.clock_gettime(time.pthread_getcpuclockid(ident))
        except (OSError, OverflowError):
            continue  # the thread ended
    return total


def _judge(
    cell: Cell,
    before: dict[str, bytes],
    orders: list[_Serial],
    results: tuple[ToolResult, ToolResult],
    labels: tuple[str, str],
    *,
    k: int,
) -> bool:
    """Both calls answered OK: the files match a serial order. A call that
    failed told its caller so, and what it left is the failure cells' to
    judge; but no file may hold what no run of the two leaves (torn,
    mixed), and a call that answered OK keeps its changes. Otherwise a
    problem names the calls (``labels``: the held one's, the other's),
    where the first was held, and the files. Whether it held."""
    after = cell.tree()
    held, ran = labels
    itself = ran == "itself"
    both = [order.after_both for order in orders]
    if any(after == state for state in both):
        return True
    where = (
        f"{held} at once with {'itself (another key)' if itself else ran}: held after its "
        f"filesystem operation {k} (before the next) while the other ran, answered "
        f"{results[0].code.value}, {results[1].code.value}"
    )
    if all(result.ok for result in results):
        differ = _differing(after, both) or _differing(after, both[:1])
        orders_text = "A then B" if itself else "A then B, B then A"
        return cell.check(
            False,
            f"{where}: the files match no serial order ({orders_text}): "
            f"{', '.join(differ[:5])} (a read-modify-write without a lock loses an update)",
        )
    states = [before, *both, *(order.after_first for order in orders)]
    torn = _differing(after, states)
    if torn:
        return cell.check(
            False, f"{where}: files no serial run leaves (torn or mixed): {', '.join(torn[:5])}"
        )
    for label, result in zip(labels, results, strict=True):
        alone = orders[0].after_first if itself else _alone(orders, label)
        lost = [
            path
            for path in sorted(set(before) | set(alone))
            if before.get(path) != alone.get(path)
            and all(after.get(path) != state.get(path) for state in (alone, *both))
        ]
        if result.ok and lost:
            return cell.check(
                False,
                f"{where}: {cell.target.label if label == 'itself' else label} answered OK, "
                f"but its changes were lost: {', '.join(lost[:5])} (a read-modify-write "
                "without a lock loses an update)",
            )
    return True


def _alone(orders: list[_Serial], label: str) -> dict[str, bytes]:
    """The files the call ``label`` left run alone (first of its order)."""
    return next(order.after_first for order in orders if order.first == label)


def _differing(after: dict[str, bytes], states: Sequence[dict[str, bytes]]) -> list[str]:
    """The paths whose content in ``after`` is in none of ``states``."""
    paths = set(after).union(*states)
    return sorted(path for path in paths if all(after.get(path) != s.get(path) for s in states))


def _label_of(index: int, interaction: Interaction) -> str:
    """As ``Target.label``: ``3-write_json_file``."""
    return f"{index + 1}-{interaction.call.tool_name}"


def _hold_points(cell: Cell, paths: list[str], changed: Sequence[str]) -> list[int]:
    """The k after which the first call is held (before its next
    operation: what it read through a descriptor is read by then): its
    operations that named a changed file or a directory above one, the last
    but one at most (at most ``MAX_HOLDS``, spread evenly)."""
    wanted = [posixpath.join(cell.root, path) for path in changed]
    points = [
        index
        for index, path in enumerate(paths, 1)
        if index < len(paths) and _names_any(path, wanted, cell.root)
    ]
    if len(points) <= MAX_HOLDS:
        return points
    last = len(points) - 1
    return sorted({points[round(step * last / (MAX_HOLDS - 1))] for step in range(MAX_HOLDS)})


def _names_any(path: str, files: Sequence[str], root: str) -> bool:
    """Whether ``path`` names one of ``files`` or a directory above one
    beneath ``root``. A path relative to a directory descriptor (the
    directory world sees the name only) counts when its last component is
    a component of one of them."""
    if not path.startswith("/"):
        name = posixpath.basename(path.rstrip("/"))
        return bool(name) and any(name in file.split("/") for file in files)
    path = posixpath.normpath(path)
    return any(
        path == file or (len(path) > len(root) and is_ancestor(path, file)) for file in files
    )


def _partners(cell: Cell) -> list[tuple[int, Interaction]]:
    """The session's other calls that changed state when recorded, nearest
    to the target first (at most ``MAX_PARTNERS``), none the same call."""
    target = cell.target
    found: list[tuple[int, int, Interaction]] = []  # (distance, index, interaction)
    for index, interaction in enumerate(target.cassette.interactions):
        call = interaction.call
        spec = cell.registry.get(call.tool_name)
        if index == target.index or spec is None or spec.risk is Risk.READ:
            continue
        if (call.tool_name, call.arguments) == (target.call.tool_name, target.call.arguments):
            continue
        other = replace(target, index=index, spec=spec)
        if other.handler_can_run:
            found.append((abs(index - target.index), index, interaction))
    return [(index, interaction) for _distance, index, interaction in sorted(found)[:MAX_PARTNERS]]


@contextmanager
def _installed(cell: Cell, gate: _Gate) -> Iterator[None]:
    """The gate on the world's operation seam for the block."""
    if cell.operations is not None:
        cell.operations.before = gate.before_operation
        try:
            yield
        finally:
            cell.operations.before = None
        return
    log = cell.files.access_log
    log.before_access = gate.before_access
    try:
        yield
    finally:
        log.before_access = None


def _flocks(cell: Cell, gate: _Gate) -> Any:
    return nullcontext() if cell.directory else FakeFlocks(cell.fs, gate.blocked)


@contextmanager
def _counted(
    cell: Cell, gate: _Gate, other: Interaction | None, pair: int
) -> Iterator[Callable[[bool], ToolCall]]:
    """Within the block, the handlers of the target and of ``other`` tell
    the gate which call they run; yields ``make_call(is_other)``: the
    target's call, or the other's (the target's again when ``other`` is
    None). Every run of the pair makes the same two calls (ids and keys;
    each run has a runtime of its own): a handler that names a file after
    its call's id leaves the same files in every order."""
    target = cell.target.call

    def make_call(is_other: bool) -> ToolCall:
        call_id = f"{cell.fault_name}-{pair}{'b' if is_other else 'a'}"
        call = other.call if is_other and other is not None else target
        key = f"{call.idempotency_key}-{call_id}" if call.idempotency_key else None
        if call is target:
            return cell.call(call_id=call_id, idempotency_key=key)
        return with_secrets(replace(call, call_id=call_id, idempotency_key=key), cell.secrets)

    previous = cell.replace_handler(lambda handler: _telling(gate, handler))
    partner = cell.registry.get(other.call.tool_name) if other is not None else None
    if partner is not None and partner.name != cell.target.call.tool_name:
        log = None if cell.directory else cell.files.access_log
        cell.registry.replace(
            partner.with_handler(HandlerProbe(_telling(gate, partner.handler), log))
        )
    try:
        yield make_call
    finally:
        cell.restore_handler(previous)
        if partner is not None and partner.name != cell.target.call.tool_name:
            cell.registry.replace(partner)


def _telling(gate: _Gate, handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler`` telling the gate which call its run belongs to (an
    ``async def`` one as it is: its runs are not told apart)."""
    if inspect.iscoroutinefunction(handler):
        return handler

    def telling(ctx: Any, **arguments: Any) -> Any:
        gate.started(ctx.call_id)
        try:
            return handler(ctx, **arguments)
        finally:
            gate.ended()

    prepare = getattr(handler, "prepare", None)
    if callable(prepare):
        telling.prepare = prepare  # type: ignore[attr-defined]
    return telling
