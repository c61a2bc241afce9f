"""Replay's world: one pyfakefs patcher shared by every cassette of a
process, paused in between. Each cassette must get exactly what a new
``Patcher`` gave it, and between cassettes the real filesystem must be real."""

from __future__ import annotations

import errno
import importlib
import os
import posixpath
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyfakefs import helpers as fake_helpers
from pyfakefs.fake_filesystem_unittest import Patcher

from pytest_toolguard.harness import fake_filesystem as fakes
from pytest_toolguard.harness.fake_filesystem import FakeFilesystems, process_fake_filesystems
from pytest_toolguard.harness.files import read_tree, read_tree_through_os
from pytest_toolguard.replay import Cassette, WorkspaceState
from pytest_toolguard.replay.cassette import Session

ROOT = "/toolguard-world-test/workspace"
"""A root no real machine has, so a real lookup of it is always False."""


def cassette(
    files: dict[str, bytes] | None = None,
    *,
    root: str = ROOT,
    directories: tuple[str, ...] = (),
    symlinks: dict[str, str] | None = None,
    outside_files: dict[str, bytes] | None = None,
) -> Cassette:
    return Cassette(
        kind="case",
        name="world",
        session=Session(),
        workspace=WorkspaceState(
            root=root,
            files=files if files is not None else {"notes.txt": b"notes\n"},
            directories=directories,
            symlinks=symlinks or {},
            outside_files=outside_files or {},
        ),
        interactions=(),
    )


RICH = cassette(
    {
        "notes.txt": b"notes\n",
        "src/a.py": b"a = 1\n",
        "src/pkg/b.py": b"b = 2\n",
        "data/deep/er/c.csv": b"id\n1\n",
        ".toolguard-tmp-leftover": b"half",
    },
    directories=("empty", "src", "src/pkg/cache"),
    symlinks={"link-to-file": "notes.txt", "link-to-dir": "src", "broken": "nowhere"},
    outside_files={
        "/toolguard-world-test/outside/secret.txt": b"secret\n",
        "/tmp/toolguard-world-test.txt": b"in tmp\n",
        "/etc/toolguard-world-test": b"etc\n",
    },
)


@pytest.fixture
def world() -> Iterator[FakeFilesystems]:
    """The shared world, started: a cassette has run, its patcher is kept."""
    with fake_filesystem(cassette()):
        pass
    assert process_fake_filesystems().started and not process_fake_filesystems().active
    yield process_fake_filesystems()


def fake_filesystem(case: Cassette) -> Any:
    """The process's world, holding ``case``'s workspace."""
    return process_fake_filesystems().filesystem(case.workspace)


def fill_workspace(fs: Any, case: Cassette) -> None:
    fakes.fill_workspace(fs, case.workspace)


def snapshot(fs: Any) -> dict[str, tuple[Any, ...]]:
    """Every entry of the fake filesystem with what ``os.stat`` and a read
    would show, times left out; and the disk accounting."""
    entries: dict[str, tuple[Any, ...]] = {}
    pending: list[tuple[str, Any]] = [("", fs.root)]
    while pending:
        prefix, directory = pending.pop()
        for name, item in sorted(directory.entries.items()):
            path = f"{prefix}/{name}"
            entries[path] = (
                item.st_mode,
                item.st_ino,
                item.st_nlink,
                item.st_size,
                item.st_dev,
                item.st_uid,
                item.st_gid,
                None if stat.S_ISDIR(item.st_mode) else item.byte_contents,
            )
            if stat.S_ISDIR(item.st_mode):
                pending.append((path, item))
    entries["<disk>"] = tuple(
        (point, usage["used_size"], usage["total_size"])
        for point, usage in sorted(fs.mount_points.items())
    )
    entries["<last inode>"] = (fs.last_ino,)
    return entries


# -- between cassettes, the real filesystem is real -------------------------------


