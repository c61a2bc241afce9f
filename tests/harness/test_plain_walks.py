"""``install_plain_walks``: pyfakefs's ``resolve_path`` answered from the
directory objects gives pyfakefs's own answer, for every kind of path."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import pytest
from pyfakefs import helpers as fake_helpers
from pyfakefs.fake_filesystem import FakeFilesystem, OSType

from pytest_toolguard.harness.plain_walks import install_plain_walks
from pytest_toolguard.harness.world import FakeWorld
from pytest_toolguard.replay.cassette import WorkspaceState

NAMES = ("ws", "a", "b", "f.txt", "link", "up", "loop", "gone", "x", "..", ".", "")


def _tree(fs: FakeFilesystem) -> None:
    fs.create_file("/ws/a/f.txt", contents="x")
    fs.create_dir("/ws/b")
    fs.create_symlink("/ws/link", "/ws/a")  # absolute, to a directory
    fs.create_symlink("/ws/a/up", "..")  # relative, climbing
    fs.create_symlink("/ws/b/loop", "/ws/b/loop")  # a loop
    fs.create_symlink("/ws/b/gone", "/nowhere/at/all")  # dangling
    fs.create_symlink("/ws/b/f.txt", "../a/f.txt")  # to a file


def _paths() -> list[Any]:
    paths: list[Any] = ["/", "", "/dev/null", "ws", "a/f.txt", "/ws/", "//ws", b"/ws/a"]
    for depth in (1, 2, 3):
        for names in itertools.product(NAMES, repeat=depth):
            paths.append("/" + "/".join(names))
    paths.append(pathlib.PurePosixPath("/ws/a/f.txt"))
    return paths


def _answer(resolve: Any, path: Any) -> tuple[str, Any]:
    try:
        answer = resolve(path)
    except Exception as exc:  # the same exception, or the same value (the same object)
        return type(exc).__name__, getattr(exc, "errno", None)
    return "value", answer if isinstance(answer, (str, bytes)) else id(answer)


def _assert_same_answers(fs: FakeFilesystem, method: str, paths: list[Any]) -> None:
    """``fs``'s ``method`` answers every path the same with the plain walks
    installed as without them, and is pyfakefs's own again once they are gone."""
    want = [_answer(getattr(fs, method), path) for path in paths]
    uninstall = install_plain_walks(fs)
    try:
        got = [_answer(getattr(fs, method), path) for path in paths]
    finally:
        uninstall()
    assert got == want
    assert method not in fs.__dict__


@pytest.mark.parametrize("os_type", [OSType.LINUX, OSType.MACOS, OSType.WINDOWS])
def test_resolve_path_gives_pyfakefs_answer_for_every_path(os_type: OSType) -> None:
    fs = FakeFilesystem()
    fs.os = os_type
    if os_type is OSType.LINUX:
        _tree(fs)
    else:
        fs.create_file("/ws/a/f.txt", contents="x")
    fs.cwd = "/ws"
    _assert_same_answers(fs, "resolve_path", _paths())


@pytest.mark.parametrize("uid", [0, 1000], ids=["root", "user"])
def test_get_object_from_normpath_gives_pyfakefs_object_for_every_path(uid: int) -> None:
    fs = FakeFilesystem()
    fs.os = OSType.LINUX
    _tree(fs)
    fs.create_dir("/ws/closed", perm_bits=0o000)
    fs.create_file("/ws/closed/inner.txt")
    paths = _paths() + ["/ws/closed/inner.txt", "/ws/closed"]
    fake_helpers.set_uid(uid)
    try:
        _assert_same_answers(fs, "get_object_from_normpath", paths)
    finally:
        fake_helpers.reset_ids()


def test_resolve_path_sees_a_link_made_after_it_walked() -> None:
    fs = FakeFilesystem()
    fs.os = OSType.LINUX
    fs.create_dir("/ws/a")
    uninstall = install_plain_walks(fs)
    try:
        assert fs.resolve_path("/ws/b/f.txt") == "/ws/b/f.txt"
        fs.create_symlink("/ws/b", "/ws/a")
        assert fs.resolve_path("/ws/b/f.txt") == "/ws/a/f.txt"
        fs.remove_object("/ws/b")
        assert fs.resolve_path("/ws/b/f.txt") == "/ws/b/f.txt"
    finally:
        uninstall()


def test_fake_world_walks_plainly_inside_and_puts_pyfakefs_back_after() -> None:
    with FakeWorld(WorkspaceState(root="/ws", files={"a/f.txt": "x"})) as world:
        fs = world.fs
        assert "resolve_path" in fs.__dict__  # the access log's wrapper, over the plain walk
        fs.create_symlink("/ws/l", "/ws/a")
        assert fs.resolve_path("/ws/l/f.txt") == "/ws/a/f.txt"
        assert fs.resolve_path("/ws/a/f.txt") == "/ws/a/f.txt"
    assert "resolve_path" not in fs.__dict__


def _wrapped_calls(install: bool) -> list[Any]:
    """The paths pyfakefs hands ``resolve_path`` when it is wrapped as the
    access log wraps it, for lookups of every kind (an inner call is an
    access the log records)."""
    fs = FakeFilesystem()
    fs.os = OSType.LINUX
    _tree(fs)
    uninstall = install_plain_walks(fs) if install else (lambda: None)
    inner = fs.resolve_path
    seen: list[Any] = []

    def recording(file_path: Any, allow_fd: bool = False) -> Any:
        seen.append(file_path)
        return inner(file_path, allow_fd)

    fs.resolve_path = recording  # type: ignore[method-assign]
    try:
        for path in _paths() + ["/ws/..%2fx", "/ws/a/..b/c", "/ws/a/f.txt/..x"]:
            for lookup in (fs.resolve_path, fs.resolve, fs.lresolve, fs.exists, fs.islink):
                _answer(lookup, path)
            _answer(fs.get_object_from_normpath, path)
    finally:
        del fs.__dict__["resolve_path"]
        uninstall()
    return seen


def test_pyfakefs_makes_the_same_wrapped_calls_with_plain_walks() -> None:
    assert _wrapped_calls(install=True) == _wrapped_calls(install=False)
