"""The fuzz workspace: the files every fuzzed call starts from, the decoys
outside it, and the path probes tried in path-like arguments.

The workspace root is ``WORKSPACE_ROOT`` holding ``WORKSPACE_FILES`` and
``WORKSPACE_SYMLINKS`` (one leads out); ``FUZZ_DECOYS`` are files outside,
each holding ``harness.world.DECOY_MARKER``. Every example runs in a fresh
``harness.world.FakeWorld`` of ``FUZZ_WORKSPACE`` (or of the starting workspace
given, ``starting_workspace``) with the decoys planted.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import replace

from ..harness.world import DECOY_MARKER, Decoys, where_checks_go_wrong
from ..replay.cassette import WorkspaceState

FUZZ_ROOT = "/toolguard-fuzz"
WORKSPACE_ROOT = f"{FUZZ_ROOT}/workspace"
"""The workspace root in the fake filesystem."""
RUN_ID = "fuzz-run"
"""The ``run_id`` runtime variable, unless ``variables`` gives another."""

WORKSPACE_FILES: Mapping[str, bytes] = {
    "notes.txt": b"first line\nsecond line mentions fuzz\n",
    "data.csv": b"name,score\nada,3\nlin,5\n",
    "sub/nested.txt": b"nested file\n",
    "sub/deeper/leaf.md": b"# leaf\n",
    "sub/blob.bin": b"\x00\xff\xfe binary",
    f"runs/{RUN_ID}/input.csv": b"id,text\n1,hello\n",
    f"runs/{RUN_ID}/artifacts/summary.md": b"# summary\n",
}
"""Files of the fuzz workspace, by path relative to its root."""
WORKSPACE_SYMLINKS: Mapping[str, str] = {"link-out": f"{FUZZ_ROOT}/outside"}
"""Symlinks in the workspace (relative path -> target); this one leads out."""
OUTSIDE_FILES: Mapping[str, bytes] = {
    f"{FUZZ_ROOT}/outside/secret.txt": f"{DECOY_MARKER}: outside, must never change\n".encode(),
    f"{FUZZ_ROOT}/workspace2/keep.txt": f"{DECOY_MARKER}: shares the root's prefix\n".encode(),
    "/etc/passwd": f"root:x:0:0:{DECOY_MARKER}:/root:/bin/sh\n".encode(),
}
"""Decoys outside the workspace; the "outside changed" check covers every
other path of the fake filesystem too."""

FUZZ_DECOYS = Decoys({**where_checks_go_wrong(WORKSPACE_ROOT).files, **OUTSIDE_FILES})
"""``OUTSIDE_FILES`` and ``harness.world.where_checks_go_wrong``'s decoys
(``<root>-old/``, ``$HOME``'s dotfiles, ``/tmp``), as the world plants
them; every example's workspace gets the forbidden ``.env`` files too
(``FakeWorld.plant_forbidden``)."""

FUZZ_WORKSPACE = WorkspaceState(
    root=WORKSPACE_ROOT, files=WORKSPACE_FILES, symlinks=WORKSPACE_SYMLINKS
)
"""The state every fuzzed call starts from (the decoys are planted after)."""


def starting_workspace(workspace: WorkspaceState | None = None) -> WorkspaceState:
    """The workspace every example starts from: ``FUZZ_WORKSPACE`` by
    default; else ``workspace`` moved to ``WORKSPACE_ROOT`` (so the path
    probes and decoys keep their places), a link target under its old root
    moved with it, plus the link leading out (``WORKSPACE_SYMLINKS``) where
    it names no path of its own. Its ``outside_files`` and ``aliases`` are
    dropped: what is outside is the fuzz workspace's decoys."""
    if workspace is None:
        return FUZZ_WORKSPACE
    old = posixpath.normpath(workspace.root)

    def moved(target: str) -> str:
        if target == old or target.startswith(old + "/"):
            return WORKSPACE_ROOT + target[len(old) :]
        return target

    taken = {*workspace.files, *workspace.symlinks, *workspace.directories}
    symlinks = {path: moved(target) for path, target in workspace.symlinks.items()}
    for path, target in WORKSPACE_SYMLINKS.items():
        if path not in taken:
            symlinks[path] = target
    return replace(workspace, root=WORKSPACE_ROOT, symlinks=symlinks, outside_files={}, aliases=())


PATH_PROBES: tuple[str, ...] = (
    "notes.txt",
    ".",
    "sub",
    "sub/nested.txt",
    "data.csv",
    "sub/blob.bin",
    "new.txt",
    "sub/new/deep.txt",
    "../escape.txt",
    "../outside/secret.txt",
    f"{FUZZ_ROOT}/outside/secret.txt",
    f"{FUZZ_ROOT}/escape.txt",
    "../workspace2/keep.txt",
    "sub/../../escape.txt",
    "link-out/secret.txt",
    "link-out/new.txt",
    "..\\escape.txt",
    "../../../../etc/passwd",
    "/etc/passwd",
    "../workspace-old/keep.txt",
    "~/.ssh/id_rsa",
    "$HOME/.aws/credentials",
    "/tmp/toolguard-decoy.txt",
    ".env",
    "sub/.env",
    ".ENV",
    "sub/.Env",
)
"""Strings tried in path-like arguments: workspace files first, then
escapes (shrinking prefers earlier probes, so a failure names the simplest)."""

EXISTING_FILE = "notes.txt"
"""What the other path arguments hold while one is probed: a file that
exists, so the handler gets as far as the probed argument."""

SECRET_VALUE = "plain-Hunter2-fuzz-9b4d"
"""What arguments named like a secret hold in the explicit examples: a
value of no recognisable shape, looked for in the result and the audit row."""