def test_between_cassettes_open_os_and_pathlib_reach_the_real_disk(
    world: FakeFilesystems, tmp_path: Path
) -> None:
    target = tmp_path / "written-between-cassettes.txt"
    with open(target, "w", encoding="utf-8") as handle:
        handle.write("real")
    fd = os.open(tmp_path / "by-os.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"real too")
    os.close(fd)
    assert target.read_text(encoding="utf-8") == "real"
    assert sorted(os.listdir(tmp_path)) == ["by-os.txt", "written-between-cassettes.txt"]
    assert os.stat(tmp_path / "by-os.txt").st_size == len(b"real too")
    assert not os.path.exists(ROOT)  # the cassette's root was fake


def test_between_cassettes_pyfakefs_sees_no_running_patcher(world: FakeFilesystems) -> None:
    # pyfakefs's pytest plugin resumes Patcher.PATCHER before every test.
    assert Patcher.PATCHER is None
    assert Patcher.REF_COUNT == 0


def test_an_error_inside_a_cassette_still_gives_the_real_filesystem_back(
    world: FakeFilesystems, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="inside"), fake_filesystem(cassette()):
        assert os.path.exists(ROOT)
        raise RuntimeError("inside")
    assert not os.path.exists(ROOT)
    (tmp_path / "after.txt").write_bytes(b"x")
    assert (tmp_path / "after.txt").read_bytes() == b"x"
    assert world.started and Patcher.PATCHER is None


# -- each cassette starts from nothing --------------------------------------------


def test_the_patcher_is_kept_from_one_cassette_to_the_next(world: FakeFilesystems) -> None:
    with fake_filesystem(cassette()) as first:
        pass
    with fake_filesystem(cassette()) as second:
        assert Patcher.PATCHER is not None and Patcher.REF_COUNT == 1
    assert second is first


def test_a_cassette_sees_none_of_the_files_an_earlier_one_made(world: FakeFilesystems) -> None:
    with fake_filesystem(cassette({"a.txt": b"first"})):
        with open(f"{ROOT}/made-in-the-first.txt", "w", encoding="utf-8") as handle:
            handle.write("x")
        os.makedirs("/toolguard-world-test/elsewhere")
        with open("/toolguard-world-test/elsewhere/out.txt", "wb") as raw:
            raw.write(b"outside")
        with open("/tmp/toolguard-world-test-tmp.txt", "wb") as raw:
            raw.write(b"tmp")
        kept_open = os.open(f"{ROOT}/a.txt", os.O_RDONLY)
    with fake_filesystem(cassette({"b.txt": b"second"})) as fs:
        assert read_tree(ROOT) == {"b.txt": b"second"}
        assert not os.path.exists("/toolguard-world-test/elsewhere")
        assert not os.path.exists("/tmp/toolguard-world-test-tmp.txt")
        assert os.listdir(tempfile.gettempdir()) == []  # /tmp itself, or the run's own
        with pytest.raises(OSError):
            os.fstat(kept_open)
        assert sorted(fs.root.entries) == ["tmp", "toolguard-world-test"]


def test_a_module_imported_between_cassettes_is_faked_in_the_next(
    world: FakeFilesystems, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"toolguard_world_probe_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "import os\nfrom os import listdir\n\n\n"
        "def look(root):\n    return os.path.isdir(root), listdir(root)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module(name)  # imported while the patcher is paused
    try:
        with fake_filesystem(cassette({"seen.txt": b"x"})):
            assert probe.look(ROOT) == (True, ["seen.txt"])
        assert probe.look(str(tmp_path))[0]  # and real again afterwards
    finally:
        sys.modules.pop(name, None)


def test_a_cleared_pyfakefs_cache_is_filled_again_for_the_next_cassette(
    world: FakeFilesystems,
) -> None:
    Patcher.clear_fs_cache()  # pyfakefs's pytest plugin does it at every session end
    with fake_filesystem(cassette()):
        assert os.path.exists(f"{ROOT}/notes.txt")


def test_a_changed_filesystem_setting_gives_the_next_cassette_a_new_patcher(
    world: FakeFilesystems,
) -> None:
    with fake_filesystem(cassette()) as changed:
        default_umask = changed.umask
        os.umask(0o077)
        changed.is_case_sensitive = False
    with fake_filesystem(cassette()) as fresh:
        assert fresh is not changed
        assert fresh.umask == default_umask and fresh.is_case_sensitive
        mode = stat.S_IMODE(os.stat(f"{ROOT}/notes.txt").st_mode)
        assert mode == 0o666 & ~default_umask


def test_the_fake_user_is_put_back_after_a_cassette(world: FakeFilesystems) -> None:
    with fake_filesystem(cassette()):
        fake_helpers.set_uid(4242)
    assert fake_helpers.get_uid() == os.getuid()


# -- other patchers ----------------------------------------------------------------


def test_a_patcher_started_between_cassettes_is_its_own(
    world: FakeFilesystems, tmp_path: Path
) -> None:
    with Patcher() as other:  # what pyfakefs's ``fs`` fixture does
        assert other.fs is not None
        assert not os.path.exists(ROOT)
        other.fs.create_file("/other.txt", contents="other")
    assert not os.path.exists("/other.txt")
    (tmp_path / "real.txt").write_bytes(b"real")
    with fake_filesystem(cassette()) as fs:
        assert not os.path.exists("/other.txt")
        assert fs is not other.fs


def test_a_cassette_inside_a_running_fake_filesystem_joins_it(fs: Any) -> None:
    fs.create_file("/from-the-fixture.txt", contents="fixture")
    with fake_filesystem(cassette()) as joined:
        assert joined is fs
        assert os.path.exists("/from-the-fixture.txt")
        assert read_tree(ROOT) == {"notes.txt": b"notes\n"}
    assert os.path.exists(ROOT)  # the fixture's filesystem is still running
    assert Patcher.PATCHER is not None


def test_a_cassette_inside_a_cassette_joins_it(world: FakeFilesystems) -> None:
    with fake_filesystem(cassette()) as outer:
        with fake_filesystem(cassette({"inner.txt": b"i"}, root="/inner")) as inner:
            assert inner is outer
        assert os.path.exists("/inner/inner.txt")
        assert world.active
    assert not os.path.exists(ROOT)
    assert Patcher.PATCHER is None and Patcher.REF_COUNT == 0


# -- closing -----------------------------------------------------------------------


def test_close_drops_the_patcher_and_the_next_cassette_starts_a_new_one(
    world: FakeFilesystems,
) -> None:
    with fake_filesystem(cassette()) as before:
        pass
    world.close()
    assert not world.started
    with fake_filesystem(cassette()) as after:
        assert os.path.exists(f"{ROOT}/notes.txt")
    assert after is not before and world.started


def test_close_inside_a_cassette_ends_the_patcher_when_the_cassette_ends(
    world: FakeFilesystems, tmp_path: Path
) -> None:
    with fake_filesystem(cassette()):
        world.close()
        assert os.path.exists(ROOT)  # still this cassette's world
    assert not world.started
    assert Patcher.PATCHER is None and Patcher.REF_COUNT == 0
    (tmp_path / "real.txt").write_bytes(b"real")
    assert os.listdir(tmp_path) == ["real.txt"]


# -- building the recorded workspace and reading it back --------------------------


def _fill_as_pyfakefs_does(fs: Any, case: Cassette) -> None:
    """The recorded workspace made with pyfakefs's own create functions."""
    state = case.workspace
    fs.create_dir(state.root)
    for directory in state.directories:
        fs.create_dir(f"{state.root}/{directory}")
    for path, content in state.files.items():
        fs.create_file(f"{state.root}/{path}", contents=content)
    for path, content in state.outside_files.items():
        fs.create_file(path, contents=content)
    for link, target in state.symlinks.items():
        fs.create_symlink(f"{state.root}/{link}", target)


def test_the_workspace_is_built_as_pyfakefs_create_functions_build_it(
    world: FakeFilesystems,
) -> None:
    with fake_filesystem(RICH) as fs:
        built = snapshot(fs)
        fs.reset()
        _fill_as_pyfakefs_does(fs, RICH)
        assert built == snapshot(fs)


def test_the_filesystem_is_emptied_as_pyfakefs_reset_empties_it(world: FakeFilesystems) -> None:
    with fake_filesystem(RICH) as fs:
        fakes.reset_filesystem(fs)
        emptied = snapshot(fs)
        fs.reset()
        assert emptied == snapshot(fs)
        assert fs.create_temp_dir


@pytest.mark.parametrize(
    ("case", "error"),
    [
        (cassette(root="/tmp"), FileExistsError),  # the temporary directory is there
        (cassette(directories=("a", "a")), FileExistsError),
        (cassette({"f": b"x", "f/g": b"y"}), OSError),  # a file used as a directory
    ],
    ids=["root-exists", "directory-twice", "file-as-directory"],
)
def test_a_workspace_pyfakefs_refuses_is_refused_the_same_way(
    world: FakeFilesystems, case: Cassette, error: type[Exception]
) -> None:
    with Patcher() as own, pytest.raises(error) as expected:
        _fill_as_pyfakefs_does(own.fs, case)
    with pytest.raises(error) as got, fake_filesystem(case):
        pass
    assert type(got.value) is type(expected.value)
    assert not os.path.exists(ROOT)


def test_paths_that_are_not_plain_go_through_pyfakefs(world: FakeFilesystems) -> None:
    odd = cassette({"a/./b.txt": b"1", "c//d.txt": b"2", "e/../f.txt": b"3"})
    with fake_filesystem(odd) as fs:
        built = snapshot(fs)
        fs.reset()
        _fill_as_pyfakefs_does(fs, odd)
        assert built == snapshot(fs)
        assert read_tree(ROOT) == {"a/b.txt": b"1", "c/d.txt": b"2", "f.txt": b"3"}


@pytest.mark.parametrize("root", [ROOT, f"{ROOT}/src", f"{ROOT}/link-to-dir", f"{ROOT}/missing"])
def test_read_tree_in_the_fake_filesystem_answers_as_the_walk_through_os(
    world: FakeFilesystems, root: str
) -> None:
    with fake_filesystem(RICH):
        fast = read_tree(root)
        walked = read_tree_through_os(root)
    assert list(fast.items()) == list(walked.items())  # the same order too


def test_read_tree_of_the_rich_workspace_skips_links_and_keeps_every_file(
    world: FakeFilesystems,
) -> None:
    with fake_filesystem(RICH):
        assert list(read_tree(ROOT)) == [
            ".toolguard-tmp-leftover",
            "notes.txt",
            "data/deep/er/c.csv",
            "src/a.py",
            "src/pkg/b.py",
        ]


def test_read_tree_as_another_user_refuses_an_unreadable_file_as_os_does(
    world: FakeFilesystems,
) -> None:
    with fake_filesystem(cassette({"locked.txt": b"x", "open.txt": b"y"})):
        os.chmod(f"{ROOT}/locked.txt", 0)
        fake_helpers.set_uid(4242)
        with pytest.raises(PermissionError):
            read_tree(ROOT)


def test_fill_workspace_works_in_a_filesystem_of_its_own() -> None:
    with Patcher() as own:
        assert own.fs is not None
        fill_workspace(own.fs, RICH)
        assert read_tree(ROOT) == read_tree_through_os(ROOT)
        assert os.readlink(f"{ROOT}/link-to-dir") == "src"


@pytest.mark.parametrize(
    ("root", "path"),
    [("/w", "a/b"), ("/w/", "a"), ("/w", "/abs"), ("", "a"), ("/", "a"), ("/w", "")],
)
def test_paths_are_joined_as_posixpath_joins_them(root: str, path: str) -> None:
    assert fakes.join_path(root, path) == posixpath.join(root, path)


@pytest.mark.parametrize(
    "path", ["/a/b", "/a", "/", "//a", "/a//b", "/a/./b", "/a/../b", "/a/b/", "a/b", "/a\0b"]
)
def test_only_paths_normpath_leaves_alone_are_built_directly(path: str) -> None:
    plain = path.startswith("/") and path != "/" and "\0" not in path
    plain = plain and posixpath.normpath(path) == path and not path.startswith("//")
    assert (fakes.plain_components(path) is not None) == plain


def test_a_file_that_does_not_fit_is_refused_and_not_left_behind() -> None:
    too_big = cassette({"small.txt": b"s", "big.txt": b"x" * 100})
    states = []
    for fill in (fill_workspace, _fill_as_pyfakefs_does):
        with Patcher() as own:
            assert own.fs is not None
            own.fs.set_disk_usage(50)
            with pytest.raises(OSError) as refused:
                fill(own.fs, too_big)
            assert refused.value.errno == errno.ENOSPC
            assert not os.path.exists(f"{ROOT}/big.txt")
            states.append(snapshot(own.fs))
    assert states[0] == states[1]
