"""The harness's oracles (what a handler left outside, where it reached,
its effects against its declarations) catch what a broken tool got away with: each
tool of ``tests/broken_tools.py``'s section 8 fails the cell (or fuzz run,
or replay) named here, and its correct twin passes the same one.

The mutation figure (``test_mutation_figure``): every broken tool here and
in ``test_faults_catch_bugs.py`` caught, out of the total; false positives
(a twin failing, a built-in tool failing a fault on the shipped files,
the example project failing its matrix) 0.

=================================  ===============  ==========================================
broken tool (its bug)              caught by        problem reported
=================================  ===============  ==========================================
file_info_expanding_home (stats    path_traversal   the handler accessed outside the workspace:
~ and $VARS expanded on the host)                   /root/.ssh/id_rsa
write_staged_in_tmp (a temporary   response_lost    the handler accessed outside the
file in /tmp, removed after)                        workspace: /tmp/...
write_keeping_a_backup (writes     response_lost    notes/todo.md.bak changed, but the call
path.bak, undeclared)                               declared writes to notes/todo.md
write_url_decoded_name (decodes    response_lost    notes/todo.md changed, but the call
its path after the check)                           declared writes to notes/to%64o.md
first_lines_on_host (walks the     response_lost    the result holds a forbidden .env file's
host tree, .env included)                           content
append_line_retrying (retries the  disk_failure     EIO on the handler's access N and the call
whole append on OSError)                            answered OK, but the files differ ...
write_swallowing_errors (answers   partial_write    the disk was full and the call answered
OK when the write failed)                           OK, but the files differ ...
login_echoing_password (the        secret_by_name   the secret argument's value (raw) is in
password in its output)                             the result
login_refusing_with_the_password   secret_by_name   the secret argument's value (hex) is in
(quotes it hex-encoded in its                       the result
exception)
echo_text given a toolguard_       response_lost    the result holds the real value of the
secrets value                                       secret 'api_key'
read_nfkc_normalised (NFKC after   path_traversal   the handler accessed outside the workspace
the check; root 5 levels deep)
start_job (a thread left running)  response_lost,   the handler answered with threads it
                                   fuzz, replay     started still running
write_check_then_open (its own     symlink_race     outside the workspace changed (the link
realpath check, then open())                        swapped in after its check, before its open)
grep_ignoring_max_results          large_input      max_results=5, but the output holds a list
(never applies its limit)                           of 1000 items
last_line_uncut (a line longer     large_input      with large inputs the output breaks its
than its schema allows)                             schema
copy_to_host_destination (raw      fuzz             outside-changed / outside-access, found
open of an undeclared 2nd path)                     with source=notes.txt filled in
=================================  ===============  ==========================================
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import broken_tools as broken
import pytest

from pytest_toolguard.faults import BUILTIN_FAULTS, iter_cells, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.fuzz import Problem, fuzz_tool
from pytest_toolguard.registry import ToolRegistry, ToolSpec
from pytest_toolguard.replay.cassette import Cassette, load, loads
from pytest_toolguard.replay.player import replay
from pytest_toolguard.replay.registry_loading import load_registry
from pytest_toolguard.tools import write_file

ROOT = Path(__file__).resolve().parents[2]
NOTES = {"notes/todo.md": "- old\n"}
REWRITE = {"path": "notes/todo.md", "content": "- a new line\n"}
READ = {"path": "notes/todo.md"}
LOGIN = {"user": "ada", "password": broken.KNOWN_PASSWORD}
SECRETS = {"api_key": "plain-api-key-value-42"}


def one_call_case(
    tool_name: str,
    arguments: Mapping[str, Any],
    files: Mapping[str, str],
    root: str | None = None,
) -> Cassette:
    """A case of one call of ``tool_name`` that succeeded, in a session that
    may read everywhere and write under ``notes/``."""
    where = f"\n  root: {root}" if root else ""
    text = f"""
format_version: 1
kind: case
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [notes]
workspace:{where}
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


