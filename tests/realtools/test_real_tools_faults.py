"""The full fault matrix and the fuzzer over real tools, recorded for real
with their recorded root deleted: a correct tool passes every cell (no
false positive), and a cell that cannot apply says why. One twin per
oracle, each with one planted bug, fails the cell that should catch it,
where its correct tool passes the same cell.

Tools that need the directory world (SQLite, git, a server process) have
their cells and fuzzing run in it, as replay runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import real_tools
import sessions
from sessions import SESSIONS, TWIN_SESSIONS, git_environment, record

from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.fuzz import fuzz_tool
from pytest_toolguard.replay import load

pytest.importorskip("mcp_server_time")
pytest.importorskip("mcp_server_git")


@pytest.fixture(scope="module")
def registry() -> Any:
    return real_tools.registry()


def _matrix(
    name: str, registry: Any, surroundings: Any, cassettes: Path, faults: Any = BUILTIN_FAULTS
) -> list[CellOutcome]:
    """Every fault against every interaction of the session ``name``,
    recorded then with its recorded root deleted; applicable or not."""
    session = {**SESSIONS, **TWIN_SESSIONS}[name]
    path, workspace = record(session, registry, surroundings.recorded, cassettes)
    sessions.delete(workspace)
    cassette = load(path)
    with git_environment():
        return [
            run_cell(fault, target, registry)
            for target in targets(cassette, registry, str(path))
            for fault in faults
        ]


def _failed(outcomes: list[CellOutcome]) -> list[str]:
    return [
        f"{outcome.interaction} {outcome.tool} {outcome.fault}: {'; '.join(outcome.problems)[:300]}"
        for outcome in outcomes
        if outcome.status == "fail"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SESSIONS))
def test_the_full_fault_matrix_has_no_false_positive_on_a_real_tool(
    name: str, registry: Any, surroundings: Any, tmp_path: Path
) -> None:
    before = surroundings.snapshots()
    outcomes = _matrix(name, registry, surroundings, tmp_path / "cassettes")
    if name == "mcp_git":
        # Built unconfined (repository=None): it takes a repository at any
        # path, so it looks wherever an argument points, at a payload or
        # through a link swapped into the workspace (GitPython probes
        # <path>/.git and opens its HEAD). Seen, as it should be: such cells
        # fail on where it reached, never on anything it changed.
        looked = [o for o in outcomes if o.status == "fail"]
        others = [
            (o.fault, p)
            for o in looked
            for p in o.problems
            if not p.startswith(
                ("the handler looked outside the workspace", "the handler accessed outside")
            )
        ]
        assert looked and others == []
        outcomes = [o for o in outcomes if o not in looked]
    assert _failed(outcomes) == []
    assert any(outcome.status == "pass" for outcome in outcomes)
    skipped = [outcome for outcome in outcomes if outcome.status == "n/a"]
    assert all(outcome.problems and all(outcome.problems) for outcome in skipped)
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []


# -- one twin per oracle ---------------------------------------------------------------

TWIN_CELLS = {
    # twin: (the fault whose cell catches it, its correct tool)
    "read_at_following_links": ("symlink_escape", "read_at"),
    "read_at_by_prefix": ("path_traversal", "read_at"),
    "write_at_and_log": ("duplicate_submission", "write_at"),
    "write_at_leaving_temporary": ("disk_failure", "write_at"),
    "ask_server_waiting": ("process_killed", "ask_server"),
}


@pytest.mark.slow
@pytest.mark.parametrize("twin", list(TWIN_CELLS))
def test_a_twin_with_a_planted_bug_fails_the_cell_its_correct_tool_passes(
    twin: str, registry: Any, surroundings: Any, tmp_path: Path
) -> None:
    fault_name, correct = TWIN_CELLS[twin]
    faults = select_faults(fault_name)
    caught = _matrix(twin, registry, surroundings, tmp_path / "twin", faults)
    assert [outcome.status for outcome in caught] == ["fail"], real_tools.TWINS[twin]
    # The same call to the correct tool: the same cell passes.
    session = TWIN_SESSIONS[twin]
    right = sessions.Session(
        correct, ((correct, session.calls[0][1]),), session.setup, capabilities=session.capabilities
    )
    path, workspace = record(right, registry, surroundings.recorded, tmp_path / "right")
    sessions.delete(workspace)
    with git_environment():
        (outcome,) = [
            run_cell(fault, target, registry)
            for target in targets(load(path), registry, str(path))
            for fault in faults
        ]
    assert outcome.status == "pass", outcome.problems
    assert surroundings.worlds_left() == []


# -- fuzzing ---------------------------------------------------------------------------

FUZZED = [
    "crm_add",
    "git_save",
    "read_at",
    "write_at",
    "ask_server",
    "get_current_time",
    "convert_time",
    "git_status",
    "git_add",
    "git_commit",
    "git_log",
]


@pytest.mark.parametrize("name", FUZZED)
def test_fuzzing_a_real_tool_finds_nothing(name: str, registry: Any, surroundings: Any) -> None:
    before = surroundings.snapshots()
    with git_environment():
        report = fuzz_tool(
            registry.get(name), examples=10, seed=0, registry=registry, timeout_seconds=60.0
        )
    assert [
        (failure.problem, failure.detail, failure.arguments) for failure in report.failures
    ] == []
    assert report.skipped is None
    assert report.handler_calls > 0
    assert surroundings.snapshots() == before
    assert surroundings.worlds_left() == []
