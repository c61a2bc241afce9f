"""Rollback never follows a symbolic link planted after the call.

A session with write roots ``("notes",)`` wrote ``notes/c.py``; another
process then swapped ``notes`` for a link to ``src``, and ``rollback``
answered OK and deleted ``src/c.py``, outside the write roots. Rollback now
walks each recorded path with the workspace's own descriptor-relative
resolution and follows no link at all (every directory of a recorded path
was a real one when the call wrote it), so a planted link is refused with
FORBIDDEN_PATH and nothing is destroyed, whatever it points to, for each
kind of change undone (a created file removed, an old content written
back, a deleted file recreated) and when the swap happens while the
rollback runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import delete_file

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall
from pytest_toolguard.registry import PathAccess, ToolRegistry, tool
from pytest_toolguard.tools import BUILTIN_TOOLS

NOTES_ONLY = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("notes",))
PRECIOUS = "precious, outside the write roots\n"


def registry() -> ToolRegistry:
    return ToolRegistry([*BUILTIN_TOOLS, delete_file])


def call(kind: str, path: str) -> ToolCall:
    if kind == "delete":
        return ToolCall("A", "delete_file", {"path": path})
    return ToolCall("A", "write_file", {"path": path, "content": "written by A\n"})


# What call A did to its file (the rollback then removes it, writes the old
# content back, or recreates it).
KINDS = ["create", "modify", "delete"]


def make_world(root: Path, tmp: Path, kind: str, depth: str) -> tuple[str, list[Path]]:
    """The workspace before call A: ``notes/<depth>c.py`` (unless A creates
    it), and a ``c.py`` of its own at the same place in ``src`` and outside
    the workspace. Returns A's path and the files that must never change."""
    (root / "notes" / depth).mkdir(parents=True)
    guarded = []
    for base in (root / "src", tmp / "outside"):
        (base / depth).mkdir(parents=True, exist_ok=True)
        (base / depth / "c.py").write_text(PRECIOUS)
        guarded.append(base / depth / "c.py")
    if kind != "create":
        (root / "notes" / depth / "c.py").write_text("before A\n")
    return f"notes/{depth}c.py", guarded


def swap_dir(root: Path, name: str, target: str) -> None:
    """Another process renames the directory away and leaves a link in its place."""
    os.rename(root / name, root / f"{name}.old")
    os.symlink(target, root / name)


def swap_file(root: Path, path: str, target: str) -> None:
    """The file A left (if any) moved away, a link in its place."""
    if (root / path).exists():
        os.rename(root / path, root / f"{path}.old")
    os.symlink(target, root / path)


# (id, depth of A's file below notes/, the swap made after the call)
SWAPS: list[tuple[str, str, Callable[[Path, Path, str], None]]] = [
    ("parent-to-src", "", lambda root, tmp, path: swap_dir(root, "notes", "src")),
    ("parent-to-src-dotdot", "", lambda root, tmp, path: swap_dir(root, "notes", "./x/../src")),
    (
        "parent-outside-relative",
        "",
        lambda root, tmp, path: swap_dir(root, "notes", "../outside"),
    ),
    (
        "parent-outside-absolute",
        "",
        lambda root, tmp, path: swap_dir(root, "notes", str(tmp / "outside")),
    ),
    ("parent-to-root-of-host", "", lambda root, tmp, path: swap_dir(root, "notes", "/")),
    ("parent-to-itself", "", lambda root, tmp, path: swap_dir(root, "notes", "notes.old")),
    ("deeper-ancestor", "deep/", lambda root, tmp, path: swap_dir(root, "notes", "src")),
    (
        "deepest-directory",
        "deep/",
        lambda root, tmp, path: swap_dir(root, "notes/deep", "../src/deep"),
    ),
    ("file-to-src", "", lambda root, tmp, path: swap_file(root, path, "../src/c.py")),
    (
        "file-outside-absolute",
        "",
        lambda root, tmp, path: swap_file(root, path, str(tmp / "outside" / "c.py")),
    ),
    ("file-dangling", "", lambda root, tmp, path: swap_file(root, path, "nowhere.py")),
]


def snapshot(paths: list[Path]) -> dict[Path, str]:
    return {path: path.read_text() for path in paths}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("swap_id", "depth", "swap"), SWAPS, ids=[s[0] for s in SWAPS])
def test_a_link_planted_after_the_call_is_refused_and_nothing_is_destroyed(
    toolguard_runtime, workspace_dir: Path, tmp_path: Path, kind: str, swap_id: str, depth, swap
) -> None:
    path, guarded = make_world(workspace_dir, tmp_path, kind, depth)
    runtime = toolguard_runtime(registry(), NOTES_ONLY)
    assert runtime.execute(call(kind, path)).ok
    swap(workspace_dir, tmp_path, path)
    before = snapshot(guarded)
    links = {p: os.readlink(p) for p in workspace_dir.rglob("*") if p.is_symlink()}

    result = runtime.rollback("A")

    assert result.code is ErrorCode.FORBIDDEN_PATH, result.message
    assert snapshot(guarded) == before
    assert {p: os.readlink(p) for p in workspace_dir.rglob("*") if p.is_symlink()} == links
    row = runtime.audit.get("rollback-A")
    assert row is not None and row.result_code is ErrorCode.FORBIDDEN_PATH


