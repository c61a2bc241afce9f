"""The files the Claude Code hook keeps for itself, and a workspace that
refuses every call naming them.

``toolguard hook`` judges calls of an agent that works in the same
directory as the hook's own state: its configuration (``toolguard.yaml``),
its audit database (with SQLite's ``-wal``, ``-shm`` and ``-journal``
beside it) and the session's cassette (with its lock and temporary
files); Claude Code's settings files, which register the hook
(``.claude/settings.json``, ``.claude/settings.local.json``); and the
Python code the hook loaded from the project (its registry's module and
what that imports, with the names such a module could be shadowed by). A
call that may change one of them could erase the audit trail, grant
itself what the configuration refuses, turn the hook off or run its own
code in the next hook process; so they are forbidden to every call the
hook judges, whatever the session's roots say.

A path whose first component begins with ``~`` is refused too
(PATH_OUTSIDE_WORKSPACE): Claude Code and the programs an MCP server runs
may read it as a home directory, never as a folder of the project. The
Claude Code bridge expands ``~`` and ``~user`` first (``relative_arguments``),
so this refusal meets only what could not be expanded, or a path argument
of another tool.

What is guaranteed: ``GuardedWorkspace.locate`` (what the policy judges a
declared path by) answers ``ForbiddenPath`` (FORBIDDEN_PATH) for a path
that resolves onto one of ``OwnFiles``, or beneath one, and, for a write,
onto a directory holding one (a write to a directory may replace what is
beneath it). The path is judged after the sandbox resolved it, links
followed one component at a time and ``..`` applied to the directory
actually reached, so every spelling of the same entry is judged the same:
relative or absolute, through ``..``, ``./`` or a trailing slash, through
a link inside the workspace. Names are compared case-insensitively (a
case-insensitive file system reaches the same file), and an existing file
is also recognised by its identity (device and inode), as a hard link
reaches it.

What is not: a tool whose paths are not declared (``PathAccess``), such as
Bash, is not judged by path here (Claude Code asks before it runs). The
files are judged when the call is decided; a change made later by another
process is not seen.
"""

from __future__ import annotations

import _imp
import os
import posixpath
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from ...sandbox import (
    AccessMode,
    ForbiddenPath,
    Location,
    PathOutsideWorkspace,
    Workspace,
    show_path,
)


@dataclass(frozen=True, slots=True)
class OwnEntry:
    """One entry the hook keeps: ``directory`` (an absolute, resolved path)
    holds the file ``name``, or with ``prefix`` every name beginning so."""

    directory: str
    name: str
    prefix: bool = False

    def matches(self, name: str) -> bool:
        """Whether ``name`` (in ``directory``) is this entry, compared
        case-insensitively."""
        wanted, given = self.name.casefold(), name.casefold()
        return given.startswith(wanted) if self.prefix else given == wanted


@dataclass(frozen=True, slots=True)
class OwnFiles:
    """The files the hook keeps for itself: see the module docstring."""

    entries: tuple[OwnEntry, ...] = ()

    @classmethod
    def of(
        cls,
        *,
        config: str | os.PathLike[str] | None = None,
        database: str | os.PathLike[str] | None = None,
        cassette: str | os.PathLike[str] | None = None,
        extra: Iterable[OwnEntry] = (),
    ) -> OwnFiles:
        """The hook's own files: its configuration file, its SQLite audit
        database (and the files SQLite keeps beside it), and its cassette
        (with the lock and temporary files written beside it), then the
        ``extra`` entries (``claude_settings``, ``loaded_code``,
        ``module_names``). Each path is made absolute and resolved now
        (links followed)."""
        entries: list[OwnEntry] = list(extra)
        if config is not None:
            entries.append(_entry(config))
        if database is not None:
            # Every name the database's begins: SQLite's -wal, -shm and
            # -journal beside it, so a planted hot journal or WAL is refused.
            entries.append(_entry(database, prefix=True))
        if cassette is not None:
            entry = _entry(cassette)
            entries += [entry, OwnEntry(entry.directory, f".{entry.name}.", prefix=True)]
        return cls(tuple(entries))

    def existing(self) -> list[str]:
        """The absolute path of every file that is one of the entries now."""
        found: list[str] = []
        by_directory: dict[str, list[OwnEntry]] = {}
        for entry in self.entries:
            by_directory.setdefault(entry.directory, []).append(entry)
        for directory, entries in by_directory.items():  # each listed once
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            found += [
                os.path.join(directory, n) for n in names if any(e.matches(n) for e in entries)
            ]
        return found


