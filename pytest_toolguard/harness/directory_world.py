"""The directory world: a recorded session rebuilt in a fresh real directory.

The fake world (``world.FakeWorld``) serves tools that reach files through
Python's own ``os`` and ``open``. A tool that reaches them through C code
(sqlite3), another process (``git``) or an absolute path needs real files:
``DirectoryWorld(state, frozen_at=...)`` makes them, one context manager::

    <tmp>/toolguard-world-XXXXXXXX/      the "around" directory (mkdtemp: 0700)
        <name>/                          the workspace root (<name>: the recorded root's)
        <name>2/keep.txt                 decoys sharing the root's prefix
        <name>-old/keep.txt
        toolguard-outside/secret.txt     a decoy beside the workspace
        secret-above.txt                 a decoy above it

The around directory stands for the recorded root's parent: a cassette's
``outside_files`` beside the recorded root are planted at the same place
beside the world's root (``planted_outside``); those elsewhere cannot be
(``unplaced_outside``), since a world never writes outside its own tree.
Every decoy holds ``world.DECOY_MARKER``.

Inside the block: the workspace holds ``state``'s files, empty
directories, links and permission bits (``WorkspaceState.modes``), each
entry's times set to ``frozen_at``; text files, link targets and paths
naming the recorded root name the world's instead (``root_map``, a
``replay.root_map.RootMap``); the in-process clock is frozen at
``frozen_at`` as in the fake world. ``tree()``, ``outside()``,
``plant(decoys)``, ``plant_forbidden()``, ``resolve_inside()``,
``save_workspace()`` and ``restore_workspace()`` answer as ``FakeWorld``'s do,
on the real files. The process's working directory is the workspace root
(``working_directory``), as the fake world's is: a relative path a handler
opens, hands to C code (``sqlite3.connect("crm.db")``) or to a process it
starts with no ``cwd`` lands in the world, never in the directory the test
run started in, which is the working directory again once the block ends.

Guarantees: the around directory is new (never an existing directory),
private (0700) and removed with everything in it when the block ends,
even when the block raised, even when a tool made directories read-only
or left a FIFO, a socket or links in it; nothing is planted or written by
the world itself outside it (but the scratch layers of ``real_data``).
Not guaranteed: what a tool does on its own outside the world (an
absolute path it was never given, ``$HOME``, the network) happens on the
real machine, but writes into real read-only data (``real_data``:
refused or kept away, and reported) and processes the tool starts
through ``subprocess``, which see the world at the recorded root where
the machine allows a mount namespace (``child_processes``, which also
gives them the recorded time through libfaketime when installed);
accesses are observed through the kernel's notifications (``kernel_watch``:
``accesses``, with the limits it states) only when ``inotify-simple`` is
installed (``accesses_observed``; otherwise said once); a file made
immutable (``chattr +i``) or a mount made under the world cannot be
removed, and ``__exit__`` raises ``OSError`` naming the directory left
behind; the working directory is the whole process's while it runs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..replay.cassette import Cassette, WorkspaceState
from ..replay.root_map import RootMap
from .child_processes import ChildProcesses
from .clock import DEFAULT_TIME, frozen_clock
from .escapes import Escape
from .files import harness_work, read_tree_through_os
from .kernel_watch import UNKNOWN, KernelAccessLog, watching
from .probes import OutsideSnapshot
from .real_data import RealData
from .working_directory import working_directory
from .world import (
    DECOY_MARKER,
    FORBIDDEN_MARKER,
    FORBIDDEN_SPELLINGS,
    OUTSIDE_DIR,
    Decoys,
    WorkspaceEntry,
    running,
)
from .world_parent import WORLD_PREFIX as WORLD_PREFIX  # where tests and benches look
from .world_parent import world_directories as world_directories
from .world_parent import world_parent

DEFAULT_NAME = "workspace"
"""The workspace's name when the recorded root has none to give."""

ABOVE_DECOY = "secret-above.txt"
"""The decoy in the around directory itself, above the workspace."""

