"""What a fault is, what it runs against, and the world one cell runs in.

A *fault* is a small object: where it applies (``applies``), how it is
injected and which oracle must hold (``inject``). A *target* is one recorded
interaction of a cassette or case. A *cell* is one fault against one target:
``run_cell`` rebuilds the cassette's world (fake filesystem, frozen clock,
the recorded session), replays the interactions before the target so the
workspace is as it was, hands the fault a ``Cell`` to inject and call
through, and then checks the invariants every cell shares:

- nothing outside the workspace changed (every file of the fake filesystem
  outside the root, including planted decoys, byte for byte; none added);
- every call the fault made has exactly one audit row, and it is finished
  (unless the fault said the store was down for it);
- no handler is still running when the cell ends;
- every planted decoy's marker is absent from every result (nothing outside
  was read).

Like replay, a cell grants the recorded approvals again (``replay.approvals``:
they follow the hooks a fault gives ``make_runtime``, so a plan still blocks
first) and serves the recorded HTTP exchanges of external tools, each as
often as asked, with no network (``cell.http``; ``replay.http``).

A fault reports a broken oracle with ``cell.check(condition, message)``; the
cell passes when no check failed. ``run_cell`` never raises for what a tool
or the executor does: a fault's own crash is reported as a failed cell too.
"""

from __future__ import annotations

import json
import posixpath
import stat
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..audit import SQLiteAuditStore
from ..capabilities import Capabilities, Risk
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..registry import PATH_ARGUMENT, ToolRegistry, ToolSpec
from ..replay.approvals import approval_hooks
from ..replay.cassette import Cassette, Interaction
from ..replay.environment import fake_filesystem, frozen_clock, read_tree
from ..replay.http import HttpPlayback, HttpUnavailable
from ..replay.player import _with_secrets
from ..runtime import ToolRuntime
from .outcome import CellOutcome, CellStatus

JOIN_SECONDS = 5.0
"""How long a cell waits for a handler that overran its deadline to end."""

THREAD_JOIN_SECONDS = 1.0
"""How long a cell waits, in all, for threads started during it to end."""

DECOY_MARKER = "TOOLGUARD-DECOY-7f3a9c"
"""In every planted file outside the workspace: a result that holds it read
outside."""

_OUTSIDE_DIR = "toolguard-outside"


# -- targets ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """One recorded interaction, with the tool it calls (``spec`` is None when
    the registry has no such tool)."""

    source: str
    """The cassette or case file, as shown (``cassettes/feedback.yaml``)."""
    cassette: Cassette
    index: int
    """0-based position of the interaction in the file."""
    spec: ToolSpec | None

    @property
    def interaction(self) -> Interaction:
        return self.cassette.interactions[self.index]

    @property
    def call(self) -> ToolCall:
        return self.interaction.call

    @property
    def label(self) -> str:
        """``3-write_json_file``: the interaction's part of a cell's id."""
        return f"{self.index + 1}-{self.call.tool_name}"

    @property
    def arguments(self) -> dict[str, Any] | None:
        """The call's arguments as an object, or None when they are not one
        (bad JSON text, a list, ...)."""
        value: Any = self.call.arguments
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        return dict(value) if isinstance(value, Mapping) else None

    @property
    def handler_ran(self) -> bool:
        """Whether the recorded call reached its handler and succeeded: the
        faults that change a handler's world need one."""
        expected = self.interaction.result
        if expected.ok is not None:
            return expected.ok and expected.code in (None, ErrorCode.OK.value)
        return expected.code == ErrorCode.OK.value

    @property
    def writes(self) -> bool:
        """Whether the tool may change files or the world."""
        return self.spec is not None and self.spec.risk is not Risk.READ

    @property
    def declared_path_arguments(self) -> tuple[str, ...]:
        """The fields of the tool's ``paths`` templates."""
        if self.spec is None:
            return ()
        return tuple(name for access in self.spec.paths for name in access.fields)

    @property
    def path_arguments(self) -> tuple[str, ...]:
        """Arguments that name a path and that this call gives as strings:
        fields of the tool's ``paths`` templates, then any other whose name
        looks like a path (``PATH_ARGUMENT``: a tool may use a path it never
        declared)."""
        if self.spec is None:
            return ()
        arguments = self.arguments or {}
        declared = list(self.declared_path_arguments)
        guessed = [name for name in arguments if PATH_ARGUMENT.search(name)]
        names: list[str] = []
        for name in declared + guessed:
            if isinstance(arguments.get(name), str) and name not in names:
                names.append(name)
        return tuple(names)


