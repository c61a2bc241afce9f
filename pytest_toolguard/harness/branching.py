"""A recorded session walked call by call, with branches off it before a call.

``SessionWalk(cassette, registry)`` is a context manager: the cassette's
world (``world.World``: fake filesystem, frozen clock) and the session's
runtime (``session.session_runtime``: its plan, its approvals, its HTTP
exchanges served). ``step()`` sends the next recorded call. Before any call,
``branch(call, files=...)`` runs another call from the state the session had
just then: a copy of the audit store and of the plan's progress, the
workspace as it was with ``files`` written over it. Afterwards the workspace
is put back, so the session goes on as recorded. What the branch did comes
back as a ``Branch``: its result, its data as the runtime stored it, its
audit row, the workspace paths its handler asked about, and the files it
created, changed or removed.

Amplification records variants with it and replay replays them, so both
see the same state before each call. Not put back after a branch: anything
outside the workspace, and the runtime's rollback journal (a branch has its
own runtime).
"""

from __future__ import annotations

import random
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..audit import AuditRecord, SQLiteAuditStore
from ..contract import ToolCall, ToolResult
from ..plan import PlanProgress
from ..redaction import Redactor
from ..registry import ToolRegistry
from ..replay.approvals import approval_hooks
from ..replay.cassette import Cassette, Interaction
from ..replay.http import HttpPlayback
from ..runtime import ToolRuntime
from .clock import frozen_clock
from .fake_filesystem import FakeWorld
from .session import secrets_redactor, session_runtime, with_secrets
from .world import WorkspaceEntry, World

JOIN_SECONDS = 5.0
"""How long a branch waits for a handler that overran its deadline."""


@dataclass(frozen=True, slots=True)
class Branch:
    """What one branch's call did."""

    result: ToolResult
    stored_data: Any
    """The result's data as the runtime stores it (redacted, then cut)."""
    audit_row: AuditRecord | None
    touched: tuple[str, ...]
    """Workspace paths the handler asked about, as it spelt them."""
    changed: Mapping[str, bytes | None] = field(default_factory=dict)
    """Files under the workspace the call created or changed (their bytes
    after it) or removed (None), by relative path."""
    problems: tuple[str, ...] = ()
    """Handlers still running once the branch ended."""


