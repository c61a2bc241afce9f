"""What a fault works with: the ``Cell`` of one fault against one target.

``run.run_cell`` rebuilds the cassette's world (``harness.world.FakeWorld``: fake
filesystem, frozen clock; or a fresh ``harness.DirectoryWorld`` of real
files, where "outside" is the world's own directory around the workspace
and the access oracle speaks only when one observes it, ``files.access_log``
not None), brings the session to the moment before the
target's call (replaying the interactions before it, or restoring what a
``PrefixCache`` saved for them), plants decoys beside the workspace, hands
the fault a ``Cell`` to inject and call through, and then checks the
invariants every cell shares:

- nothing outside the workspace changed (every entry of the fake
  filesystem outside the root, planted decoys included: content, mode,
  inode, link count, mtime, link target; none added or removed);
- every call the fault made has exactly one audit row, and it is finished
  (unless the fault said the store was down for it);
- no handler, and no thread started during the cell, is still running
  (a thread a handler run started and left alive when it answered is
  found without waiting for it);
- no handler run resolved a path outside the workspace (``open``, ``stat``,
  ``listdir``, ``readlink``, ``realpath``: ``harness.accesses``), decoy or
  not; directories above the root are not outside;
- no result, message or audit row holds a decoy's marker (nothing outside
  was read) or a forbidden ``.env`` file's marker (``FakeWorld.plant_forbidden``
  puts them in every cell's workspace), or the real value of a secret the
  test gave (``toolguard_secrets``);
- each call of the target tool changed only what its declarations allow
  (``harness.effects``: a READ tool nothing; others only beneath their
  declared write paths, inside the write roots);
- no handler run reached the real disk (``FakeWorld.escapes()``: SQLite on a
  file, a process started, a real file opened for writing, a write beneath
  a read-only real directory; each refused, and a problem even when the
  handler swallowed the refusal).

Like replay, a cell grants the recorded approvals again (they follow the
hooks a fault gives ``make_runtime``, so a plan still blocks first) and
serves the recorded HTTP exchanges of external tools, each as often as
asked, with no network (``cell.http``).

A fault reports a broken oracle with ``cell.check(condition, message)``; the
cell passes when no check failed. ``run_cell`` never raises for what a tool
or the executor does: a fault's own crash is reported as a failed cell too.
"""

from __future__ import annotations

import json
import posixpath
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..audit import SQLiteAuditStore
from ..capabilities import Capabilities
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..harness.directory_world import DirectoryWorld
from ..harness.effects import changed_files, undeclared_changes
from ..harness.failing_store import FailingStore
from ..harness.known_secrets import MIN_SECRET_LENGTH
from ..harness.probes import (
    HandlerProbe,
    OutsideSnapshot,
    ThreadWatch,
    audit_row_problems,
    outside_changes,
)
from ..harness.session import recorded_hooks, secrets_redactor, session_runtime, with_secrets
from ..harness.world import DECOY_MARKER, FORBIDDEN_MARKER, OUTSIDE_DIR, FakeWorld
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..registry import ToolRegistry, ToolSpec
from ..replay.approvals import approval_hooks
from ..replay.http import HttpPlayback
from ..runtime import ToolRuntime
from .directory import Operations, WorldFiles, operation_paths
from .prefixes import SavedPrefix
from .target import Target

JOIN_SECONDS = 5.0
"""How long a cell waits for a handler that overran its deadline to end."""

THREAD_JOIN_SECONDS = 1.0
"""How long a cell waits, in all, for threads started during it (not by a
handler run: those are found without waiting) to end."""


@dataclass(frozen=True, slots=True)
class CleanRun:
    """The target's call run with nothing injected (``Cell.clean_run``)."""

    result: ToolResult
    tree: dict[str, bytes]
    """The workspace's files it left (``directories``: its directories)."""
    accesses: int
    """Paths its handler resolved (``harness.accesses``); in the directory
    world, its Python-level file operations (``directory.Operations``)."""
    growths: int
    """Times its handler grew a file (0 in the directory world: not seen)."""
    paths: tuple[tuple[str, ...], ...] = ()
    """Per operation, in order, the paths it named or reached (``operation_paths``)."""
    directories: frozenset[str] = frozenset()


