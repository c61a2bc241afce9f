"""A rewrite never opens a file's content wider than its permission bits.

The temporary file of an atomic rewrite was created 0666 (less the umask)
and chmod'ed afterwards: another user could open it in between and read the
new content of a file kept at 0600.
"""

from __future__ import annotations

import os
import stat
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Workspace
from pytest_toolguard import sandbox as sandbox_module
from pytest_toolguard.sandbox import TEMP_PREFIX

MODES = [0o600, 0o400, 0o640, 0o644, 0o660, 0o700, 0o755, 0o4755, 0o2755, 0o6755, 0o1644, 0o4600]


class ModeWatcher:
    """Wraps the sandbox's ``os``: records the mode of every temporary file
    when it is created and whenever content is written to it."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self._temp_fds: set[int] = set()

    def module(self) -> Any:
        watcher = self

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
            fd = os.open(path, flags, mode, dir_fd=dir_fd)
            if isinstance(path, str) and path.startswith(TEMP_PREFIX):
                watcher._temp_fds.add(fd)
                watcher.seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
            return fd

        def write(fd: int, data: Any) -> int:
            if fd in watcher._temp_fds:
                watcher.seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
            return os.write(fd, data)

        def close(fd: int) -> None:
            watcher._temp_fds.discard(fd)
            os.close(fd)

        proxy = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os)})
        proxy.open, proxy.write, proxy.close = open_, write, close
        return proxy


@pytest.fixture
def watcher(monkeypatch: pytest.MonkeyPatch) -> ModeWatcher:
    watch = ModeWatcher()
    monkeypatch.setattr(sandbox_module, "os", watch.module())
    return watch


@pytest.mark.parametrize("mode", MODES, ids=oct)
def test_the_temporary_file_is_never_more_open_than_the_file_it_replaces(
    tmp_path: Path, watcher: ModeWatcher, mode: int
) -> None:
    target = tmp_path / "kept.txt"
    target.write_text("old\n")
    os.chmod(target, mode)
    with Workspace(tmp_path) as ws:
        ws.write_bytes("kept.txt", b"new content\n")
    assert watcher.seen, "no temporary file was seen"
    for seen in watcher.seen:
        assert seen & 0o077 & ~mode == 0, f"{oct(seen)} while replacing {oct(mode)}"


def test_a_new_file_is_created_no_wider_than_it_ends(tmp_path: Path, watcher: ModeWatcher) -> None:
    with Workspace(tmp_path) as ws:
        ws.write_bytes("new.txt", b"x")
    final = stat.S_IMODE((tmp_path / "new.txt").stat().st_mode)
    assert all(seen & ~final == 0 for seen in watcher.seen)


@pytest.mark.parametrize("mode", MODES, ids=oct)
def test_a_rewrite_keeps_the_permission_bits_and_drops_setuid_setgid_and_sticky(
    tmp_path: Path, mode: int
) -> None:
    target = tmp_path / "tool.sh"
    target.write_text("#!/bin/sh\n")
    os.chmod(target, mode)
    with Workspace(tmp_path) as ws:
        ws.write_bytes("tool.sh", b"#!/bin/sh\necho replaced\n")
    assert stat.S_IMODE(target.stat().st_mode) == mode & 0o777


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6700], ids=oct)
def test_a_rollback_restores_the_content_without_the_setuid_bits(tmp_path: Path, mode: int) -> None:
    from pytest_toolguard.rollback import ChangeJournal

    target = tmp_path / "tool.sh"
    target.write_text("#!/bin/sh\n")
    os.chmod(target, mode)
    journal = ChangeJournal()
    with Workspace(tmp_path) as ws:
        ws.with_journal(lambda p, b: journal.record("c1", p, b)).write_bytes("tool.sh", b"x")
        journal.rollback("c1", ws)
    assert target.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(target.stat().st_mode) & 0o7000 == 0