def targets(cassette: Cassette, registry: ToolRegistry, source: str) -> list[Target]:
    """Every interaction of ``cassette`` as a target, in file order."""
    return [
        Target(source, cassette, index, registry.get(interaction.call.tool_name))
        for index, interaction in enumerate(cassette.interactions)
    ]


# -- faults ----------------------------------------------------------------------------


class Fault:
    """A fault: subclass it, set the four documented class attributes, and
    override ``applies`` and ``inject``.

    ``applies(target)`` must depend only on the target (it is asked at
    collection, on every xdist worker alike). ``inject(cell)`` sets the fault
    up, makes its calls through ``cell.execute`` and states its oracle with
    ``cell.check``; the shared invariants are checked after it returns.
    """

    name: ClassVar[str]
    applies_to: ClassVar[str]
    """For the catalogue table: which interactions get this fault."""
    injection: ClassVar[str]
    """How it is injected."""
    expected: ClassVar[str]
    """The oracle: what must hold afterwards."""

    def applies(self, target: Target) -> bool:
        return True

    def inject(self, cell: Cell) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<fault {self.name}>"


_CATALOGUE: dict[str, Fault] = {}


def register_fault(fault: type[Fault] | Fault) -> Any:
    """Add a fault to the catalogue (a class is instantiated without
    arguments); usable as a class decorator. Returns its argument. A name
    already taken raises ``ValueError``."""
    instance = fault() if isinstance(fault, type) else fault
    name = getattr(instance, "name", "")
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ValueError(f"a fault needs a name of letters, digits and _: {name!r}")
    for attribute in ("applies_to", "injection", "expected"):
        if not isinstance(getattr(instance, attribute, None), str):
            raise ValueError(f"fault {name}: set the class attribute {attribute} (a str)")
    if name in _CATALOGUE and _CATALOGUE[name] is not instance:
        raise ValueError(f"a fault named {name!r} is already registered")
    _CATALOGUE[name] = instance
    return fault


def unregister_fault(name: str) -> None:
    """Remove a fault from the catalogue (for tests of custom faults)."""
    _CATALOGUE.pop(name, None)


def catalogue() -> tuple[Fault, ...]:
    """Every registered fault: the built-in ones first, then in
    registration order."""
    return tuple(_CATALOGUE.values())


def select_faults(spec: str, known: Sequence[Fault] | None = None) -> tuple[Fault, ...]:
    """Comma-separated names, where ``all`` stands for every fault, ->
    faults of ``known`` (default: the catalogue), in its order
    (``all,timeout`` is every fault). ``ValueError`` names any unknown fault
    and lists the known ones."""
    known = tuple(catalogue() if known is None else known)
    wanted = [part.strip() for part in spec.split(",") if part.strip()]
    if "all" in wanted:
        wanted = [fault.name for fault in known] + [name for name in wanted if name != "all"]
    names = {fault.name for fault in known}
    unknown = [name for name in wanted if name not in names]
    if unknown or not wanted:
        raise ValueError(
            f"unknown fault {', '.join(unknown) or repr(spec)}; "
            f"known: all, {', '.join(sorted(names))}"
        )
    return tuple(fault for fault in known if fault.name in wanted)


# -- the world of one cell -------------------------------------------------------------


