"""A cassette bound to one test: recorded as the test runs, or played back
call by call. The pytest ``toolguard`` fixture is a thin shell over this.

**Recording** (``RecordingTape``): the test gets a real ``ToolRuntime`` on a
real workspace. Recording starts at the first ``execute`` (so files the test
writes into ``runtime.workspace.root`` beforehand are part of the recorded
starting state) and the cassette is written only when asked, after the test
passed. The workspace root is written as ``STABLE_ROOT`` (a test's real
root is a fresh temporary directory), and a cassette whose only change is
its ``recorded_at`` is left untouched: re-recording an unchanged session
keeps the file byte for byte.

**Playback** (``PlaybackTape``): the test gets a runtime inside the
cassette's world, as ``replay()`` builds it: a pyfakefs filesystem at the
recorded root, the clock frozen at the recorded time, the recorded session,
an in-memory audit store. While the tape plays, the *whole test* runs in
that world (pyfakefs patches the process): write setup files under
``runtime.workspace.root``, never under ``tmp_path``. A cassette whose
tools declare ``world="directory"`` (or a tape given ``world="directory"``,
the marker's ``world=``) plays in a ``harness.DirectoryWorld`` instead: a
fresh real directory, ``runtime.workspace.root`` the world's own root; the
test's calls are matched, and results, rows and files compared, with that
root spelt as the recorded one (``RootMap``); every entry of the world's
tree outside the workspace created, changed or removed is a difference.

*The test owns its set-up* in every record mode: playback starts from an
empty workspace (the root directory and nothing in it), so the same set-up
code (``(root / "src").mkdir()``) runs unchanged whether the test records or
plays back. At the first call, what the set-up made is checked against the
starting state the cassette recorded: every recorded file (same content,
compared redacted), link and directory must be there; files the recording
never touched may differ. A standalone ``--toolguard-replay`` of the same
cassette starts from the recorded state instead, since no test runs.
Each call the test makes must match the cassette's next interaction
(``matching``); a call that does not raises ``CallNotInCassette`` naming the
closest recorded call and the differing fields, and is not executed. A call
that matches runs through the real executor and its result is compared as
``replay()`` compares it. ``finish()`` then compares the audit rows and the
files, and lists every interaction the test never replayed.

The marker's ``hooks`` run while recording only. In playback the recorded
plan runs again, and the recorded approvals stand in for the hooks that gave
them (``approvals``); the HTTP exchanges of external tools are served from
the cassette, with no network (``http``).

Not supported by the tape: a custom redactor, subprocess isolation (pyfakefs
lives in this process). Use ``record_session`` and ``replay`` directly for
those.
"""

from __future__ import annotations

import functools
import os
import posixpath
import threading
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..audit import AuditRecord, AuditStore, SQLiteAuditStore
from ..capabilities import Capabilities
from ..contract import ToolCall, ToolResult
from ..harness.branching import row_as_recorded, walked_world
from ..harness.directory_world import DirectoryWorld, mapped_files
from ..harness.fake_filesystem import FakeFilesystems
from ..harness.files import read_tree
from ..harness.known_secrets import KnownSecrets
from ..harness.probes import OutsideSnapshot
from ..harness.session import secrets_redactor, session_runtime
from ..harness.world import FakeWorld
from ..hooks import PostToolUse, PreToolUse
from ..redaction import Redactor
from ..registry import ToolRegistry, WorldKind, checked_world
from ..runtime import ToolRuntime
from .cassette import (
    Cassette,
    CassetteError,
    capabilities_dict,
    dump,
    dumps,
    load,
)
from .checks import Difference, ReplayChecks, ReplayReport, describe_content
from .matching import call_differences, closest
from .naming import explicit_cassette_name
from .player import ORPHAN_JOIN_SECONDS, outside_differences
from .record_mode import RecordMode, parse
from .recorder import Recorder
from .redacting import redact_file, redact_path
from .report import CallNotInCassette, format_call_mismatch
from .root_map import RootMap

STABLE_ROOT = "/workspace"
"""The workspace root written in cassettes recorded by a test."""

MARKER_ARGUMENTS = (
    "cassette",
    "capabilities",
    "volatile",
    "record_mode",
    "variables",
    "hooks",
    "world",
)