FILE_MODE = 0o644
DIRECTORY_MODE = 0o755
"""The permission bits of an entry ``WorkspaceState.modes`` gives none for."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _unwatched(
    method: Callable[Concatenate[DirectoryWorld, _P], _R],
) -> Callable[Concatenate[DirectoryWorld, _P], _R]:
    """``method`` as the harness's own work: what is queued meanwhile is
    dropped, even while a handler run (one that overran its deadline) is
    open. The kernel cannot tell whose it is; a false "accessed outside"
    (``outside()`` reads every decoy) would be worse than that loss."""

    @functools.wraps(method)
    def unwatched(world: DirectoryWorld, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        log = world._accesses
        with harness_work(), log.quiet() if log is not None else contextlib.nullcontext():
            return method(world, *args, **kwargs)

    return unwatched


class DirectoryWorld:
    """A fresh real directory holding ``state`` (see the module docstring).
    ``frozen_at`` None leaves the clock alone; ``parent`` is where the
    around directory is made (default: ``world_parent()``);
    ``decoys=False`` plants none of the default decoys; ``real_paths``:
    the real read-only data (``real_data``; None: the defaults)."""

    def __init__(
        self,
        state: WorkspaceState,
        *,
        frozen_at: str | None = None,
        parent: str | None = None,
        decoys: bool = True,
        real_paths: Iterable[str] | None = None,
    ) -> None:
        self.state = state
        self._real_paths = real_paths
        self.real_data: RealData | None = None
        self.recorded_root = posixpath.normpath(state.root)
        self.frozen_at = frozen_at
        self._parent = parent
        self._decoys = decoys
        self._stack = ExitStack()
        self._around: str | None = None
        self._root: str | None = None
        self._map: RootMap | None = None
        self.planted_outside: tuple[str, ...] = ()
        """The world's paths of the ``outside_files`` it planted."""
        self.unplaced_outside: tuple[str, ...] = ()
        """The recorded paths of ``outside_files`` it could not plant (not beside the root)."""
        self._accesses: KernelAccessLog | None = None

    @classmethod
    def of(cls, cassette: Cassette, *, empty: bool = False, **options: Any) -> DirectoryWorld:
        """The world of a recorded session, as ``FakeWorld.of`` makes it: its
        workspace before the first call (only the empty root with
        ``empty``), the clock frozen at its recorded time; ``options`` as
        the constructor's (``parent``, ``real_paths``)."""
        state = WorkspaceState(root=cassette.workspace.root) if empty else cassette.workspace
        return cls(state, frozen_at=cassette.recorded_at or DEFAULT_TIME, **options)

    # -- the block ---------------------------------------------------------------

    def __enter__(self) -> DirectoryWorld:
        with ExitStack() as stack:
            # Absolute: the world's paths must not move when the working directory does.
            parent = self._parent or world_parent()
            around = os.path.abspath(tempfile.mkdtemp(prefix=WORLD_PREFIX, dir=parent))
            stack.callback(remove_world, around)
            name = posixpath.basename(self.recorded_root) or DEFAULT_NAME
            self._around, self._root = around, os.path.join(around, name)
            self._map = RootMap(self.recorded_root, self._root)
            self._build()
            if self._decoys:
                self.plant(self.default_decoys())
            self._accesses = watching(around)
            if self._accesses is not None:  # closed first: the removal is never read
                stack.callback(self._accesses.close)
            self.real_data = stack.enter_context(
                RealData(self._real_paths, world=(around, self.recorded_root))
            )
            # Processes tools start: the recorded time and root, killed when it ends.
            self.processes = stack.enter_context(ChildProcesses.of(self))
            if self.frozen_at is not None:
                stack.enter_context(frozen_clock(self.frozen_at))
            # Last in, first undone: the user's directory is back before the world goes.
            stack.enter_context(working_directory(self._root))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._stack.close()
        finally:
            self._around = self._root = None
            self._map = None
            self._accesses = None
            self.real_data = None

    def escapes(self) -> tuple[Escape, ...]:
        """What handler runs and the processes they started wrote into the
        real read-only data (``real_data.RealData.escapes``), in order."""
        return running(self.real_data).escapes()

    @property
    def around(self) -> str:
        """The world's own directory: the workspace and the decoys are in it."""
        return running(self._around)

    @property
    def root(self) -> str:
        """The workspace root in this world (``<around>/<name>``)."""
        return running(self._root)

    @property
    def root_map(self) -> RootMap:
        """The recorded root <-> this world's root."""
        return running(self._map)

    @property
    def accesses(self) -> KernelAccessLog | None:
        """What any process did to the world's files while a handler run
        was open (``kernel_watch.KernelAccessLog``: the fake world's
        ``AccessLog`` interface); None when nothing watches them (see
        ``accesses_observed``)."""
        return self._accesses

    @property
    def accesses_observed(self) -> bool:
        """Whether the kernel's notifications watch this world. False
        (``inotify-simple`` not installed, or the kernel refused) says
        "not observed", never "nothing happened"."""
        return self._accesses is not None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """The block is one handler run for ``accesses`` (a window the
        harness opens itself, as replay does around its calls); nothing
        when accesses are not observed."""
        log = self._accesses
        if log is None:
            yield
            return
        with log.window():
            yield

    def accessed_outside(self) -> dict[str, tuple[str, ...]]:
        """What the kept accesses did outside the workspace, by path as
        the recording would spell it (``recorded_path``): the events, such
        as ``("open", "read")``. The cassette's own outside files planted
        beside the root are left out (the recording had them; their
        changes are judged by ``outside()``); ``kernel_watch.UNKNOWN``
        is a key when events were lost. Empty when not observed."""
        log = self._accesses
        if log is None:
            return {}
        planted = set(self.planted_outside)
        events: dict[str, set[str]] = {}
        for access in log.outside(self.root):
            if access.path in planted:
                continue
            shown = access.path if access.path == UNKNOWN else self.recorded_path(access.path)
            events.setdefault(shown, set()).add(access.event)
        return {path: tuple(sorted(kinds)) for path, kinds in events.items()}

    # -- paths ---------------------------------------------------------------------

    def world_path(self, recorded: str) -> str | None:
        """Where an absolute recorded path is in this world: under the
        recorded root, under the world's root; beside it (under the
        recorded root's parent), under the around directory; None elsewhere."""
        path = posixpath.normpath(recorded)
        if path == self.recorded_root:
            return self.root
        inside = _relative_under(path, self.recorded_root)
        if inside is not None:
            return posixpath.join(self.root, inside)
        parent = posixpath.dirname(self.recorded_root)
        relative = _relative_under(path, parent)
        return None if relative is None else posixpath.join(self.around, relative)

    def recorded_path(self, path: str) -> str:
        """An absolute path of this world as the recording would spell it
        (the inverse of ``world_path``); other paths as they are."""
        path = posixpath.normpath(path)
        relative = _relative_under(path, self.around)
        if relative is None:
            return path
        return posixpath.join(posixpath.dirname(self.recorded_root), relative)

    def default_decoys(self) -> Decoys:
        """The decoys every directory world plants (see the module docstring)."""
        root, around = self.root, self.around
        return Decoys(
            {
                f"{root}2/keep.txt": f"{DECOY_MARKER} shares the root's prefix\n".encode(),
                f"{root}-old/keep.txt": f"{DECOY_MARKER} shares the root's prefix\n".encode(),
                posixpath.join(
                    around, OUTSIDE_DIR, "secret.txt"
                ): f"{DECOY_MARKER} secret\n".encode(),
                posixpath.join(around, ABOVE_DECOY): f"{DECOY_MARKER} above\n".encode(),
            }
        )

    # -- what the oracles and fault cells use ----------------------------------------

    @_unwatched
    def plant(self, decoys: Decoys) -> tuple[str, ...]:
        """Create each decoy file that is not there yet, when it is inside
        the around directory and outside the workspace. Returns the paths
        left out (elsewhere on the machine: a world never writes there)."""
        skipped: list[str] = []
        for path, content in decoys.files.items():
            normal = posixpath.normpath(path)
            if _relative_under(normal, self.around) is None or _relative_under(normal, self.root):
                skipped.append(path)
                continue
            if os.path.lexists(normal):
                continue
            os.makedirs(posixpath.dirname(normal), exist_ok=True)
            _write_new(normal, content)
        return tuple(skipped)

    @_unwatched
    def plant_forbidden(self) -> tuple[str, ...]:
        """What ``FakeWorld.plant_forbidden`` plants, on the real files: a
        forbidden ``.env`` (holding ``FORBIDDEN_MARKER``) at the root, in
        the first and in the deepest directory; returns the relative paths."""
        root = self.root
        directories = sorted(
            {path.rsplit("/", 1)[0] for path in self.tree() if "/" in path},
            key=lambda path: (path.count("/"), path),
        )
        places: list[tuple[str, tuple[str, ...]]] = [("", FORBIDDEN_SPELLINGS)]
        if directories:
            places.append((directories[0], FORBIDDEN_SPELLINGS[2:]))
            places.append((directories[-1], FORBIDDEN_SPELLINGS[:1]))
        content = f"API_KEY={FORBIDDEN_MARKER}\n".encode()
        planted: list[str] = []
        for directory, spellings in places:
            where = posixpath.join(root, directory) if directory else root
            try:
                taken = set(os.listdir(where))
            except OSError:
                continue
            for name in spellings:
                if name in taken:
                    continue
                taken.add(name)
                relative = f"{directory}/{name}" if directory else name
                _write_new(posixpath.join(root, relative), content)
                planted.append(relative)
        return tuple(planted)

    def resolve_inside(self, relative: str) -> str | None:
        """Where ``relative`` leads (links followed, as far as they exist),
        relative to the root; None when that is outside."""
        root = os.path.realpath(self.root)
        landed = os.path.realpath(posixpath.join(self.root, relative))
        if landed == root:
            return "."
        return _relative_under(landed, root)

    @_unwatched
    def tree(self) -> dict[str, bytes]:
        """Every regular file under the workspace, by relative path (links
        never followed)."""
        return read_tree_through_os(self.root)

    @_unwatched
    def outside(self) -> OutsideSnapshot:
        """Every entry of the around directory outside the workspace, now,
        keyed by its path in this world, shaped as ``probes.snapshot_outside``
        shapes them (a directory's mode; a link's target; a file's mode,
        inode, links, mtime and bytes). An unreadable file reads as None."""
        entries: OutsideSnapshot = {}
        root = self.root
        pending = [self.around]
        while pending:
            directory = pending.pop()
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            for name in names:
                path = posixpath.join(directory, name)
                if path == root:
                    continue
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    entries[path] = ("directory", st.st_mode)
                    pending.append(path)
                elif stat.S_ISLNK(st.st_mode):
                    entries[path] = ("symlink", os.fsencode(os.readlink(path)))
                elif stat.S_ISREG(st.st_mode):
                    entries[path] = (
                        "file",
                        st.st_mode,
                        st.st_ino,
                        st.st_nlink,
                        st.st_mtime_ns,
                        _read(path),
                    )
                else:
                    entries[path] = ("other", st.st_mode)
        return entries

    @_unwatched
    def save_workspace(self) -> tuple[WorkspaceEntry, ...]:
        """Every entry under the root (directories, files, links, with their
        modes), parents first."""
        entries: list[WorkspaceEntry] = []
        pending = [""]
        while pending:
            prefix = pending.pop(0)
            directory = posixpath.join(self.root, prefix) if prefix else self.root
            for name in sorted(os.listdir(directory)):
                relative = f"{prefix}{name}"
                path = posixpath.join(directory, name)
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode):
                    entries.append((relative, st.st_mode, b""))
                    pending.append(relative + "/")
                elif stat.S_ISLNK(st.st_mode):
                    entries.append((relative, st.st_mode, os.fsencode(os.readlink(path))))
                elif stat.S_ISREG(st.st_mode):
                    entries.append((relative, st.st_mode, _read(path) or b""))
        return tuple(entries)

    @_unwatched
    def restore_workspace(self, entries: tuple[WorkspaceEntry, ...]) -> None:
        """Empty the workspace and make it hold ``entries`` (as
        ``save_workspace`` gave them)."""
        for name in os.listdir(self.root):
            path = posixpath.join(self.root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                make_removable(path)
                shutil.rmtree(path)
            else:
                os.unlink(path)
        modes: list[tuple[str, int]] = []
        for relative, mode, data in entries:
            path = posixpath.join(self.root, relative)
            if stat.S_ISLNK(mode):
                os.symlink(os.fsdecode(data), path)
            elif stat.S_ISDIR(mode):
                os.mkdir(path, DIRECTORY_MODE | 0o700)
                modes.append((path, stat.S_IMODE(mode)))
            else:
                _write_new(path, data)
                os.chmod(path, stat.S_IMODE(mode))
        for path, mode in reversed(modes):  # deepest first: a read-only directory filled first
            os.chmod(path, mode)

    # -- internals -----------------------------------------------------------------

    def _build(self) -> None:
        """The workspace and the outside files, from ``state``."""
        state, root, mapping = self.state, self.root, self.root_map
        os.mkdir(root, DIRECTORY_MODE)
        made: list[str] = [root]
        for directory in sorted(state.directories):
            path = _inside(root, directory)
            os.makedirs(path, DIRECTORY_MODE, exist_ok=True)
            made.append(path)
        for relative, content in sorted(state.files.items()):
            path = _inside(root, relative)
            os.makedirs(posixpath.dirname(path), DIRECTORY_MODE, exist_ok=True)
            _write_new(path, _mapped_text(mapping, content))
            made.append(path)
        for link, target in sorted(state.symlinks.items()):
            path = _inside(root, link)
            os.makedirs(posixpath.dirname(path), DIRECTORY_MODE, exist_ok=True)
            where = self.world_path(target) if target.startswith("/") else None
            os.symlink(where or target, path)
        planted: list[str] = []
        unplaced: list[str] = []
        for recorded, content in sorted(state.outside_files.items()):
            beside = self.world_path(recorded)
            if beside is None or _relative_under(beside, root) is not None or beside == root:
                unplaced.append(recorded)
                continue
            os.makedirs(posixpath.dirname(beside), exist_ok=True)
            if not os.path.lexists(beside):
                _write_new(beside, content)
            planted.append(beside)
        self.planted_outside, self.unplaced_outside = tuple(planted), tuple(unplaced)
        self._set_times(made)
        for relative, mode in sorted(state.modes.items(), key=lambda item: -item[0].count("/")):
            path = _inside(root, relative)
            if os.path.lexists(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(mode))

    def _set_times(self, paths: list[str]) -> None:
        """Every entry made gets the frozen time: tools that compare times
        (make, git's index) see the world the recording saw, not the
        moment of the rebuild."""
        if self.frozen_at is None:
            return
        moment = datetime.fromisoformat(self.frozen_at).timestamp()
        for path in reversed(paths):  # a directory's time after its entries were made
            with contextlib.suppress(OSError):
                os.utime(path, (moment, moment), follow_symlinks=False)


def remove_world(around: str) -> None:
    """Remove ``around`` and everything in it, even entries a tool made
    unwritable or unreadable; nothing to do when it is gone. ``OSError``
    when something cannot be removed (an immutable file, a mount)."""
    for _ in range(2):
        try:
            shutil.rmtree(around)
            return
        except FileNotFoundError:
            return
        except OSError:
            make_removable(around)
    shutil.rmtree(around)


def make_removable(top: str) -> None:
    """Give ``top`` and every directory beneath it (never through a link)
    the owner's read, write and search bits, so that ``rmtree`` can empty it."""
    pending = [top]
    while pending:
        directory = pending.pop()
        with contextlib.suppress(OSError):
            os.chmod(directory, stat.S_IMODE(os.lstat(directory).st_mode) | 0o700)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        pending.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))


