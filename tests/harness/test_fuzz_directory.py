"""Fuzzing tools that run in the directory world: SQLite and a subprocess
fuzzed on real files with no false positive and nothing written outside the
world, and twins that escape it (a sibling sharing the root's prefix, a
link followed out) caught."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from trees import tree_snapshot

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.fuzz import Problem, check_call, fuzz_tool
from pytest_toolguard.fuzz.call import fuzzed_world
from pytest_toolguard.fuzz.directory import CONTAINER_PREFIX, FuzzDirectory
from pytest_toolguard.fuzz.workspace import FUZZ_ROOT
from pytest_toolguard.harness.directory_world import DirectoryWorld
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool

EXAMPLES = 12


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{database}")])
def add_row(ctx: Any, database: str, text: str) -> dict[str, Any]:
    """Adds a row to a SQLite database in the workspace; returns the row count."""
    connection = sqlite3.connect(os.path.join(ctx.workspace.root, database))
    try:
        with connection:
            connection.execute("create table if not exists rows (text text)")
            connection.execute("insert into rows values (?)", (text,))
        count: int = connection.execute("select count(*) from rows").fetchone()[0]
    finally:
        connection.close()
    return {"count": count}


@tool(
    risk=Risk.WRITE,
    world="directory",
    paths=[PathAccess.read("{source}"), PathAccess.write("{target}")],
)
def copy_with_cp(ctx: Any, source: str, target: str) -> dict[str, Any]:
    """Copies a workspace file with cp(1), another process."""
    done = subprocess.run(
        ["cp", "--", source, target],
        cwd=ctx.workspace.root,
        capture_output=True,
        text=True,
        check=False,
    )
    return {"code": done.returncode}


def _append(path: str, text: str) -> dict[str, Any]:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return {"appended": len(text) + 1}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write(".")])
def append_checked(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Appends to a file it checks is inside the workspace, links resolved."""
    base = os.path.realpath(ctx.workspace.root)
    real = os.path.realpath(os.path.join(base, path))
    if os.path.commonpath([real, base]) != base:
        raise ValueError("outside the workspace")
    return _append(real, text)


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write(".")])
def append_prefix_checked(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """The twin: a string prefix check, so ``<root>2/`` passes as inside."""
    base = os.path.realpath(ctx.workspace.root)
    real = os.path.realpath(os.path.join(base, path))
    if not real.startswith(base):
        raise ValueError("outside the workspace")
    return _append(real, text)


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write(".")])
def append_link_followed(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """The twin: a check on the spelling only, so a link inside leads out."""
    base = os.path.normpath(ctx.workspace.root)
    spelt = os.path.normpath(os.path.join(base, path))
    if os.path.commonpath([spelt, base]) != base:
        raise ValueError("outside the workspace")
    return _append(spelt, text)


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory worlds are made in, with a decoy file in it;
    nothing but worlds, removed again, may ever appear there."""
    where = tmp_path / "tmp"
    where.mkdir()
    (where / "decoy.txt").write_text("must never change\n")
    monkeypatch.setattr("tempfile.tempdir", str(where))
    return where


@pytest.mark.parametrize("spec", [add_row, copy_with_cp, append_checked], ids=lambda s: s.name)
def test_a_correct_directory_tool_is_fuzzed_with_no_false_positive_and_nothing_outside(
    spec: ToolSpec, temporary: Path
) -> None:
    before = tree_snapshot(temporary)
    # A process started in a world may take over a second on a loaded machine:
    # this judges confinement, not speed.
    report = fuzz_tool(spec, examples=EXAMPLES, seed=3, timeout_seconds=30.0)
    assert report.failures == (), report.format()
    assert report.skipped is None
    assert report.handler_calls > 0
    assert tree_snapshot(temporary) == before  # every world and container removed, decoy intact


@pytest.mark.parametrize(
    ("spec", "arguments"),
    [
        (append_prefix_checked, {"path": "../workspace2/keep.txt", "text": "x"}),
        (append_prefix_checked, {"path": "../workspace-old/keep.txt", "text": "x"}),
        (append_prefix_checked, {"path": "../workspace2/new.txt", "text": "x"}),
        (append_link_followed, {"path": "link-out/secret.txt", "text": "x"}),
        (append_link_followed, {"path": "link-out/new.txt", "text": "x"}),
    ],
    ids=["prefix-keep", "prefix-old", "prefix-new", "link-secret", "link-new"],
)
def test_a_twin_reaching_outside_is_one_outside_change(
    spec: ToolSpec, arguments: dict[str, Any], temporary: Path
) -> None:
    before = tree_snapshot(temporary)
    failures = check_call(spec, arguments)
    problems = {failure.problem for failure in failures}
    assert Problem.OUTSIDE_CHANGED in problems, failures
    detail = next(f.detail for f in failures if f.problem is Problem.OUTSIDE_CHANGED)
    assert f"{FUZZ_ROOT}/" in detail  # spelt as the fuzz workspace spells it, not the temp path
    assert tree_snapshot(temporary) == before
    assert check_call(append_checked, arguments) == ()


@pytest.mark.parametrize("spec", [append_prefix_checked, append_link_followed])
def test_the_fuzzer_finds_each_twin(spec: ToolSpec, temporary: Path) -> None:
    report = fuzz_tool(spec, examples=EXAMPLES, seed=3)
    assert Problem.OUTSIDE_CHANGED in {failure.problem for failure in report.failures}
    assert not list(temporary.glob(f"{CONTAINER_PREFIX}*"))


def test_each_example_starts_from_the_same_workspace(temporary: Path) -> None:
    seen: list[bytes] = []

    @tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write(".")])
    def clobber(ctx: Any, text: str) -> dict[str, Any]:
        root = Path(ctx.workspace.root)
        seen.append((root / "notes.txt").read_bytes())
        (root / "notes.txt").write_text(text)
        (root / "sub" / "nested.txt").unlink()
        (root / "made").mkdir()
        return {}

    report = fuzz_tool(clobber, examples=EXAMPLES, seed=1)
    assert report.failures == (), report.format()
    assert len(seen) >= EXAMPLES and set(seen) == {b"first line\nsecond line mentions fuzz\n"}


@pytest.mark.parametrize(
    "value",
    ["/etc/passwd", "../../../../etc/passwd", "/tmp/toolguard-decoy.txt", "/new-at-the-root"],
)
def test_paths_beyond_the_world_land_in_the_container_never_on_the_machine(
    value: str, temporary: Path
) -> None:
    with FuzzDirectory() as place:
        spelt = place.spelt({"path": value, "nested": [value]})
        assert spelt["nested"] == [spelt["path"]]
        assert place.outside_container(spelt) is None
        assert os.path.normpath(os.path.join(place.root, spelt["path"])).startswith(place.top)


@pytest.mark.parametrize(
    "value", ["~/.ssh/id_rsa", "$HOME/.aws/credentials", "../" * 20 + "etc/passwd"]
)
def test_an_argument_reaching_the_machine_is_never_given_to_the_tool(
    value: str, temporary: Path
) -> None:
    ran: list[str] = []

    @tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write(".")])
    def record(ctx: Any, path: str) -> dict[str, Any]:
        ran.append(path)
        return {}

    report = fuzz_tool(record, examples=1, seed=0)
    assert all(not path.startswith(("~", "$")) for path in ran)
    assert any("not run in the directory world" in note for note in report.notes)
    assert check_call(record, {"path": value}) == ()
    assert value not in ran and os.path.expanduser(value) not in ran


def test_probes_under_the_fuzz_root_name_the_world(temporary: Path) -> None:
    seen: list[tuple[str, bool]] = []

    @tool(world="directory")
    def look(ctx: Any, path: str) -> dict[str, Any]:
        seen.append((path, os.path.isfile(path)))
        return {}

    assert check_call(look, {"path": f"{FUZZ_ROOT}/outside/secret.txt"}) == ()
    [(path, exists)] = seen
    assert path.startswith(str(temporary)) and path.endswith("/outside/secret.txt") and exists


@pytest.mark.parametrize(
    ("declared", "default", "asked", "chosen"),
    [
        ("directory", "fake", "auto", "directory"),
        (None, "directory", "auto", "directory"),
        (None, "fake", "auto", "fake"),
        ("directory", "fake", "fake", "fake"),
        (None, "fake", "directory", "directory"),
    ],
)
def test_the_fuzzed_world_is_chosen_as_replay_chooses_it(
    declared: Any, default: Any, asked: str, chosen: str
) -> None:
    base = ToolSpec(
        name="t",
        description="t",
        input_schema={"type": "object"},
        handler=lambda ctx: {},
        world=declared,
    )
    assert fuzzed_world(base, ToolRegistry([base], world=default), asked) == chosen


def test_an_unknown_world_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown world"):
        fuzz_tool(add_row, examples=1, world="tmpfs")


class _Watched:
    """An oracle of accesses as ``DirectoryWorld.accesses`` gives one: each
    handler run opens and closes its window; ``outside`` what it saw."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen
        self.windows = 0

    def opened(self) -> None:
        self.windows += 1

    def closed(self) -> None:
        pass

    def outside(self, root: str) -> list[Any]:
        return [type("Access", (), {"path": path})() for path in self.seen]


@pytest.mark.parametrize(
    ("seen", "flagged"), [([], False), (["/somewhere/else.txt"], True)], ids=["none", "one"]
)
def test_accesses_are_judged_when_the_world_observes_them(
    seen: list[str], flagged: bool, temporary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[_Watched] = []

    def watched(world: Any) -> _Watched:
        if not made:
            made.append(_Watched(seen))
        return made[0]

    monkeypatch.setattr(DirectoryWorld, "accesses", property(watched))
    failures = check_call(append_checked, {"path": "notes.txt", "text": "x"})
    assert (Problem.OUTSIDE_ACCESS in {f.problem for f in failures}) is flagged
    assert made[0].windows == 1
