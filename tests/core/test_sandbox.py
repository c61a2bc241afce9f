"""The workspace sandbox: what it lets through, what it refuses, and how.

Each test states one rule of ``pytest_toolguard.sandbox``. Most run on the
real filesystem under ``tmp_path``; the last group runs the core rules again
under pyfakefs, where replay runs them.
"""

from __future__ import annotations

import errno
import os
import pickle
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_toolguard.contract import ErrorCode
from pytest_toolguard.sandbox import (
    TEMP_PREFIX,
    Entry,
    ForbiddenPath,
    InvalidPath,
    LimitExceeded,
    PathOutsideWorkspace,
    SandboxError,
    Workspace,
)

SECRET = b"outside secret: must never be read through the workspace"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a secret."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_bytes(SECRET)
    return directory


@pytest.fixture
def root(tmp_path: Path, outside: Path) -> Path:
    """The workspace directory: a few files and a subdirectory."""
    directory = tmp_path / "ws"
    (directory / "sub").mkdir(parents=True)
    (directory / "a").mkdir()
    (directory / "b.txt").write_bytes(b"bee")
    (directory / "sub" / "f.txt").write_bytes(b"eff")
    return directory


@pytest.fixture
def ws(root: Path) -> Iterator[Workspace]:
    with Workspace(root) as workspace:
        yield workspace


def outside_snapshot(outside: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(outside)): path.read_bytes()
        for path in sorted(outside.rglob("*"))
        if path.is_file()
    }


# --------------------------------------------------------------------------- lexical rules


def test_dotdot_that_stays_inside_is_allowed(ws: Workspace) -> None:
    assert ws.normalize("a/../b.txt") == "b.txt"
    assert ws.read_bytes("a/../b.txt") == b"bee"
    assert ws.resolve("sub/../a/./") == "a"
    ws.write_bytes("a/../sub/new.txt", b"n")
    assert ws.read_bytes("sub/new.txt") == b"n"


def test_the_root_itself_is_dot(ws: Workspace) -> None:
    assert ws.normalize(".") == "."
    assert ws.normalize("a/..") == "."
    assert ws.resolve("./") == "."
    assert ws.exists(".")


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "sub/../../b.txt", "a/b/../../../x"])
def test_dotdot_above_the_root_is_refused(ws: Workspace, path: str) -> None:
    for operation in (ws.normalize, ws.resolve, ws.read_bytes, ws.exists):
        with pytest.raises(PathOutsideWorkspace) as caught:
            operation(path)
        assert caught.value.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
        assert caught.value.path == path
    with pytest.raises(PathOutsideWorkspace):
        ws.write_bytes(path, b"x")


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "\\etc\\passwd", "\\\\server\\share\\x", "C:\\x", "c:x", "Z:/x"]
)
def test_absolute_paths_are_refused(ws: Workspace, path: str) -> None:
    with pytest.raises(PathOutsideWorkspace):
        ws.normalize(path)
    with pytest.raises(PathOutsideWorkspace):
        ws.read_bytes(path)
    with pytest.raises(PathOutsideWorkspace):
        ws.write_bytes(path, b"x")


def test_a_host_path_into_the_workspace_is_its_relative_path(ws: Workspace, root: Path) -> None:
    assert ws.read_bytes(str(root / "b.txt")) == ws.read_bytes("b.txt")
    with pytest.raises(PathOutsideWorkspace):
        ws.read_bytes(str(root) + "/../" + root.name + "/b.txt")


def test_backslash_separates_components(ws: Workspace, outside: Path) -> None:
    assert ws.read_bytes("sub\\f.txt") == b"eff"
    assert ws.normalize("sub\\x/y") == "sub/x/y"
    with pytest.raises(PathOutsideWorkspace):
        ws.read_bytes("..\\outside\\secret.txt")
    with pytest.raises(PathOutsideWorkspace):
        ws.write_bytes("sub\\..\\..\\outside\\x", b"x")
    assert outside_snapshot(outside) == {"secret.txt": SECRET}


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "empty"),
        ("a\0b", "NUL"),
        ("sub/\0", "NUL"),
        ("x" * 256, "component of 256 bytes"),
        ("é" * 128, "component of 256 bytes once encoded"),
        ("a/" * 2100, "longer than 4096 bytes"),
        (TEMP_PREFIX + "abc", "reserved prefix"),
    ],
)
def test_unusable_paths_are_invalid(ws: Workspace, path: str, why: str) -> None:
    with pytest.raises(InvalidPath) as caught:
        ws.normalize(path)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT, why
    with pytest.raises(InvalidPath):
        ws.write_bytes(path, b"x")


