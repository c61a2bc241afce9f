"""The world a recorded session, a fault cell or a fuzzed call runs in.

``FakeWorld(state, frozen_at=...)`` is one context manager: the clock frozen at
``frozen_at`` for every thread (when given), then a fake filesystem holding
``state`` (the workspace and any files outside it), in that order (pyfakefs
unloads modules first imported while it is active, so the clock's backend
is imported first). Inside it:

- ``world.fs`` is the pyfakefs ``FakeFilesystem`` (``set_disk_usage``, ...);
- the working directory (``os.getcwd()``) is the workspace root: a
  relative path a handler opens is the workspace's, as in the directory
  world;
- ``world.plant(decoys)`` puts files outside the workspace for an escape to
  meet, each holding ``DECOY_MARKER``; ``world.plant_forbidden()`` puts
  ``.env`` files (several spellings and depths, each holding
  ``FORBIDDEN_MARKER``) inside it, for a call that must never read them;
- ``world.accesses`` is the ``AccessLog`` of the paths handlers resolve
  (``harness.accesses``), installed while the world runs; reads beneath
  the real directories mapped in read-only (``FakeFilesystems.real_paths``: the
  time-zone database, installed packages) are not outside;
- ``world.escapes()`` lists what handler runs reached of the real disk,
  refused (``harness.escapes``: SQLite on a file, a process started, a
  real file opened for writing) and every write beneath a mapped real
  directory, refused too;
- ``world.outside()`` snapshots everything outside the workspace
  (``probes.snapshot_outside``), ``world.tree()`` every file inside;
- ``world.save_workspace()`` / ``restore_workspace(entries)`` copy the
  workspace out and put it back (a fault matrix's cache of the state
  before a target).

Guarantees: each world starts from an empty filesystem holding only its
state (and the real directories mapped in); the real ``os``, ``open`` and
``pathlib`` are back once the block ends, even when it raised; a handler
run's reach of the real disk that Python audits is refused and listed in
``escapes()``. Not guaranteed: what raises no audit event (C code opening
files itself, ``multiprocessing``'s spawn start method) sees the real
world, and so does the network (replay serves recorded HTTP instead).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyfakefs.fake_filesystem import FakeFilesystem

from ..replay.cassette import Cassette, WorkspaceState
from .accesses import AccessLog
from .clock import DEFAULT_TIME, frozen_clock
from .escapes import Escape, EscapeLog, ReadOnlyPaths, guarding
from .fake_filesystem import FakeFilesystems, fill_entries, plant_files, process_fake_filesystems
from .files import read_tree
from .plain_walks import install_plain_walks
from .probes import OutsideSnapshot, snapshot_outside

DECOY_MARKER = "TOOLGUARD-DECOY-7f3a9c"
"""In every decoy planted outside a workspace: a result that holds it read
outside."""

FORBIDDEN_MARKER = "TOOLGUARD-FORBIDDEN-ENV-51d2e8"
"""In every forbidden ``.env`` file planted inside a workspace: a result,
message, audit row or cassette that holds it read a forbidden file."""

FORBIDDEN_SPELLINGS = (".env", ".ENV", ".Env")
"""The forbidden file's name as ``plant_forbidden`` spells it (the sandbox
compares names case-insensitively)."""

OUTSIDE_DIR = "toolguard-outside"
"""The directory beside a workspace that ``beside_the_workspace`` plants in."""

WorkspaceEntry = tuple[str, int, bytes]
"""(path relative to the root, st_mode, content or link target)."""


@dataclass(frozen=True, slots=True)
class Decoys:
    """Files planted outside a workspace (absolute path -> content, each
    holding ``DECOY_MARKER``); a file already there is left as it is."""

    files: Mapping[str, bytes] = field(default_factory=dict)


def beside_the_workspace(root: str) -> Decoys:
    """The decoys of a fault cell: a secret in a directory beside the
    workspace (``OUTSIDE_DIR``), ``/etc/passwd``, and ``where_checks_go_wrong``."""
    outside = posixpath.join(posixpath.dirname(root), OUTSIDE_DIR)
    return Decoys(
        {
            posixpath.join(outside, "secret.txt"): f"{DECOY_MARKER} secret\n".encode(),
            "/etc/passwd": f"root:x:0:0:{DECOY_MARKER}:/root:/bin/sh\n".encode(),
            **where_checks_go_wrong(root).files,
        }
    )


def home_directory() -> str:
    """``$HOME`` as ``~`` expands (``/root`` when unset): where the home
    decoys go."""
    home = os.environ.get("HOME") or "/root"
    return posixpath.normpath(home) if home.startswith("/") else "/root"


def where_checks_go_wrong(root: str) -> Decoys:
    """Decoys where hand-written containment checks go wrong: siblings
    sharing the root's prefix (``<root>2/``, ``<root>-old/``), ``$HOME``'s
    dotfiles (``~/.ssh/id_rsa``, ``~/.aws/credentials``: what ``$HOME`` and
    ``~`` payloads reach once expanded) and ``/tmp``. Any inside the
    workspace are left out."""
    root = root.rstrip("/")
    home = home_directory()
    files = {
        f"{root}2/keep.txt": f"{DECOY_MARKER} shares the root's prefix\n",
        f"{root}-old/keep.txt": f"{DECOY_MARKER} shares the root's prefix\n",
        f"{home}/.ssh/id_rsa": f"-----BEGIN {DECOY_MARKER} KEY-----\n",
        f"{home}/.aws/credentials": f"[default]\naws_secret_access_key = {DECOY_MARKER}\n",
        "/tmp/toolguard-decoy.txt": f"{DECOY_MARKER} in /tmp\n",
    }
    return Decoys(
        {
            path: text.encode()
            for path, text in files.items()
            if not (path == root or path.startswith(root + "/"))
        }
    )


_Value = TypeVar("_Value")


def running(value: _Value | None, what: str = "the world") -> _Value:
    """``value``, set while a context manager's block runs; ``RuntimeError``
    before or after it (``what`` names the manager in the message)."""
    if value is None:
        raise RuntimeError(f"{what} is not running: use it inside its with block")
    return value


class FakeWorld:
    """A frozen clock and a fake filesystem holding ``state`` (see the
    module docstring). ``frozen_at`` None leaves the clock alone;
    ``fake_filesystems`` is the ``FakeFilesystems`` to run in (default: the process's)."""

    def __init__(
        self,
        state: WorkspaceState,
        *,
        frozen_at: str | None = None,
        fake_filesystems: FakeFilesystems | None = None,
    ) -> None:
        self.state = state
        self.root = state.root
        self.frozen_at = frozen_at
        self._fake_filesystems = fake_filesystems or process_fake_filesystems()
        self._stack = ExitStack()
        self._fs: FakeFilesystem | None = None
        self._accesses: AccessLog | None = None
        self._escapes = EscapeLog()

    @classmethod
    def of(
        cls,
        cassette: Cassette,
        *,
        empty: bool = False,
        fake_filesystems: FakeFilesystems | None = None,
    ) -> FakeWorld:
        """The world of a recorded session: its workspace as it was before
        the first call (only the empty root with ``empty``: a test that
        plays a cassette back makes its own set-up), the clock frozen at
        its recorded time (``DEFAULT_TIME`` for a case that gives none)."""
        state = WorkspaceState(root=cassette.workspace.root) if empty else cassette.workspace
        return cls(
            state, frozen_at=cassette.recorded_at or DEFAULT_TIME, fake_filesystems=fake_filesystems
        )

    def __enter__(self) -> FakeWorld:
        real_paths = self._fake_filesystems.real_paths  # known before the fake filesystem runs
        with ExitStack() as stack:
            if self.frozen_at is not None:
                stack.enter_context(frozen_clock(self.frozen_at))
            self._fs = stack.enter_context(self._fake_filesystems.filesystem(self.state))
            self._fake_filesystems.map_real_paths(self._fs, self.root)
            # A relative path is the workspace's, as in the directory world.
            stack.callback(setattr, self._fs, "cwd", self._fs.cwd)
            self._fs.cwd = self.root
            stack.enter_context(guarding(self._escapes))
            # Before the guards and the access log, which wrap what they find.
            stack.callback(install_plain_walks(self._fs))
            read_only = ReadOnlyPaths(self._fs, real_paths, self._escapes)
            read_only.install()  # before the access log, which wraps what it finds
            stack.callback(read_only.uninstall)
            self._accesses = AccessLog(self._fs, exempt=real_paths)
            self._accesses.install()
            stack.callback(self._accesses.uninstall)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._fs = None
        self._accesses = None
        self._stack.close()

    @property
    def fs(self) -> FakeFilesystem:
        """The running fake filesystem; ``RuntimeError`` outside the block."""
        return running(self._fs)

    @property
    def accesses(self) -> AccessLog:
        """The paths handler runs resolved; ``RuntimeError`` outside the block."""
        return running(self._accesses)

    def escapes(self) -> tuple[Escape, ...]:
        """What handler runs reached of the real disk, and the writes beneath
        a read-only real directory: each refused, in order (kept after the
        block ends)."""
        return self._escapes.escapes()

    def plant_forbidden(self) -> tuple[str, ...]:
        """Put a forbidden ``.env`` file, holding ``FORBIDDEN_MARKER``, at the
        root (each of ``FORBIDDEN_SPELLINGS`` the directory does not hold
        yet, in any case), in the first and in the deepest directory of the
        workspace; a name already there is left as it is. Returns the
        relative paths planted."""
        fs, root = self.fs, self.root
        directories = sorted(
            {path.rsplit("/", 1)[0] for path in self.tree() if "/" in path},
            key=lambda path: (path.count("/"), path),
        )
        places: list[tuple[str, tuple[str, ...]]] = [("", FORBIDDEN_SPELLINGS)]
        if directories:
            places.append((directories[0], FORBIDDEN_SPELLINGS[2:]))
            places.append((directories[-1], FORBIDDEN_SPELLINGS[:1]))
        planted: list[str] = []
        for directory, spellings in places:
            where = posixpath.join(root, directory) if directory else root
            try:
                taken = set(fs.get_object(where).entries)
            except OSError:
                continue
            for name in spellings:
                relative = f"{directory}/{name}" if directory else name
                if name in taken:
                    continue
                taken.add(name)
                planted.append(relative)
        content = f"API_KEY={FORBIDDEN_MARKER}\n".encode()
        plant_files(fs, {posixpath.join(root, relative): content for relative in planted})
        return tuple(planted)

    def plant(self, decoys: Decoys) -> None:
        """Create each decoy file that is not there yet."""
        plant_files(self.fs, decoys.files)

    def resolve_inside(self, relative: str) -> str | None:
        """Where ``relative`` leads (the workspace's links followed, as far
        as they exist), relative to the root; None when that is outside."""
        root = self.root.rstrip("/")
        try:
            with self.accesses.quiet():
                landed = self.fs.resolve_path(posixpath.join(root, relative))
        except (OSError, TypeError, ValueError):
            return None
        if landed == root:
            return "."
        if isinstance(landed, str) and landed.startswith(root + "/"):
            return landed[len(root) + 1 :]
        return None

    def tree(self) -> dict[str, bytes]:
        """Every regular file under the workspace, by relative path."""
        return read_tree(self.root)

    def outside(self) -> OutsideSnapshot:
        """Everything of the fake filesystem outside the workspace, now."""
        return snapshot_outside(self.fs, self.root)

    def save_workspace(self) -> tuple[WorkspaceEntry, ...]:
        """Every entry under the root (directories, files, links, with their
        modes), parents first, read from pyfakefs's objects."""
        entries: list[WorkspaceEntry] = []
        pending: list[tuple[str, Any]] = [("", self.fs.get_object(self.root))]
        while pending:
            prefix, directory = pending.pop(0)
            for name, entry in sorted(directory.entries.items()):
                path = f"{prefix}{name}"
                mode = entry.st_mode
                entries.append(
                    (path, mode, b"" if stat.S_ISDIR(mode) else entry.byte_contents or b"")
                )
                if stat.S_ISDIR(mode):
                    pending.append((path + "/", entry))
        return tuple(entries)

    def restore_workspace(self, entries: tuple[WorkspaceEntry, ...]) -> None:
        """Empty the workspace and make it hold ``entries`` (as
        ``save_workspace`` gave them)."""
        directory: Any = self.fs.get_object(self.root)
        for name in list(directory.entries):
            directory.remove_entry(name)  # what fs.remove_object does, once resolved
        fill_entries(self.fs, self.root, entries)
