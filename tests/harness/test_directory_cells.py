"""Fault cells in the directory world: the world chosen as replay chooses
it, real files, real links swapped while the call runs, a real full disk;
correct tools pass every cell, twins with one planted bug fail theirs, and
no cell writes outside its world."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import directory_cell_tools as tools
import pytest
from trees import tree_snapshot

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults import (
    BUILTIN_FAULTS,
    Fault,
    iter_cells,
    run_cell,
    select_faults,
)
from pytest_toolguard.faults import disk as disk_faults
from pytest_toolguard.faults.directory import full_disk_unavailable
from pytest_toolguard.faults.fault import AfterSuccess
from pytest_toolguard.faults.outcome import CellOutcome, MatrixReport
from pytest_toolguard.faults.prefixes import PrefixCache
from pytest_toolguard.faults.report import render_markdown, terminal_grid
from pytest_toolguard.faults.target import targets
from pytest_toolguard.harness.directory_world import WORLD_PREFIX
from pytest_toolguard.registry import ToolRegistry
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette
from pytest_toolguard.tools import builtin_registry

FULL_DISK = full_disk_unavailable()

Setup = Callable[[Path], None]


def _notes(workspace: Path) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "list.txt").write_text("pear\napple\nfig\n")


def _repository(workspace: Path) -> None:
    (workspace / "README.md").write_text("hello\n")
    tools.make_repository(str(workspace))


GIT_INDEX = "files..git/index"
"""git's index holds inode numbers and times: there, not its bytes."""


def _database_and_notes(workspace: Path) -> None:
    tools.make_database(str(workspace))
    _notes(workspace)


