"""Fuzzing a tool from its schemas: generated calls through the real executor.

``fuzz_tool(spec)`` runs a tool's handler with arguments generated from its
input schema (``pytest_toolguard.strategies``): arguments the schema accepts
and arguments it refuses, each call through a fresh ``ToolRuntime`` in a
fresh fake filesystem (pyfakefs, one ``Patcher`` per example) holding a small
workspace and decoy files outside it. Hypothesis drives the search and
shrinks every failure to a minimal call. ``fuzz_registry(registry)`` does it
for every tool; ``check_call(spec, arguments)`` runs the checks for one call
(a failure's reproduction, or a regression test).

What every call must show (a ``Problem`` names each way of failing):

- ``execute`` returns a ``ToolResult`` and never raises;
- arguments the schema refuses never reach the handler and are answered
  ``INVALID_ARGUMENT``; arguments it accepts are never refused by the input
  schema;
- no file, directory or symlink outside the workspace root is created,
  removed or changed (content, mode, mtime, link target): the whole fake
  filesystem is compared before and after;
- no result or output holds the content of a decoy outside the workspace
  (``DECOY_MARK``): the tool did not read outside;
- exactly one audit row, finished, with the result's code;
- the handler returns JSON data that matches the tool's output schema
  (``OUTPUT_INVALID`` from the runtime is the tool's bug; an ``OK`` result
  whose output breaks the schema would be the runtime's);
- the handler raises no ``BaseException`` that is not an ``Exception``
  (``SystemExit``, ``KeyboardInterrupt``), finishes within its deadline,
  and runs at most once per call.

Each problem is reported once per kind of arguments (valid, invalid), with
the minimal call Hypothesis shrank it to; the search then runs again with
that problem known, so a second kind of problem is not hidden by the
first. The same ``seed`` gives the same report.

A handler that raises an ordinary exception (``EXECUTION_ERROR``) or is
refused by policy or the sandbox is *not* a failure: a read of a missing
file may fail. Only the properties above are checked. But a tool whose
handler no valid call reached (every one refused: by policy, a hook, the
sandbox; or no valid arguments exist) was not fuzzed at all: its report is
``skipped``, with the codes and rules that refused it, never a pass.

Reaching an escape. Random text almost never spells ``../x``, so top-level
string arguments whose names look like paths (``path``, ``file``,
``target_dir``, ...; see ``PATH_ARGUMENT``) are also given the strings of
``PATH_PROBES``: files of the fuzz workspace (so reads succeed and their
output is checked) and escapes (``..``, absolute paths, a symlink leading
out, a sibling directory sharing the root's prefix). Each probe the
argument's schema accepts runs first as an explicit example (on top of the
simplest valid arguments), and probes are mixed into the random examples.
Nested path arguments are reached by random text only.

The fuzz world. The workspace root is ``WORKSPACE_ROOT`` holding
``WORKSPACE_FILES`` and ``WORKSPACE_SYMLINKS``; ``OUTSIDE_FILES`` are
decoys. The runtime gets an in-memory audit store (sqlite never sees
pyfakefs), ``variables={"run_id": RUN_ID}`` (the built-in run tools need
it), and by default capabilities allowing this tool at its risk, reading
and writing the whole workspace, and no network host. Tools whose risk
needs approval (external, dangerous) are approved by an ``Approver`` that
allows every call (``approve=True``, the default), so their handlers run;
with ``approve=False`` they must answer ``APPROVAL_REQUIRED``, their
handlers never run and the report is skipped. Only the filesystem is
fake: a handler that opens a socket or runs a subprocess does so for real.
A tool that names its host (``network_host_argument``) is refused by the
policy, since no host is allowed (the report is skipped, saying so), unless
``capabilities`` allow one; stub any other outside effect in the registry
given to the fuzzer.

Not guaranteed: that a handler's effects outside this process (network,
subprocesses, the real clock) are seen; that every argument is tried (the
search is bounded by ``examples``); that a handler still running past its
deadline plus ``ORPHAN_JOIN_SECONDS`` (reported as
``Problem.HANDLER_STILL_RUNNING``) does not write to the real disk after its
fake filesystem is gone: threads cannot be killed. Each call's deadline is
``DEADLINE_SECONDS`` (or the tool's own, if shorter); pass
``timeout_seconds`` to change it. Schemas outside the subset
``strategies`` translates give a skipped report, never a crash.

This module does not import pytest; the plugin turns reports into items.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import json
import posixpath
import stat
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, example, find, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, NoSuchExample, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from .audit import AuditRecord, SQLiteAuditStore
from .capabilities import Capabilities
from .contract import ErrorCode, ToolCall, ToolResult
from .errors import ToolguardError
from .hooks import Approver
from .jsondata import MAX_JSON_DEPTH, MAX_JSON_INTEGER
from .registry import PATH_ARGUMENT, Handler, ToolRegistry, ToolSpec
from .replay.cassette import Cassette, Session, WorkspaceState
from .replay.environment import shared_world
from .runtime import ToolRuntime
from .sandbox import CallCancelled
from .schema import SchemaValidator
from .strategies import UnsupportedSchema, arguments_for

__all__ = [
    "DECOY_MARK",
    "FUZZ_ROOT",
    "OUTSIDE_FILES",
    "PATH_ARGUMENT",
    "PATH_PROBES",
    "RUN_ID",
    "WORKSPACE_FILES",
    "WORKSPACE_ROOT",
    "WORKSPACE_SYMLINKS",
    "FuzzFailure",
    "FuzzReport",
    "Problem",
    "check_call",
    "fuzz_registry",
    "fuzz_tool",
]

FUZZ_ROOT = "/toolguard-fuzz"
WORKSPACE_ROOT = f"{FUZZ_ROOT}/workspace"
"""The workspace root in the fake filesystem."""
RUN_ID = "fuzz-run"
"""The ``run_id`` runtime variable, unless ``variables`` gives another."""

WORKSPACE_FILES: Mapping[str, bytes] = {
    "notes.txt": b"first line\nsecond line mentions fuzz\n",
    "data.csv": b"name,score\nada,3\nlin,5\n",
    "sub/nested.txt": b"nested file\n",
    "sub/deeper/leaf.md": b"# leaf\n",
    "sub/blob.bin": b"\x00\xff\xfe binary",
    f"runs/{RUN_ID}/input.csv": b"id,text\n1,hello\n",
    f"runs/{RUN_ID}/artifacts/summary.md": b"# summary\n",
}
"""Files of the fuzz workspace, by path relative to its root."""
WORKSPACE_SYMLINKS: Mapping[str, str] = {"link-out": f"{FUZZ_ROOT}/outside"}
"""Symlinks in the workspace (relative path -> target); this one leads out."""
DECOY_MARK = "TOOLGUARD-FUZZ-DECOY"
"""In every file outside the workspace: a result holding it read outside."""
OUTSIDE_FILES: Mapping[str, bytes] = {
    f"{FUZZ_ROOT}/outside/secret.txt": f"{DECOY_MARK}: outside, must never change\n".encode(),
    f"{FUZZ_ROOT}/workspace2/keep.txt": f"{DECOY_MARK}: shares the root's prefix\n".encode(),
    "/etc/passwd": f"root:x:0:0:{DECOY_MARK}:/root:/bin/sh\n".encode(),
}
"""Decoys outside the workspace; the "outside changed" check covers every
other path of the fake filesystem too."""

PATH_PROBES: tuple[str, ...] = (
    "notes.txt",
    ".",
    "sub",
    "sub/nested.txt",
    "data.csv",
    "sub/blob.bin",
    "new.txt",
    "sub/new/deep.txt",
    "../escape.txt",
    "../outside/secret.txt",
    f"{FUZZ_ROOT}/outside/secret.txt",
    f"{FUZZ_ROOT}/escape.txt",
    "../workspace2/keep.txt",
    "sub/../../escape.txt",
    "link-out/secret.txt",
    "link-out/new.txt",
    "..\\escape.txt",
    "../../../../etc/passwd",
    "/etc/passwd",
    ".env",
    "sub/.env",
)
"""Strings tried in path-like arguments: workspace files first, then
escapes (shrinking prefers earlier probes, so a failure names the simplest)."""


DEADLINE_SECONDS = 1.0
"""The deadline each fuzzed call gets unless ``timeout_seconds`` says
otherwise (or the tool's own is shorter)."""

ORPHAN_JOIN_SECONDS = 5.0
"""How long a handler past its deadline is waited for before the fake
filesystem is torn down."""

_CALL_ID = "toolguard-fuzz-call"
_ACTOR = "toolguard-fuzz"
_HEALTH_CHECKS = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
]
_LISTED = 5
"""Paths named in an "outside changed" message before "and N more"."""