@dataclass(frozen=True, slots=True)
class TapeOptions:
    """What ``@pytest.mark.toolguard(...)`` says about a test's cassette."""

    cassette: str | None = None
    """Its path relative to the cassette directory (``.yaml`` added)."""
    capabilities: Capabilities | None = None
    volatile: tuple[str, ...] = ()
    record_mode: RecordMode | None = None
    variables: Mapping[str, str] = field(default_factory=dict)
    hooks: tuple[PreToolUse | PostToolUse, ...] = ()
    """The runtime's hooks while recording (an ``Approver``, a plan);
    playback runs the recorded plan and approvals instead."""
    world: WorldKind | None = None
    """The world this test's cassette plays back in (``fake`` or
    ``directory``); None: as the run says (``--toolguard-world``, the ini's
    ``toolguard_world``, else the tools' own)."""


def tape_options(args: Sequence[Any], kwargs: Mapping[str, Any]) -> TapeOptions:
    """Validated marker arguments. ``ValueError`` naming the first unknown
    or ill-typed argument, and the ones that exist."""
    known = ", ".join(MARKER_ARGUMENTS)
    if args:
        raise ValueError(f"takes keyword arguments only ({known}), got {args!r}")
    unknown = sorted(set(kwargs) - set(MARKER_ARGUMENTS))
    if unknown:
        raise ValueError(f"unknown argument {unknown[0]!r}; known arguments: {known}")
    cassette = kwargs.get("cassette")
    if cassette is not None:
        if not isinstance(cassette, str):
            raise ValueError(f"cassette= must be a str, got {type(cassette).__name__}")
        explicit_cassette_name(cassette)
    volatile = kwargs.get("volatile", ())
    if not isinstance(volatile, (list, tuple)) or not all(isinstance(v, str) for v in volatile):
        raise ValueError("volatile= must be a list of field paths such as 'data.elapsed'")
    variables = kwargs.get("variables", {})
    if not isinstance(variables, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in variables.items()
    ):
        raise ValueError("variables= must be a mapping of str to str")
    hooks = kwargs.get("hooks", ())
    if not isinstance(hooks, (list, tuple)) or not all(
        isinstance(hook, (PreToolUse, PostToolUse)) for hook in hooks
    ):
        raise ValueError(
            "hooks= must be a list of PreToolUse/PostToolUse hooks such as Approver(...)"
        )
    mode = kwargs.get("record_mode")
    world = kwargs.get("world")
    return TapeOptions(
        cassette=cassette,
        capabilities=_capabilities(kwargs.get("capabilities")),
        volatile=tuple(volatile),
        record_mode=None if mode is None else parse(str(mode), "record_mode="),
        variables=dict(variables),
        hooks=tuple(hooks),
        world=None if world is None else checked_world(world, "world"),
    )


def _capabilities(value: Any) -> Capabilities | None:
    if value is None or isinstance(value, Capabilities):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            "capabilities= must be a Capabilities or a mapping like a cassette's "
            f"session.capabilities, got {type(value).__name__}"
        )
    try:
        return Capabilities(**value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"capabilities=: {exc}") from None


# -- recording ----------------------------------------------------------------