def _relative_under(path: str, top: str) -> str | None:
    """``path`` relative to ``top`` when it is beneath it (on a component
    boundary), else None."""
    top = top.rstrip("/")
    if top == "":
        return path.lstrip("/") or None
    if path.startswith(top + "/"):
        return path[len(top) + 1 :]
    return None


def _inside(root: str, relative: str) -> str:
    """``root/relative``, refusing a relative path a cassette made to climb out."""
    path = posixpath.normpath(posixpath.join(root, relative))
    if _relative_under(path, root) is None:
        raise ValueError(f"workspace entry {relative!r} is not inside the workspace")
    return path


def _mapped_text(mapping: RootMap, content: bytes) -> bytes:
    """A text file's bytes with the recorded root mapped; any other file's as they are
    (a binary format would not survive a path of another length)."""
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return content
    mapped: bytes = mapping.to_world(content)
    return mapped


def mapped_files(mapping: RootMap, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` (text ones) with the world's root spelt as the recording spelt it."""
    shown: dict[str, bytes] = {}
    for path, content in files.items():
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            shown[path] = content
            continue
        shown[path] = mapping.to_recorded(content)
    return shown


def _write_new(path: str, content: bytes) -> None:
    """Create ``path`` (never through a link, never over an entry) holding ``content``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None