@pytest.mark.parametrize("path", [None, b"b.txt", 3, Path("b.txt")])
def test_a_path_that_is_not_a_str_is_invalid(ws: Workspace, path: object) -> None:
    with pytest.raises(InvalidPath):
        ws.read_bytes(path)  # type: ignore[arg-type]


def test_a_component_of_255_bytes_is_fine(ws: Workspace) -> None:
    ws.write_bytes("x" * 255, b"long name")
    assert ws.read_bytes("x" * 255) == b"long name"


@pytest.mark.parametrize(
    "path", [".env", "a/.env", "a\\.env", ".ENV", "sub/.Env/x", ".env/../b.txt", "./.env"]
)
def test_forbidden_name_in_any_component_is_refused(ws: Workspace, root: Path, path: str) -> None:
    (root / ".env").write_bytes(b"TOKEN=1")
    for operation in (ws.normalize, ws.resolve, ws.read_bytes, ws.exists, ws.delete):
        with pytest.raises(ForbiddenPath) as caught:
            operation(path)
        assert caught.value.code is ErrorCode.FORBIDDEN_PATH
    with pytest.raises(ForbiddenPath):
        ws.write_bytes(path, b"x")
    assert (root / ".env").read_bytes() == b"TOKEN=1"


def test_forbidden_names_are_configurable(root: Path) -> None:
    with Workspace(root, forbidden_names=("Secrets.json", "id_rsa")) as ws:
        ws.write_bytes(".env", b"allowed here")
        assert ws.read_bytes(".env") == b"allowed here"
        for path in ("secrets.JSON", "keys/id_rsa"):
            with pytest.raises(ForbiddenPath):
                ws.write_bytes(path, b"x")


def test_encoded_traversal_is_a_harmless_literal_name(ws: Workspace, root: Path) -> None:
    ws.write_bytes("%2e%2e/%2e%2e/x", b"literal")
    assert (root / "%2e%2e" / "%2e%2e" / "x").read_bytes() == b"literal"
    assert ws.normalize("..%2fx") == "..%2fx"


def test_unicode_is_never_normalized(ws: Workspace, root: Path) -> None:
    fullwidth = "\uff0e\uff0e\u2215x"  # NFKC would make this "../x"
    ws.write_bytes(fullwidth, b"literal")
    assert (root / fullwidth).read_bytes() == b"literal"


def test_normalize_touches_no_file(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "escape").symlink_to(outside)
    assert ws.normalize("escape/secret.txt") == "escape/secret.txt"
    assert ws.normalize("missing/x/../y") == "missing/y"


