"""The fault matrix catches bugs: tools broken on purpose fail the fault
aimed at their bug, and the correctly written twin passes the same cell.

Each tool (``tests/broken_tools.py``) is called once in a one-call case
written here as YAML; ``run_cell`` injects one fault into that call. The
two gaps found on the way (a handler's own check-then-open race; a torn
rewrite no longer than the old content) are closed: ``symlink_race`` and
``partial_write`` catch them. The harness's oracles (outside snapshots, accesses,
effects against declarations) have their own
broken tools in ``test_oracles_catch_bugs.py``.

Which fault catches which bug, and the problem the cell reports
(N: a call or an alignment number):

============================  ====================  =============================================
broken tool (its bug)         fault                 problem the cell reports
============================  ====================  =============================================
write_trusting_the_check      symlink_escape        outside the workspace changed:
(executor checks the path,                          /toolguard-outside/mirror/notes/todo.md
handler opens the host path)
write_in_chunks (truncates,   partial_write,        the write was interrupted, but the workspace
writes 8 bytes at a time)     disk_failure,         changed: notes/todo.md
                              symlink_race
append_line_claiming_         duplicate_submission  the tool is declared idempotent, but a second
idempotence (appends)                               run without a key changed notes/log.txt
write_after_deadline (writes  timeout               the call timed out, but the workspace
with open() on CallCancelled)                       changed: notes/todo.md
encode_base64 (echoes its     secret_in_payload     the fake secret (base64/N) is in the audit
input as base64)                                    database (and: in the recorded cassette)
read_text_returning_a_number  oversized_output and  oversized_output-1: expected OK, got
(int where the output schema  capability_revoked,   OUTPUT_INVALID: output.content: expected
says string)                  both incidentally;    string, got integer. Replay: result.code
                              replay                recorded OK, replayed OUTPUT_INVALID
read_url_decoded (unquotes    path_traversal (and   path_traversal-N: the result holds a file
its path after the check)     symlink_escape)       from outside the workspace
wait_for_job (ignores         timeout               handler still running: timeout-1
ctx.cancelled, keeps waiting)
write_check_then_open (its    symlink_race          outside the workspace changed (the link
own realpath check, then                            swapped in after its realpath, before its
open())                                             open)
write_in_chunks rewriting a   partial_write         the write was interrupted, but the workspace
file with content no longer                         changed (ENOSPC as the file first grows)
than the old
read_undeclared_path (no      path_traversal (its   path_traversal-N: the result holds a file
``paths``; reads ../)         argument is named     from outside the workspace
                              like a path)
read_leaving_a_cache          capability_revoked    a read-only tool ran in a read-only session,
(Risk.READ, writes a file)                          but the workspace changed: ...
start_job (its own thread     every fault that runs the handler answered with threads it
outlives the handler)         the real handler      started still running: Thread-N (done)
============================  ====================  =============================================

Also here: every built-in fault passes (or is n/a) on a fixed subset of the
shipped cassettes and one case (the full matrix runs in the plugin).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import broken_tools as broken
import pytest

from pytest_toolguard.faults import BUILTIN_FAULTS, Fault, Target, run_cell, select_faults, targets
from pytest_toolguard.faults import cell as cell_module
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import Cassette, load, loads
from pytest_toolguard.replay.player import replay
from pytest_toolguard.tools import builtin_registry, read_text, write_file

ROOT = Path(__file__).resolve().parents[2]

NOTES = {"notes/todo.md": "- old\n"}
"""The workspace of most cases: one short file under the write root."""

REWRITE = {
    "path": "notes/todo.md",
    "content": "- a new line, long enough for a full disk to cut it in half\n",
}
APPEND = {"path": "notes/log.txt", "line": "ran once"}
TEXT = {"text": "an ordinary sentence to encode"}
READ = {"path": "notes/todo.md"}


def one_call_case(
    tool_name: str, arguments: Mapping[str, Any], files: Mapping[str, str]
) -> Cassette:
    """A case of one call of ``tool_name`` that succeeded, in a session that
    may read everywhere and write under ``notes/``."""
    text = f"""
