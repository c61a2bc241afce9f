"""The fake filesystem a world runs in: pyfakefs, shared between worlds.

The filesystem is pyfakefs, with a workspace rebuilt at its root (and any
files outside it, so an escape would meet something). One patcher serves
every world of a ``FakeFilesystems``: starting a pyfakefs ``Patcher`` scans
every loaded module and builds a filesystem, about as much as the rest of
a cassette's set-up together, so the patcher is started once, *paused*
between worlds (the real ``os``, ``open`` and ``pathlib`` are back: pytest
writes its cache, reports and ``tmp_path`` for real) and resumed with an
emptied filesystem for the next one. Whoever makes a ``FakeFilesystems`` closes
it (the pytest plugin's run does, at the end of the session); the one
``process_fake_filesystems()`` gives, for callers that pass none, is closed by
an ``atexit`` hook (nothing is patched while it is paused, so late is
harmless).

Importing this module makes pyfakefs's modules call ``_make_string_path``
(pyfakefs's ``make_string_path``, answering ``str`` and ``bytes`` without
it: the same value for every argument, and about 12% of a fault cell).

Real directories a tool reads but a cassette does not own are mapped in
read-only (``FakeFilesystems.real_paths``: ``default_real_paths()``, the
time-zone database and installed packages, plus any the caller names):
each ``FakeWorld`` gets them as pyfakefs's lazily read real directories
(``map_real_paths``), unless one overlaps the workspace root or an entry
the world already holds. pyfakefs's ``read_only`` does not hold for root:
``harness.escapes.ReadOnlyPaths`` refuses the writes.

sqlite3 never sees pyfakefs: an audit store used in a world is in memory,
or made before the world starts. Handlers run in thread isolation only; a
forked process would not share the fake filesystem
(``harness.escapes`` refuses what a handler does of either).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import posixpath
import stat
import sys
import sysconfig
import tempfile
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pyfakefs import fake_filesystem as fake_filesystem_module
from pyfakefs import fake_os, fake_path, fake_scandir
from pyfakefs import helpers as fake_helpers
from pyfakefs.fake_file import FakeDirectory, FakeDirectoryFromRealDirectory, FakeFile
from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_filesystem_unittest import Patcher

from ..replay.cassette import WorkspaceState

_FS_SETTINGS = (
    "_is_windows_fs",
    "_is_macos",
    "is_case_sensitive",
    "fs_type",
    "_path_separator",
    "_alternative_path_separator",
    "umask",
    "patch_open_code",
    "shuffle_listdir_results",
    "create_temp_dir",
)
"""FakeFilesystem settings a test may change and ``reset()`` keeps: when one
differs from the filesystem's first value, the next world gets a new
patcher instead of the old one emptied."""

_CAN_SHARE = all(
    hasattr(Patcher, name)
    for name in ("PATCHER", "REF_COUNT", "CACHED_MODULES", "pause", "resume", "_find_modules")
)
"""pyfakefs has what ``FakeFilesystems`` relies on (6.x does); otherwise every
world gets its own ``Patcher``, as before."""


_PYFAKEFS_MAKE_STRING_PATH = fake_helpers.make_string_path
"""pyfakefs's own ``make_string_path``."""

_USES_MAKE_STRING_PATH = (fake_filesystem_module, fake_os, fake_path, fake_scandir)
"""The pyfakefs modules that call ``make_string_path`` by its imported name."""


def _make_string_path(path: Any) -> Any:
    """pyfakefs's ``make_string_path``, answering a ``str`` or ``bytes``
    without it: for those it returns ``os.fspath(path)``, which is ``path``
    itself. pyfakefs calls it several times per path it resolves (about 12
    times per fake system call), and each call runs an import statement
    (``FakePath``) before ``os.fspath``."""
    if type(path) is str or type(path) is bytes:
        return path
    return _PYFAKEFS_MAKE_STRING_PATH(path)