@pytest.fixture(scope="module")
def lexical_ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A workspace used only for ``normalize``, which touches no file."""
    with Workspace(tmp_path_factory.mktemp("lexical")) as workspace:
        yield workspace


_component = st.sampled_from(["a", "b", "..", ".", "", "c d", "%2e%2e"])
_separator = st.sampled_from(["/", "\\"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(_component, _separator), min_size=1, max_size=8))
def test_normalize_refuses_exactly_the_lexical_escapes(
    lexical_ws: Workspace, parts: list[tuple[str, str]]
) -> None:
    path = "".join(name + sep for name, sep in parts).rstrip("/\\") or "."
    target = os.path.normpath(os.path.join("/ws", path.replace("\\", "/")))
    if target == "/ws" or target.startswith("/ws/"):
        assert lexical_ws.normalize(path) == os.path.relpath(target, "/ws")
    else:
        with pytest.raises(PathOutsideWorkspace):
            lexical_ws.normalize(path)


# --------------------------------------------------------------------------- symlinks


def test_symlinks_inside_are_followed(ws: Workspace, root: Path) -> None:
    (root / "dirlink").symlink_to("sub")
    (root / "filelink").symlink_to("sub/f.txt")
    (root / "sub" / "up").symlink_to("../b.txt")
    assert ws.read_bytes("dirlink/f.txt") == b"eff"
    assert ws.read_bytes("filelink") == b"eff"
    assert ws.read_bytes("sub/up") == b"bee"
    assert ws.resolve("dirlink/f.txt") == "sub/f.txt"
    assert ws.resolve("filelink") == "sub/f.txt"
    assert ws.resolve("sub/up") == "b.txt"
    assert ws.resolve("dirlink/not/yet") == "sub/not/yet"
    ws.write_bytes("dirlink/new.txt", b"via link")
    assert (root / "sub" / "new.txt").read_bytes() == b"via link"


def test_dotdot_after_a_symlinked_directory_climbs_from_its_target(
    ws: Workspace, root: Path
) -> None:
    (root / "sub" / "deep").mkdir()
    (root / "sub" / "deep" / "g.txt").write_bytes(b"gee")
    (root / "deeplink").symlink_to("sub/deep")
    # As the kernel does: deeplink/.. is sub, not the root.
    assert ws.read_bytes("deeplink/../f.txt") == b"eff"
    assert ws.resolve("deeplink/../f.txt") == "sub/f.txt"


@pytest.mark.parametrize("target_kind", ["absolute", "relative"])
def test_directory_symlink_leaving_the_root_is_refused(
    ws: Workspace, root: Path, outside: Path, target_kind: str
) -> None:
    target = str(outside) if target_kind == "absolute" else "../outside"
    (root / "escape").symlink_to(target)
    (root / "sub" / "escape2").symlink_to("../" + target if target_kind == "relative" else target)
    for path in ("escape/secret.txt", "sub/escape2/secret.txt", "escape", "escape/new/x"):
        for operation in (ws.resolve, ws.read_bytes, ws.exists, ws.size):
            with pytest.raises(PathOutsideWorkspace):
                operation(path)
    for path in ("escape/new.txt", "escape/secret.txt", "sub/escape2/deeper/x"):
        with pytest.raises(PathOutsideWorkspace):
            ws.write_bytes(path, b"x")
    with pytest.raises(PathOutsideWorkspace):
        ws.list_dir("escape")
    with pytest.raises(PathOutsideWorkspace):
        ws.walk("escape")
    with pytest.raises(PathOutsideWorkspace):
        ws.delete("escape/secret.txt")
    assert outside_snapshot(outside) == {"secret.txt": SECRET}


@pytest.mark.parametrize("target_kind", ["absolute", "relative"])
def test_final_symlink_leaving_the_root_is_refused(
    ws: Workspace, root: Path, outside: Path, target_kind: str
) -> None:
    target = str(outside / "secret.txt") if target_kind == "absolute" else "../outside/secret.txt"
    (root / "leak").symlink_to(target)
    for operation in (ws.resolve, ws.read_bytes, ws.read_text, ws.exists, ws.size):
        with pytest.raises(PathOutsideWorkspace):
            operation("leak")


def test_symlink_climbing_back_inside_is_followed(ws: Workspace, root: Path) -> None:
    # Out through the parent and back in by name: never above the root.
    (root / "sub" / "round").symlink_to("../sub/../b.txt")
    assert ws.read_bytes("sub/round") == b"bee"


def test_symlink_through_the_roots_own_name_is_refused(ws: Workspace, root: Path) -> None:
    # "../ws/b.txt" would land inside, but only by climbing above the root.
    (root / "sneaky").symlink_to(f"../{root.name}/b.txt")
    with pytest.raises(PathOutsideWorkspace):
        ws.read_bytes("sneaky")


@pytest.mark.parametrize(
    "links", [{"self": "self"}, {"one": "two", "two": "one"}, {"d": "d/x"}, {"up": "sub/../up"}]
)
def test_symlink_loops_are_refused_as_invalid(
    ws: Workspace, root: Path, links: dict[str, str]
) -> None:
    for name, target in links.items():
        (root / name).symlink_to(target)
    name = next(iter(links))
    for operation in (ws.read_bytes, ws.resolve, ws.exists):
        with pytest.raises(InvalidPath) as caught:
            operation(name)
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT
        assert "symbolic links" in str(caught.value)


def test_forty_links_in_a_chain_are_followed(ws: Workspace, root: Path) -> None:
    (root / "link0").symlink_to("b.txt")
    for i in range(1, 40):
        (root / f"link{i}").symlink_to(f"link{i - 1}")
    assert ws.read_bytes("link39") == b"bee"
    (root / "link40").symlink_to("link39")
    with pytest.raises(InvalidPath):
        ws.read_bytes("link40")


def test_symlink_to_a_forbidden_name_is_refused(ws: Workspace, root: Path) -> None:
    (root / ".env").write_bytes(b"TOKEN=1")
    (root / "notes").symlink_to(".env")
    with pytest.raises(ForbiddenPath):
        ws.read_bytes("notes")
    with pytest.raises(ForbiddenPath):
        ws.resolve("notes")


def test_write_neither_follows_nor_replaces_a_final_symlink(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "leak").symlink_to(outside / "secret.txt")
    (root / "inside").symlink_to("b.txt")
    with pytest.raises(PathOutsideWorkspace):
        ws.write_bytes("leak", b"replaced")
    with pytest.raises(ForbiddenPath):
        ws.write_bytes("inside", b"replaced")
    assert (root / "b.txt").read_bytes() == b"bee"
    assert (root / "leak").is_symlink()
    assert outside_snapshot(outside) == {"secret.txt": SECRET}


def test_delete_removes_a_symlink_not_its_target(ws: Workspace, root: Path) -> None:
    (root / "link").symlink_to("b.txt")
    ws.delete("link")
    assert not (root / "link").is_symlink()
    assert (root / "b.txt").read_bytes() == b"bee"


def test_dangling_symlink_inside_does_not_exist(ws: Workspace, root: Path) -> None:
    (root / "dangling").symlink_to("nowhere/x.txt")
    assert not ws.exists("dangling")
    assert ws.size("dangling") is None
    assert ws.resolve("dangling") == "nowhere/x.txt"
    with pytest.raises(FileNotFoundError):
        ws.read_bytes("dangling")


# ------------------------------------------------------------- hard links, special files


def test_hard_linked_file_is_refused(ws: Workspace, root: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", root / "hard.txt")
    with pytest.raises(ForbiddenPath) as caught:
        ws.read_bytes("hard.txt")
    assert caught.value.code is ErrorCode.FORBIDDEN_PATH
    with pytest.raises(ForbiddenPath):
        ws.write_bytes("hard.txt", b"x")
    with pytest.raises(ForbiddenPath):
        ws.delete("hard.txt")
    assert outside_snapshot(outside) == {"secret.txt": SECRET}
    assert (root / "hard.txt").exists()
    assert ws.size("hard.txt") == len(SECRET)  # as list_dir shows it: only content is refused


def test_hard_linked_file_is_allowed_with_the_flag(root: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", root / "hard.txt")
    with Workspace(root, allow_hardlinks=True) as ws:
        assert ws.allow_hardlinks
        assert ws.read_bytes("hard.txt") == SECRET
        ws.write_bytes("hard.txt", b"new")  # replaces the entry: the other link keeps its bytes
    assert (root / "hard.txt").read_bytes() == b"new"
    assert outside_snapshot(outside) == {"secret.txt": SECRET}


def test_a_fifo_is_refused_without_blocking(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "pipe")
    with pytest.raises(ForbiddenPath):
        ws.read_bytes("pipe")
    with pytest.raises(ForbiddenPath):
        ws.size("pipe")
    with pytest.raises(ForbiddenPath):
        ws.write_bytes("pipe", b"x")


# --------------------------------------------------------------------------- reading


def test_read_within_the_limit(ws: Workspace) -> None:
    assert ws.read_bytes("b.txt", max_bytes=3) == b"bee"
    assert ws.read_text("b.txt", max_bytes=100) == "bee"


def spy_on_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many bytes each ``os.read`` asks for."""
    requested: list[int] = []
    real_read = os.read

    def read(fd: int, size: int) -> bytes:
        requested.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", read)
    return requested