format_version: 1
kind: case
description: one call of {tool_name}, recorded as a success
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [notes]
workspace:
  files: {json.dumps(dict(files))}
interactions:
  - call:
      call_id: call-01
      tool_name: {tool_name}
      arguments: {json.dumps(dict(arguments))}
    result:
      ok: true
      code: OK
"""
    return loads(text, source=f"<one call of {tool_name}>")


def run(
    fault: str, spec: ToolSpec, arguments: Mapping[str, Any], files: Mapping[str, str] = NOTES
) -> CellOutcome:
    """``fault`` injected into the one call of ``spec`` (alone in its registry)."""
    registry = ToolRegistry([spec])
    cassette = one_call_case(spec.name, arguments, files)
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


def run_all(
    spec: ToolSpec, arguments: Mapping[str, Any], files: Mapping[str, str] = NOTES
) -> dict[str, CellOutcome]:
    """Every built-in fault against the one call of ``spec``."""
    return {fault.name: run(fault.name, spec, arguments, files) for fault in BUILTIN_FAULTS}


def reported(outcome: CellOutcome, *fragments: str) -> bool:
    """Whether one problem line of ``outcome`` holds every fragment."""
    return any(all(fragment in problem for fragment in fragments) for problem in outcome.problems)


# -- broken tools, the fault that catches each, and the correct twin -------------------


@dataclass(frozen=True)
class Bug:
    """A broken tool, the fault aimed at its bug, and a tool without it."""

    broken: ToolSpec
    twin: ToolSpec
    fault: str
    arguments: Mapping[str, Any]
    problem: tuple[str, ...]
    """Fragments one line of the cell's problems must hold."""
    files: Mapping[str, str] = field(default_factory=lambda: NOTES)

    @property
    def id(self) -> str:
        return f"{self.broken.name}-{self.fault}"


BUGS = (
    # The executor checks the path before the handler; the handler then opens
    # the host path, and the fault swaps a symlink to outside in between.
    Bug(
        broken.write_trusting_the_check,
        write_file,
        "symlink_escape",
        REWRITE,
        ("outside the workspace changed", "/toolguard-outside/mirror/notes/todo.md"),
    ),
    # Truncated, then written in chunks: the full disk leaves half a file.
    Bug(
        broken.write_in_chunks,
        write_file,
        "partial_write",
        REWRITE,
        ("the write was interrupted, but the workspace changed: notes/todo.md",),
    ),
    # Declared idempotent, appends: a second run without a key adds a line.
    Bug(
        broken.append_line_claiming_idempotence,
        broken.append_line,
        "duplicate_submission",
        APPEND,
        ("declared idempotent, but a second run without a key changed notes/log.txt",),
    ),
    # Swallows CallCancelled and writes with open() after the deadline.
    Bug(
        broken.write_after_deadline,
        write_file,
        "timeout",
        REWRITE,
        ("the call timed out, but the workspace changed: notes/todo.md",),
    ),
    # Echoes its input as base64: no redaction pattern matches that form.
    Bug(
        broken.encode_base64,
        broken.echo_text,
        "secret_in_payload",
        TEXT,
        ("the fake secret (base64/", "is in the audit database"),
    ),
    # content is an int where the output schema says string. No fault aims
    # at output schemas: the runtime answers OUTPUT_INVALID, and a fault that
    # expects the recorded OK flags it (oversized_output, capability_revoked
    # for a read tool). Replay flags it too (test below); the fuzzer as well.
    Bug(
        broken.read_text_returning_a_number,
        read_text,
        "oversized_output",
        READ,
        ("expected OK, got OUTPUT_INVALID", "output.content"),
    ),
    # URL-decodes its path after the executor's check and opens the host
    # path: an encoded ../ reads the decoy outside.
    Bug(
        broken.read_url_decoded,
        broken.read_url_decoded_in_sandbox,
        "path_traversal",
        READ,
        ("the result holds a file from outside the workspace",),
    ),
)


