"""The files pytest-toolguard writes for itself: never written through a
link planted at a name someone could predict, a link at the target replaced
rather than followed, and new cassettes and audit databases private (0600)
whatever the umask, an existing file's mode kept."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard import file_writes as file_writes_module
from pytest_toolguard.cli import main
from pytest_toolguard.faults.outcome import MatrixReport
from pytest_toolguard.faults.report import write_report
from pytest_toolguard.file_writes import write_atomically
from pytest_toolguard.replay.cassette import dump, load, loads

CASE = """\
format_version: 1
kind: case
session:
  capabilities: {allowed_risks: [read]}
workspace:
  files:
    notes.txt: hello
interactions:
- call: {tool_name: read_text, arguments: {path: notes.txt}}
  result: {ok: true}
"""
PRECIOUS = b"precious, not to be overwritten\n"


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def write_cassette(target: Path) -> None:
    dump(loads(CASE), target)


def write_fault_report(target: Path) -> None:
    write_report(MatrixReport.of((), ()), target)


def upgrade_cassette(target: Path) -> None:
    if not target.is_symlink():
        target.write_text(CASE)
    assert main(["cassette", "upgrade", str(target)]) == 0


WRITERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "cassette.dump": ("c.yaml", write_cassette),
    "toolguard cassette upgrade": ("u.yaml", upgrade_cassette),
    "write_report": ("r.md", write_fault_report),
}
PREDICTABLE = (".{name}.{pid}.tmp", ".{name}.{pid}.amplify.tmp")


def regular(path: Path) -> bool:
    return stat.S_ISREG(os.lstat(path).st_mode)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("victim_exists", [True, False], ids=["victim", "dangling"])
def test_a_link_planted_at_the_old_predictable_temporary_names_is_never_written_through(
    tmp_path: Path, writer: str, victim_exists: bool
) -> None:
    name, write = WRITERS[writer]
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    if victim_exists:
        victim.write_bytes(PRECIOUS)
    target = tmp_path / "out" / name
    target.parent.mkdir()
    for pattern in PREDICTABLE:
        (target.parent / pattern.format(name=name, pid=os.getpid())).symlink_to(victim)
    write(target)
    assert regular(target)
    assert (victim.read_bytes() == PRECIOUS) if victim_exists else not victim.exists()


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_target_that_is_a_link_is_replaced_by_a_regular_file_and_its_target_kept(
    tmp_path: Path, writer: str
) -> None:
    name, write = WRITERS[writer]
    victim = tmp_path / "victim"
    victim.write_text(CASE)  # a cassette, for upgrade to read through the link
    os.chmod(victim, 0o644)
    target = tmp_path / name
    target.symlink_to(victim)
    write(target)
    assert regular(target)
    assert victim.read_text() == CASE
    assert mode_of(victim) == 0o644
    if writer != "write_report":
        assert mode_of(target) == 0o600  # a new file: the link's target's mode is not taken


@pytest.mark.parametrize("planted", ["link to a file", "dangling link", "file", "directory"])
def test_the_temporary_file_is_created_exclusively_without_following_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    monkeypatch.setattr(file_writes_module.secrets, "token_hex", lambda _: "guessed")
    victim = tmp_path / "victim"
    victim.write_bytes(PRECIOUS)
    target = tmp_path / "c.yaml"
    target.write_bytes(b"old\n")
    temporary = tmp_path / ".c.yaml.guessed.tmp"
    if planted == "link to a file":
        temporary.symlink_to(victim)
    elif planted == "dangling link":
        temporary.symlink_to(tmp_path / "nowhere")
    elif planted == "file":
        temporary.write_bytes(PRECIOUS)
    else:
        temporary.mkdir()
    with pytest.raises(OSError):
        write_atomically(target, b"new\n")
    assert victim.read_bytes() == PRECIOUS
    assert not (tmp_path / "nowhere").exists()
    assert target.read_bytes() == b"old\n"


def test_amplify_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    from pytest_toolguard import Capabilities, Risk
    from pytest_toolguard.amplify import amplify_file
    from pytest_toolguard.replay import record_session
    from pytest_toolguard.tools import builtin_registry

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    caps = Capabilities(allowed_risks=frozenset({Risk.READ}))
    target = tmp_path / "session.yaml"
    runtime = ToolRuntime(builtin_registry(), str(workspace), caps, SQLiteAuditStore(":memory:"))
    with record_session(runtime, target):
        runtime.execute(ToolCall("c1", "read_text", {"path": "notes.txt"}))
    runtime.close()
    victim = tmp_path / "victim"
    victim.write_bytes(PRECIOUS)
    for pattern in PREDICTABLE:
        (tmp_path / pattern.format(name=target.name, pid=os.getpid())).symlink_to(victim)
    os.chmod(target, 0o640)
    report = amplify_file(target, builtin_registry())
    assert report.written
    assert victim.read_bytes() == PRECIOUS
    assert regular(target) and mode_of(target) == 0o640
    assert any(interaction.variants for interaction in load(target).interactions)


# -- modes -----------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000, 0o077])
@pytest.mark.parametrize("writer", ["cassette.dump", "toolguard cassette upgrade"])
def test_a_new_cassette_is_private_whatever_the_umask(
    tmp_path: Path, writer: str, umask: int
) -> None:
    name, write = WRITERS[writer]
    os.umask(umask)
    target = tmp_path / name
    if writer == "toolguard cassette upgrade":
        write_cassette(target)  # upgrade rewrites: the first write made it
    else:
        write(target)
    assert mode_of(target) == 0o600


@pytest.mark.parametrize(("umask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_report_is_as_readable_as_the_umask_allows(
    tmp_path: Path, umask: int, expected: int
) -> None:
    os.umask(umask)
    target = tmp_path / "r.html"
    write_fault_report(target)
    assert mode_of(target) == expected


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644, 0o664, 0o400, 0o4755, 0o2750])
def test_a_rewrite_keeps_the_file_s_permission_bits_without_setuid_or_setgid(
    tmp_path: Path, writer: str, mode: int
) -> None:
    name, write = WRITERS[writer]
    target = tmp_path / name
    target.write_text(CASE)
    os.chmod(target, mode)
    write(target)
    assert mode_of(target) == mode & 0o777


def test_a_new_audit_database_and_its_wal_and_shm_are_private(tmp_path: Path) -> None:
    database = tmp_path / "audit" / "audit.db"
    database.parent.mkdir()
    store = SQLiteAuditStore(database)
    from pytest_toolguard import Capabilities, Risk
    from pytest_toolguard.tools import builtin_registry

    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        Capabilities(allowed_risks=frozenset({Risk.READ})),
        store,
    )
    runtime.execute(ToolCall("c1", "list_files", {}))
    created = sorted(path.name for path in database.parent.iterdir())
    modes = {path.name: mode_of(path) for path in database.parent.iterdir()}
    runtime.close()
    store.close()
    assert created == ["audit.db", "audit.db-shm", "audit.db-wal"]
    assert modes == dict.fromkeys(created, 0o600)


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o600])
def test_an_existing_audit_database_keeps_its_mode_and_gives_it_to_wal_and_shm(
    tmp_path: Path, mode: int
) -> None:
    database = tmp_path / "audit.db"
    SQLiteAuditStore(database).close()
    os.chmod(database, mode)
    store = SQLiteAuditStore(database)
    modes = {path.name: mode_of(path) for path in tmp_path.iterdir()}
    store.close()
    assert modes["audit.db"] == mode and "audit.db-wal" in modes
    assert all(value == mode for value in modes.values()), modes


def test_a_store_of_a_sqlite_uri_creates_no_file_itself(tmp_path: Path) -> None:
    database = tmp_path / "ro.db"
    with pytest.raises(Exception):  # noqa: B017 - SQLite's own refusal, whatever its type
        SQLiteAuditStore(f"file:{database}?mode=ro", uri=True)
    assert not database.exists()
