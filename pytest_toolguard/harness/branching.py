"""A recorded session walked call by call, with branches off it before a call.

``SessionWalk(cassette, registry)`` is a context manager: the cassette's
world (``world.FakeWorld``: fake filesystem, frozen clock) and the session's
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

The world is chosen as replay chooses it (``world``: ``auto``, the
directory world when a tool the cassette calls declares
``world="directory"``; or ``fake``; or ``directory``). In a
``directory_world.DirectoryWorld`` the calls are sent with the recorded
root spelt as the world's (``RootMap``), and what a ``Branch`` holds
(result, data, audit row, changed files) is spelt back as recorded, so
both worlds give the same ``Branch`` for the same tool. ``Branch.escapes``
says what the call reached beyond its world: in the fake world the real
disk (``FakeWorld.escapes()``, refused), in the directory world any entry of
the world's own tree outside the workspace created, changed or removed,
which is then put back (kinds, modes, bytes, link targets), so the next
branch and call start from the world as built.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ..audit import AuditRecord, SQLiteAuditStore
from ..contract import ToolCall, ToolResult
from ..plan import PlanProgress
from ..redaction import Redactor
from ..registry import ToolRegistry, WorldKind, checked_world
from ..replay.approvals import approval_hooks
from ..replay.cassette import Cassette, Interaction
from ..replay.http import HttpPlayback
from ..replay.root_map import RootMap
from ..runtime import ToolRuntime
from .clock import frozen_clock
from .directory_world import DirectoryWorld, make_removable
from .fake_filesystem import FakeFilesystems
from .probes import OutsideChanges, OutsideSnapshot, outside_changes
from .session import secrets_redactor, session_runtime, with_secrets
from .world import FakeWorld, WorkspaceEntry

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
    escapes: tuple[str, ...] = ()
    """What the call reached beyond its world, one line each (see the
    module docstring): such a call's answer is not the tool's alone."""


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
        fake_filesystems: FakeFilesystems | None = None,
        world: str = "auto",
    ) -> None:
        self.cassette = cassette
        self.registry = registry
        self.kind: WorldKind = walked_world(cassette, registry, world)
        """The world the walk runs in (``fake`` or ``directory``)."""
        self.redactor = redactor or secrets_redactor(secrets) or Redactor()
        self.secrets = secrets
        self.index = 0
        """The recorded call ``step()`` sends next."""
        self._fake_filesystems = fake_filesystems
        self._stack = ExitStack()
        self._world: FakeWorld | DirectoryWorld | None = None
        self._map: RootMap | None = None
        self._in_world = cassette
        """The cassette as the world spells it (its root, the calls' arguments)."""
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
            if self.kind == "directory":
                fake_filesystems = self._fake_filesystems
                real_paths = fake_filesystems.real_paths if fake_filesystems is not None else None
                place = stack.enter_context(DirectoryWorld.of(self.cassette, real_paths=real_paths))
                self._world, self._map = place, place.root_map
                self._in_world = replace(
                    self.cassette,
                    workspace=replace(self.cassette.workspace, root=place.root),
                    interactions=tuple(self._spelt(i) for i in self.cassette.interactions),
                )
            else:
                self._world = stack.enter_context(
                    FakeWorld.of(self.cassette, fake_filesystems=self._fake_filesystems)
                )
            self._runtime = self._make_runtime(self._store, self._plan, ())
            runtime = self._runtime
            stack.callback(lambda: runtime.close(join_timeout=JOIN_SECONDS))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._runtime = None
        self._world = None
        self._map = None
        self._in_world = self.cassette
        self._stack.close()

    @property
    def world(self) -> FakeWorld | DirectoryWorld:
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
        call = self._in_world.interactions[self.index].call
        self.index += 1
        return self._recorded_result(self._runtime.execute(with_secrets(call, self.secrets)))

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
        outside = world.outside() if isinstance(world, DirectoryWorld) else None
        escaped = len(world.escapes())
        try:
            for path, data in (files or {}).items():
                self._write(path, data)
            before = world.save_workspace() if files else saved
            store = self._store.copy()
            runtime = self._make_runtime(
                store,
                self._plan.copy() if self._plan else None,
                [self._spelt(interaction) for interaction in approved],
                timeouts,
            )
            stored: list[Any] = []
            touched: list[str] = []
            runtime.add_listener(lambda _call, _result, data, _approval: stored.append(data))
            runtime.watch_files(lambda _call_id, paths: touched.extend(paths))
            if self._http is not None:
                self._http.current = self.index
            sent = self._spelt_call(call)
            try:
                with _moment(frozen_at), _seeded(seed):
                    result = runtime.execute(with_secrets(sent, self.secrets))
            finally:
                problems = tuple(runtime.close(join_timeout=JOIN_SECONDS))
            rows = [row for row in store.rows() if row.call_id == sent.call_id]
            store.close()
            after = world.save_workspace()
            escapes = self._escapes(escaped, outside)
        except BaseException:
            world.restore_workspace(saved)
            raise
        if after != saved:  # most branches only read: nothing to put back
            _put_back(world, saved, after)
        old, new = _regular_files(before), _regular_files(after)
        changed: dict[str, bytes | None] = {
            path: self._recorded_bytes(data) for path, data in new.items() if old.get(path) != data
        }
        changed.update({path: None for path in old if path not in new})
        kept = stored[-1] if stored else None
        return Branch(
            result=self._recorded_result(result),
            stored_data=self._map.to_recorded(kept) if self._map is not None else kept,
            audit_row=self._recorded_row(rows[-1]) if rows else None,
            touched=tuple(touched),
            changed=dict(sorted(changed.items())),
            problems=problems,
            escapes=escapes,
        )

    # -- the directory world's spelling ---------------------------------------------

    def _spelt(self, interaction: Interaction) -> Interaction:
        """``interaction`` with its call spelt as the world spells it."""
        return replace(interaction, call=self._spelt_call(interaction.call))

    def _spelt_call(self, call: ToolCall) -> ToolCall:
        if self._map is None:
            return call
        return replace(call, arguments=self._map.to_world(call.arguments))

    def _recorded_result(self, result: ToolResult) -> ToolResult:
        if self._map is None:
            return result
        return replace(
            result,
            message=self._map.to_recorded(result.message),
            data=self._map.to_recorded(result.data),
        )

    def _recorded_row(self, row: AuditRecord) -> AuditRecord:
        return row if self._map is None else row_as_recorded(self._map, row)

    def _recorded_bytes(self, data: bytes) -> bytes:
        """A changed file's bytes spelt as recorded (text files only)."""
        if self._map is None or not _is_text(data):
            return data
        mapped: bytes = self._map.to_recorded(data)
        return mapped

    def _write(self, relative: str, data: bytes) -> None:
        """``data`` written over the workspace file ``relative``."""
        world = self.world
        full = f"{world.root}/{relative}"
        if isinstance(world, FakeWorld):
            if world.fs.exists(full):
                world.fs.remove_object(full)
            world.fs.create_file(full, contents=data)
            return
        assert self._map is not None
        if world.resolve_inside(relative) is None:
            raise ValueError(f"workspace file {relative!r} is not inside the workspace")
        if os.path.lexists(full):
            os.unlink(full)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "xb") as handle:
            handle.write(self._map.to_world(data) if _is_text(data) else data)

    def _escapes(self, seen: int, outside: OutsideSnapshot | None) -> tuple[str, ...]:
        """What the branch's call reached beyond its world since ``seen``
        escapes (the fake world) or the ``outside`` snapshot (the directory
        world)."""
        world = self.world
        if isinstance(world, FakeWorld):
            return tuple(escape.message for escape in world.escapes()[seen:])
        if outside is None:
            return ()
        changes = outside_changes(outside, world.outside())
        if changes:
            _put_back_outside(world, outside, changes)
        return tuple(escape.message for escape in world.escapes()[seen:]) + tuple(
            f"{verb} {world.recorded_path(path)} outside the workspace"
            for verb, paths in (
                ("created", changes.created),
                ("removed", changes.removed),
                ("changed", changes.modified),
            )
            for path in paths
        )

    def _make_runtime(
        self,
        store: SQLiteAuditStore,
        plan: PlanProgress | None,
        approved: Sequence[Interaction],
        timeouts: Mapping[str, float] | None = None,
    ) -> ToolRuntime:
        approvals = approval_hooks([*self._in_world.interactions, *approved], self.redactor)
        return session_runtime(
            self._in_world,
            self.registry,
            store,
            redactor=self.redactor,
            hooks=[plan] if plan is not None else [],
            approvals=approvals,
            timeouts=timeouts,
            http=self._http,
        )