@pytest.mark.parametrize("kind", KINDS)
def test_once_the_link_is_gone_the_same_rollback_goes_through(
    toolguard_runtime, workspace_dir: Path, tmp_path: Path, kind: str
) -> None:
    """A refusal forgets nothing: the call can be rolled back once the
    directory is back."""
    path, guarded = make_world(workspace_dir, tmp_path, kind, "")
    runtime = toolguard_runtime(registry(), NOTES_ONLY)
    assert runtime.execute(call(kind, path)).ok
    swap_dir(workspace_dir, "notes", "src")
    assert runtime.rollback("A").code is ErrorCode.FORBIDDEN_PATH
    os.unlink(workspace_dir / "notes")
    os.rename(workspace_dir / "notes.old", workspace_dir / "notes")

    assert runtime.rollback("A").ok
    restored = workspace_dir / path
    if kind == "create":
        assert not restored.exists()
    else:
        assert restored.read_text() == "before A\n"
    assert all(p.read_text() == PRECIOUS for p in guarded)


def test_a_path_the_call_wrote_outside_the_write_roots_is_not_rolled_back(
    toolguard_runtime, workspace_dir: Path
) -> None:
    """The journal holds what a handler wrote wherever it wrote it; the
    rollback acts inside the session's write roots only."""

    @tool(input_schema={"type": "object"}, risk=Risk.WRITE, paths=[PathAccess.write("notes/a")])
    def strays(ctx: Any) -> dict[str, Any]:
        ctx.workspace.write_text("notes/a", "in the roots\n")
        ctx.workspace.write_text("src/c.py", "undeclared, outside the roots\n")
        return {}

    (workspace_dir / "src").mkdir()
    (workspace_dir / "src" / "c.py").write_text(PRECIOUS)
    runtime = toolguard_runtime(ToolRegistry([strays]), NOTES_ONLY)
    assert runtime.execute(ToolCall("A", "strays", {})).ok

    result = runtime.rollback("A")

    assert result.code is ErrorCode.PERMISSION_DENIED
    assert (workspace_dir / "notes" / "a").read_text() == "in the roots\n"  # all or nothing
    assert (workspace_dir / "src" / "c.py").read_text() == "undeclared, outside the roots\n"


# --- the swap made while the rollback runs -----------------------------------------------


class Seam:
    """Runs ``swap`` once, at a chosen point of the rollback: after the
    check of every path (between check and act), or inside the act, just
    after the directory named ``when_opened`` was opened from its parent's
    descriptor (between two resolution steps). No timing involved."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, workspace: Any, swap: Callable[[], None]):
        self.swap = swap
        self.done = False
        self.acting = False
        self._monkeypatch = monkeypatch
        undo = workspace.undo

        def watched_undo(*args: Any, check_only: bool = False, **kwargs: Any) -> bool:
            self.acting = not check_only
            return bool(undo(*args, check_only=check_only, **kwargs))

        monkeypatch.setattr(workspace, "undo", watched_undo)

    def before_acting(self, workspace: Any) -> None:
        undo = workspace.undo

        def swap_first(*args: Any, check_only: bool = False, **kwargs: Any) -> bool:
            if not check_only and not self.done:
                self.done = True
                self.swap()
            return bool(undo(*args, check_only=check_only, **kwargs))

        self._monkeypatch.setattr(workspace, "undo", swap_first)

    def after_opening(self, when_opened: str) -> None:
        real_open = os.open

        def open_then_swap(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            fd = real_open(name, flags, *args, **kwargs)
            if (
                self.acting
                and not self.done
                and name == when_opened
                and flags & os.O_DIRECTORY
                and kwargs.get("dir_fd") is not None
            ):
                self.done = True
                self.swap()
            return fd

        self._monkeypatch.setattr(os, "open", open_then_swap)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", ["src", "../outside", "/"])
def test_a_link_swapped_in_between_the_check_and_the_act_is_refused(
    toolguard_runtime, workspace_dir: Path, tmp_path: Path, monkeypatch, kind: str, target: str
) -> None:
    path, guarded = make_world(workspace_dir, tmp_path, kind, "")
    runtime = toolguard_runtime(registry(), NOTES_ONLY)
    assert runtime.execute(call(kind, path)).ok
    after_a = (workspace_dir / path).read_text() if kind != "delete" else None
    seam = Seam(monkeypatch, runtime.workspace, lambda: swap_dir(workspace_dir, "notes", target))
    seam.before_acting(runtime.workspace)

    result = runtime.rollback("A")

    assert seam.done
    assert result.code is ErrorCode.FORBIDDEN_PATH, result.message
    assert all(p.read_text() == PRECIOUS for p in guarded)
    moved = workspace_dir / "notes.old" / "c.py"  # A's file, in its directory moved away
    assert (moved.read_text() if moved.exists() else None) == after_a


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", ["", "deep/"])
def test_a_link_swapped_in_between_two_resolution_steps_never_redirects_the_act(
    toolguard_runtime, workspace_dir: Path, tmp_path: Path, monkeypatch, kind: str, depth: str
) -> None:
    """The directory was opened before the swap: the act lands in that very
    directory (A's own, now moved away) or is refused; never in ``src``."""
    path, guarded = make_world(workspace_dir, tmp_path, kind, depth)
    runtime = toolguard_runtime(registry(), NOTES_ONLY)
    assert runtime.execute(call(kind, path)).ok
    seam = Seam(monkeypatch, runtime.workspace, lambda: swap_dir(workspace_dir, "notes", "src"))
    seam.after_opening("notes")

    result = runtime.rollback("A")

    assert seam.done
    assert result.code in (ErrorCode.OK, ErrorCode.FORBIDDEN_PATH), result.message
    assert all(p.read_text() == PRECIOUS for p in guarded)
    assert not (workspace_dir / "src" / depth / "c.py.old").exists()
    if result.ok:  # undone in the directory A wrote to
        moved = workspace_dir / "notes.old" / depth / "c.py"
        assert (moved.read_text() if moved.exists() else None) == (
            None if kind == "create" else "before A\n"
        )