def test_read_over_the_limit_is_refused_without_reading(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    requested = spy_on_reads(monkeypatch)
    with pytest.raises(LimitExceeded) as caught:
        ws.read_bytes("b.txt", max_bytes=2)
    assert caught.value.code is ErrorCode.LIMIT_EXCEEDED
    assert requested == []


def test_a_file_growing_after_the_size_check_is_read_no_further_than_the_limit(
    ws: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "big.bin").write_bytes(b"z" * 100_000)
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:
        # The size as it was before the file grew.
        result = real_fstat(fd)
        fields = list(result)
        fields[stat.ST_SIZE] = 10
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", stale_fstat)
    requested = spy_on_reads(monkeypatch)
    with pytest.raises(LimitExceeded):
        ws.read_bytes("big.bin", max_bytes=50)
    assert sum(requested) <= 51


def test_exists_and_size(ws: Workspace, root: Path) -> None:
    (root / "link").symlink_to("b.txt")
    assert ws.exists("b.txt") and ws.exists("sub") and ws.exists("link")
    assert not ws.exists("missing") and not ws.exists("missing/x") and not ws.exists("b.txt/x")
    assert ws.size("b.txt") == 3
    assert ws.size("link") == 3
    assert ws.size("missing") is None
    with pytest.raises(IsADirectoryError):
        ws.size("sub")


def test_ordinary_misses_raise_the_usual_errors(ws: Workspace) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        ws.read_bytes("data/x.csv")
    assert missing.value.filename == "data/x.csv"
    with pytest.raises(IsADirectoryError):
        ws.read_bytes("sub")
    with pytest.raises(IsADirectoryError):
        ws.read_bytes(".")
    with pytest.raises(NotADirectoryError):
        ws.read_bytes("b.txt/x")
    with pytest.raises(NotADirectoryError):
        ws.list_dir("b.txt")


# --------------------------------------------------------------------------- writing


def test_write_creates_parents(ws: Workspace, root: Path) -> None:
    ws.write_text("new/deep/dir/f.txt", "héllo")
    assert (root / "new" / "deep" / "dir" / "f.txt").read_text(encoding="utf-8") == "héllo"
    assert ws.read_text("new/deep/dir/f.txt") == "héllo"


def test_write_without_make_parents_needs_the_parent(ws: Workspace, root: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ws.write_bytes("nope/f.txt", b"x", make_parents=False)
    assert not (root / "nope").exists()


def test_write_over_a_directory_is_refused(ws: Workspace) -> None:
    with pytest.raises(IsADirectoryError):
        ws.write_bytes("sub", b"x")
    with pytest.raises(IsADirectoryError):
        ws.write_bytes(".", b"x")


def test_write_keeps_permission_bits(ws: Workspace, root: Path) -> None:
    script = root / "run.sh"
    script.write_bytes(b"#!/bin/sh\n")
    script.chmod(0o750)
    ws.write_bytes("run.sh", b"#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750


def temp_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.name.startswith(TEMP_PREFIX)]


def test_write_failing_at_fsync_keeps_old_content_and_no_temp_file(
    ws: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError) as caught:
        ws.write_bytes("sub/f.txt", b"NEW CONTENT")
    assert caught.value.errno == errno.EIO
    monkeypatch.undo()
    assert (root / "sub" / "f.txt").read_bytes() == b"eff"
    assert temp_files(root) == []


def test_write_failing_midway_keeps_old_content_and_no_temp_file(
    ws: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls = 0

    def flaky_write(fd: int, data: bytes) -> int:
        # Writes a few bytes, then the disk fills up.
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data)[:4])

    monkeypatch.setattr(os, "write", flaky_write)
    with pytest.raises(OSError) as caught:
        ws.write_bytes("sub/f.txt", b"A MUCH LONGER NEW CONTENT")
    assert caught.value.errno == errno.ENOSPC
    assert str(root) not in str(caught.value)
    monkeypatch.undo()
    assert calls == 2
    assert (root / "sub" / "f.txt").read_bytes() == b"eff"
    assert temp_files(root) == []


def test_short_writes_are_completed(
    ws: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:3]))
    ws.write_bytes("f.bin", bytes(range(256)) * 4)
    monkeypatch.undo()
    assert (root / "f.bin").read_bytes() == bytes(range(256)) * 4