@dataclass(frozen=True)
class Bug:
    """A broken tool, the cell that catches it, and its correct twin."""

    broken: ToolSpec
    twin: ToolSpec
    fault: str
    arguments: Mapping[str, Any]
    problem: str
    files: Mapping[str, str] = field(default_factory=lambda: NOTES)
    root: str | None = None
    secrets: Mapping[str, str] | None = None

    @property
    def id(self) -> str:
        return f"{self.broken.name}-{self.fault}"

    def run(self, spec: ToolSpec) -> CellOutcome:
        registry = ToolRegistry([spec])
        cassette = one_call_case(spec.name, self.arguments, self.files, self.root)
        (fault,) = select_faults(self.fault)
        target = targets(cassette, registry, cassette.source)[0]
        return run_cell(fault, target, registry, secrets=self.secrets)


BUGS = (
    Bug(
        broken.file_info_expanding_home,
        broken.file_info,
        "path_traversal",
        READ,
        "the handler accessed outside the workspace",
    ),
    Bug(
        broken.write_staged_in_tmp,
        write_file,
        "response_lost",
        REWRITE,
        "the handler accessed outside the workspace: /tmp",
    ),
    Bug(
        broken.write_keeping_a_backup,
        write_file,
        "response_lost",
        REWRITE,
        "notes/todo.md.bak changed, but the call declared writes to notes/todo.md",
    ),
    Bug(
        broken.write_url_decoded_name,
        write_file,
        "response_lost",
        {"path": "notes/to%64o.md", "content": "- new\n"},
        "notes/todo.md changed, but the call declared writes to notes/to%64o.md",
    ),
    Bug(
        broken.first_lines_on_host,
        broken.first_lines,
        "response_lost",
        {"path": "."},
        "the result holds a forbidden .env file's content",
    ),
    Bug(
        broken.append_line_retrying,
        broken.append_line_verified,
        "disk_failure",
        {"path": "notes/log.txt", "line": "ran once"},
        "the call answered OK, but the files differ from a run with nothing injected",
    ),
    Bug(
        broken.write_swallowing_errors,
        write_file,
        "partial_write",
        REWRITE,
        "the disk was full and the call answered OK, but the files differ",
    ),
    Bug(
        broken.login_echoing_password,
        broken.login,
        "secret_by_name",
        LOGIN,
        "the secret argument's value (raw) is in the result",
    ),
    Bug(
        broken.login_refusing_with_the_password,
        broken.login_refusing,
        "secret_by_name",
        LOGIN,
        "the secret argument's value (hex) is in the result",
    ),
    Bug(
        broken.echo_text,
        broken.count_chars,
        "response_lost",
        {"text": "<redacted:api_key>"},
        "the result holds the real value of the secret 'api_key'",
        secrets=SECRETS,
    ),
    Bug(
        broken.read_nfkc_normalised,
        broken.read_nfkc_normalised_in_sandbox,
        "path_traversal",
        READ,
        "the handler accessed outside the workspace",
        root="/srv/a/b/c/workspace",
    ),
    Bug(
        broken.write_check_then_open,
        write_file,
        "symlink_race",
        REWRITE,
        "outside the workspace changed",
    ),
    Bug(
        broken.grep_ignoring_max_results,
        broken.grep_lines,
        "large_input",
        {"path": "notes/todo.md", "query": "old", "max_results": 5},
        "max_results=5, but the output holds a list of",
    ),
    Bug(
        broken.last_line_uncut,
        broken.last_line,
        "large_input",
        READ,
        "with large inputs the output breaks its schema",
    ),
)


@pytest.fixture
def job_done() -> Iterator[threading.Event]:
    done = threading.Event()
    yield done
    done.set()


@pytest.mark.parametrize("bug", BUGS, ids=lambda bug: bug.id)
def test_the_oracle_fails_the_broken_tool(bug: Bug) -> None:
    outcome = bug.run(bug.broken)

    assert outcome.status == "fail", outcome
    assert any(bug.problem in problem for problem in outcome.problems), outcome.problems


@pytest.mark.parametrize("bug", BUGS, ids=lambda bug: bug.id)
def test_the_correct_twin_passes_the_same_cell(bug: Bug) -> None:
    outcome = bug.run(bug.twin)

    assert outcome.status == "pass", outcome.problems