@pytest.mark.parametrize("bug", BUGS, ids=lambda bug: bug.id)
def test_fault_fails_the_broken_tool(bug: Bug) -> None:
    outcome = run(bug.fault, bug.broken, bug.arguments, bug.files)

    assert outcome.status == "fail", outcome
    assert reported(outcome, *bug.problem), outcome.problems


@pytest.mark.parametrize("bug", BUGS, ids=lambda bug: bug.id)
def test_correct_twin_passes_the_same_cell(bug: Bug) -> None:
    outcome = run(bug.fault, bug.twin, bug.arguments, bug.files)

    assert outcome.status == "pass", outcome.problems


def test_non_atomic_write_that_stays_inside_fails_only_the_disk_and_race_faults() -> None:
    # Its own realpath check, then open(): symlink_race swaps a link in between.
    outcomes = run_all(broken.write_in_chunks, REWRITE)

    failed = {name for name, outcome in outcomes.items() if outcome.status == "fail"}
    assert failed == {"partial_write", "disk_failure", "symlink_race"}, {
        name: outcomes[name].problems for name in failed
    }


def test_output_breaking_its_schema_is_a_replay_difference() -> None:
    # The call recorded with the correct read_text, replayed with the broken one.
    recorded = loads(
        """
format_version: 1
kind: case
session: {}
workspace:
  files:
    notes/todo.md: "- old\\n"
interactions:
  - call:
      tool_name: read_text
      arguments: {path: notes/todo.md}
    result:
      ok: true
      code: OK
      data: {path: notes/todo.md, content: "- old\\n", truncated: false, total_chars: 6}
""",
        source="<read_text recorded>",
    )
    broken_read_text = replace(broken.read_text_returning_a_number, name="read_text")

    report = replay(recorded, ToolRegistry([broken_read_text]))

    codes = [(d.field, d.recorded, d.replayed) for d in report.differences]
    assert ("result.code", "OK", "OUTPUT_INVALID") in codes, report.differences
    assert replay(recorded, ToolRegistry([read_text])).ok


# -- a handler still running when the cell ends --------------------------------------


