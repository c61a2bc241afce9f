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
``runtime.workspace.root``, never under ``tmp_path``.

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

import os
import posixpath
import threading
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..audit import AuditRecord, SQLiteAuditStore
from ..capabilities import Capabilities
from ..contract import ToolCall, ToolResult
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..redaction import Redactor
from ..registry import ToolRegistry
from ..runtime import ToolRuntime
from .approvals import approval_hooks
from .cassette import (
    Cassette,
    CassetteError,
    FileState,
    WorkspaceState,
    capabilities_dict,
    dump,
    dumps,
    load,
)
from .environment import fake_filesystem, frozen_clock, read_tree
from .matching import call_differences, closest
from .naming import explicit_cassette_name
from .player import ORPHAN_JOIN_SECONDS, Difference, ReplayReport, _Checker, _describe
from .record_mode import RecordMode, parse
from .recorder import Recorder
from .redacting import redact_file, redact_path
from .report import CallNotInCassette, format_call_mismatch

STABLE_ROOT = "/workspace"
"""The workspace root written in cassettes recorded by a test."""

MARKER_ARGUMENTS = ("cassette", "capabilities", "volatile", "record_mode", "variables", "hooks")


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
    return TapeOptions(
        cassette=cassette,
        capabilities=_capabilities(kwargs.get("capabilities")),
        volatile=tuple(volatile),
        record_mode=None if mode is None else parse(str(mode), "record_mode="),
        variables=dict(variables),
        hooks=tuple(hooks),
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


class RecordingTape:
    """Records ``runtime`` from its first ``execute`` on."""

    def __init__(self, runtime: ToolRuntime, *, name: str, recorded_by: str | None = None) -> None:
        self.runtime = runtime
        self.recorder = Recorder(runtime, name=name, recorded_by=recorded_by)
        self._started = False
        self._lock = threading.Lock()
        runtime.execute = self._first_call  # type: ignore[method-assign]

    def _first_call(self, call: ToolCall) -> ToolResult:
        self._start()
        result: ToolResult = self.runtime.execute(call)
        return result

    def _start(self) -> None:
        with self._lock:
            if not self._started:
                vars(self.runtime).pop("execute", None)  # the runtime's own method again
                self.recorder.start()  # snapshots the workspace, then watches execute
                self._started = True

    def cassette(self) -> Cassette:
        """Stop recording; the cassette of what was recorded, with the
        workspace root written as ``STABLE_ROOT``."""
        self._start()  # a test that made no call records an empty session
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
    ) -> None:
        """``capabilities`` and ``variables``, when given, are what the test
        asks for now: a difference from the recorded session is reported."""
        self.cassette = cassette
        self.registry = registry
        self.cassette_path = cassette_path
        self.rerecord = rerecord
        self.redactor = Redactor()
        self.asked_capabilities = capabilities
        self.asked_variables = variables
        self._refused: list[Difference] = []
        self._checker = _Checker(
            self.redactor, tuple(cassette.volatile) + tuple(volatile), registry
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
        self._execute: Any = None
        self._http = self._checker.http_playback(cassette, registry)  # before the fake world

    def start(self) -> ToolRuntime:
        cassette = self.cassette
        self._stack.enter_context(frozen_clock(cassette.recorded_at))  # before pyfakefs: see player
        # The test makes its own starting state (see the module docstring).
        empty = replace(cassette, workspace=WorkspaceState(root=cassette.workspace.root))
        self._stack.enter_context(fake_filesystem(empty))
        session = cassette.session
        self._store = SQLiteAuditStore(":memory:")
        plan: list[PreToolUse | PostToolUse] = [PlanProgress(session.plan)] if session.plan else []
        runtime = ToolRuntime(
            self._http.registry(self.registry) if self._http else self.registry,
            cassette.workspace.root,
            session.capabilities,
            self._store,
            hooks=[*plan, *approval_hooks(cassette, self.redactor)],
            redactor=self.redactor,
            variables=session.variables,
            idempotency_scope=session.idempotency_scope,
            timeouts=session.timeouts,
        )
        runtime.add_listener(lambda call, result, data, approval: self._stored.append(data))
        self._execute = runtime.execute
        runtime.execute = self._play  # type: ignore[method-assign]
        self._runtime = runtime
        return runtime

    def _play(self, call: ToolCall) -> ToolResult:
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        interactions = self.cassette.interactions
        with self._lock:
            self._calls += 1
            number, index = self._calls, self._next
            if self._before is None:
                self._before = read_tree(self.cassette.workspace.root)
                self._check_set_up(self._before)
            expected = interactions[index].call if index < len(interactions) else None
            if expected is None or call_differences(expected, call, self.redactor):
                tool_name = str(getattr(call, "tool_name", "?"))
                self._refused.append(
                    Difference(
                        f"call {number} ({tool_name})",
                        "not in the cassette",
                        "absent",
                        {"call_id": getattr(call, "call_id", None)},
                    )
                )
                raise CallNotInCassette(self._mismatch(number, index, call))
            self._next += 1
            if self._http is not None:
                self._http.current = index
        result: ToolResult = self._execute(call)
        self._results.append(result)
        self._checker.result(index, interactions[index], result, self._stored[-1])
        return result

    def _mismatch(self, number: int, index: int, call: ToolCall) -> str:
        interactions = self.cassette.interactions
        near = closest(interactions, index, call, self.redactor)
        return format_call_mismatch(
            cassette_path=self.cassette_path,
            number=number,
            tool_name=str(getattr(call, "tool_name", "?")),
            expected_index=index + 1,
            total=len(interactions),
            closest=None
            if near is None
            else (near[0] + 1, interactions[near[0]].call.tool_name, near[1]),
            rerecord=self.rerecord,
        )

    def finish(self, *, test_completed: bool = True) -> ReplayReport:
        """Close the runtime, compare audit rows, files and session, list
        the interactions never replayed, and leave the cassette's world.

        ``test_completed=False`` (the test failed: it may have stopped
        early) leaves out the interactions never reached and the calls
        refused as not in the cassette (the test already failed on those);
        every other difference is kept."""
        checker, cassette = self._checker, self.cassette
        rows: tuple[AuditRecord, ...] = ()
        try:
            if self._runtime is not None:
                for orphan in self._runtime.close(join_timeout=ORPHAN_JOIN_SECONDS):
                    checker.add("runtime", "handlers", "none still running", orphan)
            if self._http is not None:
                self._http.close()
                checker.http_requests(cassette.interactions, self._http.unmatched())
            if self._store is not None:
                rows = tuple(self._store.rows())
                self._store.close()
            replayed = cassette.interactions[: self._next]
            checker.audit(replayed, rows)
            self._check_session()
            if test_completed:
                checker.differences.extend(self._refused)
                self._list_unreached()
            if self._next == len(cassette.interactions) and self._before is not None:
                self._check_files(read_tree(cassette.workspace.root))
        finally:
            self._stack.close()
        return ReplayReport(
            cassette, tuple(self._results), tuple(checker.differences), checker.checks, rows
        )

    def _list_unreached(self) -> None:
        interactions = self.cassette.interactions
        for index in range(self._next, len(interactions)):
            call = interactions[index].call
            self._checker.add(
                f"interaction {index + 1} ({call.tool_name})",
                "never replayed",
                {"call_id": call.call_id, "arguments": call.arguments},
                "the test made no such call",
            )

    def _check_set_up(self, made: Mapping[str, bytes]) -> None:
        """What the test's set-up made, against the recorded starting state."""
        recorded = self.cassette.workspace
        root = recorded.root
        where = "workspace before the first call"
        shown = {redact_path(self.redactor, path): data for path, data in made.items()}
        for path, content in sorted(recorded.files.items()):
            have = shown.get(path)
            self._checker.compare(
                where,
                path,
                _describe(content),
                None if have is None else _describe(redact_file(self.redactor, have)),
            )
        for link, target in sorted(recorded.symlinks.items()):
            full = posixpath.join(root, link)
            self._checker.compare(
                where,
                link,
                f"symlink to {target}",
                f"symlink to {os.readlink(full)}" if os.path.islink(full) else "no symlink",
            )
        for directory in sorted(recorded.directories):
            self._checker.compare(
                where,
                f"{directory}/",
                "directory",
                "directory" if os.path.isdir(posixpath.join(root, directory)) else "missing",
            )

    def _check_session(self) -> None:
        recorded = self.cassette.session
        if self.asked_capabilities is not None:
            self._checker.compare(
                "session",
                "capabilities",
                capabilities_dict(recorded.capabilities),
                capabilities_dict(self.asked_capabilities),
            )
        if self.asked_variables is not None:
            self._checker.compare(
                "session", "variables", dict(recorded.variables), dict(self.asked_variables)
            )

    def _check_files(self, after: Mapping[str, bytes]) -> None:
        # Recorded final files must match; files the test changed (through a
        # tool or not) since its first call must be recorded ones.
        self._checker.files(replace(self.cassette, final_files_exact=False), after)
        before = self._before or {}
        expected = self.cassette.final_files
        for path in sorted(after):
            if path not in expected and after[path] != before.get(path):
                self._checker.checks += 1
                state = FileState.of(after[path])
                self._checker.add(
                    "files",
                    path,
                    "absent (not in the cassette)",
                    f"{len(after[path])} bytes, sha256 {state.sha256[:12]}",
                )