def use_fast_string_paths(enabled: bool = True) -> None:
    """Make pyfakefs's modules call ``_make_string_path`` instead of
    ``make_string_path`` (the same value for every argument; done once, at
    import), or, ``enabled`` False, pyfakefs's own again (for benchmarks)."""
    function = _make_string_path if enabled else _PYFAKEFS_MAKE_STRING_PATH
    for module in _USES_MAKE_STRING_PATH:
        if getattr(module, "make_string_path", None) in (
            _make_string_path,
            _PYFAKEFS_MAKE_STRING_PATH,
        ):
            module.make_string_path = function  # type: ignore[attr-defined]


use_fast_string_paths()


def _settings(fs: FakeFilesystem) -> tuple[Any, ...]:
    return tuple(getattr(fs, name, None) for name in _FS_SETTINGS)


def fill_workspace(fs: FakeFilesystem, state: WorkspaceState) -> None:
    """Create a workspace's starting state in ``fs``: the root, its
    directories, files and symlinks, and the files outside it.
    Raises what ``FakeFilesystem.create_dir``/``create_file``/
    ``create_symlink`` raise (``FileExistsError`` for a path made twice)."""
    builder = _Builder(fs)
    builder.directory(state.root)
    for directory in state.directories:
        builder.directory(join_path(state.root, directory))
    for path, content in state.files.items():
        builder.file(join_path(state.root, path), content)
    for path, content in state.outside_files.items():
        builder.file(path, content)
    for link, target in state.symlinks.items():
        fs.create_symlink(join_path(state.root, link), target)


def default_real_paths() -> tuple[str, ...]:
    """The real directories every world maps in read-only: the time-zone
    database's (``zoneinfo.TZPATH``, existing or not: a lookup there is
    never an access outside), the ``tzdata`` package's, the installed
    packages' (``sysconfig``'s ``purelib`` and ``platlib``: their data
    through ``importlib.resources`` and ``importlib.metadata``), and this
    package's own, wherever it is installed from: an editable install
    keeps it outside them, and the runtime imports some of its modules
    only once a handler needs them (the event loop kept for coroutines)."""
    paths: list[str] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    try:
        import zoneinfo

        paths.extend(zoneinfo.TZPATH)
    except ImportError:  # pragma: no cover - CPython always has it
        pass
    try:
        spec = importlib.util.find_spec("tzdata")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        paths.extend(spec.submodule_search_locations)
    for name in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            paths.append(path)
    return real_path_list(paths)


