"""The directory world: a recorded session rebuilt in a fresh real
directory, where C libraries (sqlite3), subprocesses (git) and absolute
paths see the same files as the handler; the recorded root mapped to the
world's; decoys around it; everything removed afterwards.

Each tool here reaches its files past ``ctx.workspace``, which a fake
filesystem cannot serve: replayed there, sqlite3 opens the real file at the
recorded root (or fails when it is gone), git runs on the real disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import directory_tools
import pytest
from directory_tools import CAPS, REGISTRY

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.harness.directory_world import (
    WORLD_PREFIX,
    DirectoryWorld,
    world_directories,
)
from pytest_toolguard.harness.world import DECOY_MARKER, Decoys
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.cassette import WorkspaceState, dump
from pytest_toolguard.replay.player import chosen_world
from pytest_toolguard.replay.recorder import WorkspaceTooLarge
from pytest_toolguard.replay.root_map import RootMap

FROZEN = "2024-05-01T12:00:00+00:00"


def _record(
    tmp_path: Path,
    calls: list[tuple[str, Any]],
    setup: Any = None,
    registry: ToolRegistry = REGISTRY,
) -> tuple[Path, Path]:
    """Record ``calls`` in ``tmp_path/rec/proj``; returns (cassette path, workspace)."""
    workspace = tmp_path / "rec" / "proj"
    workspace.mkdir(parents=True)
    if setup is not None:
        setup(workspace)
    runtime = ToolRuntime(registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "cassettes" / "session.yaml"
    path.parent.mkdir(exist_ok=True)
    with record_session(runtime, path):
        results = [
            runtime.execute(ToolCall(call_id=f"c{i}", tool_name=name, arguments=arguments))
            for i, (name, arguments) in enumerate(calls)
        ]
    runtime.close()
    assert all(result.ok for result in results), [result.message for result in results]
    return path, workspace


def _git_repository(workspace: Path) -> None:
    """A workspace that is a git repository with one commit, before recording."""
    (workspace / "README.md").write_text("hello\n")
    directory_tools._git(str(workspace), "init")
    directory_tools._git(str(workspace), "add", "README.md")
    directory_tools._git(str(workspace), "commit", "-m", "first")


# -- replay through C code, subprocesses and absolute paths ------------------------------


def test_a_sqlite_tool_replays_twice_after_its_recorded_directory_is_gone(tmp_path: Path) -> None:
    path, workspace = _record(tmp_path, [("add_contact", {"name": "Ada"})])
    shutil.rmtree(workspace.parent)
    for _ in range(2):
        report = replay(load(path), REGISTRY)
        assert report.differences == ()
        assert [result.data for result in report.results] == [{"count": 1}]
    assert not workspace.parent.exists()  # replay never made the recorded root


def test_a_git_tool_replays_from_the_whole_workspace_its_recording_kept(tmp_path: Path) -> None:
    path, workspace = _record(
        tmp_path,
        [("git_commit_note", {"name": "note.txt", "text": "remember\n"})],
        setup=_git_repository,
    )
    cassette = load(path)
    # git read .git through its own process: the recorder kept all of it.
    assert {".git/HEAD", "README.md"} <= set(cassette.workspace.files)
    assert any(name.startswith(".git/objects/") for name in cassette.workspace.files)
    # git's index holds inode numbers and times: checked for being there only.
    dump(replace(cassette, volatile=("files..git/index",)), path)
    shutil.rmtree(workspace.parent)
    for _ in range(2):
        report = replay(load(path), REGISTRY)
        assert report.differences == ()
        assert "nothing to commit" in report.results[0].data["status"]


def test_git_objects_keep_their_read_only_modes(tmp_path: Path) -> None:
    path, _ = _record(
        tmp_path,
        [("git_commit_note", {"name": "n.txt", "text": "x\n"})],
        setup=_git_repository,
    )
    modes = load(path).workspace.modes
    objects = [name for name in modes if name.startswith(".git/objects/") and "/pack" not in name]
    assert objects and all(modes[name] == 0o444 for name in objects if name.count("/") == 3)


def test_an_absolute_path_argument_is_mapped_to_the_world(tmp_path: Path) -> None:
    def notes(workspace: Path) -> None:
        (workspace / "notes.txt").write_text("a\nb\nc\n")

    recorded_path = str(tmp_path / "rec" / "proj" / "notes.txt")
    path, workspace = _record(tmp_path, [("count_lines_at", {"path": recorded_path})], notes)
    shutil.rmtree(workspace.parent)
    report = replay(load(path), REGISTRY)
    assert report.differences == ()
    # The handler opened the world's copy; its answer reads as recorded.
    assert report.results[0].data == {"path": recorded_path, "lines": 3}


def test_a_tool_writing_beside_its_workspace_is_reported_and_the_real_disk_untouched(
    tmp_path: Path,
) -> None:
    path, workspace = _record(tmp_path, [("add_contact_beside", {"name": "Ada"})])
    real_database = workspace.parent / "crm.db"
    before = real_database.read_bytes()
    report = replay(load(path), REGISTRY)
    outside = [d for d in report.differences if d.where == "outside the workspace"]
    found = {d.field: d.recorded for d in outside}
    assert found[str(real_database)] == "absent"
    # SQLite's journal beside it, made and removed within the call: seen only by the kernel.
    assert found.get(f"{real_database}-journal", "not accessed") == "not accessed"
    assert set(found) <= {str(real_database), f"{real_database}-journal"}
    assert report.results[0].data == {"count": 1}  # its own database, in the world
    assert real_database.read_bytes() == before


@pytest.mark.parametrize("decoy", ["proj2/keep.txt", "proj-old/keep.txt", "secret-above.txt"])
def test_a_tool_changing_a_decoy_is_reported(tmp_path: Path, decoy: str) -> None:
    @tool(world="directory", risk="write")
    def spoil(ctx: Any) -> dict[str, Any]:
        target = os.path.join(os.path.dirname(ctx.workspace.root), decoy)
        with open(target, "a", encoding="utf-8") as handle:
            handle.write("changed\n")
        return {}

    registry = ToolRegistry([spoil])
    path, _ = _record(tmp_path, [("spoil", {})], registry=registry, setup=_decoys_beside(decoy))
    report = replay(load(path), registry)
    assert [(d.where, d.recorded) for d in report.differences] == [
        ("outside the workspace", "unchanged")
    ]
    assert report.differences[0].field == str(tmp_path / "rec" / decoy)


def _decoys_beside(decoy: str) -> Any:
    def setup(workspace: Path) -> None:
        target = workspace.parent / decoy
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("recorded\n")

    return setup


FAKE_WORLD_FAILS = {
    "sqlite3": ([("add_contact", {"name": "Ada"})], None),
    "git": ([("git_commit_note", {"name": "n.txt", "text": "x\n"})], _git_repository),
}


@pytest.mark.parametrize(("calls", "setup"), FAKE_WORLD_FAILS.values(), ids=list(FAKE_WORLD_FAILS))
def test_forced_into_the_fake_world_such_a_tool_does_not_replay(
    tmp_path: Path, calls: list[tuple[str, Any]], setup: Any
) -> None:
    """What the directory world is for: where the recorded root is gone,
    C code and subprocesses find nothing in a fake filesystem."""
    path, workspace = _record(tmp_path, calls, setup)
    shutil.rmtree(workspace.parent)
    report = replay(load(path), REGISTRY, world="fake")
    assert report.differences != ()
    assert not workspace.parent.exists()


def test_a_fake_world_tool_still_replays_in_the_fake_world(tmp_path: Path) -> None:
    @tool(risk="write")
    def note(ctx: Any, text: str) -> dict[str, Any]:
        ctx.workspace.write_text("note.txt", text)
        return {"root": ctx.workspace.root}

    registry = ToolRegistry([note])
    path, workspace = _record(tmp_path, [("note", {"text": "x"})], registry=registry)
    cassette = load(path)
    assert chosen_world(cassette, registry) == "fake"
    shutil.rmtree(workspace.parent)
    report = replay(cassette, registry)
    assert report.differences == ()
    assert report.results[0].data == {"root": str(workspace)}  # no mapping: the same root


def test_a_fake_world_tool_forced_into_the_directory_world_replays(tmp_path: Path) -> None:
    @tool(risk="write")
    def note(ctx: Any, text: str) -> dict[str, Any]:
        ctx.workspace.write_text("note.txt", text)
        return {"root": ctx.workspace.root}

    registry = ToolRegistry([note])
    path, workspace = _record(tmp_path, [("note", {"text": "x"})], registry=registry)
    shutil.rmtree(workspace.parent)
    report = replay(load(path), registry, world="directory")
    assert report.differences == ()
    assert report.results[0].data == {"root": str(workspace)}  # mapped back


SHIPPED = sorted(
    path
    for folder in ("cases", "cassettes")
    for path in (Path(__file__).resolve().parents[2] / folder).glob("*.yaml")
)


@pytest.mark.parametrize("path", SHIPPED, ids=[path.name for path in SHIPPED])
def test_every_shipped_example_replays_in_the_directory_world_too(path: Path) -> None:
    from pytest_toolguard.tools import builtin_registry

    report = replay(load(path), builtin_registry(), world="directory")
    assert report.differences == ()


# -- the world is removed, whatever happened in it -------------------------------------


def test_replay_leaves_no_world_behind_even_a_locked_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Worlds made in a temporary directory of this test's own: other
    # processes' worlds in the shared one come and go while it runs.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    path, _ = _record(tmp_path, [("lock_up", {})])
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    report = replay(load(path), REGISTRY)
    assert report.differences == ()
    assert list(world_directories()) == []


@pytest.mark.parametrize("raising", [False, True])
def test_the_world_is_removed_with_read_only_trees_fifos_and_links(
    tmp_path: Path, raising: bool
) -> None:
    state = WorkspaceState(root="/somewhere/proj", files={"a.txt": b"a"})
    expecting = pytest.raises(RuntimeError) if raising else contextlib.nullcontext()
    with expecting, DirectoryWorld(state, parent=str(tmp_path)) as world:
        around = world.around
        locked = os.path.join(world.root, "locked")
        os.makedirs(os.path.join(locked, "deep"))
        os.mkfifo(os.path.join(locked, "pipe"))
        os.symlink("/etc", os.path.join(locked, "out"))
        Path(locked, "deep", "f").write_text("x")
        os.chmod(os.path.join(locked, "deep", "f"), 0)
        os.chmod(os.path.join(locked, "deep"), 0)
        os.chmod(locked, 0o500)
        os.chmod(world.root, 0o500)
        if raising:
            raise RuntimeError("the body failed")
    assert not os.path.lexists(around)
    assert list(tmp_path.iterdir()) == []
    assert os.path.isdir("/etc")  # the link was removed, never followed


def _lock_up_a_world(parent: str) -> None:
    with DirectoryWorld(WorkspaceState(root="/r/proj"), parent=parent) as world:
        locked = os.path.join(world.root, "locked")
        os.makedirs(os.path.join(locked, "deep"))
        os.mkfifo(os.path.join(locked, "pipe"))
        Path(locked, "deep", "f").write_text("x")
        os.chmod(os.path.join(locked, "deep"), 0)
        os.chmod(locked, 0o500)
        os.chmod(world.root, 0o500)
        os.chmod(world.around, 0o500)
        assert not os.access(locked, os.W_OK)  # the permissions hold for this user


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_an_unprivileged_user_s_locked_world_is_removed() -> None:
    """As root every permission is ignored: a forked child becomes
    ``nobody`` and runs the world in a directory of its own."""
    parent = tempfile.mkdtemp(prefix="toolguard-test-")
    try:
        os.chown(parent, 65534, 65534)
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                _lock_up_a_world(parent)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert os.listdir(parent) == []
    finally:
        shutil.rmtree(parent)


def test_a_world_is_private_and_new(tmp_path: Path) -> None:
    state = WorkspaceState(root="/r/proj")
    with (
        DirectoryWorld(state, parent=str(tmp_path)) as one,
        DirectoryWorld(state, parent=str(tmp_path)) as two,
    ):
        assert one.around != two.around
        assert stat.S_IMODE(os.stat(one.around).st_mode) == 0o700
        assert os.path.basename(one.around).startswith(WORLD_PREFIX)
        assert os.path.basename(one.root) == "proj"


# -- the world rebuilt from a cassette's workspace ------------------------------------


STATE = WorkspaceState(
    root="/home/ann/proj",
    files={
        "a.txt": b"see /home/ann/proj/b and /home/ann/proj2/c\n",
        "bin/run": b"#!/bin/sh\n",
        "blob.bin": b"\xff\x00/home/ann/proj",
        "ro/x": b"x",
    },
    directories=("empty", "bin", "ro", "deep/empty"),
    symlinks={"rel": "a.txt", "abs": "/home/ann/proj/a.txt", "out": "/home/ann/other.txt"},
    outside_files={"/home/ann/other.txt": b"beside", "/etc/elsewhere": b"far"},
    modes={"bin/run": 0o755, "ro": 0o555, "ro/x": 0o400},
)


def test_the_world_holds_the_cassettes_files_links_dirs_and_modes(tmp_path: Path) -> None:
    with DirectoryWorld(STATE, frozen_at=FROZEN, parent=str(tmp_path)) as world:
        root = Path(world.root)
        assert (root / "a.txt").read_bytes() == f"see {root}/b and /home/ann/proj2/c\n".encode()
        assert (root / "blob.bin").read_bytes() == b"\xff\x00/home/ann/proj"  # binary: as it is
        assert (root / "empty").is_dir() and (root / "deep" / "empty").is_dir()
        assert os.readlink(root / "rel") == "a.txt"
        assert os.readlink(root / "abs") == str(root / "a.txt")
        assert os.readlink(root / "out") == os.path.join(world.around, "other.txt")
        assert stat.S_IMODE(os.stat(root / "bin" / "run").st_mode) == 0o755
        assert stat.S_IMODE(os.stat(root / "ro").st_mode) == 0o555
        assert stat.S_IMODE(os.stat(root / "ro" / "x").st_mode) == 0o400
        assert stat.S_IMODE(os.stat(root / "a.txt").st_mode) == 0o644
        assert os.stat(root / "a.txt").st_mtime == pytest.approx(1714564800)
        assert world.planted_outside == (os.path.join(world.around, "other.txt"),)
        assert world.unplaced_outside == ("/etc/elsewhere",)
        assert world.resolve_inside("abs") == "a.txt"
        assert world.resolve_inside("out") is None
    assert (
        not os.path.exists("/home/ann/other.txt")
        or Path("/home/ann/other.txt").read_bytes() != b"beside"
    )


def test_the_clock_is_frozen_inside_the_world_only(tmp_path: Path) -> None:
    import datetime

    with DirectoryWorld(STATE, frozen_at=FROZEN, parent=str(tmp_path)):
        assert datetime.datetime.now(datetime.timezone.utc).isoformat() == FROZEN
    assert datetime.datetime.now(datetime.timezone.utc).year != 2024


def test_decoys_are_planted_around_the_workspace_only(tmp_path: Path) -> None:
    with DirectoryWorld(STATE, parent=str(tmp_path)) as world:
        around = Path(world.around)
        for decoy in (
            "proj2/keep.txt",
            "proj-old/keep.txt",
            "toolguard-outside/secret.txt",
            "secret-above.txt",
        ):
            assert DECOY_MARKER in (around / decoy).read_text()
        skipped = world.plant(
            Decoys(
                {
                    "/etc/toolguard-never": b"x",
                    str(around / "toolguard-outside" / "more.txt"): DECOY_MARKER.encode(),
                    str(Path(world.root) / "inside.txt"): b"x",
                }
            )
        )
        assert set(skipped) == {"/etc/toolguard-never", str(Path(world.root) / "inside.txt")}
        assert (around / "toolguard-outside" / "more.txt").exists()
        assert not (Path(world.root) / "inside.txt").exists()
        assert {str(around / "proj2" / "keep.txt"), str(around / "secret-above.txt")} <= set(
            world.outside()
        )
        assert not any(path.startswith(world.root + "/") for path in world.outside())
    assert not os.path.exists("/etc/toolguard-never")


def test_save_and_restore_give_back_the_workspace(tmp_path: Path) -> None:
    with DirectoryWorld(STATE, parent=str(tmp_path)) as world:
        saved = world.save_workspace()
        tree = world.tree()
        Path(world.root, "a.txt").write_text("changed")
        Path(world.root, "new.txt").write_text("new")
        world.restore_workspace(saved)
        assert world.tree() == tree
        assert world.save_workspace() == saved


def test_forbidden_files_are_planted_inside_the_workspace(tmp_path: Path) -> None:
    with DirectoryWorld(STATE, parent=str(tmp_path)) as world:
        planted = world.plant_forbidden()
        assert ".env" in planted
        assert all(os.path.exists(os.path.join(world.root, path)) for path in planted)


def test_a_cassette_entry_climbing_out_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    state = WorkspaceState(root="/r/proj", files={"../../escape.txt": b"x"})
    refused = pytest.raises(ValueError, match="not inside the workspace")
    with refused, DirectoryWorld(state, parent=str(tmp_path)):
        pass
    assert list(tmp_path.iterdir()) == []


# -- the root mapped both ways --------------------------------------------------------

MAPPED = {
    "the root": ("/ws", "/w/ws"),
    "a path under it": ("/ws/a.txt", "/w/ws/a.txt"),
    "in a command": ("cd /ws && ls", "cd /w/ws && ls"),
    "quoted": ("'/ws'", "'/w/ws'"),
    "twice": ("/ws:/ws/b", "/w/ws:/w/ws/b"),
    "trailing slash": ("/ws/", "/w/ws/"),
    "a sibling sharing the prefix": ("/ws2/a", "/ws2/a"),
    "a sibling with a suffix": ("/ws-old", "/ws-old"),
    "a name with a dot": ("/ws.bak", "/ws.bak"),
    "deeper elsewhere": ("/data/ws/a", "/data/ws/a"),
    "another case": ("/WS/a", "/WS/a"),
}


@pytest.mark.parametrize(("recorded", "world"), MAPPED.values(), ids=list(MAPPED))
def test_the_root_maps_on_component_boundaries(recorded: str, world: str) -> None:
    mapping = RootMap("/ws", "/w/ws")
    assert mapping.to_world(recorded) == world
    assert mapping.to_recorded(world) == recorded
    assert mapping.to_world(recorded.encode()) == world.encode()


def test_the_root_map_walks_json_values() -> None:
    mapping = RootMap("/ws", "/w/ws")
    value = {"/ws/k": ["/ws", 1, None, {"x": "/ws2"}], "n": 2.5, "t": ("/ws/a",)}
    assert mapping.to_world(value) == {
        "/w/ws/k": ["/w/ws", 1, None, {"x": "/ws2"}],
        "n": 2.5,
        "t": ("/w/ws/a",),
    }
    assert mapping.to_recorded(mapping.to_world(value)) == value


@pytest.mark.parametrize("root", ["relative", "/", ""])
def test_a_root_map_refuses_roots_it_cannot_map(root: str) -> None:
    with pytest.raises(ValueError):
        RootMap(root, "/w/ws")


# -- choosing the world ---------------------------------------------------------------


def _plain(ctx: Any) -> dict[str, Any]:
    return {}


@pytest.mark.parametrize(
    ("tool_world", "registry_world", "forced", "expected"),
    [
        (None, "fake", "auto", "fake"),
        ("directory", "fake", "auto", "directory"),
        (None, "directory", "auto", "directory"),
        ("fake", "directory", "auto", "fake"),
        ("directory", "fake", "fake", "fake"),
        (None, "fake", "directory", "directory"),
    ],
)
def test_the_world_is_chosen_from_the_tools_and_the_option(
    tool_world: Any, registry_world: Any, forced: str, expected: str
) -> None:
    spec = tool(name="t", world=tool_world)(_plain)
    registry = ToolRegistry([spec], world=registry_world)
    path_free = load_case_calling("t")
    assert chosen_world(path_free, registry, forced) == expected


def load_case_calling(name: str) -> Any:
    from pytest_toolguard.replay.cassette import loads

    return loads(
        "format_version: 1\nkind: case\nname: c\nsession: {}\n"
        f"interactions:\n- call: {{tool_name: {name}}}\n"
    )


@pytest.mark.parametrize("bad", ["Directory", "real", "", 1])
def test_an_unknown_world_is_one_clear_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="unknown world"):
        tool(name="t", world=bad)(_plain)
    with pytest.raises(ValueError, match="unknown world"):
        ToolRegistry(world=bad)
    with pytest.raises(ValueError, match="unknown world"):
        replay(load_case_calling("t"), ToolRegistry(), world=str(bad) or "x")


# -- recording keeps the whole workspace for directory-world tools ----------------------


def _busy_workspace(workspace: Path) -> None:
    (workspace / "untouched").mkdir()
    (workspace / "untouched" / "data.txt").write_text("data\n")
    (workspace / "empty").mkdir()
    (workspace / "tool.sh").write_text("#!/bin/sh\n")
    (workspace / "tool.sh").chmod(0o755)
    (workspace / "link").symlink_to("tool.sh")
    (workspace / ".env").write_text("SECRET=1\n")


@pytest.mark.parametrize(
    ("world", "kept"),
    [("directory", {"untouched/data.txt", "tool.sh"}), ("fake", set())],
)
def test_the_recorder_keeps_the_whole_workspace_only_for_directory_world_tools(
    tmp_path: Path, world: str, kept: set[str]
) -> None:
    spec = tool(name="noop", world=world)(_plain)  # type: ignore[arg-type]
    path, _ = _record(
        tmp_path, [("noop", {})], setup=_busy_workspace, registry=ToolRegistry([spec])
    )
    state = load(path).workspace
    assert set(state.files) == kept  # never .env
    if world == "directory":
        assert set(state.directories) == {"untouched", "empty"}
        assert state.symlinks == {"link": "tool.sh"}
        assert state.modes == {"tool.sh": 0o755}


def test_a_workspace_over_the_bound_is_refused_with_nothing_written(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.bin").write_bytes(b"x" * 2000)
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "s.yaml"
    too_large = pytest.raises(
        WorkspaceTooLarge, match="2,000 bytes in 1 files.*max_workspace_bytes"
    )
    with too_large, record_session(runtime, path, max_workspace_bytes=1000):
        runtime.execute(ToolCall(call_id="1", tool_name="add_contact", arguments={"name": "A"}))
    runtime.close()
    assert not path.exists()


def test_modes_survive_a_dump_and_a_load(tmp_path: Path) -> None:
    from pytest_toolguard.replay.cassette import Cassette, Session, dumps, loads

    cassette = Cassette(
        kind="cassette", name="m", session=Session(), workspace=STATE, interactions=()
    )
    text = dumps(cassette)
    assert "bin/run: '0755'" in text
    assert loads(text).workspace.modes == STATE.modes


def test_git_is_installed() -> None:
    """The git tests need the binary (``.ci/run`` installs it)."""
    assert subprocess.run(["git", "--version"], capture_output=True, check=False).returncode == 0
    assert tempfile.gettempdir()


# -- where worlds are made -------------------------------------------------------


def _memory_dir_here() -> bool:
    """Whether this machine's /dev/shm is a writable tmpfs with room, read
    independently of the code under test (``df``-style, from ``stat -f``)."""
    found = subprocess.run(
        ["stat", "-f", "-c", "%T %a %S", "/dev/shm"], capture_output=True, text=True, check=False
    )
    kind, blocks, size = (found.stdout.split() + ["", "0", "0"])[:3]
    return kind == "tmpfs" and int(blocks) * int(size) >= 1 << 30 and os.access("/dev/shm", os.W_OK)


@pytest.fixture
def no_temporary_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``TMPDIR``/``TEMP``/``TMP``/``TOOLGUARD_WORLD_DIR``; the temporary
    directory itself private (``tempfile.tempdir``)."""
    for name in ("TMPDIR", "TEMP", "TMP", "TOOLGUARD_WORLD_DIR"):
        monkeypatch.delenv(name, raising=False)
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    return private