def _record(
    tmp_path: Path,
    registry: ToolRegistry,
    calls: list[tuple[str, Any]],
    setup: Setup,
    volatile: tuple[str, ...] = (),
) -> Cassette:
    """``calls`` recorded in ``tmp_path/rec/proj``, then that directory
    deleted: the cells run where the recorded root does not exist.
    ``volatile`` is added to the cassette's (``files.<path>``)."""
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    setup(workspace)
    runtime = ToolRuntime(registry, str(workspace), tools.CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        results = [
            runtime.execute(ToolCall(call_id=f"c{i}", tool_name=name, arguments=arguments))
            for i, (name, arguments) in enumerate(calls)
        ]
    runtime.close()
    assert all(result.ok for result in results), [result.message for result in results]
    _remove(workspace.parent)
    cassette = load(path)
    return replace(cassette, volatile=(*cassette.volatile, *volatile))


def _sorting(tmp_path: Path) -> Cassette:
    """A recorded session of the child-process tool."""
    return _record(tmp_path, tools.CORRECT, [("sort_lines", {"path": "notes/list.txt"})], _notes)


def _remove(top: Path) -> None:
    for directory, _subdirs, _names in os.walk(top):
        os.chmod(directory, 0o700)
    for path in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    top.rmdir()


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[Path]:
    """Where the cells' worlds are made: it holds a decoy tree of its own,
    which must be exactly as it was afterwards, with no world left behind."""
    where = tmp_path / "worlds"
    (where / "proj2").mkdir(parents=True)
    (where / "proj2" / "keep.txt").write_text("keep\n")
    (where / "secret.txt").write_text("secret\n")
    before = tree_snapshot(where)
    yield where
    assert tree_snapshot(where) == before
    assert not [name for name in os.listdir(where) if name.startswith(WORLD_PREFIX)]


def _cells(
    cassette: Cassette,
    registry: ToolRegistry,
    parent: Path,
    faults: tuple[Fault, ...] = BUILTIN_FAULTS,
    world: str = "auto",
) -> list[CellOutcome]:
    return [
        run_cell(fault, target, registry, world=world, parent=str(parent))
        for target, fault in iter_cells(cassette, registry, "session.yaml", faults)
    ]


def _failures(outcomes: list[CellOutcome]) -> list[str]:
    return [
        f"{o.interaction}-{o.tool} {o.fault}: {'; '.join(o.problems)}"
        for o in outcomes
        if o.status == "fail"
    ]


# -- correct tools pass every cell ----------------------------------------------------------

CORRECT_SESSIONS = {
    "sqlite": (
        [("add_contact", {"name": "Ada"}), ("add_contact", {"name": "Grace"})],
        _database_and_notes,
    ),
    "child-process": ([("sort_lines", {"path": "notes/list.txt"})], _notes),
    "absolute-path": ([("count_lines_at", {"path": "{root}/notes/list.txt"})], _notes),
    "git": ([("commit_note", {"name": "note.txt", "text": "hi"})], _repository),
}


@pytest.mark.slow
@pytest.mark.parametrize("session", sorted(CORRECT_SESSIONS))
def test_a_correct_tool_passes_every_cell_of_the_full_matrix_in_the_directory_world(
    tmp_path: Path, parent: Path, session: str
) -> None:
    calls, setup = CORRECT_SESSIONS[session]
    root = str(tmp_path / "rec" / "proj")
    calls = [(name, {k: v.replace("{root}", root) for k, v in a.items()}) for name, a in calls]
    cassette = _record(tmp_path, tools.CORRECT, calls, setup, (GIT_INDEX,))
    outcomes = _cells(cassette, tools.CORRECT, parent)
    assert _failures(outcomes) == []
    ran = {o.fault for o in outcomes if o.status == "pass"}
    # shell_injection has nothing to inject into a call that starts no process.
    idle = [o for o in outcomes if o.status == "n/a" and o.fault == "shell_injection"]
    for outcome in idle:
        assert outcome.problems[0].startswith("nothing to inject: "), outcome
    skipped = [o for o in outcomes if o.status == "n/a" and o not in idle]
    for outcome in skipped:  # only for a machine without mount namespaces
        assert outcome.problems[0].startswith("skipped in the directory world: "), outcome
    if FULL_DISK is None:
        assert not skipped
    expected = {"timeout", "duplicate_submission", "response_lost", "handler_exception"}
    if session != "absolute-path":
        expected |= {"disk_failure"} | ({"partial_write"} if FULL_DISK is None else set())
    if session in ("child-process", "git"):
        expected |= {"symlink_escape", "symlink_race", "path_traversal", "large_input"}
        expected |= {"shell_injection"}
    if session == "absolute-path":
        expected |= {"path_traversal", "large_input"}
    assert expected <= ran


# -- twins with one planted bug fail their cell ------------------------------------------------

TWINS = [
    # (tool, arguments, fault, what the cell must say)
    ("read_note_following_links", {"path": "notes/list.txt"}, "symlink_escape", "read through it"),
    ("read_note_prefix_checked", {"path": "notes/list.txt"}, "path_traversal", "from outside"),
    ("read_note_prefix_checked", {"path": "notes/list.txt"}, "symlink_escape", "read through it"),
    (
        "append_checked_then_opened",
        {"path": "notes/list.txt", "text": "x"},
        "symlink_race",
        "mirror",
    ),
    ("append_in_a_thread", {"path": "notes/list.txt", "text": "x"}, "symlink_race", "mir"),
    ("sort_lines_leaving_temporary", {"path": "notes/list.txt"}, "disk_failure", "list.txt.part"),
    ("add_contact_past_deadline", {"name": "Ada"}, "timeout", "db/crm.db"),
    ("add_contact_beside", {"name": "Ada"}, "duplicate_submission", "crm-copy.db"),
    ("add_contact_beside", {"name": "Ada"}, "handler_exception", None),
    ("commit_note_leaving_temporaries", {"name": "n.txt", "text": "hi"}, "disk_failure", "tmp_obj"),
    ("head_ignoring_its_limit", {"path": "notes/list.txt", "max_lines": 5}, "large_input", "max_"),
]


@pytest.mark.parametrize(("tool", "arguments", "fault", "said"), TWINS)
def test_a_twin_with_a_planted_bug_fails_its_cell(
    tmp_path: Path, parent: Path, tool: str, arguments: dict[str, str], fault: str, said: str | None
) -> None:
    setup = _repository if tool.startswith("commit_note") else _database_and_notes
    cassette = _record(tmp_path, tools.TWINS, [(tool, arguments)], setup, (GIT_INDEX,))
    (outcome,) = _cells(cassette, tools.TWINS, parent, select_faults(fault))
    if said is None:  # a fault that never runs the handler: the twin's bug is not its to see
        assert outcome.status == "pass", outcome.problems
        return
    assert outcome.status == "fail"
    assert any(said in problem for problem in outcome.problems), outcome.problems


@pytest.mark.skipif(FULL_DISK is not None, reason=f"no full disk here: {FULL_DISK}")
@pytest.mark.parametrize("fault", ["partial_write", "disk_failure"])
def test_a_child_process_ignoring_a_full_disk_is_caught_by_a_real_one(
    tmp_path: Path, parent: Path, fault: str
) -> None:
    """The twin's child writes its output and never checks the write: only a
    disk that fills up for the child itself (not an error raised in this
    process) shows it."""
    cassette = _record(
        tmp_path,
        tools.TWINS,
        [("sort_lines_leaving_temporary", {"path": "notes/list.txt"})],
        _notes,
    )
    (outcome,) = _cells(cassette, tools.TWINS, parent, select_faults(fault))
    assert outcome.status == "fail"
    assert any("pages left" in p or "disk was full" in p for p in outcome.problems)


# -- the world, chosen as replay chooses it -------------------------------------------------


def test_a_directory_world_tool_forced_into_the_fake_world_is_reported_not_run(
    tmp_path: Path, parent: Path
) -> None:
    cassette = _record(
        tmp_path, tools.CORRECT, [("add_contact", {"name": "Ada"})], _database_and_notes
    )
    (outcome,) = _cells(cassette, tools.CORRECT, parent, select_faults("response_lost"), "fake")
    assert outcome.status == "fail"
    assert any("reached the real disk" in problem for problem in outcome.problems)


@pytest.mark.parametrize("world", ["auto", "directory"])
def test_the_cell_runs_in_a_fresh_world_under_the_parent_with_the_root_mapped(
    tmp_path: Path, parent: Path, world: str
) -> None:
    seen: list[str] = []
    registry = ToolRegistry(
        [spec.with_handler(_recording(spec.handler, seen)) for spec in tools.CORRECT]
    )
    root = str(tmp_path / "rec" / "proj")
    cassette = _record(
        tmp_path, tools.CORRECT, [("count_lines_at", {"path": f"{root}/notes/list.txt"})], _notes
    )
    outcomes = _cells(cassette, registry, parent, select_faults("duplicate_submission"), world)
    assert [o.status for o in outcomes] == ["pass"]
    worlds = {Path(path).parents[2] for path in seen}
    assert len(worlds) == 1 and next(iter(worlds)).parent == parent
    assert all(path.endswith("/proj/notes/list.txt") for path in seen)
    assert not os.path.exists(root)


def _recording(handler: Callable[..., Any], seen: list[str]) -> Callable[..., Any]:
    def recording(ctx: Any, **arguments: Any) -> Any:
        seen.append(arguments.get("path", ""))
        return handler(ctx, **arguments)

    return recording


def test_a_fake_world_tool_forced_into_the_directory_world_runs_there(
    tmp_path: Path, parent: Path
) -> None:
    """The same tool declared for the fake world: its child process is
    refused and reported there, and runs for real when the directory
    world is forced."""
    cassette = _record(
        tmp_path, tools.CORRECT, [("sort_lines", {"path": "notes/list.txt"})], _notes
    )
    fake = ToolRegistry([replace(spec, world=None) for spec in tools.CORRECT], world="fake")
    (auto,) = _cells(cassette, fake, parent, select_faults("response_lost"), "auto")
    (forced,) = _cells(cassette, fake, parent, select_faults("response_lost"), "directory")
    assert auto.status == "fail"
    assert any("reached the real disk" in problem for problem in auto.problems)
    assert forced.status == "pass", forced.problems


# -- a fault that cannot apply is skipped with its reason ---------------------------------------


def test_without_mount_namespaces_partial_write_is_skipped_with_its_reason(
    tmp_path: Path, parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk_faults, "full_disk_unavailable", lambda: "unshare: not permitted")
    cassette = _record(
        tmp_path, tools.CORRECT, [("sort_lines", {"path": "notes/list.txt"})], _notes
    )
    outcomes = _cells(cassette, tools.CORRECT, parent, select_faults("partial_write,disk_failure"))
    by_fault = {o.fault: o for o in outcomes}
    assert by_fault["partial_write"].status == "n/a"
    assert by_fault["partial_write"].problems == (
        "skipped in the directory world: a full disk needs a private mount namespace: "
        "unshare: not permitted",
    )
    assert by_fault["disk_failure"].status == "pass"  # EIO still injected


class _FakeFilesystemOnly(AfterSuccess):
    name = "fake_filesystem_only"
    injection = "pyfakefs's disk usage set"
    expected = "nothing"

    def cannot_run_in(self, world: str) -> str | None:
        return "it sets pyfakefs's disk usage" if world == "directory" else None

    def inject(self, cell: Any) -> None:
        cell.fs.set_disk_usage(1)


@pytest.mark.parametrize("world", ["directory", "fake"])
def test_a_fault_of_ones_own_says_why_it_cannot_run_in_the_directory_world(
    tmp_path: Path, parent: Path, world: str
) -> None:
    cassette = _record(
        tmp_path, tools.CORRECT, [("sort_lines", {"path": "notes/list.txt"})], _notes
    )
    (target,) = targets(cassette, tools.CORRECT, "session.yaml")
    outcome = run_cell(
        _FakeFilesystemOnly(), target, tools.CORRECT, world=world, parent=str(parent)
    )
    if world == "directory":
        assert outcome.status == "n/a"
        assert outcome.problems == (
            "skipped in the directory world: it sets pyfakefs's disk usage",
        )
    else:
        assert outcome.status != "n/a"


def test_cell_fs_in_the_directory_world_is_a_clear_failure(tmp_path: Path, parent: Path) -> None:
    class UsesFs(_FakeFilesystemOnly):
        name = "uses_fs"

        def cannot_run_in(self, world: str) -> str | None:
            return None

    cassette = _record(
        tmp_path, tools.CORRECT, [("sort_lines", {"path": "notes/list.txt"})], _notes
    )
    (target,) = targets(cassette, tools.CORRECT, "session.yaml")
    outcome = run_cell(UsesFs(), target, tools.CORRECT, world="directory", parent=str(parent))
    assert outcome.status == "fail"
    assert any("directory world" in problem for problem in outcome.problems)


def test_an_unknown_world_is_refused(tmp_path: Path, parent: Path) -> None:
    cassette = _record(
        tmp_path, tools.CORRECT, [("sort_lines", {"path": "notes/list.txt"})], _notes
    )
    (target,) = targets(cassette, tools.CORRECT, "session.yaml")
    with pytest.raises(ValueError, match="unknown world"):
        run_cell(BUILTIN_FAULTS[0], target, tools.CORRECT, world="real", parent=str(parent))


def test_the_matrix_report_lists_each_skipped_fault_with_its_reason() -> None:
    skipped = "skipped in the directory world: a full disk needs a private mount namespace: EPERM"
    cells = [
        CellOutcome("s.yaml", index, "sort_lines", "partial_write", "n/a", (skipped,))
        for index in (1, 2)
    ]
    cells.append(CellOutcome("s.yaml", 1, "sort_lines", "timeout", "n/a", ("not applicable",)))
    report = MatrixReport.of(["timeout", "partial_write"], cells)
    assert report.skipped() == {("partial_write", skipped.removeprefix("skipped ")): 2}
    assert (
        "`partial_write` (2) in the directory world: "
        "a full disk needs a private mount namespace: EPERM" in render_markdown(report)
    )
    assert any("partial_write (2)" in line for line in terminal_grid(report, 200))


SHIPPED = sorted(
    path
    for folder in ("cases", "cassettes")
    for path in (Path(__file__).resolve().parents[2] / folder).glob("*.yaml")
)


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=[path.name for path in SHIPPED])
def test_every_shipped_example_passes_its_cells_in_the_directory_world_too(
    path: Path, tmp_path: Path
) -> None:
    """No false positive from the real files themselves: the shipped tools
    (fake-world tools, forced into the directory world) pass every cell."""
    registry = builtin_registry()
    source = f"{path.parent.name}/{path.name}"
    outcomes = [
        run_cell(fault, target, registry, world="directory", parent=str(tmp_path))
        for target, fault in iter_cells(load(path, source=source), registry, source, BUILTIN_FAULTS)
    ]
    assert _failures(outcomes) == []  # a file of unregistered tools has no cell
    assert os.listdir(tmp_path) == []