class Cell:
    """What a fault works with: the target, the workspace as it was just
    before the target's call, and ways to call through the real executor.

    ``runtime`` is the session's runtime (the recorded capabilities, plan,
    variables and idempotency scope), over a copy of the registry whose
    target tool counts its handler's runs (``handler_calls``). Every
    runtime's store sits behind a ``FailingStore`` (``failing_store``)."""

    def __init__(
        self,
        fault_name: str,
        target: Target,
        registry: ToolRegistry,
        world: FakeWorld | DirectoryWorld,
        secrets: Mapping[str, str] | None,
        *,
        http: HttpPlayback | None = None,
        start: SavedPrefix | None = None,
    ) -> None:
        self.fault_name = fault_name
        """The fault's name: its calls' ids start with it."""
        self.target = target
        self.world = world
        self.files = WorldFiles(world, fault_name)
        """The world's files as the harness (not the handler) reaches them."""
        self.root = world.root
        self.outside_dir = posixpath.join(posixpath.dirname(self.root), OUTSIDE_DIR)
        """A directory beside the workspace holding decoy files."""
        self.secrets = secrets
        self.problems: list[str] = []
        self._probe: HandlerProbe | None = None
        self.http = http
        """Serves the recorded HTTP exchanges (None when the cassette calls
        no external tool); ``http.injected(...)`` changes what they answer."""
        self.registry = self._probing_registry(registry)
        if http is not None:
            self.registry = http.registry(self.registry)
        self.approvals = approval_hooks(target.cassette)
        """The hooks granting the recorded approvals; every runtime of the
        cell has them, after its other hooks."""
        self._runtimes: list[tuple[ToolRuntime, SQLiteAuditStore, FailingStore]] = []
        self._settled: set[int] = set()
        self._results: list[ToolResult] = []
        self.outside_before: OutsideSnapshot | None = None
        self._calls: list[tuple[SQLiteAuditStore, str]] = []
        self._unaudited: set[str] = set()
        self._serial = 0
        self.hooks: list[PreToolUse | PostToolUse]
        if start is None:
            self.hooks = recorded_hooks(target.cassette)
        else:
            self.hooks = [start.plan.copy()] if start.plan else []
        self._threads = ThreadWatch()
        self._flight_lock = threading.Lock()
        self._in_flight: set[int] = set()
        self._overlapped: set[int] = set()
        self._serial_flight = 0
        self._before: dict[str, bytes] | None = None
        self.runtime = self.make_runtime(audit=start.store.copy() if start else None)
        """The session's runtime."""

    # -- set-up

    @property
    def directory(self) -> bool:
        """Whether the cell runs in the directory world (real files)."""
        return self.files.directory

    @property
    def fs(self) -> Any:
        """The pyfakefs ``FakeFilesystem`` (``WorldFiles.fs``)."""
        return self.files.fs

    @property
    def operations(self) -> Operations | None:
        """The directory world's ``directory.Operations`` (``run.run_cell``'s); else None."""
        return self.files.operations

    def _probing_registry(self, registry: ToolRegistry) -> ToolRegistry:
        specs = []
        for spec in registry:
            if spec.name == self.target.call.tool_name:
                log = self.files.access_log
                self._probe = HandlerProbe(
                    spec.handler, log if hasattr(log, "opened") and hasattr(log, "closed") else None
                )
                self._probe.on_start = self._handler_starting
                spec = spec.with_handler(self._probe)
            specs.append(spec)
        return ToolRegistry(specs, world=registry.world)

    @property
    def handler_calls(self) -> int:
        """How often the target tool's handler has run for the fault's calls
        (the replayed interactions before it are not counted)."""
        return self._probe.calls if self._probe else 0

    @property
    def spec(self) -> ToolSpec | None:
        """The target tool as the runtime sees it now."""
        return self.registry.get(self.target.call.tool_name)

    def replace_handler(
        self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
    ) -> Callable[..., Any]:
        """Replace the target tool's handler with ``wrap(current_handler)``
        (still counted); returns the handler it replaced."""
        probe = self._probe
        if probe is None:
            raise LookupError(f"no tool {self.target.call.tool_name!r} in the registry")
        previous = probe.handler
        probe.handler = wrap(previous)
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
        isolation: Literal["inline", "thread"] = "thread",
    ) -> ToolRuntime:
        """A runtime of the recorded session over this cell's registry, with
        its own in-memory audit store (or ``audit``, which it then owns);
        the cell closes it and checks its rows. ``isolation``: as
        ``session_runtime``'s."""
        store = audit if audit is not None else SQLiteAuditStore(":memory:")
        switch = FailingStore(store)
        runtime = session_runtime(
            self.target.cassette,
            self.registry,
            switch,
            hooks=self.hooks if hooks is None else hooks,
            approvals=self.approvals,
            capabilities=capabilities,
            timeouts=timeouts,
            redactor=secrets_redactor(self.secrets),
            isolation=isolation,
        )
        self._runtimes.append((runtime, store, switch))
        return runtime

    def replay_before(self, first: int = 0) -> None:
        """Bring the session to the moment before the target's call:
        replay the interactions before it from ``first`` on (the cell
        started from the state saved before ``first``; no comparisons: the
        replay items do that)."""
        interactions = self.target.cassette.interactions
        for position in range(first, self.target.index):
            interaction = interactions[position]
            self._playing(position)
            self.runtime.execute(with_secrets(interaction.call, self.secrets))

    def saved(self) -> SavedPrefix:
        """The state ``replay_before`` left: the workspace, a copy of the
        session's store, a copy of the plan's progress."""
        plan = next((hook for hook in self.hooks if isinstance(hook, PlanProgress)), None)
        return SavedPrefix(
            self.world.save_workspace(),
            self.store_of(self.runtime).copy(),
            plan.copy() if plan else None,
        )

    def at_target(self) -> None:
        """From here on the target's call plays: the handler count starts
        at zero, HTTP is served as recorded with it."""
        self._playing(self.target.index)
        if self._probe is not None:
            self._probe.reset()
        reset = getattr(self.files.access_log, "reset", None)
        if reset is not None:
            reset()

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
        call_id = f"{self.fault_name}-{self._serial}"
        fields: dict[str, Any] = {"call_id": call_id}
        if call.idempotency_key:
            fields["idempotency_key"] = f"{call.idempotency_key}-{call_id}"
        fields.update(changes)
        if arguments is not None:
            fields["arguments"] = arguments
        return with_secrets(replace(call, **fields), self.secrets)

    def execute(
        self, call: ToolCall, runtime: ToolRuntime | None = None, *, judge_effects: bool = True
    ) -> ToolResult:
        """Run ``call`` through ``runtime`` (default: the session's) and keep
        it for the audit invariant."""
        runtime = runtime or self.runtime
        self._calls.append((self.store_of(runtime), call.call_id))
        token = self._entering()
        self._before = None  # taken as the handler starts (a refused call costs nothing)
        try:
            result = runtime.execute(call)
        finally:
            alone = self._leaving(token)
        self._results.append(result)
        # Calls made at once (duplicate_submission's burst) see each other's
        # temporary files: only a call that ran alone is judged.
        before = self._before
        if judge_effects and alone and before is not None:
            self._check_declared(call, runtime, before)
        return result

    def _handler_starting(self) -> None:
        if self._before is None:
            self._before = self.tree()

    def _entering(self) -> int:
        with self._flight_lock:
            self._serial_flight += 1
            token = self._serial_flight
            if self._in_flight:
                self._overlapped.update(self._in_flight, {token})
            self._in_flight.add(token)
            return token

    def _leaving(self, token: int) -> bool:
        with self._flight_lock:
            self._in_flight.discard(token)
            overlapped = token in self._overlapped
            self._overlapped.discard(token)
            return not overlapped

    def _check_declared(
        self, call: ToolCall, runtime: ToolRuntime, before: Mapping[str, bytes]
    ) -> None:
        """The call changed only what its tool's declarations allow."""
        spec = self.registry.get(call.tool_name)
        if spec is None:
            return
        changed = changed_files(before, self.tree())
        for problem in undeclared_changes(
            spec,
            call.arguments,
            runtime.variables,
            runtime.capabilities.write_roots,
            changed,
            self.world.resolve_inside,
        ):
            self.problems.append(f"{call.call_id}: {problem}")

    def handler_outputs(self) -> list[Any]:
        """What the target's handler returned, run by run (before the
        runtime judged or cut it)."""
        return list(self._probe.current.outputs) if self._probe else []

    def audit_rows(self) -> list[Any]:
        """Every audit row of every runtime this cell made, so far."""
        return [row for _runtime, store, _switch in self._runtimes for row in store.rows()]

    def store_of(self, runtime: ToolRuntime) -> SQLiteAuditStore:
        """The audit store of a runtime this cell made."""
        return next(store for made, store, _switch in self._runtimes if made is runtime)

    def failing_store(self, runtime: ToolRuntime | None = None) -> FailingStore:
        """The ``FailingStore`` in front of a runtime's store (default: the
        session's): ``with cell.failing_store().failing("start"): ...``."""
        runtime = runtime or self.runtime
        return next(switch for made, _store, switch in self._runtimes if made is runtime)

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
        with self.files.quiet():  # the harness's look, never counted as the handler's
            self.outside_before = self.world.outside()

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
        """Every regular file under the workspace, by relative path, read
        as the harness (``WorldFiles.tree``: a file the cassette's
        ``volatile`` names counts for being there, not for its bytes)."""
        return self.files.tree(self.target.cassette.volatile)

    def clean_run(self, arguments: Any = None) -> CleanRun:
        """The target's call (with ``arguments`` when given) once with
        nothing injected, through a runtime of its own (no plan), then the
        workspace put back as it was: what it answered and left, its
        handler's operations and growths (what a fault's OK must leave)."""
        saved = self.world.save_workspace()
        log = self.files.access_log if not self.directory else self.operations
        accesses = getattr(log, "count", 0)
        growths = getattr(log, "growths", 0)
        result = self.execute(self.call(arguments), self.make_runtime(hooks=[]))
        count = getattr(log, "count", 0)
        clean = CleanRun(
            result,
            self.tree(),
            count - accesses,
            getattr(log, "growths", 0) - growths,
            operation_paths(log, accesses, count),
            self.files.directories(),
        )
        self.world.restore_workspace(saved)
        return clean

    def check_complete(self, clean: CleanRun, why: str) -> None:
        """The workspace holds what ``clean`` left."""
        after = self.tree()
        differ = sorted(
            path for path in set(clean.tree) | set(after) if clean.tree.get(path) != after.get(path)
        )
        self.check(
            not differ,
            f"{why}, but the files differ from a run with nothing injected: "
            + ", ".join(differ[:5]),
        )

    def check_old_or_new(self, before: Mapping[str, bytes], clean: CleanRun, why: str) -> None:
        """Every file holds its content from ``before`` or from ``clean``:
        none torn or doubled, no other file (a temporary one) left."""
        after = self.tree()
        bad = sorted(
            path
            for path in set(before) | set(clean.tree) | set(after)
            if after.get(path) not in (before.get(path), clean.tree.get(path))
        )
        self.check(
            not bad,
            f"{why}: files neither old nor new (torn, doubled or left behind): "
            + ", ".join(bad[:5]),
        )

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

    def finish(self) -> None:
        """Close every runtime (waiting for late handlers) and check the
        shared invariants but the outside one (``check_outside``)."""
        for runtime, _store, _switch in self._runtimes:
            self.settle(runtime)
        if self.http is not None:
            self.http.close()
        # After the runtimes are closed their own workers have ended: a
        # thread still alive was started by a handler.
        left_by_handler = self._probe.leftover_threads() if self._probe else []
        self.check(
            not left_by_handler,
            f"the handler answered with threads it started still running: "
            f"{', '.join(left_by_handler)}",
        )
        left = self._threads.leftover(THREAD_JOIN_SECONDS)
        self.check(not left, f"threads started during the cell still running: {', '.join(left)}")
        self._check_accesses()
        escapes = getattr(self.world, "escapes", None)
        for escape in escapes() if escapes is not None else ():
            self.problems.append(f"the handler reached the real disk: {escape.message}")
        needles = self._needles()
        for result in self._results:
            shown = json.dumps([result.data, result.message], default=str)
            for needle, what in needles:
                self.check(needle not in shown, f"{result.call_id}: the result holds {what}")
        for store in {id(store): store for _runtime, store, _switch in self._runtimes}.values():
            calls = [call_id for call_store, call_id in self._calls if call_store is store]
            for problem in audit_row_problems(store.rows(), calls, may_lack_row=self._unaudited):
                self.problems.append(problem)
            stored = store.serialize()
            for needle, what in needles:
                self.check(needle.encode() not in stored, f"the audit database holds {what}")
            store.close()

    def _needles(self) -> list[tuple[str, str]]:
        """What no result, message or audit row may hold, and what it is."""
        needles = [
            (DECOY_MARKER, "a file from outside the workspace"),
            (FORBIDDEN_MARKER, "a forbidden .env file's content"),
        ]
        for keyword, value in (self.secrets or {}).items():
            if len(value) >= MIN_SECRET_LENGTH:
                needles.append((value, f"the real value of the secret {keyword!r}"))
        return needles

    def _check_accesses(self) -> None:
        """No handler run resolved a path outside the workspace (when an
        oracle of accesses observes the world: otherwise nothing is said)."""
        if self.operations is not None and isinstance(self.world, DirectoryWorld):
            self.problems += self.operations.look_problems(self.root, self.world.around)
        outside_of = getattr(self.files.access_log, "outside", None)
        if outside_of is None:
            return
        outside = outside_of(self.root)
        paths = sorted({access.path for access in outside})
        self.check(
            not paths,
            "the handler accessed outside the workspace: "
            + ", ".join(paths[:5])
            + (f" and {len(paths) - 5} more" if len(paths) > 5 else ""),
        )

    def check_outside(self) -> None:
        """Nothing outside the workspace changed since ``outside_planted``."""
        if (before := self.outside_before) is not None:
            with self.files.quiet():
                changes = outside_changes(before, self.world.outside()).paths
            self.check(not changes, f"outside the workspace changed: {', '.join(changes[:5])}")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