@pytest.mark.parametrize("variable", ["TMPDIR", "TEMP", "TMP"])
def test_a_named_temporary_directory_holds_the_worlds(
    no_temporary_setting: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, str(no_temporary_setting))
    with DirectoryWorld(STATE) as world:
        assert os.path.dirname(world.around) == str(no_temporary_setting)
        assert list(world_directories()) == [world.around]
    assert list(world_directories()) == []


def test_toolguard_world_dir_wins_over_tmpdir(
    no_temporary_setting: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    chosen = tmp_path / "worlds"
    chosen.mkdir()
    monkeypatch.setenv("TMPDIR", str(no_temporary_setting))
    monkeypatch.setenv("TOOLGUARD_WORLD_DIR", str(chosen))
    with DirectoryWorld(STATE) as world:
        assert os.path.dirname(world.around) == str(chosen)
        assert os.path.isdir(world.root)
    assert os.listdir(chosen) == [] and os.listdir(no_temporary_setting) == []


def test_with_nothing_named_worlds_go_to_memory_when_it_has_room(
    no_temporary_setting: Path,
) -> None:
    expected = "/dev/shm" if _memory_dir_here() else str(no_temporary_setting)
    with DirectoryWorld(STATE) as world:
        assert os.path.dirname(world.around) == expected
        around = world.around
        assert os.path.isdir(world.root)
    assert not os.path.exists(around)
    assert os.listdir(no_temporary_setting) == []
