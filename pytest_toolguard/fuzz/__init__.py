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
  (``harness.world.DECOY_MARKER``): the tool did not read outside;
- the handler never reaches the real disk from the fake world (SQLite on
  a file, a process, a real file opened for writing: ``harness.escapes``
  refuses it, and it is the ``real-disk`` problem);
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

The fuzz workspace (``fuzz.workspace``). The workspace root is ``WORKSPACE_ROOT``
holding ``WORKSPACE_FILES`` and ``WORKSPACE_SYMLINKS``; ``OUTSIDE_FILES``
are decoys, planted in a fresh ``harness.world.FakeWorld`` for every example.
A tool that needs a workspace of its own (a git server needs a repository)
is given one with ``workspace=``: every example starts from that state
instead, at the same root, beside the same decoys.
The runtime gets an in-memory audit store (sqlite never sees pyfakefs),
``variables={"run_id": RUN_ID}`` (the built-in run tools need it), and by
default capabilities allowing this tool at its risk, reading
and writing the whole workspace, and no network host. Tools whose risk
needs approval (external, dangerous) are approved by an ``Approver`` that
allows every call (``approve=True``, the default), so their handlers run;
with ``approve=False`` they must answer ``APPROVAL_REQUIRED``, their
handlers never run and the report is skipped. Only the filesystem is
fake: a handler that runs a subprocess or opens SQLite on a file is
refused (``real-disk``). A handler that reaches the network (a socket
connected, a host resolved: loopback too) gets ``NetworkRefused``, a
``ConnectionRefusedError``, and nothing is sent (``fuzz.network``): its
error is the tool's to answer, and answering OK anyway is a problem
(``network-refused-ok``). ``network=True`` lets it through, and the
report says so.
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

The directory world (``fuzz.directory``). A tool declaring
``world="directory"`` (or its registry's default, or ``world="directory"``
given here, chosen as replay chooses) reaches files through C libraries or
other processes: it is fuzzed in a ``harness.DirectoryWorld`` of the same
workspace on the real disk, inside a container that stands for the
machine's root, so decoys, probes and paths climbing out stay inside it.
The same properties are judged on the real tree: "outside changed" covers
the whole container but the workspace (a sibling sharing the root's
prefix, a link followed out, a file above the world); reads outside are
seen through the decoys' marker; accesses only when the world observes
them (``DirectoryWorld.accesses`` not None). An argument that would reach
the real machine outside the container (``~/.ssh``, ``$HOME``, more
``..`` than the container is deep) is never given to the tool: those
examples are not run, and a note says so.

The package does not import pytest; the plugin turns reports into items.
Its modules: ``workspace`` (the fuzz workspace), ``directory`` (its directory
twin), ``arguments`` (what is tried),
``call`` (one call, checked), ``search`` (Hypothesis), ``report``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..capabilities import Capabilities
from ..harness.fake_filesystem import FakeFilesystems
from ..registry import ToolRegistry, ToolSpec
from ..replay.cassette import WorkspaceState
from ..strategies import UnsupportedSchema, arguments_for
from .arguments import (
    accepts_every_object,
    explicit_examples,
    path_probes,
    runnable,
    with_probes,
)
from .call import LISTED, CallChecker, Refusals, short
from .report import FuzzFailure, FuzzReport, Problem
from .search import Search