def real_path_list(paths: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    """``paths`` normalised (a relative one made absolute against the
    current directory: call it outside a world), each once, in order; ``/``
    dropped (the whole disk mapped in would hide every decoy)."""
    seen: dict[str, None] = {}
    for path in paths:
        text = posixpath.normpath(os.path.abspath(os.fspath(path)))
        if text != "/":
            seen.setdefault(text, None)
    return tuple(seen)


def real_directories(paths: Iterable[str]) -> tuple[str, ...]:
    """Those of ``paths`` that are directories on the real disk, even inside
    a world: asked through pyfakefs's own ``os``, which it never patches."""
    real_os: Any = vars(fake_filesystem_module)["os"]
    return tuple(path for path in paths if real_os.path.isdir(path))


def map_real_paths(fs: FakeFilesystem, directories: Sequence[str], root: str) -> tuple[str, ...]:
    """Map each real directory of ``directories`` (``real_directories``)
    into ``fs`` read-only (``add_real_directory``: contents read when first
    looked at); one that overlaps ``root`` (inside it, or holding it), or
    whose place ``fs`` already holds (or a file on the way), is left out,
    and so is one inside another (mapped with it).
    Returns those mapped."""
    root = root.rstrip("/") or "/"
    mapped = []
    for path in directories:
        if path == root or path.startswith(root + "/") or root.startswith(path + "/"):
            continue
        if any(path.startswith(other + "/") for other in directories):
            continue  # mapped with the directory holding it (tzdata in site-packages)
        names = plain_components(path)
        if names is None:
            continue
        if _entry(fs, names) is not None:  # taken already, or a file or link on the way
            continue
        parent = _entry(fs, names[:-1])
        if parent is None and _Builder(fs).make(posixpath.dirname(path), None):
            parent = _entry(fs, names[:-1])
        try:
            if parent is not None and stat.S_ISDIR(parent.st_mode) and _plain_posix(fs):
                # What add_real_directory does once its path functions are done.
                parent.add_entry(FakeDirectoryFromRealDirectory(path, fs, True, path))
            else:
                fs.add_real_directory(path, read_only=True)
        except OSError:
            continue
        mapped.append(path)
    return tuple(mapped)


def _entry(fs: FakeFilesystem, names: Sequence[str]) -> Any:
    """The object at the plain path of ``names``, walking directory objects
    (no link followed, no lazy real directory read); None when a component
    is missing; the file or link met on the way when one is."""
    current: Any = fs.root
    for part in names:
        if not stat.S_ISDIR(current.st_mode) or is_real_directory(current):
            return current
        current = current.entries.get(part)
        if current is None:
            return None
    return current


def is_real_directory(entry: Any) -> bool:
    """Whether a pyfakefs object is a real directory mapped in (its
    entries are read from the real disk when first looked at)."""
    return isinstance(entry, FakeDirectoryFromRealDirectory)


def fill_entries(fs: FakeFilesystem, root: str, entries: Iterable[tuple[str, int, bytes]]) -> None:
    """Create each ``(relative path, st_mode, content or link target)`` under
    ``root``, parents first, as ``create_dir(path, perm_bits=mode)``,
    ``create_file(path, st_mode=mode, contents=...)`` and ``create_symlink``
    do (the umask applied, a directory's own permissions checked as they
    are), walking the directory objects where it can (``_Builder``)."""
    builder = _Builder(fs)
    for path, mode, data in entries:
        full = join_path(root, path)
        if stat.S_ISLNK(mode):
            fs.create_symlink(full, data.decode())
        elif stat.S_ISDIR(mode):
            if not (builder._fast and builder.make(full, None, mode)):
                fs.create_dir(full, perm_bits=stat.S_IMODE(mode))
        elif not (builder._fast and builder.make(full, data, mode)):
            fs.create_file(full, st_mode=mode, contents=data)


def plant_files(fs: FakeFilesystem, files: Mapping[str, bytes]) -> None:
    """Create each absolute path of ``files`` that is not there yet (and
    its parents), as ``fill_workspace`` creates a workspace's files."""
    builder = _Builder(fs)
    for path, content in files.items():
        if not (builder._fast and builder.make(path, content)) and not fs.exists(path):
            fs.create_file(path, contents=content)


def reset_filesystem(fs: FakeFilesystem) -> None:
    """What ``fs.reset()`` does (every entry, descriptor and mount gone, a
    fresh temporary directory), with ``/tmp`` made by ``_Builder`` when it
    can be instead of through pyfakefs's path functions."""
    tempdir_name = getattr(fs, "_tempdir_name", None)
    if not (callable(tempdir_name) and fs.create_temp_dir and _plain_posix(fs)):
        fs.reset()
        return
    fs.create_temp_dir = False
    try:
        fs.reset()
    finally:
        fs.create_temp_dir = True
    # As FakeFilesystem._create_temp_dir, which also clears tempfile's cache.
    if tempdir_name() != "/tmp" or not _Builder(fs).make("/tmp", None):
        fs.reset()  # a temporary directory elsewhere gets a /tmp link: pyfakefs's way
        return
    # What ``tempfile.gettempdir()`` finds first in this filesystem, told
    # now: found, it writes and removes a probe file through the fake
    # filesystem, milliseconds in every world that asks (each fault cell does).
    tempfile.tempdir = "/tmp"


def _plain_posix(fs: FakeFilesystem) -> bool:
    """``fs`` emulates Linux with its defaults, and no permission can refuse
    the owner a directory made with its umask (root, or an umask leaving the
    owner rwx): what ``_Builder`` assumes."""
    return (
        not fs.is_windows_fs
        and not fs.is_macos
        and fs.is_case_sensitive
        and fs.path_separator == "/"
        and not fs.alternative_path_separator
        and (fake_helpers.is_root() or not fs.umask & 0o700)
    )


def plain_components(path: str) -> list[str] | None:
    """The names of a plain absolute POSIX path (one that ``normpath``
    leaves alone, not the root, no NUL); None for any other. Plain string
    work: inside the world, ``posixpath`` here is pyfakefs's."""
    if not path.startswith("/") or "\0" in path:
        return None
    names = path[1:].split("/")
    if "" in names or "." in names or ".." in names:  # list scans in C: called per resolve
        return None
    return names


def join_path(root: str, path: str) -> str:
    """``posixpath.join(root, path)``, without pyfakefs's (slower) one."""
    if path.startswith("/") or not root:
        return path
    return root + path if root.endswith("/") else f"{root}/{path}"


class _Builder:
    """Makes directories and files as ``FakeFilesystem.create_dir`` and
    ``create_file`` do, with the same pyfakefs objects, modes, inode order
    and disk accounting, but by walking the directory objects instead of
    resolving each path as a string several times (about ten times faster).
    A path it is not sure of (not plain, a link or a file on the way, the
    entry already there, a filesystem not ``_plain_posix``) goes to those
    methods, which answer or raise as always."""

    def __init__(self, fs: FakeFilesystem) -> None:
        self._fs = fs
        self._fast = _plain_posix(fs)
        self._dir_mode = stat.S_IFDIR | (fake_helpers.PERM_DEF & ~fs.umask)
        self._file_mode = stat.S_IFREG | (fake_helpers.PERM_DEF_FILE & ~fs.umask)

    def directory(self, path: str) -> None:
        if not (self._fast and self.make(path, None)):
            self._fs.create_dir(path)

    def file(self, path: str, content: bytes) -> None:
        if not (self._fast and self.make(path, content)):
            self._fs.create_file(path, contents=content)

    def make(self, path: str, content: bytes | None, mode: int | None = None) -> bool:
        """Make the directory (``content`` None) or the file ``path`` and
        any missing parent; False, having changed nothing, when unsure.
        ``mode``: the new entry's ``st_mode`` before the umask (default:
        ``create_dir``'s and ``create_file``'s)."""
        names = plain_components(path)
        if names is None:
            return False
        *parents, name = names
        current: Any = self._fs.root
        missing = len(parents)
        for index, part in enumerate(parents):
            entry = current.entries.get(part)
            if entry is None:
                missing = index
                break
            if not stat.S_ISDIR(entry.st_mode):  # a link or a file on the way
                return False
            current = entry
        else:
            if name in current.entries:  # create_* raises FileExistsError
                return False
        made = []
        for part in parents[missing:] + ([name] if content is None else []):
            directory = FakeDirectory(part, filesystem=self._fs)
            current.add_entry(directory)
            made.append(directory)
            current = directory
        for directory in made:  # as create_dir: modes set once all are made
            directory.st_mode = self._dir_mode
        if content is None and mode is not None:
            made[-1].st_mode = stat.S_IFDIR | (stat.S_IMODE(mode) & ~self._fs.umask)
        if content is not None:
            file_mode = self._file_mode if mode is None else mode & ~self._fs.umask
            file = FakeFile(name, file_mode, filesystem=self._fs)
            current.add_entry(file)
            try:
                file.set_initial_contents(content)
            except OSError:  # no space (set_disk_usage): create_file removes it too
                current.remove_entry(name)
                raise
        return True


class FakeFilesystems:
    """One pyfakefs ``Patcher`` for many worlds, one at a time.

    ``filesystem(state)`` gives each world an empty fake filesystem
    holding only its recorded files, exactly as a new ``Patcher`` would;
    what is saved is the patcher's start and teardown (scanning every loaded
    module, building the filesystem and the fake modules): about half of
    what the fake filesystem cost a world. Between worlds the patcher is paused, which puts
    the real ``os``, ``open``, ``io``, ``shutil`` and ``pathlib`` back in
    every module, and it is hidden from pyfakefs (``Patcher.PATCHER`` is
    None, ``REF_COUNT`` 0), so pyfakefs's own pytest hooks never resume it
    and the ``fs`` fixture, or any other ``Patcher``, starts its own.

    Guarantees, per world: the filesystem is ``reset()`` (no file, link
    or open descriptor of an earlier world; ``/tmp`` fresh); modules
    imported since the last world are patched too (the module scan is
    redone, cached, as a new ``Patcher`` does it); pyfakefs's user and
    group ids are put back after it, as ``Patcher.tearDown`` does. When a
    test changed a filesystem setting that ``reset()`` keeps (the OS type,
    case sensitivity, the umask, ...), the next world gets a new patcher.

    Not shared, and run exactly as before (a ``Patcher`` of its own, or
    joining the running one): a world entered while any fake filesystem
    is running (nested in another world, or in a test using pyfakefs's
    ``fs`` fixture), and every world when the installed pyfakefs lacks
    what this relies on. Not thread-safe beyond that: pyfakefs patches the
    whole process, so one world runs at a time.

    ``close()`` drops the paused patcher (nothing is patched while paused,
    so closing late is harmless); the next world starts a new one.

    ``real_paths``: the real directories a ``FakeWorld`` maps in read-only
    (``map_real_paths``): ``default_real_paths()`` and the ``real_paths``
    given (made absolute now, against the current directory).
    ``filesystem(state)`` itself holds ``state`` only.
    """

    def __init__(self, real_paths: Iterable[str | os.PathLike[str]] = ()) -> None:
        self._given = real_path_list(real_paths)
        self._real_paths: tuple[str, ...] | None = None
        self._real_directories: tuple[str, ...] | None = None
        self._lock = threading.Lock()
        self._patcher: Patcher | None = None
        self._settings: tuple[Any, ...] = ()
        self._active = False
        self._closing = False
        self._exit_hook = False
        self._scanned: tuple[tuple[object, ...], tuple[int, ...], object] | None = None

    @property
    def started(self) -> bool:
        """A patcher is kept (paused, or running a world)."""
        return self._patcher is not None

    @property
    def active(self) -> bool:
        """A world is running now."""
        return self._active

    @property
    def real_paths(self) -> tuple[str, ...]:
        """The real directories its worlds map in read-only (those that
        exist; the others are looked up in vain, harmlessly): the defaults,
        then the ones given."""
        if self._real_paths is None:
            self._real_paths = tuple(dict.fromkeys([*default_real_paths(), *self._given]))
        return self._real_paths

    def map_real_paths(self, fs: FakeFilesystem, root: str) -> tuple[str, ...]:
        """Map ``real_paths`` into a running world's ``fs`` read-only
        (``map_real_paths``; which of them exist is asked of the real disk
        once); returns those mapped."""
        if self._real_directories is None:
            self._real_directories = real_directories(self.real_paths)
        return map_real_paths(fs, self._real_directories, root)

    @contextmanager
    def filesystem(self, state: WorkspaceState) -> Iterator[FakeFilesystem]:
        """A fake filesystem holding only ``state`` (``fill_workspace``),
        running until the block ends; yields the ``FakeFilesystem``."""
        patcher = self._enter()
        if patcher is None:  # not shareable now: a Patcher of its own, or join the running one
            with Patcher() as joined:
                assert joined.fs is not None  # set by Patcher.__enter__
                fill_workspace(joined.fs, state)
                yield joined.fs
            return
        try:
            assert patcher.fs is not None
            fill_workspace(patcher.fs, state)
            yield patcher.fs
        finally:
            self._leave(patcher)

    def close(self) -> None:
        """Drop the paused patcher. Inside a running world, the patcher
        is torn down when that world ends instead. Idempotent."""
        with self._lock:
            if self._active:
                self._closing = True
                return
            self._drop()

    # -- internals ---------------------------------------------------------------

    def _enter(self) -> Patcher | None:
        """Start or resume the patcher for one world, with an empty
        filesystem; None when it must not be shared now."""
        with self._lock:
            if not _CAN_SHARE or self._active or Patcher.PATCHER is not None or Patcher.REF_COUNT:
                return None
            patcher = self._patcher
            if patcher is not None and (
                patcher.fs is None or _settings(patcher.fs) != self._settings
            ):
                self._drop()
                patcher = None
            if patcher is None:
                patcher = Patcher()  # Patcher.PATCHER is None: a new one, made the singleton
                patcher.setUp()
                self._scanned = self._modules()
                assert patcher.fs is not None
                self._patcher = patcher
                self._settings = _settings(patcher.fs)
                if not self._exit_hook:
                    atexit.register(self.close)
                    self._exit_hook = True
            else:
                # What setUp does, without building a new filesystem: be the
                # running patcher again, patch modules imported since the
                # last world, and start from an empty filesystem.
                Patcher.PATCHER = patcher
                Patcher.REF_COUNT += 1
                try:
                    self._find_modules(patcher)
                    assert patcher.fs is not None
                    reset_filesystem(patcher.fs)
                    patcher.resume()
                except BaseException:
                    self._patcher = None
                    if patcher.is_patching:
                        patcher.tearDown()  # stops it and clears what _enter set
                    else:
                        self._hide(patcher)
                    raise
            self._active = True
            return patcher

    def _find_modules(self, patcher: Patcher) -> None:
        """The module scan of ``setUp`` (cached by pyfakefs: only modules it
        has not seen are looked into); skipped when ``sys.modules`` holds the
        very modules of the last scan, in order, and pyfakefs's cache is the
        same: the scan would find nothing new."""
        last, now = self._scanned, self._modules()
        if last is not None and last[1] == now[1] and last[2] is now[2]:
            return
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore")  # as setUp does (pyfakefs #542)
            patcher._find_modules()
        self._scanned = self._modules()

    @staticmethod
    def _modules() -> tuple[tuple[object, ...], tuple[int, ...], object]:
        """sys.modules's modules (held, so their ids stay theirs), their ids
        and pyfakefs's module cache (replaced when it is cleared)."""
        modules = tuple(sys.modules.values())
        return modules, tuple(map(id, modules)), Patcher.CACHED_MODULES

    def _leave(self, patcher: Patcher) -> None:
        """Pause the patcher and hide it; or, when anything is not as this
        world left it (a joined patcher still running, a close asked),
        leave as a ``Patcher`` context does and forget the patcher."""
        with self._lock:
            self._active = False
            expected = Patcher.PATCHER is patcher and Patcher.REF_COUNT == 1
            if not expected or self._closing:
                self._closing = False
                self._patcher = None
                patcher.tearDown()
                return
            patcher.pause()
            self._hide(patcher)

    @staticmethod
    def _hide(patcher: Patcher) -> None:
        """Make pyfakefs see no running patcher (its pytest hooks resume
        ``Patcher.PATCHER``), as ``tearDown`` leaves it, ids included."""
        if Patcher.PATCHER is patcher:
            Patcher.PATCHER = None
            Patcher.REF_COUNT = max(0, Patcher.REF_COUNT - 1)
        fake_helpers.reset_ids()

    def _drop(self) -> None:
        """Forget the paused patcher (pausing again is a no-op: be sure)."""
        patcher, self._patcher = self._patcher, None
        self._scanned = None
        self._settings = ()
        if patcher is not None:
            patcher.pause()


_PROCESS_WORLD = FakeFilesystems()
"""The ``FakeFilesystems`` of callers that bring none (pyfakefs patches the whole
process, so only one world runs at a time anyway)."""


def process_fake_filesystems() -> FakeFilesystems:
    """The process's ``FakeFilesystems``, for callers that pass none; its paused
    patcher is dropped at exit."""
    return _PROCESS_WORLD
