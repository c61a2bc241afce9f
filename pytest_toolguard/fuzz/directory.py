"""The fuzz workspace on the real disk, for tools that run in the directory world.

A tool declaring ``world="directory"`` (or fuzzed with ``world="directory"``)
reaches files through C libraries or other processes, which pyfakefs never
sees; it is fuzzed in a ``harness.DirectoryWorld`` of ``FUZZ_WORKSPACE`` (or
the starting workspace given, as ``fuzz.workspace.starting_workspace`` places it)
instead, a fresh one per example (``FuzzDirectory``), inside a container
that stands for the machine's root::

    <tmp>/toolguard-fuzz-XXXXXXXX/             the container (mkdtemp: 0700)
        up/up/.../up/                          LEVELS_ABOVE levels: "/" of the fuzz workspace
            etc/passwd, tmp/toolguard-decoy.txt   the fake world's decoys there
            toolguard-world-XXXXXXXX/          the DirectoryWorld: FUZZ_ROOT
                workspace/                     WORKSPACE_ROOT
                outside/secret.txt, workspace2/keep.txt, workspace-old/keep.txt, ...

Every string of a call's arguments is spelt for this world before the call:
a path under ``FUZZ_ROOT`` names the same place under the world's own
directory, any other absolute path the same place under the container's
"/". A relative path climbing out of the workspace (``../../../../etc/passwd``)
lands in the ``up`` levels, still inside the container. An argument that
would still land outside the container, read as a path from the workspace
(after ``~`` and ``$VAR`` expansion: ``~/.ssh/id_rsa``), is never given to
the tool: the example is not run (``outside_container``), since a tool on
the real disk would really reach it.

A relative path resolves from the workspace root, which is the process's
working directory while the world runs (``DirectoryWorld``), for the
handler, the C code it calls and the processes it starts alike.

What is judged is the real tree: ``outside()`` is every entry of the
container but the workspace (so a write beside the workspace, through a
link, or above the world is seen), ``tree()`` the workspace's files.
Accesses are the world's own (``DirectoryWorld.accesses``; None: not
observed). The container is removed after each example, as the world is.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from ..harness.directory_world import DirectoryWorld, remove_world
from ..harness.escapes import Escape
from ..harness.probes import OutsideSnapshot
from ..harness.world import Decoys, running
from ..harness.world_parent import world_parent
from ..replay.cassette import WorkspaceState
from ..replay.root_map import RootMap
from .workspace import FUZZ_ROOT, FUZZ_WORKSPACE

CONTAINER_PREFIX = "toolguard-fuzz-"
"""The name of every fuzz container begins with this."""

LEVELS_ABOVE = 8
"""Directories between the container and the fuzz workspace's "/": a relative
path climbing up to this far above the world's "/" still lands inside the
container (``PATH_PROBES`` climb four)."""


class FuzzDirectory:
    """One example's fuzz workspace on the real disk (see the module docstring).
    Has what ``fuzz.call.CallChecker`` asks of ``harness.world.FakeWorld``."""

    def __init__(
        self,
        parent: str | None = None,
        real_paths: Sequence[str] | None = None,
        workspace: WorkspaceState = FUZZ_WORKSPACE,
    ) -> None:
        self._parent = parent
        self._workspace = workspace
        self._real_paths = real_paths
        self._stack = ExitStack()
        self._top: str | None = None
        self._slash: str | None = None
        self._world: DirectoryWorld | None = None
        self._map: RootMap | None = None

    def __enter__(self) -> FuzzDirectory:
        with ExitStack() as stack:
            # Absolute: the world's block moves the working directory into it.
            parent = self._parent or world_parent()
            top = os.path.abspath(tempfile.mkdtemp(prefix=CONTAINER_PREFIX, dir=parent))
            stack.callback(remove_world, top)
            slash = os.path.join(top, *(["up"] * LEVELS_ABOVE))
            os.makedirs(slash)
            world = stack.enter_context(
                DirectoryWorld(self._workspace, parent=slash, real_paths=self._real_paths)
            )
            self._top, self._slash, self._world = top, slash, world
            self._map = RootMap(FUZZ_ROOT, world.around)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._stack.close()
        finally:
            self._top = self._slash = None
            self._world = None
            self._map = None

    @property
    def world(self) -> DirectoryWorld:
        return running(self._world, "the fuzz directory")

    @property
    def top(self) -> str:
        """The container: nothing the world makes is outside it."""
        return running(self._top, "the fuzz directory")

    @property
    def root(self) -> str:
        """The workspace root of this example."""
        return self.world.root

    @property
    def accesses(self) -> Any:
        """The world's oracle of accesses; None: not observed."""
        return self.world.accesses

    def escapes(self) -> Sequence[Escape]:
        """What the tool wrote into the real read-only data
        (``DirectoryWorld.escapes``): nothing else is refused on the real disk."""
        return self.world.escapes()

    def spelt(self, value: Any) -> Any:
        """``value`` (JSON) with every path of the fake fuzz workspace spelt as
        this one's: under ``FUZZ_ROOT``, under the world's directory; any
        other absolute path, under the container's "/"."""
        if isinstance(value, str):
            return self._path(value)
        if isinstance(value, list):
            return [self.spelt(item) for item in value]
        if isinstance(value, dict):
            return {key: self.spelt(item) for key, item in value.items()}
        return value

    def _path(self, text: str) -> str:
        assert self._map is not None and self._slash is not None
        mapped: str = self._map.to_world(text)
        if mapped != text or not text.startswith("/"):
            return mapped
        return self._slash + text

    def outside_container(self, value: Any) -> str | None:
        """The first string of ``value`` (JSON, as ``spelt`` gives it) that,
        read as a path from the workspace root after ``~`` and ``$VAR``
        expansion, lands outside the container; None when none does."""
        if isinstance(value, str):
            expanded = os.path.expandvars(os.path.expanduser(value))
            landed = posixpath.normpath(posixpath.join(self.root, expanded))
            if landed != self.top and not landed.startswith(self.top + "/"):
                return value
            return None
        items: list[Any] = []
        if isinstance(value, list):
            items = value
        elif isinstance(value, dict):
            items = [*value.keys(), *value.values()]
        for item in items:
            found = self.outside_container(item)
            if found is not None:
                return found
        return None

    def plant(self, decoys: Decoys) -> tuple[str, ...]:
        """``decoys`` (spelt as the fake fuzz workspace spells them) planted at
        their place in this one (``$HOME``'s under the container's "/");
        returns those that cannot be (none, unless spelt outside it)."""
        spelt = Decoys({self._path(path): content for path, content in decoys.files.items()})
        beside = {p: c for p, c in spelt.files.items() if p.startswith(self.world.around + "/")}
        skipped = list(self.world.plant(Decoys(beside)))
        for path, content in spelt.files.items():
            if path in beside:
                continue
            if not path.startswith(self.top + "/"):
                skipped.append(path)
                continue
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            with open(path, "xb") as handle:
                handle.write(content)
        return tuple(skipped)

    def plant_forbidden(self) -> tuple[str, ...]:
        return self.world.plant_forbidden()

    def resolve_inside(self, relative: str) -> str | None:
        return self.world.resolve_inside(relative)

    def tree(self) -> dict[str, bytes]:
        return self.world.tree()

    def outside(self) -> OutsideSnapshot:
        """Every entry of the container outside the workspace, shaped as
        ``DirectoryWorld.outside`` shapes them."""
        entries: OutsideSnapshot = dict(self.world.outside())
        around, root = self.world.around, self.root
        pending = [self.top]
        while pending:
            directory = pending.pop()
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            for name in names:
                path = posixpath.join(directory, name)
                if path in (around, root):
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
        entries[around] = ("directory", os.lstat(around).st_mode)
        return entries

    def recorded(self, path: str) -> str:
        """A path of this world as the fake fuzz workspace spells it."""
        if self._slash is not None and path.startswith(self._slash + "/"):
            return path[len(self._slash) :]
        return self.world.recorded_path(path)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None