def walked_world(cassette: Cassette, registry: ToolRegistry, world: str = "auto") -> WorldKind:
    """The world ``cassette`` is walked (and replayed) in: ``world`` when it
    is ``fake`` or ``directory``; for ``auto``, the directory world when a
    tool its calls name runs in it (``ToolRegistry.world_for``).
    ``ValueError`` for any other ``world``."""
    if world == "auto":
        return registry.world_for(item.call.tool_name for item in cassette.interactions)
    return checked_world(world, "world")


def row_as_recorded(mapping: RootMap, row: AuditRecord) -> AuditRecord:
    """``row`` with its text fields spelt as the recording spelt the root."""
    return replace(
        row,
        **{
            name: mapping.to_recorded(getattr(row, name))
            for name in _ROW_TEXT
            if isinstance(getattr(row, name), str)
        },
    )


_ROW_TEXT = ("call_id", "arguments_json", "rule", "reason", "result_preview", "error_message")


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _put_back(
    world: FakeWorld | DirectoryWorld,
    saved: tuple[WorkspaceEntry, ...],
    now: tuple[WorkspaceEntry, ...],
) -> None:
    """Make the workspace hold ``saved`` again: only the regular files that
    differ when nothing else changed (the usual case, in the fake world),
    else every entry."""
    if isinstance(world, DirectoryWorld):
        world.restore_workspace(saved)
        return
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


def _put_back_outside(
    world: DirectoryWorld, saved: OutsideSnapshot, changes: OutsideChanges
) -> None:
    """Make the world's tree outside the workspace hold ``saved`` again
    (a branch wrote there): what was created removed, deepest first; what
    was changed or removed written back, parents first. Inode numbers and
    times are new; kinds, modes, bytes and link targets are as saved."""
    for path in sorted(changes.created, key=lambda p: -p.count("/")):
        if os.path.isdir(path) and not os.path.islink(path):
            make_removable(path)
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    for path in sorted((*changes.modified, *changes.removed), key=lambda p: p.count("/")):
        entry = saved[path]
        if entry[0] != "directory" and os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                make_removable(path)
                shutil.rmtree(path)
            else:
                os.unlink(path)
        if entry[0] == "directory":
            os.makedirs(path, exist_ok=True)
            os.chmod(path, stat.S_IMODE(entry[1]))
        elif entry[0] == "symlink":
            os.symlink(os.fsdecode(entry[1]), path)
        elif entry[0] == "file":
            with open(path, "xb") as handle:
                handle.write(entry[-1] or b"")
            os.chmod(path, stat.S_IMODE(entry[1]))


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