def test_a_thread_a_handler_leaves_running_fails_the_cell_without_waiting(
    job_done: threading.Event,
) -> None:
    bug = Bug(broken.starting_a_job(job_done), broken.run_job, "response_lost", {"job": "n"}, "")

    outcome = bug.run(bug.broken)

    assert any("answered with threads it started still running" in p for p in outcome.problems)
    assert bug.run(bug.twin).status == "pass"


def test_replay_reports_a_thread_a_handler_left_running(job_done: threading.Event) -> None:
    cassette = one_call_case("start_job", {"job": "n"}, {})

    report = replay(cassette, ToolRegistry([broken.starting_a_job(job_done)]))

    assert ("runtime", "threads") in {(d.where, d.field) for d in report.differences}
    assert replay(cassette, ToolRegistry([broken.run_job])).ok


# -- the fuzzer --------------------------------------------------------------------------

FUZZ_EXAMPLES = 30


def _fuzz_problems(spec: ToolSpec) -> set[Problem]:
    return {failure.problem for failure in fuzz_tool(spec, examples=FUZZ_EXAMPLES).failures}


FUZZ_BUGS = (
    (broken.file_info_expanding_home, broken.file_info, Problem.OUTSIDE_ACCESS),
    (broken.first_lines_on_host, broken.first_lines, Problem.FORBIDDEN_READ),
    (broken.login_echoing_password, broken.login, Problem.SECRET_LEAKED),
    (broken.write_keeping_a_backup, write_file, Problem.UNDECLARED_CHANGE),
    (broken.copy_to_host_destination, broken.copy_in_workspace, Problem.OUTSIDE_CHANGED),
)


@pytest.mark.parametrize(
    ("bad", "twin", "problem"), FUZZ_BUGS, ids=[bad.name for bad, _t, _p in FUZZ_BUGS]
)
def test_the_fuzzer_catches_the_broken_tool_and_passes_its_twin(
    bad: ToolSpec, twin: ToolSpec, problem: Problem
) -> None:
    assert problem in _fuzz_problems(bad)
    assert _fuzz_problems(twin) == set()


def test_the_fuzzer_reports_a_thread_a_handler_left_running(job_done: threading.Event) -> None:
    assert Problem.THREAD_LEFT in _fuzz_problems(broken.starting_a_job(job_done))
    assert _fuzz_problems(broken.run_job) == set()


# -- the figure --------------------------------------------------------------------------


def _example_project_outcomes() -> list[CellOutcome]:
    """Every built-in fault over the example project's cassettes, with its tools."""
    project = ROOT / "examples" / "agent_project"
    import sys

    sys.path.insert(0, str(project))
    try:
        registry = load_registry("agent_tools:registry")
    finally:
        sys.path.remove(str(project))
    outcomes = []
    for path in sorted((project / "cassettes").rglob("*.yaml")):
        cassette = load(path, source=str(path))
        for target, fault in iter_cells(cassette, registry, str(path), BUILTIN_FAULTS):
            outcomes.append(run_cell(fault, target, registry))
    return outcomes


@pytest.mark.slow
def test_mutation_figure() -> None:
    """Broken tools caught / total (cells here and in test_faults_catch_bugs),
    and false positives: twins failing, the example project failing."""
    import test_faults_catch_bugs as earlier

    caught = sum(bug.run(bug.broken).status == "fail" for bug in BUGS)
    caught += sum(
        earlier.run(b.fault, b.broken, b.arguments, b.files).status == "fail" for b in earlier.BUGS
    )
    total = len(BUGS) + len(earlier.BUGS)
    twins_failing = [bug.id for bug in BUGS if bug.run(bug.twin).status != "pass"]
    example_failing = [
        f"{o.source}:{o.interaction}:{o.fault}: {o.problems}"
        for o in _example_project_outcomes()
        if o.status == "fail"
    ]

    assert (caught, total) == (total, total)
    assert twins_failing == []
    assert example_failing == []