def test_concurrent_readers_see_old_or_new_content_never_torn(ws: Workspace) -> None:
    old, new = b"o" * 200_000, b"n" * 200_000
    ws.write_bytes("big.bin", old)
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(ws.read_bytes("big.bin"))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(30):
            ws.write_bytes("big.bin", new if i % 2 == 0 else old)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert seen <= {old, new}


# --------------------------------------------------------------------------- journal


def test_on_change_receives_previous_bytes_or_none(root: Path) -> None:
    changes: list[tuple[str, bytes | None]] = []
    (root / "dirlink").symlink_to("sub")
    with Workspace(root, on_change=lambda path, previous: changes.append((path, previous))) as ws:
        ws.write_bytes("new.txt", b"1")
        ws.write_bytes("new.txt", b"2")
        ws.write_bytes("dirlink/f.txt", b"changed")
        ws.delete("b.txt")
    assert changes == [
        ("new.txt", None),
        ("new.txt", b"1"),
        ("sub/f.txt", b"eff"),
        ("b.txt", b"bee"),
    ]


def test_a_failing_on_change_leaves_the_file_untouched(root: Path) -> None:
    def refuse(path: str, previous: bytes | None) -> None:
        raise RuntimeError("journal full")

    with Workspace(root, on_change=refuse) as ws:
        with pytest.raises(RuntimeError):
            ws.write_bytes("b.txt", b"x")
        with pytest.raises(RuntimeError):
            ws.delete("b.txt")
    assert (root / "b.txt").read_bytes() == b"bee"
    assert temp_files(root) == []