class _Counted:
    """A handler wrapper counting its calls (thread-safe)."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        self.handler = handler
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, ctx: Any, **arguments: Any) -> Any:
        with self._lock:
            self.calls += 1
        return self.handler(ctx, **arguments)


class Cell:
    """What a fault works with: the target, the workspace as it was just
    before the target's call, and ways to call through the real executor.

    ``runtime`` is the session's runtime (the recorded capabilities, plan,
    variables and idempotency scope), over a copy of the registry whose
    target tool counts its handler's calls (``handler_calls``).
    """

    def __init__(
        self,
        fault: Fault,
        target: Target,
        registry: ToolRegistry,
        fs: Any,
        secrets: Mapping[str, str] | None,
        *,
        http: HttpPlayback | None = None,
    ) -> None:
        self.fault = fault
        self.target = target
        self.fs = fs
        """The pyfakefs ``FakeFilesystem`` (for ``set_disk_usage``, ...)."""
        self.root = target.cassette.workspace.root
        self.outside_dir = posixpath.join(posixpath.dirname(self.root), _OUTSIDE_DIR)
        """A directory beside the workspace holding decoy files."""
        self.secrets = secrets
        self.problems: list[str] = []
        self._counter: _Counted | None = None
        self.http = http
        """Serves the recorded HTTP exchanges (None when the cassette calls
        no external tool); ``http.injected(...)`` changes what they answer."""
        self.registry = self._counting_registry(registry)
        if http is not None:
            self.registry = http.registry(self.registry)
        self.approvals = approval_hooks(target.cassette)
        """The hooks granting the recorded approvals; every runtime of the
        cell has them, after its other hooks."""
        self._runtimes: list[tuple[ToolRuntime, SQLiteAuditStore]] = []
        self._settled: set[int] = set()
        self._results: list[ToolResult] = []
        self.outside_before: dict[str, bytes] | None = None
        self._calls: list[tuple[SQLiteAuditStore, str]] = []
        self._unaudited: set[str] = set()
        self._serial = 0
        self.hooks: list[PreToolUse | PostToolUse] = []
        plan = target.cassette.session.plan
        if plan:
            self.hooks.append(PlanProgress(plan))
        self._threads_before = set(threading.enumerate())
        self.runtime = self.make_runtime()
        """The session's runtime (replaced by ``replay_before`` when the
        state before the target comes from the cache)."""

    # -- set-up

    def _counting_registry(self, registry: ToolRegistry) -> ToolRegistry:
        specs = []
        for spec in registry:
            if spec.name == self.target.call.tool_name:
                self._counter = _Counted(spec.handler)
                spec = spec.with_handler(self._counter)
            specs.append(spec)
        return ToolRegistry(specs)

    @property
    def handler_calls(self) -> int:
        """How often the target tool's handler has been called by the
        fault's calls (the replayed interactions before it are not counted)."""
        return self._counter.calls if self._counter else 0

    @property
    def spec(self) -> ToolSpec | None:
        """The target tool as the runtime sees it now."""
        return self.registry.get(self.target.call.tool_name)

    def replace_handler(
        self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
    ) -> Callable[..., Any]:
        """Replace the target tool's handler with ``wrap(current_handler)``
        (still counted); returns the handler it replaced."""
        counter = self._counter
        if counter is None:
            raise LookupError(f"no tool {self.target.call.tool_name!r} in the registry")
        previous = counter.handler
        counter.handler = wrap(previous)
        return previous

    def restore_handler(self, handler: Callable[..., Any]) -> None:
        """Put back a handler ``replace_handler`` returned."""
        self.replace_handler(lambda _current: handler)

    def replace_spec(self, **changes: Any) -> None:
        """Change fields of the target tool's spec (``result_limit=...``)."""
        spec = self.spec
        if spec is None:
            raise LookupError(f"no tool {self.target.call.tool_name!r} in the registry")
        self.registry.replace(replace(spec, **changes))

    def make_runtime(
        self,
        *,
        capabilities: Capabilities | None = None,
        hooks: Sequence[PreToolUse | PostToolUse] | None = None,
        timeouts: Mapping[str, float] | None = None,
        audit: SQLiteAuditStore | None = None,
    ) -> ToolRuntime:
        """A runtime of the recorded session over this cell's registry, with
        its own in-memory audit store (or ``audit``, which it then owns);
        the cell closes it and checks its rows."""
        session = self.target.cassette.session
        store = audit if audit is not None else SQLiteAuditStore(":memory:")
        runtime = ToolRuntime(
            self.registry,
            self.root,
            capabilities if capabilities is not None else session.capabilities,
            store,
            hooks=[*(self.hooks if hooks is None else hooks), *self.approvals],
            variables=session.variables,
            idempotency_scope=session.idempotency_scope,
            timeouts={**session.timeouts, **(timeouts or {})},
        )
        self._runtimes.append((runtime, store))
        return runtime

    def replay_before(self, source: ToolRegistry | None = None) -> None:
        """Bring the session to the moment before the target's call: replay
        the interactions before it (no comparisons: the replay items do
        that), or, when another cell of the same interaction already did,
        restore what they left (``source``, the registry the cell was given,
        is part of that cache's key). Then reset the handler count."""
        index = self.target.index
        saved = _PREFIXES.get(self.target.cassette, index, source, self.secrets)
        if saved is not None:
            saved.restore(self)
        else:
            for position, interaction in enumerate(self.target.cassette.interactions[:index]):
                self._playing(position)
                self.runtime.execute(_with_secrets(interaction.call, self.secrets))
            if index and source is not None:
                _PREFIXES.put(self.target.cassette, index, source, self.secrets, _Saved.of(self))
        self._playing(index)
        if self._counter is not None:
            self._counter.calls = 0

    def _playing(self, index: int) -> None:
        if self.http is not None:
            self.http.current = index

    # -- calls

    def call(self, arguments: Any = None, **changes: Any) -> ToolCall:
        """The target's call with a fresh call id, optionally with other
        ``arguments`` or other fields, and the secrets filled in last: a
        placeholder in arguments a fault derived from the recorded ones
        (``target.arguments``) is sent as the real value too. A recorded
        idempotency key is made unique to this call too (unless
        ``idempotency_key`` is given): reused, every call after the first
        would only be answered from the key, and test nothing."""
        self._serial += 1
        call = self.target.call
        call_id = f"{self.fault.name}-{self._serial}"
        fields: dict[str, Any] = {"call_id": call_id}
        if call.idempotency_key:
            fields["idempotency_key"] = f"{call.idempotency_key}-{call_id}"
        fields.update(changes)
        if arguments is not None:
            fields["arguments"] = arguments
        return _with_secrets(replace(call, **fields), self.secrets)

    def execute(self, call: ToolCall, runtime: ToolRuntime | None = None) -> ToolResult:
        """Run ``call`` through ``runtime`` (default: the session's) and keep
        it for the audit invariant."""
        runtime = runtime or self.runtime
        self._calls.append((self.store_of(runtime), call.call_id))
        result = runtime.execute(call)
        self._results.append(result)
        return result

    def store_of(self, runtime: ToolRuntime) -> SQLiteAuditStore:
        """The audit store of a runtime this cell made."""
        return next(store for made, store in self._runtimes if made is runtime)

    def settle(self, runtime: ToolRuntime) -> None:
        """Close ``runtime`` now, waiting for handlers that overran their
        deadline (a still running one is a problem)."""
        if id(runtime) not in self._settled:
            self._settled.add(id(runtime))
            for problem in runtime.close(join_timeout=JOIN_SECONDS):
                self.problems.append(f"{problem}")

    def outside_planted(self) -> None:
        """Call after planting files outside the workspace: they become part
        of what must stay unchanged."""
        self.outside_before = _outside(self)

    def unaudited(self, call_id: str) -> None:
        """Declare that ``call_id`` may have no audit row (the store was down
        when it started)."""
        self._unaudited.add(call_id)

    # -- oracles

    def check(self, condition: bool, message: str) -> bool:
        """Record ``message`` as a broken oracle unless ``condition``."""
        if not condition:
            self.problems.append(message)
        return condition

    def expect(
        self,
        result: ToolResult,
        *codes: ErrorCode,
        state: CallState | None = None,
        retryable: bool | None = None,
    ) -> bool:
        """Check that ``result`` answers one of ``codes`` (and ``state``,
        ``retryable`` when given)."""
        wanted = " or ".join(code.value for code in codes)
        ok = self.check(
            result.code in codes,
            f"{result.call_id}: expected {wanted}, got {result.code.value}: "
            f"{_short(result.message)}",
        )
        if state is not None:
            ok &= self.check(
                result.state is state,
                f"{result.call_id}: expected state {state.value}, got {result.state.value}",
            )
        if retryable is not None:
            ok &= self.check(
                result.retryable is retryable,
                f"{result.call_id}: expected retryable={retryable}, got {result.retryable}",
            )
        return ok

    def tree(self) -> dict[str, bytes]:
        """Every regular file under the workspace, by relative path."""
        return read_tree(self.root)

    def check_refused(self, before: Mapping[str, bytes], why: str) -> None:
        """A refused call's oracle: the handler never ran (``handler_calls``
        is 0) and the workspace holds exactly ``before``."""
        self.check(self.handler_calls == 0, f"{why}, but the handler ran")
        self.check_unchanged(before, why)

    def check_unchanged(self, before: Mapping[str, bytes], why: str) -> None:
        """The workspace holds exactly ``before``."""
        after = self.tree()
        changed = sorted(
            path for path in set(before) | set(after) if before.get(path) != after.get(path)
        )
        self.check(not changed, f"{why}, but the workspace changed: {', '.join(changed[:5])}")

    # -- teardown

    def _check_threads(self) -> None:
        """A thread a handler started must not outlive the cell (after the
        runtimes are closed, their own workers have ended)."""
        left = _leftover_threads(self._threads_before, THREAD_JOIN_SECONDS)
        self.check(not left, f"threads started during the cell still running: {', '.join(left)}")

    def finish(self) -> None:
        """Close every runtime (waiting for late handlers) and check that
        each call has one finished audit row."""
        for runtime, _store in self._runtimes:
            self.settle(runtime)
        if self.http is not None:
            self.http.close()
        self._check_threads()
        for result in self._results:
            shown = json.dumps([result.data, result.message], default=str)
            self.check(
                DECOY_MARKER not in shown,
                f"{result.call_id}: the result holds a file from outside the workspace",
            )
        for store in {id(store): store for _runtime, store in self._runtimes}.values():
            rows = store.rows()
            for call_store, call_id in self._calls:
                if call_store is not store:
                    continue
                mine = [row for row in rows if row.call_id == call_id]
                if call_id in self._unaudited and not mine:
                    continue
                self.check(
                    len(mine) == 1,
                    f"{call_id}: expected one audit row, found {len(mine)}",
                )
                unfinished = [row.state.value for row in mine if not row.state.finished]
                self.check(not unfinished, f"{call_id}: audit row left {', '.join(unfinished)}")
            store.close()