@pytest.fixture
def job_done(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The event a waiting tool waits for, set when the test ends (so no
    thread outlives it); the cell waits 0.5 s, not 5, for late handlers."""
    monkeypatch.setattr(cell_module, "JOIN_SECONDS", 0.5)
    done = threading.Event()
    yield done
    done.set()


def test_handler_ignoring_cancellation_is_still_running_at_teardown(
    job_done: threading.Event,
) -> None:
    spec = broken.waiting_ignoring_cancel(job_done)

    with pytest.warns(RuntimeWarning, match="handler still running"):
        outcome = run("timeout", spec, {"job": "nightly"})

    assert outcome.status == "fail", outcome
    assert reported(outcome, "handler still running"), outcome.problems


def test_handler_ending_when_cancelled_passes_timeout(job_done: threading.Event) -> None:
    outcome = run("timeout", broken.waiting_until_cancelled(job_done), {"job": "nightly"})

    assert outcome.status == "pass", outcome.problems


# -- gaps: bugs no fault catches yet ---------------------------------------------------


def test_symlink_swapped_between_a_handlers_check_and_open_is_caught() -> None:
    outcome = run("symlink_race", broken.write_check_then_open, REWRITE)

    assert outcome.status == "fail", outcome


def test_tearing_a_rewrite_of_similar_size_is_caught_by_partial_write() -> None:
    similar = {"notes/todo.md": "x" * len(REWRITE["content"])}

    outcome = run("partial_write", broken.write_in_chunks, REWRITE, similar)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "the write was interrupted, but the workspace changed"), outcome


def test_undeclared_path_argument_is_caught_by_path_traversal() -> None:
    outcome = run("path_traversal", broken.read_undeclared_path, READ)

    assert outcome.status == "fail", outcome


def test_read_tool_that_writes_is_caught_by_capability_revoked() -> None:
    outcome = run("capability_revoked", broken.read_leaving_a_cache, READ)

    assert outcome.status == "fail", outcome
    assert "a read-only tool ran in a read-only session, but the workspace changed" in str(
        outcome.problems
    )


def test_handler_thread_left_running_is_caught_by_some_fault() -> None:
    done = threading.Event()
    started: list[threading.Thread] = []

    @tool(name="start_job", input_schema=broken.WAIT_INPUT)
    def start_job(ctx: Any, job: str) -> dict[str, Any]:
        """Starts a job on a thread of its own and returns at once."""
        worker = threading.Thread(target=done.wait, args=(30,), daemon=True)
        worker.start()
        started.append(worker)
        return {"job": job}

    try:
        outcome = run("oversized_output", start_job, {"job": "nightly"})
    finally:
        done.set()
        for worker in started:
            worker.join(5)

    assert started, "the tool never ran"
    assert outcome.status == "fail", outcome
    assert "threads started during the cell still running" in str(outcome.problems)


# -- the built-in tools pass every fault on the shipped files --------------------------

SHIPPED = (
    "cassettes/code_editing.yaml",
    "cassettes/feedback_analysis.yaml",
    "cassettes/refusals.yaml",
    "cases/duplicate_idempotency_key.yaml",
)
"""Every shipped cassette and one case (the full matrix runs in the plugin)."""


def _selected_targets() -> list[Target]:
    """Of each shipped file, the first two calls and the first call of every
    other tool: each built-in tool at least once, in bounded time."""
    registry = builtin_registry()
    chosen: list[Target] = []
    for source in SHIPPED:
        seen: set[str] = set()
        for target in targets(load(ROOT / source, source=source), registry, source):
            if target.index < 2 or target.call.tool_name not in seen:
                chosen.append(target)
            seen.add(target.call.tool_name)
    return chosen


SELECTED = _selected_targets()
HTTP_FAULTS = ("network_error", "http_error", "late_response", "http_redirect")
NO_BUILTIN_TARGET = (
    *HTTP_FAULTS,
    "secret_by_name",
    "process_killed",
    "hash_seed",
    "slow_world",
    "async_loop",
    "shell_injection",
)
"""Faults no built-in tool gives a target: they make no HTTP request, take
no secret-named argument, run in the fake world, build no set, read no
clock, are not ``async def`` and start no process (those faults run in
test_http_replay.py, test_oracles_catch_bugs.py, test_process_killed.py,
test_misses_hash_seed.py, test_misses_time_budget.py, test_misses_async.py
and test_misses_shell.py)."""
CELLS = [
    pytest.param(target, fault, id=f"{target.source}-{target.label}-{fault.name}")
    for target in SELECTED
    for fault in BUILTIN_FAULTS
]


@pytest.mark.parametrize(("target", "fault"), CELLS)
def test_builtin_tools_pass_every_fault_on_shipped_files(target: Target, fault: Fault) -> None:
    outcome = run_cell(fault, target, builtin_registry())

    assert outcome.status in ("pass", "n/a"), outcome.problems


def test_the_shipped_subset_exercises_every_fault_and_builtin_tool() -> None:
    # Otherwise the sweep above could pass by being n/a everywhere. The built-in
    # tools make no HTTP request: the HTTP faults run in test_http_replay.py.
    idle = [
        f.name
        for f in BUILTIN_FAULTS
        if f.name not in NO_BUILTIN_TARGET and not any(f.applies(t) for t in SELECTED)
    ]
    untested = set(builtin_registry().names()) - {t.call.tool_name for t in SELECTED}

    assert not idle, f"no selected call exercises {idle}"
    assert not untested, f"no selected call uses {sorted(untested)}"