class SessionWalk:
    """The recorded session, call by call, with branches (see the module
    docstring). ``HttpUnavailable`` on entry when the cassette holds HTTP
    exchanges and vcrpy is missing."""

    def __init__(
        self,
        cassette: Cassette,
        registry: ToolRegistry,
        *,
        redactor: Redactor | None = None,
        secrets: Mapping[str, str] | None = None,
        fake_world: FakeWorld | None = None,
    ) -> None:
        self.cassette = cassette
        self.registry = registry
        self.redactor = redactor or secrets_redactor(secrets) or Redactor()
        self.secrets = secrets
        self.index = 0
        """The recorded call ``step()`` sends next."""
        self._fake_world = fake_world
        self._stack = ExitStack()
        self._world: World | None = None
        self._http: HttpPlayback | None = None
        self._store = SQLiteAuditStore(":memory:")
        plan = cassette.session.plan
        self._plan = PlanProgress(plan) if plan else None
        self._runtime: ToolRuntime | None = None

    def __enter__(self) -> SessionWalk:
        with ExitStack() as stack:
            # Before the fake world: it imports vcrpy.
            self._http = HttpPlayback.for_cassette(self.cassette, self.registry, self.redactor)
            if self._http is not None:
                stack.callback(self._http.close)
            stack.callback(self._store.close)
            self._world = stack.enter_context(World.of(self.cassette, fake_world=self._fake_world))
            self._runtime = self._make_runtime(self._store, self._plan, ())
            runtime = self._runtime
            stack.callback(lambda: runtime.close(join_timeout=JOIN_SECONDS))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._runtime = None
        self._world = None
        self._stack.close()

    @property
    def world(self) -> World:
        """The running world; ``RuntimeError`` outside the ``with`` block."""
        if self._world is None:
            raise RuntimeError("the walk is not running: use it inside its with block")
        return self._world

    @property
    def interaction(self) -> Interaction | None:
        """The recorded interaction ``step()`` sends next (None past the last)."""
        interactions = self.cassette.interactions
        return interactions[self.index] if self.index < len(interactions) else None

    def step(self) -> ToolResult:
        """Send the next recorded call through the session's runtime."""
        interaction = self.interaction
        if interaction is None or self._runtime is None:
            raise RuntimeError("no recorded call left to send (or the walk is not running)")
        if self._http is not None:
            self._http.current = self.index
        self.index += 1
        return self._runtime.execute(with_secrets(interaction.call, self.secrets))

    def branch(
        self,
        call: ToolCall,
        *,
        files: Mapping[str, bytes] | None = None,
        approved: Sequence[Interaction] = (),
        frozen_at: str | None = None,
        seed: int | None = None,
        timeouts: Mapping[str, float] | None = None,
    ) -> Branch:
        """Run ``call`` from the state before the next recorded call (see
        the module docstring). ``approved``: interactions whose recorded
        approvals the branch's runtime grants too (a variant of an approved
        call); ``frozen_at``: another frozen time for this call; ``seed``:
        ``random.seed`` before it; ``timeouts``: deadlines over the
        recorded ones. Never raises for what the call does."""
        world = self.world
        saved = world.save_workspace()
        try:
            for path, data in (files or {}).items():
                full = f"{world.root}/{path}"
                if world.fs.exists(full):
                    world.fs.remove_object(full)
                world.fs.create_file(full, contents=data)
            before = world.save_workspace() if files else saved
            store = self._store.copy()
            runtime = self._make_runtime(
                store, self._plan.copy() if self._plan else None, approved, timeouts
            )
            stored: list[Any] = []
            touched: list[str] = []
            runtime.add_listener(lambda _call, _result, data, _approval: stored.append(data))
            runtime.watch_files(lambda _call_id, paths: touched.extend(paths))
            if self._http is not None:
                self._http.current = self.index
            try:
                with _moment(frozen_at), _seeded(seed):
                    result = runtime.execute(with_secrets(call, self.secrets))
            finally:
                problems = tuple(runtime.close(join_timeout=JOIN_SECONDS))
            rows = [row for row in store.rows() if row.call_id == call.call_id]
            store.close()
            after = world.save_workspace()
        except BaseException:
            world.restore_workspace(saved)
            raise
        if after != saved:  # most branches only read: nothing to put back
            _put_back(world, saved, after)
        old, new = _regular_files(before), _regular_files(after)
        changed: dict[str, bytes | None] = {
            path: data for path, data in new.items() if old.get(path) != data
        }
        changed.update({path: None for path in old if path not in new})
        return Branch(
            result=result,
            stored_data=stored[-1] if stored else None,
            audit_row=rows[-1] if rows else None,
            touched=tuple(touched),
            changed=dict(sorted(changed.items())),
            problems=problems,
        )

    def _make_runtime(
        self,
        store: SQLiteAuditStore,
        plan: PlanProgress | None,
        approved: Sequence[Interaction],
        timeouts: Mapping[str, float] | None = None,
    ) -> ToolRuntime:
        approvals = approval_hooks([*self.cassette.interactions, *approved], self.redactor)
        return session_runtime(
            self.cassette,
            self.registry,
            store,
            redactor=self.redactor,
            hooks=[plan] if plan is not None else [],
            approvals=approvals,
            timeouts=timeouts,
            http=self._http,
        )


def _put_back(
    world: World, saved: tuple[WorkspaceEntry, ...], now: tuple[WorkspaceEntry, ...]
) -> None:
    """Make the workspace hold ``saved`` again: only the regular files that
    differ when nothing else changed (the usual case), else every entry."""
    others_then = [(path, mode) for path, mode, _ in saved if not stat.S_ISREG(mode)]
    others_now = [(path, mode) for path, mode, _ in now if not stat.S_ISREG(mode)]
    if others_then != others_now:
        world.restore_workspace(saved)
        return
    then = {path: (mode, data) for path, mode, data in saved if stat.S_ISREG(mode)}
    current = {path: (mode, data) for path, mode, data in now if stat.S_ISREG(mode)}
    for path in sorted(set(then) | set(current)):
        if then.get(path) == current.get(path):
            continue
        full = f"{world.root}/{path}"
        if path in current:
            world.fs.remove_object(full)
        if path in then:
            mode, data = then[path]
            world.fs.create_file(full, st_mode=mode, contents=data)


def _regular_files(entries: tuple[WorkspaceEntry, ...]) -> dict[str, bytes]:
    return {path: data for path, mode, data in entries if stat.S_ISREG(mode)}


@contextmanager
def _moment(frozen_at: str | None) -> Iterator[None]:
    if frozen_at is None:
        yield
        return
    with frozen_clock(frozen_at):
        yield


@contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    """``random`` seeded for the block, then put back as it was."""
    if seed is None:
        yield
        return
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