def _leftover_threads(before: set[threading.Thread], wait: float) -> list[str]:
    """Names of threads started since ``before`` that are still alive after
    waiting up to ``wait`` seconds in all for them to end."""
    deadline = time.monotonic() + wait
    alive = []
    for thread in threading.enumerate():
        if (
            thread in before
            or thread is threading.current_thread()
            or isinstance(thread, threading._DummyThread)  # not joinable; not started by us
        ):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            alive.append(thread.name)
    return sorted(alive)


# -- the state before a target, saved for the next cell -----------------------------


@dataclass(frozen=True, slots=True)
class _Saved:
    """What replaying the interactions before a target left behind: the
    workspace (every entry under the root, with its mode), the session's
    audit store (rows and idempotency keys) and the plan's progress. Not
    kept: the runtime's rollback journal (a fault that rolls back an
    earlier call must replay instead: ``_PREFIXES.size = 0``)."""

    entries: tuple[tuple[str, int, bytes], ...]
    """(relative path, st_mode, content or link target), parents first."""
    store: SQLiteAuditStore
    plan: PlanProgress | None

    @classmethod
    def of(cls, cell: Cell) -> _Saved:
        entries: list[tuple[str, int, bytes]] = []
        pending: list[tuple[str, Any]] = [("", cell.fs.get_object(cell.root))]
        while pending:
            prefix, directory = pending.pop(0)
            for name, entry in sorted(directory.entries.items()):
                path = f"{prefix}{name}"
                mode = entry.st_mode
                entries.append(
                    (path, mode, b"" if stat.S_ISDIR(mode) else entry.byte_contents or b"")
                )
                if stat.S_ISDIR(mode):
                    pending.append((path + "/", entry))
        plan = next((hook for hook in cell.hooks if isinstance(hook, PlanProgress)), None)
        store = cell.store_of(cell.runtime).copy()
        return cls(tuple(entries), store, plan.copy() if plan else None)

    def restore(self, cell: Cell) -> None:
        """Put the workspace, the store and the plan back into ``cell``'s
        fresh world, replacing its session runtime."""
        fs = cell.fs
        for name in list(fs.get_object(cell.root).entries):
            fs.remove_object(posixpath.join(cell.root, name))
        for path, mode, data in self.entries:
            full = posixpath.join(cell.root, path)
            if stat.S_ISDIR(mode):
                fs.create_dir(full, perm_bits=stat.S_IMODE(mode))
            elif stat.S_ISLNK(mode):
                fs.create_symlink(full, data.decode())
            else:
                fs.create_file(full, st_mode=mode, contents=data)
        fresh = cell.runtime
        store = cell.store_of(fresh)
        cell._runtimes = [(r, st) for r, st in cell._runtimes if r is not fresh]
        fresh.close()
        store.close()
        cell.hooks = [self.plan.copy()] if self.plan else []
        cell.runtime = cell.make_runtime(audit=self.store.copy())