class RecordingRuntime(ToolRuntime):
    """The runtime a recording tape gives its test: a ``ToolRuntime`` whose
    first ``execute`` (or ``aexecute``) starts the recording, so files the
    test writes under ``workspace.root`` beforehand are the recorded
    starting state."""

    def __init__(self, tape: RecordingTape, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tape = tape

    def execute(self, call: ToolCall) -> ToolResult:
        self._tape.start()
        return super().execute(call)

    async def aexecute(self, call: ToolCall) -> ToolResult:
        self._tape.start()
        return await super().aexecute(call)


class RecordingTape:
    """Records a test's session from its first call on. ``runtime`` is the
    ``RecordingRuntime`` the test gets (a real runtime on a real
    workspace at ``root``); ``write(path)`` writes what it recorded."""

    def __init__(
        self,
        registry: ToolRegistry,
        root: str,
        audit: AuditStore,
        *,
        name: str,
        recorded_by: str | None = None,
        capabilities: Capabilities | None = None,
        variables: Mapping[str, str] | None = None,
        hooks: Sequence[PreToolUse | PostToolUse] = (),
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        """``secrets`` (``toolguard_secrets``) are redacted as any secret
        is, so the cassette holds their placeholders and playback, which
        redacts them too, matches."""
        self.runtime = RecordingRuntime(
            self,
            registry,
            root,
            capabilities,
            audit,
            variables=variables,
            hooks=hooks,
            redactor=secrets_redactor(secrets),
        )
        self.recorder = Recorder(self.runtime, name=name, recorded_by=recorded_by)
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start recording (once): snapshot the workspace, then watch every call."""
        with self._lock:
            if not self._started:
                self.recorder.start()
                self._started = True

    def cassette(self) -> Cassette:
        """Stop recording; the cassette of what was recorded, with the
        workspace root written as ``STABLE_ROOT``."""
        self.start()  # a test that made no call records an empty session
        self.recorder.stop()
        cassette = self.recorder.cassette()
        return replace(cassette, workspace=replace(cassette.workspace, root=STABLE_ROOT))

    def write(self, path: str | Path) -> bool:
        """Write the cassette at ``path`` atomically; False (and the file
        untouched) when it already says the same apart from ``recorded_at``."""
        return write_if_changed(self.cassette(), path)


def write_if_changed(cassette: Cassette, path: str | Path) -> bool:
    """``dump`` unless the file at ``path`` holds the same cassette apart
    from its ``recorded_at``. True when written."""
    target = Path(path)
    if target.is_file():
        try:
            old = load(target)
            same = dumps(replace(cassette, recorded_at=old.recorded_at)) == target.read_text(
                encoding="utf-8"
            )
        except (CassetteError, OSError):
            same = False
        if same:
            return False
    dump(cassette, target)
    return True


# -- playback -----------------------------------------------------------------


class PlaybackTape:
    """Plays a cassette back to a test, call by call. ``start()`` enters
    the cassette's world and returns the runtime; ``finish()`` leaves it and
    returns the report of every difference (``ok`` when none)."""

    def __init__(
        self,
        cassette: Cassette,
        registry: ToolRegistry,
        *,
        cassette_path: str,
        rerecord: str,
        volatile: Sequence[str] = (),
        capabilities: Capabilities | None = None,
        variables: Mapping[str, str] | None = None,
        fake_filesystems: FakeFilesystems | None = None,
        secrets: Mapping[str, str] | None = None,
        world: str = "auto",
    ) -> None:
        """``capabilities`` and ``variables``, when given, are what the test
        asks for now: a difference from the recorded session is reported.
        ``fake_filesystems`` is the ``FakeFilesystems`` to play in (default: the
        process's). ``secrets`` (``toolguard_secrets``) are redacted by the
        runtime, in matching, and from every difference and message.
        ``world`` (``auto``, ``fake``, ``directory``) chooses the world as
        replay chooses it; ``ValueError`` for another."""
        self.cassette = cassette
        self.registry = registry
        self.cassette_path = cassette_path
        self.rerecord = rerecord
        self.redactor = secrets_redactor(secrets) or Redactor()
        self.secrets = KnownSecrets(secrets)
        self.asked_capabilities = capabilities
        self.asked_variables = variables
        self._refused: list[Difference] = []
        self._checks = ReplayChecks(
            self.redactor, tuple(cassette.volatile) + tuple(volatile), registry, self.secrets
        )
        self._stack = ExitStack()
        self._lock = threading.Lock()
        self._next = 0
        self._calls = 0
        self._stored: list[Any] = []
        self._results: list[ToolResult] = []
        self._before: dict[str, bytes] | None = None
        self._runtime: ToolRuntime | None = None
        self._store: SQLiteAuditStore | None = None
        self._fake_filesystems = fake_filesystems
        self.world: WorldKind = walked_world(cassette, registry, world)
        """The world the tape plays in: ``fake`` or ``directory``."""
        self._world: FakeWorld | DirectoryWorld | None = None
        self._map: RootMap | None = None
        self._outside: OutsideSnapshot = {}
        self._http = self._checks.http_playback(cassette, registry)  # before the fake world

    def start(self) -> ToolRuntime:
        """Enter the cassette's world (an empty workspace at the recorded
        root: the test makes its own set-up) and give the runtime the test
        calls through."""
        cassette = self.cassette
        if self.world == "directory":
            fake_filesystems = self._fake_filesystems
            place = self._stack.enter_context(
                DirectoryWorld.of(
                    cassette,
                    empty=True,
                    real_paths=fake_filesystems.real_paths
                    if fake_filesystems is not None
                    else None,
                )
            )
            self._world, self._map = place, place.root_map
            self._outside = place.outside()
            mapping = place.root_map
            cassette = replace(
                cassette,
                workspace=replace(cassette.workspace, root=place.root),
                interactions=tuple(
                    replace(i, call=replace(i.call, arguments=mapping.to_world(i.call.arguments)))
                    for i in cassette.interactions
                ),
            )
        else:
            self._world = self._stack.enter_context(
                FakeWorld.of(cassette, empty=True, fake_filesystems=self._fake_filesystems)
            )
        self._store = SQLiteAuditStore(":memory:")
        runtime = session_runtime(
            cassette,
            self.registry,
            self._store,
            redactor=self.redactor,
            http=self._http,
            runtime_class=functools.partial(PlaybackRuntime, self),
        )
        runtime.add_listener(lambda call, result, data, approval: self._stored.append(data))
        self._runtime = runtime
        return runtime

    def expect(self, call: ToolCall) -> int:
        """The index of the interaction ``call`` plays: the cassette's next
        one, which it must match; ``CallNotInCassette`` otherwise (naming
        the closest recorded call), and the call is not executed. The first
        call also checks what the test's set-up made."""
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        interactions = self.cassette.interactions
        with self._lock:
            self._calls += 1
            number, index = self._calls, self._next
            if self._before is None:
                self._before = self._tree()
                self._check_set_up(self._before)
            expected = interactions[index].call if index < len(interactions) else None
            if self._map is not None and isinstance(call, ToolCall):
                call = replace(call, arguments=self._map.to_recorded(call.arguments))
            if expected is None or call_differences(expected, call, self.redactor):
                tool_name = str(getattr(call, "tool_name", "?"))
                self._refused.append(
                    Difference(
                        self.secrets.scrub(f"call {number} ({tool_name})"),
                        "not in the cassette",
                        "absent",
                        self.secrets.scrub({"call_id": getattr(call, "call_id", None)}),
                    )
                )
                raise CallNotInCassette(self._mismatch(number, index, call))
            self._next += 1
            if self._http is not None:
                self._http.current = index
        return index

    def played(self, index: int, result: ToolResult) -> None:
        """Compare the result of the interaction ``expect`` gave (spelt as
        recorded, in the directory world)."""
        data = self._stored[-1]
        if self._map is not None:
            result = replace(
                result,
                message=self._map.to_recorded(result.message),
                data=self._map.to_recorded(result.data),
            )
            data = self._map.to_recorded(data)
        self._results.append(result)
        self._checks.result(index, self.cassette.interactions[index], result, data)

    def _mismatch(self, number: int, index: int, call: ToolCall) -> str:
        interactions = self.cassette.interactions
        near = closest(interactions, index, call, self.redactor)
        # The test's call is shown: its fields may hold a real secret.
        return self.secrets.text(
            format_call_mismatch(
                cassette_path=self.cassette_path,
                number=number,
                tool_name=str(getattr(call, "tool_name", "?")),
                expected_index=index + 1,
                total=len(interactions),
                closest=None
                if near is None
                else (
                    near[0] + 1,
                    interactions[near[0]].call.tool_name,
                    [self._checks.scrubbed(difference) for difference in near[1]],
                ),
                rerecord=self.rerecord,
            )
        )

    def finish(self, *, test_completed: bool = True) -> ReplayReport:
        """Close the runtime, compare audit rows, files and session, list
        the interactions never replayed, and leave the cassette's world.

        ``test_completed=False`` (the test failed: it may have stopped
        early) leaves out the interactions never reached and the calls
        refused as not in the cassette (the test already failed on those);
        every other difference is kept."""
        checks, cassette = self._checks, self.cassette
        rows: tuple[AuditRecord, ...] = ()
        try:
            if self._runtime is not None:
                for orphan in self._runtime.close(join_timeout=ORPHAN_JOIN_SECONDS):
                    checks.add("runtime", "handlers", "none still running", orphan)
            if self._http is not None:
                self._http.close()
                checks.http_requests(cassette.interactions, self._http.unmatched())
            if self._store is not None:
                rows = tuple(self._store.rows())
                self._store.close()
            if self._map is not None:
                mapping = self._map
                rows = tuple(row_as_recorded(mapping, row) for row in rows)
            if isinstance(self._world, FakeWorld):
                checks.escapes("runtime", self._world.escapes())
            elif isinstance(self._world, DirectoryWorld):
                checks.escapes("runtime", self._world.escapes())
                outside_differences(checks, self._world, self._outside)
            replayed = cassette.interactions[: self._next]
            checks.audit(replayed, rows)
            self._check_session()
            if test_completed:
                checks.differences.extend(self._refused)
                self._list_unreached()
            if self._next == len(cassette.interactions) and self._before is not None:
                self._check_files(self._tree())
        finally:
            self._stack.close()
        return ReplayReport(
            cassette, tuple(self._results), tuple(checks.differences), checks.checks, rows
        )

    def _tree(self) -> dict[str, bytes]:
        """The workspace's files now, spelt as recorded."""
        if isinstance(self._world, DirectoryWorld):
            return mapped_files(self._world.root_map, read_tree(self._world.root))
        return read_tree(self.cassette.workspace.root)

    def _list_unreached(self) -> None:
        interactions = self.cassette.interactions
        for index in range(self._next, len(interactions)):
            call = interactions[index].call
            self._checks.add(
                f"interaction {index + 1} ({call.tool_name})",
                "never replayed",
                {"call_id": call.call_id, "arguments": call.arguments},
                "the test made no such call",
            )

    def _check_set_up(self, made: Mapping[str, bytes]) -> None:
        """What the test's set-up made, against the recorded starting state."""
        recorded = self.cassette.workspace
        root = recorded.root if self._world is None else self._world.root
        where = "workspace before the first call"
        shown = {redact_path(self.redactor, path): data for path, data in made.items()}
        for path, content in sorted(recorded.files.items()):
            have = shown.get(path)
            self._checks.compare(
                where,
                path,
                describe_content(content),
                None if have is None else self._checks.describe(redact_file(self.redactor, have)),
            )
        for link, target in sorted(recorded.symlinks.items()):
            full = posixpath.join(root, link)
            self._checks.compare(
                where,
                link,
                f"symlink to {target}",
                f"symlink to {self._recorded_target(os.readlink(full))}"
                if os.path.islink(full)
                else "no symlink",
            )
        for directory in sorted(recorded.directories):
            self._checks.compare(
                where,
                f"{directory}/",
                "directory",
                "directory" if os.path.isdir(posixpath.join(root, directory)) else "missing",
            )

    def _recorded_target(self, target: str) -> str:
        """A link's target as the recording spelt it."""
        if isinstance(self._world, DirectoryWorld) and target.startswith("/"):
            return self._world.recorded_path(target)
        return target

    def _check_session(self) -> None:
        recorded = self.cassette.session
        if self.asked_capabilities is not None:
            self._checks.compare(
                "session",
                "capabilities",
                capabilities_dict(recorded.capabilities),
                capabilities_dict(self.asked_capabilities),
            )
        if self.asked_variables is not None:
            self._checks.compare(
                "session", "variables", dict(recorded.variables), dict(self.asked_variables)
            )

    def _check_files(self, after: Mapping[str, bytes]) -> None:
        # Recorded final files must match; files the test changed (through a
        # tool or not) since its first call must be recorded ones.
        self._checks.files(replace(self.cassette, final_files_exact=False), after)
        before = self._before or {}
        expected = self.cassette.final_files
        for path in sorted(after):
            if path not in expected and after[path] != before.get(path):
                self._checks.checks += 1
                self._checks.add(
                    "files",
                    path,
                    "absent (not in the cassette)",
                    self._checks.describe(after[path]),
                )


class PlaybackRuntime(ToolRuntime):
    """The runtime a playing tape gives its test: each ``execute`` (or
    ``aexecute``) must be the cassette's next call (``PlaybackTape.expect``)
    and its result is compared as ``replay()`` compares it."""

    def __init__(self, tape: PlaybackTape, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tape = tape

    def execute(self, call: ToolCall) -> ToolResult:
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        index = self._tape.expect(call)
        result = super().execute(call)
        self._tape.played(index, result)
        return result

    async def aexecute(self, call: ToolCall) -> ToolResult:
        __tracebackhide__ = True
        index = self._tape.expect(call)
        result = await super().aexecute(call)
        self._tape.played(index, result)
        return result