class Problem(str, enum.Enum):
    """Each way a fuzzed call can fail; the value is a stable id."""

    EXECUTE_RAISED = "execute-raised"
    """``ToolRuntime.execute`` raised instead of answering (a runtime bug)."""
    INVALID_REACHED_HANDLER = "invalid-reached-handler"
    """The handler ran with arguments the input schema refuses (a runtime bug)."""
    INVALID_NOT_REFUSED = "invalid-not-refused"
    """Arguments the schema refuses were answered with another code than
    INVALID_ARGUMENT (a runtime bug)."""
    VALID_REFUSED = "valid-refused"
    """Arguments the schema accepts were refused by the input schema check."""
    OUTSIDE_CHANGED = "outside-changed"
    """Something outside the workspace root was created, removed or changed."""
    OUTSIDE_READ = "outside-read"
    """The result or the handler's output holds the content of a decoy
    outside the workspace (``DECOY_MARK``): the tool read outside."""
    AUDIT_ROWS = "audit-rows"
    """Not exactly one finished audit row with the result's code."""
    OUTPUT_INVALID = "output-invalid"
    """The handler's output broke the tool's output schema (OUTPUT_INVALID)."""
    OUTPUT_NOT_JSON = "output-not-json"
    """The handler returned something that is not JSON data (OUTPUT_INVALID)."""
    OUTPUT_UNCHECKED = "output-unchecked"
    """An OK result whose output breaks the output schema (a runtime bug)."""
    HANDLER_BASE_EXCEPTION = "handler-base-exception"
    """The handler raised a BaseException that is not an Exception."""
    HANDLER_RAN_TWICE = "handler-ran-twice"
    """One call ran the handler more than once."""
    TIMEOUT = "timeout"
    """The handler overran its deadline and ran on instead of stopping when
    cancelled (``ctx.cancelled``; writes then raise ``CallCancelled``)."""
    HANDLER_STILL_RUNNING = "handler-still-running"
    """The handler was still running ``ORPHAN_JOIN_SECONDS`` after the call
    was answered; it may write to the real disk later."""
    FLAKY = "flaky"
    """A failure that did not happen again with the same arguments."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class FuzzFailure:
    """One failing call: the tool, what went wrong, and the (minimal)
    arguments that make it happen. ``valid`` says whether the input schema
    accepts them. ``arguments`` is None only for a ``FLAKY`` failure whose
    arguments Hypothesis did not keep."""

    tool: str
    problem: Problem
    detail: str
    arguments: dict[str, Any] | None
    valid: bool

    @property
    def arguments_json(self) -> str:
        """The arguments as one line of JSON (ASCII, sorted keys)."""
        return json.dumps(self.arguments, ensure_ascii=True, sort_keys=True)

    @property
    def call_json(self) -> str:
        """The call as a model would send it: ``{"tool_name": ..., "arguments": ...}``."""
        return json.dumps(
            {"tool_name": self.tool, "arguments": self.arguments}, ensure_ascii=True, sort_keys=True
        )

    @property
    def reproduce(self) -> str:
        """One line of Python that runs the failing call again with the
        same checks, in the same fuzz world; ``spec`` is the tool's
        ``ToolSpec`` (``registry.get(name)``)."""
        return f"pytest_toolguard.fuzz.check_call(spec, json.loads({self.arguments_json!r}))"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (for xdist's ``workeroutput``); ``from_dict`` reverses it."""
        return {
            "tool": self.tool,
            "problem": self.problem.value,
            "detail": self.detail,
            "arguments": self.arguments,
            "valid": self.valid,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FuzzFailure:
        return cls(
            tool=data["tool"],
            problem=Problem(data["problem"]),
            detail=data["detail"],
            arguments=data["arguments"],
            valid=data["valid"],
        )

    def format(self) -> str:
        """Three lines: the problem, the call, how to reproduce it."""
        kind = "valid" if self.valid else "invalid"
        return (
            f"[{self.problem}] with {kind} arguments: {self.detail}\n"
            f"  call:      {self.call_json}\n"
            f"  reproduce: {self.reproduce}"
        )


@dataclass(frozen=True, slots=True)
class FuzzReport:
    """What fuzzing one tool found.

    ``valid_calls`` and ``invalid_calls`` count the calls executed with
    arguments the input schema accepts or refuses (explicit examples and
    shrinking included); ``handler_calls`` how many of them ran the handler;
    ``codes`` how they were answered.
    ``failures`` holds one minimal failing call per ``Problem`` and kind of
    arguments (valid, invalid). ``skipped`` says why the tool could not be
    fuzzed: a schema the strategies cannot translate (nothing was run), or
    a handler that no call reached (the refusals that stopped them);
    ``notes`` what could not be tried (no invalid arguments exist, say)."""

    tool: str
    valid_calls: int
    invalid_calls: int
    handler_calls: int
    failures: tuple[FuzzFailure, ...]
    skipped: str | None = None
    notes: tuple[str, ...] = ()
    seed: int = 0
    codes: Mapping[str, int] = field(default_factory=dict)
    """How many calls were answered with each ``ErrorCode`` value (valid and
    invalid together): shows what the fuzzing reached (did any read succeed?)."""

    @property
    def ok(self) -> bool:
        """No failure (a skipped tool is not a failure)."""
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (for xdist's ``workeroutput``); ``from_dict`` reverses it."""
        return {
            "tool": self.tool,
            "valid_calls": self.valid_calls,
            "invalid_calls": self.invalid_calls,
            "handler_calls": self.handler_calls,
            "failures": [failure.as_dict() for failure in self.failures],
            "skipped": self.skipped,
            "notes": list(self.notes),
            "seed": self.seed,
            "codes": dict(self.codes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FuzzReport:
        return cls(
            tool=data["tool"],
            valid_calls=data["valid_calls"],
            invalid_calls=data["invalid_calls"],
            handler_calls=data["handler_calls"],
            failures=tuple(FuzzFailure.from_dict(item) for item in data["failures"]),
            skipped=data["skipped"],
            notes=tuple(data["notes"]),
            seed=data["seed"],
            codes=dict(data["codes"]),
        )

    def format(self) -> str:
        """A readable multi-line report: a summary line, then each failure."""
        if self.skipped is not None and not (self.valid_calls or self.invalid_calls):
            return f"fuzz {self.tool}: skipped: {self.skipped}"
        ran = (
            f"{self.valid_calls} valid and {self.invalid_calls} invalid calls, "
            f"handler ran {self.handler_calls} times, seed {self.seed}"
        )
        verdict = "ok" if self.ok else f"{len(self.failures)} failure(s)"
        if self.skipped is not None:
            verdict = f"skipped: {self.skipped}"
        lines = [f"fuzz {self.tool}: {verdict} ({ran})"]
        if self.codes:
            answered = ", ".join(f"{code} {count}" for code, count in sorted(self.codes.items()))
            lines.append(f"  answered: {answered}")
        lines.extend(f"  note: {note}" for note in self.notes)
        for failure in self.failures:
            lines.extend("  " + line for line in failure.format().splitlines())
        return "\n".join(lines)


def fuzz_tool(
    spec: ToolSpec,
    *,
    examples: int = 100,
    seed: int = 0,
    capabilities: Capabilities | None = None,
    registry: ToolRegistry | None = None,
    variables: Mapping[str, str] | None = None,
    approve: bool = True,
    timeout_seconds: float | None = None,
) -> FuzzReport:
    """Fuzz one tool: up to ``examples`` generated calls with valid
    arguments and up to ``examples`` with invalid ones (plus the explicit
    path probes), each checked as the module docstring says, every failure
    shrunk to a minimal call. Deterministic for a given ``seed``.

    ``capabilities`` defaults to this tool at its risk, reading and writing
    the whole workspace; ``registry`` is the rest of the registry the tool
    runs beside (default: the tool alone); ``variables`` default to
    ``{"run_id": RUN_ID}``; ``approve`` (default True) approves every call
    of a tool whose risk needs it, so its handler runs; ``timeout_seconds``
    replaces the tool's deadline.

    Never raises for a tool's behaviour; a schema outside the supported
    subset, or a handler that no valid call reached, gives a report with
    ``skipped`` set (saying why). Raises ``ValueError`` for ``examples < 1``."""
    if examples < 1:
        raise ValueError(f"examples must be at least 1, got {examples}")
    harness = _Harness(
        spec,
        capabilities=capabilities,
        registry=registry,
        variables=variables,
        approve=approve,
        timeout_seconds=timeout_seconds,
    )
    notes: list[str] = []
    failures: list[FuzzFailure] = []
    try:  # UnsupportedSchema comes when a strategy is built, or lazily when drawn
        valid_strategy = _runnable(arguments_for(harness.judge, valid=True))
        invalid_strategy = _runnable(arguments_for(harness.judge, valid=False))
        validator = harness.judge.input_validator
        probes = _path_probes(harness.judge)
        valid_search = _Search(
            harness,
            _with_probes(valid_strategy, probes, validator),
            valid=True,
            explicit=_explicit_examples(valid_strategy, probes, validator),
        )
        invalid_search = _Search(harness, invalid_strategy, valid=False, explicit=())
        searches = [valid_search]
        if _accepts_every_object(spec.input_schema):
            # Hypothesis would spend seconds failing to find what does not exist.
            notes.append("no invalid arguments: the input schema accepts every object")
        else:
            searches.append(invalid_search)
        for search in searches:
            failures.extend(search.run(examples, seed, notes))
    except UnsupportedSchema as exc:
        return FuzzReport(spec.name, 0, 0, 0, (), skipped=str(exc), seed=seed)
    skipped = None
    if harness.handler_calls == 0:
        never_ran = _never_ran(valid_search.calls, harness.refusals)
        if failures:
            notes.append(never_ran)
        else:
            skipped = never_ran
    return FuzzReport(
        tool=spec.name,
        valid_calls=valid_search.calls,
        invalid_calls=invalid_search.calls,
        handler_calls=harness.handler_calls,
        failures=tuple(failures),
        skipped=skipped,
        notes=tuple(notes),
        seed=seed,
        codes=dict(sorted(harness.codes.items())),
    )


def _never_ran(valid_calls: int, refusals: Mapping[tuple[str, str], _Refusal]) -> str:
    """Why the handler never ran, for a skipped report."""
    if not valid_calls:
        return "the handler never ran: no valid arguments could be generated from the input schema"
    ranked = sorted(refusals.items(), key=lambda entry: (-entry[1].count, entry[0]))
    shown = "; ".join(
        f"{refusal.count} answered {code}"
        + (f" by {rule}" if rule else "")
        + (f" ({_short(refusal.reason, 160)})" if refusal.reason else "")
        for (code, rule), refusal in ranked[:_LISTED]
    )
    more = f"; and {len(ranked) - _LISTED} more kinds" if len(ranked) > _LISTED else ""
    return (
        f"the handler never ran: every one of {valid_calls} valid calls was refused: {shown}{more}"
    )


def fuzz_registry(
    registry: ToolRegistry,
    *,
    examples: int = 100,
    seed: int = 0,
    capabilities: Capabilities | None = None,
    variables: Mapping[str, str] | None = None,
    approve: bool = True,
    timeout_seconds: float | None = None,
    tools: Sequence[str] | None = None,
) -> list[FuzzReport]:
    """``fuzz_tool`` for every tool of ``registry`` (or the named ``tools``),
    in name order, each beside the others. ``KeyError`` for an unknown name."""
    names = registry.names() if tools is None else sorted(tools)
    reports = []
    for name in names:
        spec = registry.get(name)
        if spec is None:
            raise KeyError(f"no tool named {name!r} in the registry")
        reports.append(
            fuzz_tool(
                spec,
                examples=examples,
                seed=seed,
                capabilities=capabilities,
                registry=registry,
                variables=variables,
                approve=approve,
                timeout_seconds=timeout_seconds,
            )
        )
    return reports


def check_call(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    *,
    capabilities: Capabilities | None = None,
    registry: ToolRegistry | None = None,
    variables: Mapping[str, str] | None = None,
    approve: bool = True,
    timeout_seconds: float | None = None,
) -> tuple[FuzzFailure, ...]:
    """Run one call of ``spec`` with ``arguments`` in a fresh fuzz world and
    return every failure it shows (empty when it passes every check).
    Whether the arguments are valid is judged by the tool's input schema.
    Options as for ``fuzz_tool``."""
    harness = _Harness(
        spec,
        capabilities=capabilities,
        registry=registry,
        variables=variables,
        approve=approve,
        timeout_seconds=timeout_seconds,
    )
    values = dict(arguments)
    valid = harness.judge.input_validator.is_valid(values)
    return tuple(
        FuzzFailure(spec.name, problem, detail, values, valid)
        for problem, detail in harness.check(values, valid)
    )


# -- one call ---------------------------------------------------------------


@dataclass
class _Refusal:
    """Valid calls refused before the handler, of one code and rule."""

    count: int
    reason: str
    """The first such call's reason (its audit row's)."""


@dataclass
class _Run:
    """What the wrapped handler saw during one call."""

    calls: int = 0
    finished: int = 0
    raised: BaseException | None = None
    outputs: list[Any] = field(default_factory=list)


class _Tracker:
    """Wraps a handler so each call's runs, exceptions and outputs are seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current = _Run()
        self.total = 0

    def start(self) -> _Run:
        self.current = _Run()
        return self.current

    def wrap(self, handler: Handler) -> Handler:
        """``handler``, counted. An ``async def`` handler gets an ``async
        def`` wrapper (so the runtime still sees a coroutine function), and
        an awaitable a plain handler returns is followed until it settles:
        a run ends when its value is there, not when its coroutine is made."""
        if inspect.iscoroutinefunction(handler) or (
            not inspect.isroutine(handler) and inspect.iscoroutinefunction(type(handler).__call__)
        ):

            @functools.wraps(handler)
            async def tracked_coroutine(ctx: Any, **arguments: Any) -> Any:
                return await self._settled(self._started(), handler(ctx, **arguments))

            return tracked_coroutine

        @functools.wraps(handler)
        def tracked(ctx: Any, **arguments: Any) -> Any:
            run = self._started()
            try:
                value = handler(ctx, **arguments)
            except BaseException as exc:
                self._finished(run, raised=exc)
                raise
            if inspect.isawaitable(value):
                return self._settled(run, value)  # the runtime awaits it
            self._finished(run, value=value)
            return value

        return tracked

    def _started(self) -> _Run:
        run = self.current  # the call this run belongs to, even if it overruns
        with self._lock:
            run.calls += 1
            self.total += 1
        return run

    def _finished(
        self, run: _Run, *, value: Any = None, raised: BaseException | None = None
    ) -> None:
        with self._lock:
            run.finished += 1
            if raised is not None:
                run.raised = raised
            else:
                run.outputs.append(value)

    async def _settled(self, run: _Run, awaitable: Awaitable[Any]) -> Any:
        try:
            value = await awaitable
        except BaseException as exc:
            self._finished(run, raised=exc)
            raise
        self._finished(run, value=value)
        return value


class _Harness:
    """The fuzzed tool, wrapped, and everything a call needs besides its
    arguments."""

    def __init__(
        self,
        spec: ToolSpec,
        *,
        capabilities: Capabilities | None,
        registry: ToolRegistry | None,
        variables: Mapping[str, str] | None,
        approve: bool,
        timeout_seconds: float | None,
    ) -> None:
        self.spec = spec
        # Validators compiled afresh from the schemas: the contract, judged
        # independently of whatever the runtime uses.
        self.judge = replace(spec)
        self._tracker = _Tracker()
        wrapped = replace(spec, handler=self._tracker.wrap(spec.handler))
        # The runtime gets the tool as registered, validators included.
        object.__setattr__(wrapped, "input_validator", spec.input_validator)
        object.__setattr__(wrapped, "output_validator", spec.output_validator)
        others = [other for other in registry or () if other.name != spec.name]
        self.registry = ToolRegistry([*others, wrapped])
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
        self.codes: dict[str, int] = {}
        """How many calls were answered with each code."""
        self.refusals: dict[tuple[str, str], _Refusal] = {}
        """Valid calls that never reached the handler, by (code, audit rule)."""

    @property
    def handler_calls(self) -> int:
        return self._tracker.total

    def check(self, arguments: dict[str, Any], valid: bool) -> list[tuple[Problem, str]]:
        """Run one call in a fresh fake filesystem; every problem it shows."""
        run = self._tracker.start()
        call = ToolCall(
            call_id=_CALL_ID,
            tool_name=self.spec.name,
            arguments=json.dumps(arguments, ensure_ascii=False),  # as a model sends them
            actor=_ACTOR,
            session_id=_ACTOR,
        )
        problems: list[tuple[Problem, str]] = []
        result: ToolResult | None = None
        store = SQLiteAuditStore(":memory:")  # made outside the fake fs; never sees it
        try:
            with shared_world().filesystem(_EMPTY) as fs:
                _build_world(fs)
                before = _outside_snapshot(fs)
                runtime = ToolRuntime(
                    self.registry,
                    WORKSPACE_ROOT,
                    self.capabilities,
                    store,
                    hooks=self.hooks,
                    variables=self.variables,
                    timeouts=self.timeouts,
                )
                try:
                    result = runtime.execute(call)
                except Exception as exc:
                    problems.append((Problem.EXECUTE_RAISED, _raised(exc)))
                except BaseException as exc:
                    if exc is not run.raised:
                        raise  # a real interrupt of the fuzzer, not the tool's
                    problems.append((Problem.EXECUTE_RAISED, _raised(exc)))
                finally:
                    with warnings.catch_warnings():
                        # An overrunning handler is reported below, not warned about.
                        warnings.simplefilter("ignore", RuntimeWarning)
                        runtime.close(join_timeout=ORPHAN_JOIN_SECONDS)
                if run.finished < run.calls:
                    problems.append(
                        (
                            Problem.HANDLER_STILL_RUNNING,
                            f"the handler was still running {ORPHAN_JOIN_SECONDS:g} s after "
                            "its deadline; it may write to the real disk once the fake "
                            "filesystem is gone",
                        )
                    )
                changed = _outside_changes(before, _outside_snapshot(fs))
            rows = store.rows()
        finally:
            store.close()
        if result is not None:
            self.codes[result.code.value] = self.codes.get(result.code.value, 0) + 1
            if valid and not run.calls:
                self._refused(result, rows)
            problems.extend(self._judge(result, run, valid, rows))
            if _holds_decoy(result, run):
                problems.append(
                    (
                        Problem.OUTSIDE_READ,
                        f"the result holds a file from outside the workspace; {_answered(result)}",
                    )
                )
        if changed:
            where = f"outside the workspace {WORKSPACE_ROOT}"
            problems.append((Problem.OUTSIDE_CHANGED, f"{changed}, {where}"))
        audit = _audit_problem(rows, result)
        if audit:
            problems.append((Problem.AUDIT_ROWS, audit))
        return problems

    def _refused(self, result: ToolResult, rows: list[AuditRecord]) -> None:
        row = rows[0] if len(rows) == 1 else None
        rule = row.rule if row is not None else ""
        reason = (row.reason if row is not None else "") or result.message
        key = (result.code.value, rule)
        if key in self.refusals:
            self.refusals[key].count += 1
        else:
            self.refusals[key] = _Refusal(1, reason)

    def _judge(
        self, result: ToolResult, run: _Run, valid: bool, rows: list[AuditRecord]
    ) -> list[tuple[Problem, str]]:
        answered = _answered(result)
        if not valid:
            if run.calls:
                return [(Problem.INVALID_REACHED_HANDLER, f"the handler ran; {answered}")]
            if result.code is not ErrorCode.INVALID_ARGUMENT:
                return [(Problem.INVALID_NOT_REFUSED, answered)]
            return []
        problems: list[tuple[Problem, str]] = []
        schema_refused = any(row.rule == "schema.input" for row in rows)
        if result.code is ErrorCode.INVALID_ARGUMENT and not run.calls and schema_refused:
            problems.append((Problem.VALID_REFUSED, answered))
        if run.calls > 1:
            problems.append((Problem.HANDLER_RAN_TWICE, f"the handler ran {run.calls} times"))
        stopped = isinstance(run.raised, (CallCancelled, asyncio.CancelledError))
        if run.raised is not None and not isinstance(run.raised, Exception) and not stopped:
            problems.append((Problem.HANDLER_BASE_EXCEPTION, f"the handler {_raised(run.raised)}"))
        if result.code is ErrorCode.TIMEOUT and not stopped:
            # A handler may wait past a deadline (wait_for_file); it must stop
            # when cancelled (CallCancelled, or a coroutine's CancelledError:
            # the runtime's doing, never a problem), not run on and return.
            problems.append((Problem.TIMEOUT, answered))
        if result.code is ErrorCode.OUTPUT_INVALID:
            if run.outputs and not _is_json(run.outputs[0]):
                detail = f"returned {type(run.outputs[0]).__name__}; {answered}"
                problems.append((Problem.OUTPUT_NOT_JSON, detail))
            else:
                problems.append((Problem.OUTPUT_INVALID, answered))
        elif result.ok and run.outputs:
            judge = self.judge.output_validator
            output = _as_json(run.outputs[0])
            errors = judge.errors(output) if judge is not None else []
            if errors:
                problems.append(
                    (Problem.OUTPUT_UNCHECKED, f"answered OK, but {_short('; '.join(errors))}")
                )
        return problems


def _answered(result: ToolResult) -> str:
    return f"answered {result.code}: {_short(result.message)}"


def _holds_decoy(result: ToolResult, run: _Run) -> bool:
    texts = [result.message, json.dumps(result.data, ensure_ascii=False, default=repr)]
    texts.extend(json.dumps(output, ensure_ascii=False, default=repr) for output in run.outputs)
    return any(DECOY_MARK in text for text in texts)


def _raised(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"raised {type(exc).__name__}" + (f": {_short(text)}" if text else "")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _as_json(value: Any) -> Any:
    """``value`` as the runtime judges it: through JSON text and back."""
    return json.loads(json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False))


def _audit_problem(rows: list[AuditRecord], result: ToolResult | None) -> str:
    """Why the rows are not one finished row with the result's code ('' when they are)."""
    described = ", ".join(f"{row.call_id}:{row.state}" for row in rows) or "none"
    if len(rows) != 1 or rows[0].call_id != _CALL_ID:
        return f"expected one audit row for the call, found {len(rows)} ({described})"
    row = rows[0]
    if not row.state.finished:
        return f"the audit row was left {row.state}"
    if result is not None and row.result_code is not result.code:
        return f"the audit row says {row.result_code}, the result {result.code}"
    return ""


# -- the fake world ---------------------------------------------------------


_EMPTY = Cassette(
    kind="case",
    name="fuzz",
    session=Session(),
    workspace=WorkspaceState(root=WORKSPACE_ROOT),
    interactions=(),
)
"""The world every example starts from (``_build_world`` adds the files)."""


def _build_world(fs: Any) -> None:
    for path, content in OUTSIDE_FILES.items():
        fs.create_file(path, contents=content)
    if not fs.exists(WORKSPACE_ROOT):
        fs.create_dir(WORKSPACE_ROOT)
    for relative, content in WORKSPACE_FILES.items():
        fs.create_file(posixpath.join(WORKSPACE_ROOT, relative), contents=content)
    for relative, target in WORKSPACE_SYMLINKS.items():
        fs.create_symlink(posixpath.join(WORKSPACE_ROOT, relative), target)


Entry = tuple[Any, ...]


def _outside_snapshot(fs: Any) -> dict[str, Entry]:
    """Every entry of the fake filesystem outside the workspace root, read
    from pyfakefs' objects (a walk through ``os`` costs ten times more and
    changes access times): kind and mode; a file's inode, link count, mtime
    and bytes; a symlink's target."""
    entries: dict[str, Entry] = {}
    pending: list[tuple[str, Any]] = [("", fs.root)]
    while pending:
        prefix, directory = pending.pop()
        for name, item in directory.entries.items():
            path = f"{prefix}/{name}"
            if path == WORKSPACE_ROOT:
                continue
            mode = item.st_mode
            if stat.S_ISDIR(mode):
                entries[path] = ("directory", mode)
                pending.append((path, item))
            elif stat.S_ISLNK(mode):
                entries[path] = ("symlink", item.byte_contents)
            else:
                entries[path] = (
                    "file",
                    mode,
                    item.st_ino,
                    item.st_nlink,
                    item.st_mtime,
                    item.byte_contents,
                )
    return entries


def _outside_changes(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> str:
    """What changed, as ``created /a; modified /b`` ('' when nothing did)."""
    parts = []
    for verb, paths in (
        ("created", sorted(after.keys() - before.keys())),
        ("removed", sorted(before.keys() - after.keys())),
        ("modified", sorted(p for p in before.keys() & after.keys() if before[p] != after[p])),
    ):
        if paths:
            shown = ", ".join(paths[:_LISTED])
            more = f" and {len(paths) - _LISTED} more" if len(paths) > _LISTED else ""
            parts.append(f"{verb} {shown}{more}")
    return "; ".join(parts)


# -- arguments --------------------------------------------------------------


_CONSTRAINING = frozenset(
    {
        "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains",
        "dependentRequired", "dependentSchemas", "enum", "exclusiveMaximum",
        "exclusiveMinimum", "if", "items", "maxContains", "maxItems", "maxLength",
        "maxProperties", "maximum", "minContains", "minItems", "minLength",
        "minProperties", "minimum", "multipleOf", "not", "oneOf", "pattern",
        "patternProperties", "prefixItems", "properties", "propertyNames", "required",
        "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems",
    }
)  # fmt: skip
"""JSON Schema 2020-12 keywords that can refuse a value (the rest annotate)."""


def _accepts_every_object(schema: Any) -> bool:
    """Whether ``schema`` plainly accepts every JSON object: only ``type``
    allowing objects, and properties and additionalProperties that accept
    anything. False when unsure."""
    if schema is True:
        return True
    if not isinstance(schema, Mapping):
        return False
    for keyword in _CONSTRAINING.intersection(schema):
        value = schema[keyword]
        if keyword == "type":
            if value != "object" and not (isinstance(value, list) and "object" in value):
                return False
        elif keyword == "properties":
            if not isinstance(value, Mapping) or not all(map(_accepts_anything, value.values())):
                return False
        elif keyword == "additionalProperties":
            if not _accepts_anything(value):
                return False
        else:
            return False
    return True


def _accepts_anything(schema: Any) -> bool:
    return schema is True or (isinstance(schema, Mapping) and not _CONSTRAINING & set(schema))


def _within_runtime_limits(value: Any, depth: int = 0) -> bool:
    """Whether the runtime parses ``value`` at all: JSON text, integers and
    nesting within its limits (beyond them it answers INVALID_REQUEST before
    any schema is asked, which is not what is fuzzed here)."""
    if depth > MAX_JSON_DEPTH:
        return False
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return True
    if isinstance(value, int):
        return -MAX_JSON_INTEGER <= value <= MAX_JSON_INTEGER
    if isinstance(value, dict):
        return all(_within_runtime_limits(child, depth + 1) for child in value.values())
    if isinstance(value, list):
        return all(_within_runtime_limits(child, depth + 1) for child in value)
    return False


def _runnable(strategy: SearchStrategy[dict[str, Any]]) -> SearchStrategy[dict[str, Any]]:
    return strategy.filter(lambda value: _within_runtime_limits(value) and _is_json(value))


def _path_probes(judge: ToolSpec) -> dict[str, list[str]]:
    """For each top-level path-like argument, the probes its schema accepts."""
    schema = judge.input_schema
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return {}
    defs = schema.get("$defs")
    found: dict[str, list[str]] = {}
    for name in sorted(properties):
        subschema = properties[name]
        if not PATH_ARGUMENT.search(name) or subschema is False:
            continue
        if subschema is True:
            accepted = list(PATH_PROBES)
        elif isinstance(subschema, Mapping):
            document = dict(subschema)
            if defs is not None and "$defs" not in document:
                document["$defs"] = defs
            validator = SchemaValidator(document)
            accepted = [probe for probe in PATH_PROBES if validator.is_valid(probe)]
        else:
            continue
        if accepted:
            found[name] = accepted
    return found


def _with_probes(
    strategy: SearchStrategy[dict[str, Any]],
    probes: Mapping[str, list[str]],
    validator: SchemaValidator,
) -> SearchStrategy[dict[str, Any]]:
    """``strategy``, and as often its values with one path argument set to a probe."""
    if not probes:
        return strategy
    choice = st.one_of(
        [st.tuples(st.just(name), st.sampled_from(values)) for name, values in probes.items()]
    )
    probed = (
        st.tuples(strategy, choice)
        .map(lambda parts: {**parts[0], parts[1][0]: parts[1][1]})
        .filter(validator.is_valid)
    )
    return st.one_of(strategy, probed)


def _explicit_examples(
    strategy: SearchStrategy[dict[str, Any]],
    probes: Mapping[str, list[str]],
    validator: SchemaValidator,
) -> tuple[dict[str, Any], ...]:
    """The simplest valid arguments with each path argument set to each probe."""
    if not probes:
        return ()
    try:
        base: dict[str, Any] = find(
            strategy,
            lambda _value: True,
            # Hypothesis tries the simplest choices first: no shrinking needed.
            settings=settings(
                database=None,
                derandomize=True,
                max_examples=1,
                phases=(Phase.generate,),
                suppress_health_check=_HEALTH_CHECKS,
            ),
        )
    except (NoSuchExample, Unsatisfiable):
        return ()
    found: list[dict[str, Any]] = []
    for name, values in probes.items():
        for probe in values:
            arguments = {**base, name: probe}
            if arguments not in found and validator.is_valid(arguments):
                found.append(arguments)
    return tuple(found)


# -- the search -------------------------------------------------------------


class _ExampleFailed(ToolguardError):
    """Raised inside the Hypothesis test so that it shrinks the example."""

    def __init__(self, problem: Problem, detail: str, arguments: dict[str, Any]) -> None:
        super().__init__(f"{problem}: {detail}")
        self.problem = problem
        self.detail = detail
        self.arguments = arguments


class _Search:
    """Hypothesis over one kind of arguments (valid or invalid), until no
    new kind of problem turns up."""

    def __init__(
        self,
        harness: _Harness,
        strategy: SearchStrategy[dict[str, Any]],
        *,
        valid: bool,
        explicit: tuple[dict[str, Any], ...],
    ) -> None:
        self.harness = harness
        self.strategy = strategy
        self.valid = valid
        self.explicit = explicit
        self.calls = 0

    def run(self, examples: int, seed_value: int, notes: list[str]) -> list[FuzzFailure]:
        """One minimal failure per problem: after each failure the search
        runs again with that problem known, so another one can surface."""
        known: set[Problem] = set()
        failures: list[FuzzFailure] = []
        for _ in range(len(Problem)):
            failure = self._once(examples, seed_value, known, notes)
            if failure is None:
                break
            failures.append(failure)
            if failure.problem is Problem.FLAKY:
                break  # another run would meet the same unsteady failure
            known.add(failure.problem)
        return failures

    def _once(
        self, examples: int, seed_value: int, known: set[Problem], notes: list[str]
    ) -> FuzzFailure | None:
        def body(arguments: dict[str, Any]) -> None:
            self.calls += 1
            for problem, detail in self.harness.check(arguments, self.valid):
                if problem not in known:
                    raise _ExampleFailed(problem, detail, arguments)

        test: Callable[..., None] = body
        for arguments in reversed(self.explicit):
            test = example(arguments)(test)
        test = given(self.strategy)(test)
        test = seed(seed_value)(test)
        test = settings(
            max_examples=examples,
            database=None,
            deadline=None,  # the handler runs on a worker thread under its own deadline
            derandomize=False,  # the seed decides
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=_HEALTH_CHECKS,
            report_multiple_bugs=False,
            print_blob=False,
            verbosity=Verbosity.quiet,
        )(test)
        kind = "valid" if self.valid else "invalid"
        try:
            test()
        except _ExampleFailed as failed:
            return self._failure(failed)
        except Unsatisfiable:
            notes.append(f"no {kind} arguments could be generated from the input schema")
        except Flaky as flaky:
            inner = next(
                (e for e in getattr(flaky, "exceptions", ()) if isinstance(e, _ExampleFailed)),
                None,
            )
            detail = f"a failure did not happen again with the same arguments ({flaky})"
            if inner is not None and inner.problem not in known:
                detail = f"{inner.detail} (but not every time with these arguments)"
            arguments = inner.arguments if inner is not None else None
            return FuzzFailure(
                self.harness.spec.name, Problem.FLAKY, _short(detail), arguments, self.valid
            )
        return None

    def _failure(self, failed: _ExampleFailed) -> FuzzFailure:
        return FuzzFailure(
            self.harness.spec.name, failed.problem, failed.detail, failed.arguments, self.valid
        )