def test_restore_undoes_writes_and_deletes_without_calling_on_change(root: Path) -> None:
    changes: list[tuple[str, bytes | None]] = []
    with Workspace(root) as ws:
        view = ws.with_journal(lambda path, previous: changes.append((path, previous)))
        view.write_bytes("b.txt", b"changed")
        view.write_bytes("fresh/new.txt", b"created")
        view.delete("sub/f.txt")
        recorded = list(changes)
        for path, previous in reversed(recorded):
            view.restore(path, previous)
        view.restore("never/existed.txt", None)  # already absent: fine
    assert changes == recorded
    assert (root / "b.txt").read_bytes() == b"bee"
    assert not (root / "fresh" / "new.txt").exists()
    assert (root / "sub" / "f.txt").read_bytes() == b"eff"


def test_journal_view_shares_the_root_and_its_close_keeps_the_owner_open(root: Path) -> None:
    ws = Workspace(root)
    with ws.with_journal(lambda path, previous: None) as view:
        assert view.root == ws.root
        assert view.read_bytes("b.txt") == b"bee"
    with pytest.raises(ValueError):
        view.read_bytes("b.txt")
    assert ws.read_bytes("b.txt") == b"bee"
    ws.close()
    ws.close()  # idempotent
    with pytest.raises(ValueError):
        ws.read_bytes("b.txt")


# --------------------------------------------------------------------------- listing


def test_list_dir_is_sorted_and_describes_symlinks_without_following(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "zlink").symlink_to(outside)
    (root / "Capital").write_bytes(b"cc")
    (root / ".env").write_bytes(b"TOKEN=1")
    assert ws.list_dir() == [
        Entry(name="Capital", path="Capital", is_dir=False, is_symlink=False, size=2),
        Entry(name="a", path="a", is_dir=True, is_symlink=False, size=None),
        Entry(name="b.txt", path="b.txt", is_dir=False, is_symlink=False, size=3),
        Entry(name="sub", path="sub", is_dir=True, is_symlink=False, size=None),
        Entry(name="zlink", path="zlink", is_dir=False, is_symlink=True, size=None),
    ]
    assert ws.list_dir("sub") == [
        Entry(name="f.txt", path="sub/f.txt", is_dir=False, is_symlink=False, size=3)
    ]


def test_walk_lists_regular_files_sorted_without_following_symlinks(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "sub" / "inner").mkdir()
    (root / "sub" / "inner" / "z.txt").write_bytes(b"z")
    (root / "sub" / "loop").symlink_to("..")
    (root / "escape").symlink_to(outside)
    (root / "filelink").symlink_to("b.txt")
    assert ws.walk() == ["b.txt", "sub/f.txt", "sub/inner/z.txt"]
    assert ws.walk("sub") == ["sub/f.txt", "sub/inner/z.txt"]


