"""Tools that need the directory world: files reached through C code
(sqlite3), another process (git) or an absolute path. The plugin tests copy
this file into their pytester project as ``directory_tools.py``."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from typing import Any

from pytest_toolguard import Capabilities, Risk
from pytest_toolguard.registry import ToolRegistry, tool

GIT_DATE = "2024-05-01T12:00:00+00:00"
"""Every commit's date: a tool whose commits are the same on every run."""


def _count_after_insert(database: str, name: str) -> int:
    connection = sqlite3.connect(database)
    try:
        with connection:
            connection.execute("create table if not exists contacts (name text)")
            connection.execute("insert into contacts values (?)", (name,))
        count: int = connection.execute("select count(*) from contacts").fetchone()[0]
    finally:
        connection.close()
    return count


@tool(risk=Risk.WRITE, world="directory")
def add_contact(ctx: Any, name: str) -> dict[str, Any]:
    """Adds a contact to the CRM database in the workspace; returns how many there are."""
    return {"count": _count_after_insert(os.path.join(ctx.workspace.root, "crm.db"), name)}


@tool(risk=Risk.WRITE, world="directory")
def add_contact_beside(ctx: Any, name: str) -> dict[str, Any]:
    """The broken twin: keeps its database beside the workspace, outside it."""
    parent = os.path.dirname(ctx.workspace.root)
    return {"count": _count_after_insert(os.path.join(parent, "crm.db"), name)}


def _git(root: str, *arguments: str) -> str:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": root,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Agent",
        "GIT_AUTHOR_EMAIL": "agent@example.com",
        "GIT_COMMITTER_NAME": "Agent",
        "GIT_COMMITTER_EMAIL": "agent@example.com",
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
    }
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *arguments],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@tool(risk=Risk.WRITE, world="directory")
def git_commit_note(ctx: Any, name: str, text: str) -> dict[str, Any]:
    """Writes a note and commits it with git (a subprocess); returns git's answers."""
    root = ctx.workspace.root
    initialised = "" if os.path.isdir(os.path.join(root, ".git")) else _git(root, "init")
    with open(os.path.join(root, name), "w", encoding="utf-8") as handle:
        handle.write(text)
    _git(root, "add", name)
    committed = _git(root, "commit", "-m", f"add {name}")
    return {"init": initialised, "commit": committed, "status": _git(root, "status")}


@tool(world="directory")
def count_lines_at(ctx: Any, path: str) -> dict[str, Any]:
    """Counts the lines of a file named by its absolute path."""
    with open(path, encoding="utf-8") as handle:
        return {"path": path, "lines": sum(1 for _ in handle)}


@tool(risk=Risk.WRITE, world="directory")
def lock_up(ctx: Any) -> dict[str, Any]:
    """Leaves what is hard to remove: a read-only tree, a FIFO, a read-only file."""
    root = ctx.workspace.root
    inner = os.path.join(root, "locked", "inner")
    os.makedirs(inner)
    with open(os.path.join(inner, "kept.txt"), "w", encoding="utf-8") as handle:
        handle.write("kept\n")
    os.chmod(os.path.join(inner, "kept.txt"), 0o400)
    os.mkfifo(os.path.join(root, "locked", "pipe"))
    os.chmod(inner, 0o500)
    os.chmod(os.path.join(root, "locked"), 0o500)
    return {"locked": True}


REGISTRY = ToolRegistry([add_contact, add_contact_beside, git_commit_note, count_lines_at, lock_up])
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def registry() -> ToolRegistry:
    """The registry, for ``toolguard_registry = directory_tools:registry``."""
    return REGISTRY