SETTINGS_FILES = ("settings.json", "settings.local.json")
"""Claude Code's settings files in a ``.claude`` directory: they register
the hook, and one line of them (``disableAllHooks``) turns it off."""


def claude_settings(project: str | os.PathLike[str]) -> list[OwnEntry]:
    """Entries for the settings files that register the hook: the
    project's (``project/.claude``, and ``$CLAUDE_PROJECT_DIR/.claude``
    when set) and the user's (``$CLAUDE_CONFIG_DIR``, else
    ``~/.claude``). An entry outside a workspace's root guards nothing
    there: such a path is outside anyway."""
    directories = [os.path.join(os.fspath(project), ".claude")]
    if os.environ.get("CLAUDE_PROJECT_DIR"):
        directories.append(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], ".claude"))
    directories.append(
        os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    )
    return [
        _entry(os.path.join(directory, name))
        for directory in dict.fromkeys(directories)
        for name in SETTINGS_FILES
    ]


def loaded_code(root: str | os.PathLike[str]) -> list[OwnEntry]:
    """Entries for every Python file this process loaded from beneath
    ``root`` (each ``sys.modules`` entry whose file, or package
    directory, resolves there): the file by any suffix (``name.py``,
    ``name.pyc``, an extension module), a directory of its name (a
    package there would be imported in its place), the ``__pycache__``
    beside it, and for a package its ``__init__`` and a module of its
    name beside it (which would win over a namespace package); the rest
    of a package's directory stays writable. These are the code the
    hook's next process runs."""
    real_root = os.path.realpath(os.fspath(root))
    resolved: dict[str, str] = {}  # each directory resolved once: modules share them

    def real(path: str) -> list[str]:
        """The directory and name ``path`` is spelt in, and the ones it resolves to."""
        directory, name = os.path.split(os.path.abspath(path))
        if directory not in resolved:
            resolved[directory] = os.path.realpath(directory)
        found = [os.path.join(resolved[directory], name)]
        if os.path.islink(path):
            found.append(os.path.realpath(path))
        return found

    # (directory, module name, whether a directory of that name would win)
    places: set[tuple[str, str, bool]] = set()
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        for file in {getattr(module, "__file__", None), getattr(spec, "origin", None)}:
            if isinstance(file, str) and os.path.isabs(file):
                for path in real(file):
                    directory, name = os.path.split(path)
                    places.add((directory, name.partition(".")[0], True))
        search = getattr(module, "__path__", None)  # a package: its directories
        for directory in list(search) if search is not None else []:
            if isinstance(directory, str) and os.path.isabs(directory):
                for path in real(directory):
                    places.add((path, "__init__", True))
                    places.add((*os.path.split(path), False))
    # Both sides are resolved absolute paths: a prefix test says what
    # ``relpath`` would, without its per-call normalising (a pytest process
    # has thousands of modules, and the hook asks on every event).
    beneath = real_root.rstrip(os.sep) + os.sep
    entries: list[OwnEntry] = []
    for directory, name, exact in sorted(places):
        if not name or not (directory == real_root or directory.startswith(beneath)):
            continue
        entries += [
            OwnEntry(directory, f"{name}.", prefix=True),
            OwnEntry(directory, "__pycache__"),
        ]
        if exact:
            entries.append(OwnEntry(directory, name))
    return entries


def module_names(directory: str | os.PathLike[str], names: Iterable[str]) -> list[OwnEntry]:
    """Entries for the top-level modules ``names`` in ``directory``, found
    there or not (a file written there later under such a name would be
    imported by the next process that looks for it): a file of the name
    by any suffix, a directory of the name unless one is there (a package
    found: ``loaded_code`` keeps its ``__init__``, the rest of it stays
    writable), and ``__pycache__``."""
    real = os.path.realpath(os.fspath(directory))
    entries = [OwnEntry(real, "__pycache__")] if names else []
    for name in dict.fromkeys(names):
        if name in sys.builtin_module_names or _imp.is_frozen(name):
            continue  # found before any directory is searched: no file stands in
        entries.append(OwnEntry(real, f"{name}.", prefix=True))
        if not os.path.isdir(os.path.join(real, name)):  # a package there: ``loaded_code``
            entries.append(OwnEntry(real, name))
    return entries