def test_a_prefix_saved_in_one_world_serves_the_next_cells_world(
    tmp_path: Path, parent: Path
) -> None:
    """The state before a target is replayed once, saved spelt with the
    recorded root, and restored in each later cell's fresh world spelt with
    that world's root: the remembered absolute path leads into it."""
    runs: list[str] = []
    registry = ToolRegistry(
        [spec.with_handler(_counting(spec.handler, spec.name, runs)) for spec in tools.CORRECT]
    )
    calls: list[tuple[str, Any]] = [("remember_root", {}), ("count_remembered", {})]
    cassette = _record(tmp_path, tools.CORRECT, calls, _notes)
    (target,) = [t for t in targets(cassette, registry, "session.yaml") if t.index == 1]
    prefixes = PrefixCache()
    outcomes = [
        run_cell(fault, target, registry, prefixes=prefixes, parent=str(parent))
        for fault in select_faults("oversized_output,response_lost,oversized_output")
    ]
    assert [o.status for o in outcomes] == ["pass", "pass"], [o.problems for o in outcomes]
    again = run_cell(
        select_faults("oversized_output")[0],
        target,
        registry,
        prefixes=prefixes,
        parent=str(parent),
    )
    assert again.status == "pass", again.problems
    assert runs.count("remember_root") == 1  # replayed for the first cell only


def _counting(handler: Callable[..., Any], name: str, runs: list[str]) -> Callable[..., Any]:
    def counting(ctx: Any, **arguments: Any) -> Any:
        runs.append(name)
        return handler(ctx, **arguments)

    return counting
