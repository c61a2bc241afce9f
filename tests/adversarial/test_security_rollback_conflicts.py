"""Rollback never destroys later work.

Call A created a file, call B rewrote it, and ``rollback("A")`` answered OK
and deleted B's content. The journal now keeps what each change left (size
and SHA-256 of the bytes written, or "absent"), and the rollback checks
every path against it, on disk, through the descriptor it then acts by, so
the check holds whoever made the later change: the same runtime, another
runtime or session on the same workspace, or a plain process. A path that
is neither what A left nor what it held before A is a ROLLBACK_CONFLICT:
nothing at all is restored (every path is checked before any is touched),
the result's data names the paths, and A stays in the journal.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import delete_file

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall, ToolRuntime
from pytest_toolguard.registry import PathAccess, ToolRegistry, tool
from pytest_toolguard.tools import BUILTIN_TOOLS

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("docs",))
PATH = "docs/c.md"
BEFORE = "before A\n"
BY_A = "written by A\n"
BY_B = "B's later work\n"


@tool(input_schema={"type": "object"}, risk=Risk.WRITE, paths=[PathAccess.write("docs/a.md")])
def write_three(ctx: Any) -> dict[str, Any]:
    """Write docs/a.md, docs/b.md and docs/sub/c.md, in that order."""
    for name in ("a.md", "b.md", "sub/c.md"):
        ctx.workspace.write_text(f"docs/{name}", f"{name} by A\n")
    return {}


def registry() -> ToolRegistry:
    return ToolRegistry([*BUILTIN_TOOLS, delete_file, write_three])


def write(call_id: str, content: str, path: str = PATH) -> ToolCall:
    return ToolCall(call_id, "write_file", {"path": path, "content": content})


@dataclass
class FakeWorld:
    root: Path
    runtime: ToolRuntime
    other: Callable[[], ToolRuntime]  # another runtime on the same workspace

    @property
    def file(self) -> Path:
        return self.root / PATH


def run(world: FakeWorld, call: ToolCall) -> None:
    assert world.runtime.execute(call).ok


def keep_times(path: Path, change: Callable[[], None]) -> None:
    """Change the file, then put its size-and-times fingerprint back."""
    st = path.stat()
    change()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def in_place(path: Path, text: str, mode: str = "r+") -> None:
    """Write into the file itself (same inode), as an editor without atomic saves."""
    with path.open(mode) as handle:
        handle.write(text)


def rename_over(path: Path, text: str) -> None:
    fresh = path.with_name("fresh.tmp")
    fresh.write_text(text)
    os.rename(fresh, path)


# B's later change of the file A changed: (id, change). Each leaves BY_B (or
# another content of its own) at PATH, or deletes it.
LATER: list[tuple[str, Callable[[FakeWorld], None]]] = [
    ("same-runtime", lambda w: run(w, write("B", BY_B))),
    ("other-runtime", lambda w: w.other().execute(write("B", BY_B))),
    ("external-in-place", lambda w: in_place(w.file, BY_B)),
    ("external-new-file", lambda w: w.file.write_text(BY_B)),
    ("rename-over", lambda w: rename_over(w.file, BY_B)),
    (
        "same-size-same-times",
        lambda w: keep_times(w.file, lambda: w.file.write_text(BY_A.upper())),
    ),
    ("append", lambda w: in_place(w.file, "more\n", "a")),
    ("made-empty", lambda w: w.file.write_text("")),
    ("replaced-by-directory", lambda w: (w.file.unlink(), w.file.mkdir())),
    ("replaced-by-fifo", lambda w: (w.file.unlink(), os.mkfifo(w.file))),
    ("delete-same-runtime", lambda w: run(w, ToolCall("B", "delete_file", {"path": PATH}))),
    ("delete-external", lambda w: w.file.unlink()),
]
DELETES = {"delete-same-runtime", "delete-external"}


def state(path: Path) -> Any:
    """What is at ``path``, comparable before and after."""
    if path.is_symlink():
        return ("link", os.readlink(path))
    if not path.exists():
        return None
    if path.is_dir():
        return ("dir", sorted(os.listdir(path)))
    if stat.S_ISFIFO(path.stat().st_mode):
        return ("fifo",)
    return path.read_text()


@pytest.fixture
def world(toolguard_runtime, workspace_dir: Path) -> FakeWorld:
    (workspace_dir / "docs").mkdir()
    return FakeWorld(
        workspace_dir,
        toolguard_runtime(registry(), CAPS),
        lambda: toolguard_runtime(registry(), CAPS),
    )


CASES = [
    pytest.param(kind, later, id=f"A-{kind}-then-{later[0]}")
    for kind in ("creates", "modifies")
    for later in LATER
    # A created the file and B deleted it: already as before A (below).
    if not (kind == "creates" and later[0] in DELETES)
]


@pytest.mark.parametrize(("kind", "later"), CASES)
def test_a_later_change_of_what_the_call_wrote_is_a_conflict_and_survives(
    world: FakeWorld, kind: str, later: tuple[str, Callable[[FakeWorld], None]]
) -> None:
    if kind == "modifies":
        world.file.write_text(BEFORE)
    run(world, write("A", BY_A))
    later[1](world)
    after_b = state(world.file)
    assert after_b != BY_A

    result = world.runtime.rollback("A")

    assert result.code is ErrorCode.ROLLBACK_CONFLICT, result.message
    assert not result.ok and "conflict" in result.message
    assert result.data == {"conflicts": [PATH], "restored": []}
    assert state(world.file) == after_b
    assert [c.path for c in world.runtime.journal.changes("A")] == [PATH]  # kept
    row = world.runtime.audit.get("rollback-A")
    assert row is not None and row.result_code is ErrorCode.ROLLBACK_CONFLICT


RECREATIONS: list[tuple[str, Callable[[FakeWorld], None]]] = [
    ("same-runtime", lambda w: run(w, write("B", BY_B))),
    ("other-runtime", lambda w: w.other().execute(write("B", BY_B))),
    ("external", lambda w: w.file.write_text(BY_B)),
    ("rename-over", lambda w: rename_over(w.file, BY_B)),
    ("empty", lambda w: w.file.write_text("")),
    ("link", lambda w: w.file.symlink_to("elsewhere.md")),
]


@pytest.mark.parametrize("later", RECREATIONS, ids=[r[0] for r in RECREATIONS])
def test_a_file_made_again_after_the_call_deleted_it_is_not_overwritten(
    world: FakeWorld, later: tuple[str, Callable[[FakeWorld], None]]
) -> None:
    world.file.write_text(BEFORE)
    run(world, ToolCall("A", "delete_file", {"path": PATH}))
    later[1](world)
    after_b = state(world.file)

    result = world.runtime.rollback("A")

    expected = ErrorCode.FORBIDDEN_PATH if later[0] == "link" else ErrorCode.ROLLBACK_CONFLICT
    assert result.code is expected, result.message
    assert state(world.file) == after_b


# --- what is not a conflict ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["creates", "modifies"])
def test_with_no_later_change_the_rollback_restores(world: FakeWorld, kind: str) -> None:
    if kind == "modifies":
        world.file.write_text(BEFORE)
    run(world, write("A", BY_A))
    assert world.runtime.rollback("A").ok
    assert state(world.file) == (None if kind == "creates" else BEFORE)


@pytest.mark.parametrize("kind", ["creates", "modifies"])
def test_a_chmod_alone_is_not_a_conflict_and_a_restored_file_keeps_it(
    world: FakeWorld, kind: str
) -> None:
    """The check is on content: a permission change loses no work that a
    restore does not keep (a restored file keeps its current bits)."""
    if kind == "modifies":
        world.file.write_text(BEFORE)
    run(world, write("A", BY_A))
    os.chmod(world.file, 0o700)
    assert world.runtime.rollback("A").ok
    if kind == "creates":
        assert not world.file.exists()
    else:
        assert world.file.read_text() == BEFORE
        assert stat.S_IMODE(world.file.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    ("kind", "later", "expected"),
    [
        ("creates", "delete", None),
        ("modifies", "write-back", BEFORE),
        ("deletes", "write-back", BEFORE),
    ],
)
def test_a_path_already_back_to_what_it_held_is_left_alone(
    world: FakeWorld, kind: str, later: str, expected: Any
) -> None:
    if kind != "creates":
        world.file.write_text(BEFORE)
    if kind == "deletes":
        run(world, ToolCall("A", "delete_file", {"path": PATH}))
    else:
        run(world, write("A", BY_A))
    if later == "delete":
        world.file.unlink()
    else:
        world.file.write_text(BEFORE)

    assert world.runtime.rollback("A").ok
    assert state(world.file) == expected


def test_the_same_content_rewritten_by_another_call_is_rolled_back(world: FakeWorld) -> None:
    """What the check compares is content: identical bytes lose no work."""
    world.file.write_text(BEFORE)
    run(world, write("A", BY_A))
    rename_over(world.file, BY_A)
    assert world.runtime.rollback("A").ok
    assert world.file.read_text() == BEFORE


def test_the_later_call_rolled_back_first_lets_the_earlier_one_go(world: FakeWorld) -> None:
    world.file.write_text(BEFORE)
    run(world, write("A", BY_A))
    run(world, write("B", BY_B))
    assert world.runtime.rollback("A").code is ErrorCode.ROLLBACK_CONFLICT
    assert world.runtime.rollback("B").ok
    assert world.file.read_text() == BY_A
    assert world.runtime.rollback("A").ok
    assert world.file.read_text() == BEFORE


def test_a_call_that_changed_a_path_twice_is_checked_against_its_last_write(
    world: FakeWorld, registry_of
) -> None:
    @tool(input_schema={"type": "object"}, risk=Risk.WRITE, paths=[PathAccess.write(PATH)])
    def twice(ctx: Any) -> dict[str, Any]:
        ctx.workspace.write_text(PATH, "first\n")
        ctx.workspace.write_text(PATH, BY_A)
        return {}

    world.file.write_text(BEFORE)
    world.runtime.registry = registry_of(twice)
    assert world.runtime.execute(ToolCall("A", "twice", {})).ok
    assert world.runtime.rollback("A").ok
    assert world.file.read_text() == BEFORE


@pytest.mark.parametrize("later", ["none", "external"])
def test_process_isolation_sends_what_the_change_left(
    toolguard_runtime, workspace_dir: Path, later: str
) -> None:
    (workspace_dir / "docs").mkdir()
    (workspace_dir / PATH).write_text(BEFORE)
    runtime = toolguard_runtime(registry(), CAPS, isolation="process")
    assert runtime.execute(write("A", BY_A)).ok
    if later == "external":
        (workspace_dir / PATH).write_text(BY_B)
        assert runtime.rollback("A").code is ErrorCode.ROLLBACK_CONFLICT
        assert (workspace_dir / PATH).read_text() == BY_B
    else:
        assert runtime.rollback("A").ok
        assert (workspace_dir / PATH).read_text() == BEFORE


# --- several paths: every one is checked before any is restored --------------------------

THREE = ["docs/a.md", "docs/b.md", "docs/sub/c.md"]


def run_three(world: FakeWorld) -> dict[str, str]:
    (world.root / "docs" / "b.md").write_text("b before\n")
    assert world.runtime.execute(ToolCall("A", "write_three", {})).ok
    return {path: (world.root / path).read_text() for path in THREE}


def tree(world: FakeWorld) -> dict[str, Any]:
    return {path: state(world.root / path) for path in THREE}


@pytest.mark.parametrize(
    "changed", [["docs/b.md"], ["docs/a.md"], ["docs/sub/c.md", "docs/a.md"], THREE]
)
def test_one_conflict_among_several_paths_restores_nothing(
    world: FakeWorld, changed: list[str]
) -> None:
    run_three(world)
    for path in changed:
        (world.root / path).write_text(BY_B)
    before = tree(world)

    result = world.runtime.rollback("A")

    assert result.code is ErrorCode.ROLLBACK_CONFLICT
    assert result.data is not None
    assert sorted(result.data["conflicts"]) == sorted(changed)
    assert result.data["restored"] == []
    assert tree(world) == before
    assert sorted(c.path for c in world.runtime.journal.changes("A")) == sorted(THREE)


def test_once_the_conflict_is_resolved_the_rollback_restores_everything(world: FakeWorld) -> None:
    by_a = run_three(world)
    (world.root / "docs" / "b.md").write_text(BY_B)
    assert world.runtime.rollback("A").code is ErrorCode.ROLLBACK_CONFLICT
    (world.root / "docs" / "b.md").write_text(by_a["docs/b.md"])
    assert world.runtime.rollback("A").ok
    assert tree(world) == {"docs/a.md": None, "docs/b.md": "b before\n", "docs/sub/c.md": None}


@pytest.mark.parametrize("at", [1, 2])
def test_a_change_made_while_the_rollback_acts_stops_it_there_and_is_reported(
    world: FakeWorld, monkeypatch, at: int
) -> None:
    """The check passed for every path; then, before the act on the
    ``at``-th path (newest first), another process rewrites that path. What
    was restored is reported and forgotten; the rest stays in the journal."""
    by_a = run_three(world)
    newest_first = THREE[::-1]
    workspace = world.runtime.workspace
    undo = workspace.undo
    acts: list[str] = []

    def write_before_the_act(path: str, *args: Any, check_only: bool = False, **kw: Any) -> bool:
        if not check_only:
            acts.append(path)
            if len(acts) == at + 1:
                (world.root / path).write_text(BY_B)
        return bool(undo(path, *args, check_only=check_only, **kw))

    monkeypatch.setattr(workspace, "undo", write_before_the_act)

    result = world.runtime.rollback("A")

    assert result.code is ErrorCode.ROLLBACK_CONFLICT
    assert result.data == {"conflicts": newest_first[at:], "restored": newest_first[:at]}
    assert (world.root / newest_first[at]).read_text() == BY_B  # survives
    for path in newest_first[at + 1 :]:
        assert (world.root / path).read_text() == by_a[path]  # untouched
    assert [c.path for c in world.runtime.journal.changes("A")] == THREE[: len(THREE) - at]


@pytest.mark.parametrize("kind", ["creates", "modifies"])
@pytest.mark.parametrize("race", ["rename-over", "append-in-place", "delete"])
def test_a_change_between_the_last_check_and_the_act_is_not_overwritten(
    world: FakeWorld, monkeypatch, kind: str, race: str
) -> None:
    """The entry was judged through its descriptor; right before the act its
    name is looked at once more. Another process changes it just then: at
    the act's second ``lstat`` of the name (the first is where the entry was
    looked at, before it was opened and judged)."""
    if kind == "modifies":
        world.file.write_text(BEFORE)
    run(world, write("A", BY_A))
    workspace = world.runtime.workspace
    undo = workspace.undo
    real_stat = os.stat
    seen = {"acting": False, "lstats": 0}

    def raced_stat(name: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if seen["acting"] and name == "c.md" and kwargs.get("follow_symlinks") is False:
            seen["lstats"] += 1
            if seen["lstats"] == 2:
                if race == "rename-over":
                    rename_over(world.file, BY_B)
                elif race == "append-in-place":
                    in_place(world.file, BY_B, "a")
                else:
                    world.file.unlink()
        return real_stat(name, *args, **kwargs)

    def arm(*args: Any, check_only: bool = False, **kwargs: Any) -> bool:
        seen["acting"] = not check_only
        return bool(undo(*args, check_only=check_only, **kwargs))

    monkeypatch.setattr(workspace, "undo", arm)
    monkeypatch.setattr(os, "stat", raced_stat)
    after_race = {
        "rename-over": BY_B,
        "append-in-place": BY_A + BY_B,
        "delete": None,
    }[race]

    result = world.runtime.rollback("A")

    assert seen["lstats"] == 2
    assert result.code is ErrorCode.ROLLBACK_CONFLICT, result.message
    assert state(world.file) == after_race