def _entry(path: str | os.PathLike[str], *, prefix: bool = False) -> OwnEntry:
    # The directory resolved (links followed), the name as given: the name
    # may be a link the hook would follow, so its target is kept too (below).
    absolute = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(absolute)
    real = os.path.realpath(absolute)
    if not prefix and os.path.basename(real) != name:  # the file itself is a link
        directory, name = os.path.split(real)
    return OwnEntry(os.path.realpath(directory), name, prefix)


class OwnFileRefused(ForbiddenPath):
    """A path naming one of the hook's own files (FORBIDDEN_PATH)."""


class GuardedWorkspace(Workspace):
    """A ``Workspace`` whose ``locate`` refuses the hook's ``own`` files
    (``OwnFileRefused``, a ``ForbiddenPath``): the policy of every call through a runtime built
    on it judges them forbidden. Everything else is ``Workspace``'s."""

    def __init__(self, root: str | os.PathLike[str], own: OwnFiles) -> None:
        super().__init__(root)
        self.own = own
        real_root = os.path.realpath(self.root)
        self._entries: list[tuple[str, OwnEntry]] = []
        """Each entry inside the root, with its directory relative to it."""
        for entry in own.entries:
            relative = _inside(real_root, entry.directory)
            if relative is not None:
                self._entries.append((relative.casefold(), entry))
        self._identities = _identities(own.existing())

    def locate(self, path: str, mode: AccessMode = "read") -> Location:
        """``Workspace.locate``, then ``ForbiddenPath`` when what ``path``
        resolves to is one of the hook's own files (see the module);
        ``PathOutsideWorkspace`` for a path beginning with ``~``."""
        if path.startswith("~"):
            raise PathOutsideWorkspace(
                f"path {show_path(path)} begins with '~', which a tool may read as a home "
                "directory: never judged as a path in the project",
                path,
            )
        try:
            location = super().locate(path, mode)
        except OSError:
            # Judged by its spelling, as the policy then judges it.
            if self.names_own(self.normalize(path), mode):
                raise self._refusal(path) from None
            raise
        if self.names_own(location.resolved, mode):
            location.close()
            raise self._refusal(path)
        return location

    def names_own(self, resolved: str, mode: AccessMode = "read") -> bool:
        """Whether the workspace path ``resolved`` (canonical, relative) is
        one of the hook's own files or beneath one; for a write, also a
        directory holding one."""
        folded = posixpath.normpath(resolved).casefold()
        parts = [] if folded == "." else folded.split("/")
        for end in range(1, len(parts) + 1):  # the entry itself, then each directory above it
            directory = "/".join(parts[: end - 1]) or "."
            if any(d == directory and e.matches(parts[end - 1]) for d, e in self._entries):
                return True
        if mode == "write":
            for directory, _ in self._entries:
                if folded == "." or directory == folded or directory.startswith(folded + "/"):
                    return True
        return self._same_file(resolved)

    def _same_file(self, resolved: str) -> bool:
        if not self._identities:
            return False
        try:
            status = os.lstat(os.path.join(self.root, resolved))
        except (OSError, ValueError):
            return False
        return (status.st_dev, status.st_ino) in self._identities

    @staticmethod
    def _refusal(path: str) -> OwnFileRefused:
        return OwnFileRefused(
            f"path {show_path(path)} is one of toolguard's own files (its configuration, "
            "audit log, cassette, code or Claude Code's settings that run it): no call it "
            "judges may use it",
            path,
        )


def _inside(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` (POSIX), or None when outside it."""
    relative = os.path.relpath(path, root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return relative.replace(os.sep, "/")


def _identities(paths: Iterable[str]) -> frozenset[tuple[int, int]]:
    """(device, inode) of each path that is an existing regular file."""
    found: set[tuple[int, int]] = set()
    for path in paths:
        try:
            status = os.stat(path)
        except (OSError, ValueError):
            continue
        if os.path.isfile(path):
            found.add((status.st_dev, status.st_ino))
    return frozenset(found)