__all__ = [
    "FuzzFailure",
    "FuzzReport",
    "Problem",
    "check_call",
    "fuzz_registry",
    "fuzz_tool",
]


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
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
    network: bool = False,
    workspace: WorkspaceState | None = None,
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
    replaces the tool's deadline; ``fake_filesystems`` is the ``FakeFilesystems`` the
    examples run in (default: the process's); ``world`` is ``auto`` (the
    tool's ``world``, else the registry's), ``fake`` or ``directory``;
    ``network=True`` lets handlers reach the network (refused by default:
    ``fuzz.network``), and the report says so.
    ``workspace`` is the state every example's workspace starts from
    (default ``fuzz.workspace.FUZZ_WORKSPACE``; a cassette's ``workspace``, or a
    ``WorkspaceState`` of a repository for a tool that needs one), placed
    at ``WORKSPACE_ROOT`` as ``fuzz.workspace.starting_workspace`` says.

    Never raises for a tool's behaviour; a schema outside the supported
    subset, or a handler that no valid call reached, gives a report with
    ``skipped`` set (saying why). Raises ``ValueError`` for ``examples < 1``
    or an unknown ``world``."""
    if examples < 1:
        raise ValueError(f"examples must be at least 1, got {examples}")
    checker = CallChecker(
        spec,
        capabilities=capabilities,
        registry=registry,
        variables=variables,
        approve=approve,
        timeout_seconds=timeout_seconds,
        fake_filesystems=fake_filesystems,
        world=world,
        network=network,
        workspace=workspace,
    )
    notes: list[str] = []
    failures: list[FuzzFailure] = []
    try:  # UnsupportedSchema comes when a strategy is built, or lazily when drawn
        valid_strategy = runnable(arguments_for(checker.judge, valid=True))
        invalid_strategy = runnable(arguments_for(checker.judge, valid=False))
        validator = checker.judge.input_validator
        probes = path_probes(checker.judge)
        valid_search = Search(
            checker,
            with_probes(valid_strategy, probes, validator),
            valid=True,
            explicit=explicit_examples(valid_strategy, probes, validator),
        )
        invalid_search = Search(checker, invalid_strategy, valid=False, explicit=())
        searches = [valid_search]
        if accepts_every_object(spec.input_schema):
            # Hypothesis would spend seconds failing to find what does not exist.
            notes.append("no invalid arguments: the input schema accepts every object")
        else:
            searches.append(invalid_search)
        for search in searches:
            failures.extend(search.run(examples, seed, notes))
    except UnsupportedSchema as exc:
        return FuzzReport(spec.name, 0, 0, 0, (), skipped=str(exc), seed=seed, network=network)
    finally:
        checker.close()
    if checker.not_run:
        notes.append(_not_run(checker.not_run))
    if checker.network_refused:
        notes.append(
            f"network refused in {checker.network_refused} calls (first: "
            f"{checker.first_refused}); fuzz_tool(..., network=True) to allow it"
        )
    skipped = None
    if checker.handler_calls == 0:
        never_ran = _never_ran(valid_search.calls, checker.refusals)
        if failures:
            notes.append(never_ran)
        else:
            skipped = never_ran
    return FuzzReport(
        tool=spec.name,
        valid_calls=valid_search.calls,
        invalid_calls=invalid_search.calls,
        handler_calls=checker.handler_calls,
        failures=tuple(failures),
        skipped=skipped,
        notes=tuple(notes),
        seed=seed,
        codes=dict(sorted(checker.codes.items())),
        network=network,
    )


def _never_ran(valid_calls: int, refusals: Mapping[tuple[str, str], Refusals]) -> str:
    """Why the handler never ran, for a skipped report."""
    if not valid_calls:
        return "the handler never ran: no valid arguments could be generated from the input schema"
    ranked = sorted(refusals.items(), key=lambda entry: (-entry[1].count, entry[0]))
    shown = "; ".join(
        f"{refusal.count} answered {code}"
        + (f" by {rule}" if rule else "")
        + (f" ({short(refusal.reason, 160)})" if refusal.reason else "")
        for (code, rule), refusal in ranked[:LISTED]
    )
    more = f"; and {len(ranked) - LISTED} more kinds" if len(ranked) > LISTED else ""
    return (
        f"the handler never ran: every one of {valid_calls} valid calls was refused: {shown}{more}"
    )


def _not_run(not_run: Mapping[str, int]) -> str:
    """The note on examples never run in the directory world."""
    shown = ", ".join(repr(value) for value in sorted(not_run)[:LISTED])
    more = f" and {len(not_run) - LISTED} more" if len(not_run) > LISTED else ""
    return (
        f"{sum(not_run.values())} examples not run in the directory world: an argument "
        f"would reach the real machine outside its container ({shown}{more})"
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
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
    network: bool = False,
    workspace: WorkspaceState | None = None,
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
                fake_filesystems=fake_filesystems,
                world=world,
                network=network,
                workspace=workspace,
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
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
    network: bool = False,
    workspace: WorkspaceState | None = None,
) -> tuple[FuzzFailure, ...]:
    """Run one call of ``spec`` with ``arguments`` in a fresh fuzz workspace and
    return every failure it shows (empty when it passes every check).
    Whether the arguments are valid is judged by the tool's input schema.
    Options as for ``fuzz_tool``."""
    checker = CallChecker(
        spec,
        capabilities=capabilities,
        registry=registry,
        variables=variables,
        approve=approve,
        timeout_seconds=timeout_seconds,
        fake_filesystems=fake_filesystems,
        world=world,
        network=network,
        workspace=workspace,
    )
    values = dict(arguments)
    valid = checker.judge.input_validator.is_valid(values)
    try:
        found = checker.check(values, valid)
    finally:
        checker.close()
    return tuple(
        FuzzFailure(spec.name, problem, detail, values, valid) for problem, detail in found
    )