def test_in_flight_temp_files_are_never_listed(
    ws: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings: list[tuple[list[str], list[str]]] = []
    real_fsync = os.fsync

    def observing_fsync(fd: int) -> None:
        # Runs while the temporary file exists on disk.
        listings.append(([entry.name for entry in ws.list_dir("sub")], ws.walk()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observing_fsync)
    ws.write_bytes("sub/g.txt", b"g")
    monkeypatch.undo()
    assert listings, "the write did not fsync"
    assert temp_files(root) == []
    for names, walked in listings:
        assert all(not name.startswith(TEMP_PREFIX) for name in names + walked)
    (root / (TEMP_PREFIX + "stale")).write_bytes(b"left by a crash")
    assert TEMP_PREFIX + "stale" not in [entry.name for entry in ws.list_dir()]
    assert TEMP_PREFIX + "stale" not in ws.walk()


# ------------------------------------------------------- messages, descriptors, threads


def test_no_error_message_contains_a_host_path(
    ws: Workspace, root: Path, outside: Path, tmp_path: Path
) -> None:
    (root / "escape").symlink_to(outside)
    (root / "abs").symlink_to(outside / "secret.txt")
    (root / "loop").symlink_to("loop")
    os.link(root / "b.txt", root / "hard.txt")
    attempts: list[Callable[[], object]] = [
        lambda: ws.read_bytes(str(outside / "secret.txt")),
        lambda: ws.write_bytes(str(root / "sub"), b"x"),
        lambda: ws.read_bytes(str(root / "escape" / "secret.txt")),
        lambda: ws.read_bytes(str(root / ".." / "outside" / "secret.txt")),
        lambda: ws.read_bytes("escape/secret.txt"),
        lambda: ws.read_bytes("abs"),
        lambda: ws.read_bytes("loop"),
        lambda: ws.read_bytes("hard.txt"),
        lambda: ws.read_bytes("../outside/secret.txt"),
        lambda: ws.read_bytes("missing/file.txt"),
        lambda: ws.read_bytes("sub"),
        lambda: ws.read_bytes("b.txt/x"),
        lambda: ws.read_bytes("b.txt", max_bytes=1),
        lambda: ws.read_bytes(".env"),
        lambda: ws.read_bytes(""),
        lambda: ws.read_bytes(root),  # type: ignore[arg-type]
        lambda: ws.write_bytes("sub", b"x"),
        lambda: ws.write_bytes("b.txt/x", b"x"),
        lambda: ws.delete("missing"),
        lambda: ws.list_dir("b.txt"),
        lambda: ws.resolve("escape"),
    ]
    for attempt in attempts:
        with pytest.raises((SandboxError, OSError)) as caught:
            attempt()
        assert str(tmp_path) not in str(caught.value), caught.value


def test_sandbox_errors_survive_pickling() -> None:
    error = PathOutsideWorkspace("path '../x' climbs above the workspace root", "../x")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is PathOutsideWorkspace
    assert (copy.code, copy.path, str(copy)) == (error.code, error.path, str(error))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_no_descriptor_leaks(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "escape").symlink_to("../outside")
    (root / "loop").symlink_to("loop")
    (root / "sub" / "link").symlink_to("../a")
    ws.list_dir()  # warm up anything opened once per process
    before = open_descriptors()
    for i in range(200):
        ws.write_bytes(f"sub/link/deep/f{i % 7}.txt", b"x" * i)
        ws.read_bytes(f"sub/link/deep/f{i % 7}.txt")
        ws.resolve("sub/link/deep/../../sub/f.txt")
        ws.list_dir("sub")
        ws.walk()
        ws.exists("sub/link/nope")
        ws.size("b.txt")
        for bad in ("escape/secret.txt", "loop", "sub/link/deep/missing", "b.txt/x", "sub"):
            with pytest.raises((SandboxError, OSError)):
                ws.read_bytes(bad)
        with pytest.raises(PathOutsideWorkspace):
            ws.write_bytes("escape/x/y", b"x")
    assert open_descriptors() == before
    ws.close()
    assert open_descriptors() == before - 1


def test_workspace_is_usable_from_several_threads(ws: Workspace) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(50):
                path = f"t{n}/{i % 5}.txt"
                ws.write_bytes(path, f"{n}:{i}".encode())
                assert ws.read_bytes(path) == f"{n}:{i}".encode()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert len(ws.walk()) == 2 + 6 * 5


def test_forbidden_names_must_be_an_iterable_of_names(root: Path) -> None:
    with pytest.raises(TypeError):
        Workspace(root, forbidden_names=".env")


# --------------------------------------------------------------------------- under pyfakefs


@pytest.fixture
def fake_root(fs: object) -> Path:
    """The same layout as ``root``, in pyfakefs's fake filesystem."""
    os.makedirs("/fake/ws/sub")
    os.makedirs("/fake/ws/a")
    os.makedirs("/fake/outside")
    with open("/fake/outside/secret.txt", "wb") as handle:
        handle.write(SECRET)
    with open("/fake/ws/b.txt", "wb") as handle:
        handle.write(b"bee")
    with open("/fake/ws/sub/f.txt", "wb") as handle:
        handle.write(b"eff")
    return Path("/fake/ws")


def test_under_pyfakefs_reads_writes_and_lexical_rules_hold(fake_root: Path) -> None:
    with Workspace(fake_root) as ws:
        assert ws.read_bytes("a/../b.txt") == b"bee"
        ws.write_bytes("new/dir/f.txt", b"made")
        assert ws.read_bytes("new/dir/f.txt") == b"made"
        assert ws.walk() == ["b.txt", "new/dir/f.txt", "sub/f.txt"]
        assert [entry.name for entry in ws.list_dir()] == ["a", "b.txt", "new", "sub"]
        for bad in ("../outside/secret.txt", "/fake/outside/secret.txt", "..\\x"):
            with pytest.raises(PathOutsideWorkspace):
                ws.read_bytes(bad)
        with pytest.raises(ForbiddenPath):
            ws.write_bytes("a\\.ENV", b"x")
        with pytest.raises(InvalidPath):
            ws.read_bytes("a\0")
        with pytest.raises(LimitExceeded):
            ws.read_bytes("b.txt", max_bytes=1)
        with pytest.raises(FileNotFoundError):
            ws.read_bytes("missing.txt")
    assert not os.path.exists("/fake/outside/new")


def test_under_pyfakefs_symlinks_are_confined(fake_root: Path) -> None:
    os.symlink("sub", "/fake/ws/dirlink")
    os.symlink("../outside", "/fake/ws/escape")
    os.symlink("/fake/outside/secret.txt", "/fake/ws/abs")
    os.symlink("loop", "/fake/ws/loop")
    with Workspace(fake_root) as ws:
        assert ws.read_bytes("dirlink/f.txt") == b"eff"
        assert ws.resolve("dirlink/f.txt") == "sub/f.txt"
        for bad in ("escape/secret.txt", "abs"):
            with pytest.raises(PathOutsideWorkspace):
                ws.read_bytes(bad)
        with pytest.raises(PathOutsideWorkspace):
            ws.write_bytes("escape/new.txt", b"x")
        with pytest.raises(InvalidPath):
            ws.read_bytes("loop")
        with pytest.raises(PathOutsideWorkspace):
            ws.write_bytes("abs", b"not through, not over the link")
    assert os.path.islink("/fake/ws/abs")
    assert sorted(os.listdir("/fake/outside")) == ["secret.txt"]
    with open("/fake/outside/secret.txt", "rb") as handle:
        assert handle.read() == SECRET


def test_under_pyfakefs_hard_links_journal_and_atomic_writes(
    fake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.link("/fake/outside/secret.txt", "/fake/ws/hard.txt")
    changes: list[tuple[str, bytes | None]] = []
    with Workspace(fake_root, on_change=lambda p, b: changes.append((p, b))) as ws:
        with pytest.raises(ForbiddenPath):
            ws.read_bytes("hard.txt")
        ws.write_bytes("b.txt", b"changed")
        ws.restore("b.txt", b"bee")
        assert changes == [("b.txt", b"bee")]

        def broken_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "simulated I/O error")

        monkeypatch.setattr(os, "fsync", broken_fsync)
        with pytest.raises(OSError):
            ws.write_bytes("sub/f.txt", b"NEW")
        monkeypatch.undo()
        assert ws.read_bytes("sub/f.txt") == b"eff"
        assert not any(name.startswith(TEMP_PREFIX) for name in os.listdir("/fake/ws/sub"))


def test_resolve_with_size_gives_the_real_targets_size_in_one_walk(tmp_path):
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_bytes(b"12345")
    os.symlink("d/f.txt", root / "link")
    with Workspace(root) as ws:
        assert ws.resolve_with_size("link") == ("d/f.txt", 5)
        assert ws.resolve_with_size("d") == ("d", None)
        assert ws.resolve_with_size("d/missing.txt") == ("d/missing.txt", None)
        assert ws.resolve_with_size(".") == (".", None)
