"""One fuzzed call, checked: the tool wrapped in a ``HandlerProbe``, run
through a fresh ``ToolRuntime`` in a fresh fuzz workspace, and every property
of the ``fuzz`` docstring judged."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from ..audit import AuditRecord, SQLiteAuditStore
from ..capabilities import Capabilities
from ..contract import ErrorCode, ToolCall, ToolResult
from ..harness.effects import changed_files, undeclared_changes
from ..harness.fake_filesystem import FakeFilesystems
from ..harness.probes import (
    HandlerProbe,
    HandlerRuns,
    OutsideSnapshot,
    audit_row_problems,
    holds_marker,
    outside_changes,
)
from ..harness.world import DECOY_MARKER, FORBIDDEN_MARKER, FakeWorld, WorkspaceEntry
from ..hooks import Approver
from ..redaction import Redactor
from ..registry import ToolRegistry, ToolSpec, WorldKind, checked_world
from ..replay.cassette import WorkspaceState
from ..runtime import ToolRuntime
from ..sandbox import CallCancelled
from ..secret_entropy import shannon_entropy
from .directory import FuzzDirectory
from .network import NetworkLog, refusing_network
from .report import Problem
from .workspace import FUZZ_DECOYS, RUN_ID, WORKSPACE_ROOT, starting_workspace

MIN_SECRET_LENGTH = 8
"""A secret-named argument's value shorter than this is not looked for
(generated values like ``"0"`` are in any text)."""

MIN_SECRET_ENTROPY = 2.0
"""Nor one of fewer bits per character (``shannon_entropy``): fewer than
about four characters used evenly, as in ``00000000`` or ``abababab``. A
real secret has over 3; a generated one of 8 varied characters about 3."""

_NAMES = Redactor()

DEADLINE_SECONDS = 1.0
"""The deadline each fuzzed call gets unless ``timeout_seconds`` says
otherwise (or the tool's own is shorter)."""

ORPHAN_JOIN_SECONDS = 5.0
"""How long a handler past its deadline is waited for before the fake
filesystem is torn down."""

CALL_ID = "toolguard-fuzz-call"
"""The call id (and, as ``ACTOR``, the actor and session) of every fuzzed call."""
ACTOR = "toolguard-fuzz"

LISTED = 5
"""Paths named in an "outside changed" message before "and N more"."""


@dataclass
class Refusals:
    """Valid calls refused before the handler, of one code and rule."""

    count: int
    reason: str
    """The first such call's reason (its audit row's)."""


class CallChecker:
    """The fuzzed tool, wrapped, and everything a call needs besides its
    arguments; ``check(arguments, valid)`` runs one call and judges it."""

    def __init__(
        self,
        spec: ToolSpec,
        *,
        capabilities: Capabilities | None,
        registry: ToolRegistry | None,
        variables: Mapping[str, str] | None,
        approve: bool,
        timeout_seconds: float | None,
        fake_filesystems: FakeFilesystems | None = None,
        world: str = "auto",
        network: bool = False,
        workspace: WorkspaceState | None = None,
    ) -> None:
        self.spec = spec
        self.network = network
        """Whether handlers may reach the network (``fuzz.network`` refuses it
        otherwise)."""
        self.network_refused = 0
        """How many calls had a network reach refused."""
        self.first_refused = ""
        """The first reach refused."""
        self.workspace = starting_workspace(workspace)
        """What every example's workspace holds before its call."""
        self.world: WorldKind = fuzzed_world(spec, registry, world)
        """The world each example runs in: ``fake`` (``harness.world.FakeWorld``) or
        ``directory`` (``fuzz.directory.FuzzDirectory``)."""
        # Validators compiled afresh from the schemas: the contract, judged
        # independently of whatever the runtime uses.
        self.judge = replace(spec)
        self._probe = HandlerProbe(spec.handler)
        # The runtime gets the tool as registered, validators included.
        wrapped = spec.with_handler(self._probe)
        others = [other for other in registry or () if other.name != spec.name]
        default = registry.world if registry is not None else "fake"
        self.registry = ToolRegistry([*others, wrapped], world=default)
        self.capabilities = capabilities or Capabilities(
            allowed_tools=frozenset({spec.name}),
            allowed_risks=frozenset({spec.risk}),
            read_roots=(".",),
            write_roots=(".",),
        )
        self.variables = dict(variables) if variables is not None else {"run_id": RUN_ID}
        self.hooks = [Approver(lambda _event: True)] if approve else []
        deadline = timeout_seconds
        if deadline is None:
            deadline = min(spec.timeout_seconds, DEADLINE_SECONDS)
        self.timeouts = {spec.name: deadline}
        self.fake_filesystems = fake_filesystems
        self.codes: dict[str, int] = {}
        """How many calls were answered with each code."""
        self.refusals: dict[tuple[str, str], Refusals] = {}
        """Valid calls that never reached the handler, by (code, audit rule)."""
        self._kept: tuple[FuzzDirectory, tuple[WorkspaceEntry, ...], OutsideSnapshot] | None = None
        self.not_run: dict[str, int] = {}
        """Examples never run in the directory world, by the argument that
        named a place outside its container (the real machine)."""

    @property
    def handler_calls(self) -> int:
        return self._probe.calls

    def check(self, arguments: dict[str, Any], valid: bool) -> list[tuple[Problem, str]]:
        """Run one call in a fresh fuzz workspace; every problem it shows."""
        problems: list[tuple[Problem, str]] = []
        result: ToolResult | None = None
        store = SQLiteAuditStore(":memory:")  # made outside the fake fs; never sees it
        network = NetworkLog()
        try:
            with self._world() as world:
                sent = arguments
                if isinstance(world, FuzzDirectory):
                    sent = world.spelt(arguments)
                    far = world.outside_container(sent)
                    if far is not None:
                        self.not_run[far] = self.not_run.get(far, 0) + 1
                        return []
                else:
                    world.plant(FUZZ_DECOYS)
                    world.plant_forbidden()
                runs = self._probe.start_call()
                call = ToolCall(
                    call_id=CALL_ID,
                    tool_name=self.spec.name,
                    arguments=json.dumps(sent, ensure_ascii=False),  # as a model sends them
                    actor=ACTOR,
                    session_id=ACTOR,
                )
                before = world.outside()
                inside_before = world.tree()
                self._probe.accesses = world.accesses
                runtime = ToolRuntime(
                    self.registry,
                    world.root,
                    self.capabilities,
                    store,
                    hooks=self.hooks,
                    variables=self.variables,
                    timeouts=self.timeouts,
                    # A handler past its deadline runs on, so that the
                    # properties of a late handler (still running, writing)
                    # are judged; inline mode would stop it.
                    isolation="thread",
                )
                refusing = nullcontext(network) if self.network else refusing_network(network)
                try:
                    with refusing:
                        try:
                            result = runtime.execute(call)
                        finally:
                            with warnings.catch_warnings():
                                # An overrunning handler is reported below, not warned about.
                                warnings.simplefilter("ignore", RuntimeWarning)
                                runtime.close(join_timeout=ORPHAN_JOIN_SECONDS)
                except Exception as exc:
                    problems.append((Problem.EXECUTE_RAISED, _raised(exc)))
                except BaseException as exc:
                    if exc is not runs.raised:
                        raise  # a real interrupt of the fuzzer, not the tool's
                    problems.append((Problem.EXECUTE_RAISED, _raised(exc)))
                if runs.finished < runs.calls:
                    problems.append(
                        (
                            Problem.HANDLER_STILL_RUNNING,
                            f"the handler was still running {ORPHAN_JOIN_SECONDS:g} s after "
                            f"its deadline; it may write {self._after_world}",
                        )
                    )
                self._probe.accesses = None
                changes = outside_changes(before, world.outside())
                if isinstance(world, FuzzDirectory):
                    changes = replace(
                        changes,
                        created=tuple(world.recorded(p) for p in changes.created),
                        removed=tuple(world.recorded(p) for p in changes.removed),
                        modified=tuple(world.recorded(p) for p in changes.modified),
                    )
                changed = changes.describe(LISTED)
                accesses = world.accesses
                outside_paths = (
                    sorted({a.path for a in accesses.outside(world.root)})
                    if accesses is not None
                    else []
                )
                escapes = [escape.message for escape in world.escapes()]
                undeclared = (
                    undeclared_changes(
                        self.spec,
                        sent,
                        self.variables,
                        self.capabilities.write_roots,
                        changed_files(inside_before, world.tree()),
                        world.resolve_inside,
                    )
                    if runs.calls
                    else []
                )
            rows = store.rows()
            audit_text = "\n".join(repr(row) for row in rows)
        finally:
            store.close()
        reaches = network.reaches()
        if reaches:
            self.network_refused += 1
            self.first_refused = self.first_refused or reaches[0]
        if result is not None and result.ok and reaches:
            # A refused request is the tool's error to answer; answering OK
            # claims an effect that never happened.
            problems.append(
                (
                    Problem.NETWORK_REFUSED_OK,
                    f"{reaches[0]} was refused, yet the call answered OK",
                )
            )
        if result is not None:
            self.codes[result.code.value] = self.codes.get(result.code.value, 0) + 1
            if valid and not runs.calls:
                self._refused(result, rows)
            problems.extend(self._judge(result, runs, valid, rows))
            if holds_marker(DECOY_MARKER, [result], *runs.outputs):
                problems.append(
                    (
                        Problem.OUTSIDE_READ,
                        f"the result holds a file from outside the workspace; {_answered(result)}",
                    )
                )
        if result is not None and holds_marker(FORBIDDEN_MARKER, [result], *runs.outputs):
            problems.append(
                (
                    Problem.FORBIDDEN_READ,
                    f"the result holds a forbidden .env file; {_answered(result)}",
                )
            )
        if outside_paths:
            shown = ", ".join(outside_paths[:LISTED])
            problems.append((Problem.OUTSIDE_ACCESS, f"the handler accessed {shown}"))
        if escapes:
            more = f" and {len(escapes) - LISTED} more" if len(escapes) > LISTED else ""
            problems.append((Problem.REAL_DISK, "; ".join(escapes[:LISTED]) + more))
        if undeclared:
            problems.append((Problem.UNDECLARED_CHANGE, "; ".join(undeclared[:LISTED])))
        left = runs.leftover_threads()
        if left:
            problems.append(
                (
                    Problem.THREAD_LEFT,
                    f"the handler answered with threads running: {', '.join(left)}",
                )
            )
        leaked = _leaked_secrets(arguments, result, audit_text)
        if leaked:
            problems.append((Problem.SECRET_LEAKED, leaked))
        if changed:
            where = f"outside the workspace {WORKSPACE_ROOT}"
            problems.append((Problem.OUTSIDE_CHANGED, f"{changed}, {where}"))
        audit = _audit_problem(rows, result)
        if audit:
            problems.append((Problem.AUDIT_ROWS, audit))
        return problems

    def _world(self) -> AbstractContextManager[FakeWorld | FuzzDirectory]:
        if self.world == "directory":
            return self._directory()
        return FakeWorld(self.workspace, fake_filesystems=self.fake_filesystems)

    @contextmanager
    def _directory(self) -> Iterator[FuzzDirectory]:
        """The directory world of one example: the tool's own, kept from
        one example to the next, its workspace put back when an example
        changed it; made afresh when one changed anything outside the
        workspace, left its handler running, or the world observes accesses
        (measured: making and removing a world per example made a
        directory-world example cost 2-3x a fake-world one on ext4; kept,
        about the same)."""
        if self._kept is None:
            fake_filesystems = self.fake_filesystems
            place = FuzzDirectory(
                real_paths=fake_filesystems.real_paths if fake_filesystems is not None else None,
                workspace=self.workspace,
            )
            place.__enter__()
            try:
                place.plant(FUZZ_DECOYS)
                place.plant_forbidden()
                self._kept = (place, place.world.save_workspace(), place.outside())
            except BaseException:
                place.__exit__(None, None, None)
                raise
        place, saved, outside = self._kept
        calls = self._probe.calls
        fresh = False
        try:
            yield place
            runs = self._probe.current
            # An oracle of accesses watches a world's whole life: a world
            # that has one is never handed to the next example.
            watched = place.accesses is not None
            fresh = watched or runs.finished < runs.calls or place.outside() != outside
            fresh = fresh or bool(place.escapes())  # its escapes would be the next example's
            if not fresh and self._probe.calls != calls and place.world.save_workspace() != saved:
                place.world.restore_workspace(saved)
        except BaseException:
            fresh = True
            raise
        finally:
            if fresh:
                self.close()

    def close(self) -> None:
        """Remove the directory world kept between examples (if any)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept[0].__exit__(None, None, None)

    @property
    def _after_world(self) -> str:
        if self.world == "directory":
            return "in its directory after it is removed"
        return "to the real disk once the fake filesystem is gone"

    def _refused(self, result: ToolResult, rows: list[AuditRecord]) -> None:
        row = rows[0] if len(rows) == 1 else None
        rule = row.rule if row is not None else ""
        reason = (row.reason if row is not None else "") or result.message
        key = (result.code.value, rule)
        if key in self.refusals:
            self.refusals[key].count += 1
        else:
            self.refusals[key] = Refusals(1, reason)

    def _judge(
        self, result: ToolResult, runs: HandlerRuns, valid: bool, rows: list[AuditRecord]
    ) -> list[tuple[Problem, str]]:
        answered = _answered(result)
        if not valid:
            if runs.calls:
                return [(Problem.INVALID_REACHED_HANDLER, f"the handler ran; {answered}")]
            if result.code is not ErrorCode.INVALID_ARGUMENT:
                return [(Problem.INVALID_NOT_REFUSED, answered)]
            return []
        problems: list[tuple[Problem, str]] = []
        schema_refused = any(row.rule == "schema.input" for row in rows)
        if result.code is ErrorCode.INVALID_ARGUMENT and not runs.calls and schema_refused:
            problems.append((Problem.VALID_REFUSED, answered))
        if runs.calls > 1:
            problems.append((Problem.HANDLER_RAN_TWICE, f"the handler ran {runs.calls} times"))
        stopped = isinstance(runs.raised, (CallCancelled, asyncio.CancelledError))
        if runs.raised is not None and not isinstance(runs.raised, Exception) and not stopped:
            problems.append((Problem.HANDLER_BASE_EXCEPTION, f"the handler {_raised(runs.raised)}"))
        if result.code is ErrorCode.TIMEOUT and not stopped:
            # A handler may wait past a deadline (wait_for_file); it must stop
            # when cancelled (CallCancelled, or a coroutine's CancelledError:
            # the runtime's doing, never a problem), not run on and return.
            problems.append((Problem.TIMEOUT, answered))
        if result.code is ErrorCode.OUTPUT_INVALID:
            if runs.outputs and not is_json(runs.outputs[0]):
                detail = f"returned {type(runs.outputs[0]).__name__}; {answered}"
                problems.append((Problem.OUTPUT_NOT_JSON, detail))
            else:
                problems.append((Problem.OUTPUT_INVALID, answered))
        elif result.ok and runs.outputs:
            judge = self.judge.output_validator
            output = _as_json(runs.outputs[0])
            errors = judge.errors(output) if judge is not None else []
            if errors:
                problems.append(
                    (Problem.OUTPUT_UNCHECKED, f"answered OK, but {short('; '.join(errors))}")
                )
        return problems


def fuzzed_world(spec: ToolSpec, registry: ToolRegistry | None, world: str = "auto") -> WorldKind:
    """The world ``spec`` is fuzzed in: ``world`` when it is ``fake`` or
    ``directory``; for ``auto``, the tool's own (``ToolSpec.world``), else
    its registry's default, as replay chooses (``replay.player.chosen_world``).
    ``ValueError`` for any other ``world``."""
    if world != "auto":
        return checked_world(world, "world")
    return spec.world or (registry.world if registry is not None else "fake")


def _leaked_secrets(arguments: Mapping[str, Any], result: ToolResult | None, audit: str) -> str:
    """Where the value of a secret-named argument shows ('' nowhere), not
    counting where a non-secret value of the call that holds it shows (a
    path equal to the secret, echoed, leaks nothing) nor values too short
    or too regular to tell from chance (``meaningful_secret``)."""
    found = []
    plain = _plain_strings(arguments)
    result_text = "" if result is None else _result_text(result)
    for name, value in arguments.items():
        if not isinstance(value, str) or not meaningful_secret(value):
            continue
        if _NAMES.sensitive_keyword(name) is None:
            continue
        explained = [other for other in plain if value in other]
        if _shows(value, result_text, explained):
            found.append(f"{name}'s value is in the result")
        if _shows(value, audit, explained):
            found.append(f"{name}'s value is in the audit row")
    return "; ".join(found)


def meaningful_secret(value: str) -> bool:
    """Whether a secret-named argument's value is worth looking for: at
    least ``MIN_SECRET_LENGTH`` characters and ``MIN_SECRET_ENTROPY`` bits
    per character. Shorter or more regular values (``0``, ``00000000``,
    ``abababab``) turn up in any text by chance: zero-padded numbers,
    dates, ids."""
    return len(value) >= MIN_SECRET_LENGTH and shannon_entropy(value) >= MIN_SECRET_ENTROPY


def _plain_strings(arguments: Mapping[str, Any]) -> list[str]:
    """Every string in the call's arguments outside secret-named keys,
    longest first."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if _NAMES.sensitive_keyword(str(key)) is None:
                    walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(arguments)
    return sorted(set(found), key=len, reverse=True)


def _result_text(result: ToolResult) -> str:
    return json.dumps([result.data, result.message], ensure_ascii=False, default=str)


def _spellings(value: str) -> list[str]:
    """``value`` as it may be written in a text of JSON or of ``repr``s."""
    forms = [
        value,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(value)[1:-1],
        repr(value)[1:-1],
    ]
    return list(dict.fromkeys(form for form in forms if form))


def _shows(secret: str, text: str, explained: Sequence[str]) -> bool:
    """Whether ``secret`` is in ``text`` once every occurrence of the
    values in ``explained`` (which hold it) is cut out."""
    pieces = [text]
    for other in explained:
        for form in _spellings(other):
            pieces = [piece for whole in pieces for piece in whole.split(form)]
    return any(form in piece for piece in pieces for form in _spellings(secret))


def _answered(result: ToolResult) -> str:
    return f"answered {result.code}: {short(result.message)}"


def _raised(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"raised {type(exc).__name__}" + (f": {short(text)}" if text else "")


def short(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_json(value: Any) -> bool:
    """Whether ``value`` is JSON data (finite numbers)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _as_json(value: Any) -> Any:
    """``value`` as the runtime judges it: through JSON text and back."""
    return json.loads(json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False))


def _audit_problem(rows: list[AuditRecord], result: ToolResult | None) -> str:
    """Why the rows are not one finished row of the call with the result's
    code ('' when they are)."""
    problems = audit_row_problems(rows, [CALL_ID], exclusive=True)
    if not problems and result is not None and rows[0].result_code is not result.code:
        problems.append(f"the audit row says {rows[0].result_code}, the result {result.code}")
    return "; ".join(problems)