class _SavedStates:
    """The last few saved states, by (cassette, index, registry, secrets)
    identity. pytest runs an interaction's cells one after another, so a few
    suffice; each entry keeps its key objects alive, so an id is never
    reused while it is here."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[int, ...], tuple[tuple[object, ...], _Saved]] = (
            OrderedDict()
        )

    def get(
        self, cassette: Cassette, index: int, registry: object, secrets: object
    ) -> _Saved | None:
        found = self._entries.get((id(cassette), index, id(registry), id(secrets)))
        if found is None or found[0] != (cassette, registry, secrets):
            return None
        return found[1]

    def put(
        self, cassette: Cassette, index: int, registry: object, secrets: object, saved: _Saved
    ) -> None:
        if self.size <= 0:
            return
        key = (id(cassette), index, id(registry), id(secrets))
        self._entries[key] = ((cassette, registry, secrets), saved)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            _key, (_keep, dropped) = self._entries.popitem(last=False)
            dropped.store.close()

    def clear(self) -> None:
        while self._entries:
            _key, (_keep, dropped) = self._entries.popitem(last=False)
            dropped.store.close()


_PREFIXES = _SavedStates()


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- running one cell ------------------------------------------------------------------


def run_cell(
    fault: Fault,
    target: Target,
    registry: ToolRegistry,
    *,
    secrets: Mapping[str, str] | None = None,
    nodeid: str = "",
) -> CellOutcome:
    """Run ``fault`` against ``target`` in a fresh world; never raises for
    what happens in it."""
    if fault.applies(target):
        problems = tuple(_run(fault, target, registry, secrets))
        status: CellStatus = "fail" if problems else "pass"
    else:
        problems, status = ("not applicable",), "n/a"
    return CellOutcome(
        source=target.source,
        interaction=target.index + 1,
        tool=target.call.tool_name,
        fault=fault.name,
        status=status,
        problems=problems,
        nodeid=nodeid,
    )


def _run(
    fault: Fault, target: Target, registry: ToolRegistry, secrets: Mapping[str, str] | None
) -> list[str]:
    cassette = target.cassette
    try:  # before the fake world: it imports vcrpy
        http = HttpPlayback.for_cassette(cassette, registry, repeats=True)
    except HttpUnavailable as exc:
        return [str(exc)]
    with ExitStack() as stack:
        # The clock first: pyfakefs unloads modules first imported while it
        # is active, so the clock's backend must be imported outside it.
        stack.enter_context(frozen_clock(cassette.recorded_at))
        fs = stack.enter_context(fake_filesystem(cassette))
        cell = Cell(fault, target, registry, fs, secrets, http=http)
        try:
            cell.replay_before(registry)
            _plant_decoys(cell)
            cell.outside_planted()
            fault.inject(cell)
        except Exception:  # the fault itself broke: report it, never crash the run
            cell.problems.append("the fault raised: " + _last_lines(traceback.format_exc()))
        cell.finish()
        before = cell.outside_before
        if before is not None:
            after = _outside(cell)
            changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
            cell.check(not changed, f"outside the workspace changed: {', '.join(changed[:5])}")
        return cell.problems
    raise AssertionError("unreachable")  # pragma: no cover  (ExitStack swallows nothing)


def _plant_decoys(cell: Cell) -> None:
    """Files outside the workspace for an escape to meet: a sibling
    directory mirroring the workspace's top level, and /etc/passwd."""
    fs = cell.fs
    fs.create_file(
        posixpath.join(cell.outside_dir, "secret.txt"), contents=f"{DECOY_MARKER} secret\n"
    )
    if not fs.exists("/etc/passwd"):
        fs.create_file("/etc/passwd", contents=f"root:x:0:0:{DECOY_MARKER}:/root:/bin/sh\n")


def _outside(cell: Cell) -> dict[str, bytes]:
    """Every file, link and directory (with its mode) of the fake
    filesystem outside the workspace, read from pyfakefs' own tree (walking
    it through the fake ``os`` costs ten times more)."""
    found: dict[str, bytes] = {}
    pending: list[tuple[str, Any]] = [("", cell.fs.root_dir)]
    while pending:
        prefix, directory = pending.pop()
        for name, entry in directory.entries.items():
            path = f"{prefix}/{name}"
            if path == cell.root:
                continue
            if stat.S_ISDIR(entry.st_mode):
                found[path + "/"] = b"directory %o" % stat.S_IMODE(entry.st_mode)
                pending.append((path, entry))
            elif stat.S_ISLNK(entry.st_mode):
                found[path] = b"-> " + (entry.byte_contents or b"")
            else:
                found[path] = entry.byte_contents or b""
    return found


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def iter_cells(
    cassette: Cassette, registry: ToolRegistry, source: str, faults: Sequence[Fault]
) -> Iterator[tuple[Target, Fault]]:
    """Every (target, fault) pair that applies, in file then catalogue order."""
    for target in targets(cassette, registry, source):
        for fault in faults:
            if fault.applies(target):
                yield target, fault
