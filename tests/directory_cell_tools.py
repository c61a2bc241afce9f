"""Tools for fault cells in the directory world: correct ones that reach
files through C code (sqlite3) or another process (a python child), and
twins each with one planted bug a cell must catch."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from typing import Any

from pytest_toolguard import Capabilities, Risk
from pytest_toolguard.registry import PathAccess, ToolRegistry, tool

NAME = {"type": "string", "minLength": 1, "maxLength": 80}
PATH = {"type": "string", "minLength": 1, "maxLength": 300}

SORT = "import sys; sys.stdout.write(''.join(sorted(sys.stdin.read().splitlines(True))))"
"""What the child process runs: the lines of its input, sorted."""

WRITE_SORTED = (
    "import sys; data = open(sys.argv[1]).read(); "
    "open(sys.argv[2], 'w').write(''.join(sorted(data.splitlines(True))))"
)
"""What the twin's child runs: it reads and writes the files itself."""


DATABASE_DIRECTORY = "db"


@tool(
    input_schema={
        "type": "object",
        "properties": {"name": NAME},
        "required": ["name"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write(DATABASE_DIRECTORY)],
    world="directory",
    acts_on_repeat=True,  # each call adds a row: a repeat adds another, as meant
)
def add_contact(ctx: Any, name: str) -> dict[str, Any]:
    """Adds a contact to the workspace's SQLite database (``db/crm.db``);
    returns how many there are. The database's directory is opened once,
    never through a link, and SQLite reaches it through that descriptor:
    a link swapped in afterwards leads nowhere. The database is the
    workspace's (``make_database``): a call never creates it."""
    if ctx.cancelled.is_set():  # answered TIMEOUT already: change nothing
        raise TimeoutError("cancelled before it started")
    directory = os.open(
        os.path.join(ctx.workspace.root, DATABASE_DIRECTORY),
        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
    )
    try:
        connection = sqlite3.connect(f"file:/proc/self/fd/{directory}/crm.db?mode=rw", uri=True)
        try:
            connection.execute("insert into contacts values (?)", (name,))
            if ctx.cancelled.is_set():  # answered TIMEOUT already: change nothing
                connection.rollback()
                raise TimeoutError("cancelled")
            connection.commit()
            count: int = connection.execute("select count(*) from contacts").fetchone()[0]
        finally:
            connection.close()
    finally:
        os.close(directory)
    return {"count": count}


def make_database(workspace: str) -> None:
    """The workspace's empty CRM database, as a deployment would hold it."""
    os.makedirs(os.path.join(workspace, DATABASE_DIRECTORY), exist_ok=True)
    connection = sqlite3.connect(os.path.join(workspace, DATABASE_DIRECTORY, "crm.db"))
    with connection:
        connection.execute("create table contacts (name text)")
    connection.close()


def _sorted_by_child(text: str) -> str:
    done = subprocess.run(
        [sys.executable, "-I", "-c", SORT],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}")],
    world="directory",
)
def sort_lines(ctx: Any, path: str) -> dict[str, Any]:
    """Sorts a text file's lines with a child process; the file is read and
    written through the workspace."""
    text = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    ordered = _sorted_by_child(text)
    ctx.workspace.write_text(path, ordered)
    return {"path": path, "lines": ordered.count("\n")}


GIT_DATE = "2024-05-01T12:00:00+00:00"


def _git(ctx: Any, git_dir: int, *arguments: str) -> str:
    """``git`` on the workspace, its repository reached through the
    descriptor ``git_dir`` (opened never through a link), with fixed names
    and dates: a commit is the same on every run."""
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": ctx.workspace.root,
        "GIT_DIR": f"/proc/self/fd/{git_dir}",
        "GIT_WORK_TREE": ctx.workspace.root,
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
        ["git", *arguments],
        cwd=ctx.workspace.root,
        env=environment,
        pass_fds=(git_dir,),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {arguments[0]} failed: {done.stderr.strip()[:200]}")
    return done.stdout


@tool(
    input_schema={
        "type": "object",
        "properties": {"name": PATH, "text": NAME},
        "required": ["name", "text"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{name}"), PathAccess.write(".git")],
    world="directory",
)
def commit_note(ctx: Any, name: str, text: str) -> dict[str, Any]:
    """Writes a note through the workspace and commits it with ``git`` (a
    child process) in the workspace's existing repository."""
    return _commit(ctx, name, text, clean_up=True)


def _commit(ctx: Any, name: str, text: str, *, clean_up: bool) -> dict[str, Any]:
    if ctx.cancelled.is_set():
        raise TimeoutError("cancelled before it started")
    git_dir = os.open(
        os.path.join(ctx.workspace.root, ".git"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    )
    try:
        ctx.workspace.write_text(name, text)
        _git(ctx, git_dir, "add", "--", name)
        committed = _git(ctx, git_dir, "commit", "-q", "-m", f"add {name}")
    except BaseException:
        if clean_up:  # git leaves them when a write fails (a full disk)
            _remove_git_temporaries(git_dir)
        raise
    finally:
        os.close(git_dir)
    return {"committed": committed}


def _remove_git_temporaries(git_dir: int) -> None:
    """The temporary objects and lock files a failed git command left."""
    top = f"/proc/self/fd/{git_dir}"
    for directory, _subdirs, names in os.walk(top):
        for name in names:
            if name.startswith("tmp_obj_") or name.endswith(".lock"):
                os.unlink(os.path.join(directory, name))


def make_repository(workspace: str) -> None:
    """The workspace's git repository, with one commit."""
    for arguments in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "first"]):
        subprocess.run(
            ["git", *arguments],
            cwd=workspace,
            env={
                **os.environ,
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_AUTHOR_NAME": "A",
                "GIT_AUTHOR_EMAIL": "a@example.com",
                "GIT_COMMITTER_NAME": "A",
                "GIT_COMMITTER_EMAIL": "a@example.com",
                "GIT_AUTHOR_DATE": GIT_DATE,
                "GIT_COMMITTER_DATE": GIT_DATE,
            },
            check=True,
            capture_output=True,
        )


@tool(
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    risk=Risk.WRITE,
    paths=[PathAccess.write("where.txt")],
    world="directory",
)
def remember_root(ctx: Any) -> dict[str, Any]:
    """Writes the absolute path of the notes into ``where.txt``."""
    ctx.workspace.write_text("where.txt", os.path.join(ctx.workspace.root, "notes", "list.txt"))
    return {"remembered": True}


@tool(
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    paths=[PathAccess.read("where.txt")],
    world="directory",
)
def count_remembered(ctx: Any) -> dict[str, Any]:
    """Counts the lines of the file ``where.txt`` names (inside the workspace only)."""
    root = os.path.realpath(ctx.workspace.root)
    path = os.path.realpath(ctx.workspace.read_text("where.txt"))
    if not path.startswith(root + os.sep):
        raise PermissionError(f"{path} is outside the workspace")
    with open(path, encoding="utf-8") as handle:
        return {"lines": sum(1 for _ in handle)}


# -- twins, one planted bug each ------------------------------------------------------


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}")],
    world="directory",
)
def read_note_following_links(ctx: Any, path: str) -> dict[str, Any]:
    """The twin that follows a link: opens the joined path itself, after the policy's check."""
    with open(os.path.join(ctx.workspace.root, path), encoding="utf-8") as handle:
        return {"text": handle.read()}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    world="directory",
)
def read_note_prefix_checked(ctx: Any, path: str) -> dict[str, Any]:
    """The twin with a sibling-prefix check: ``startswith(root)`` with no separator."""
    root = ctx.workspace.root
    full = os.path.abspath(os.path.join(root, path))
    if not full.startswith(root):
        raise PermissionError(f"{path} is outside the workspace")
    with open(full, encoding="utf-8") as handle:
        return {"text": handle.read()}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}"), PathAccess.write("{path}.part")],
    world="directory",
)
def sort_lines_leaving_temporary(ctx: Any, path: str) -> dict[str, Any]:
    """The twin that leaves its temporary file when the child fails: the
    child writes ``<path>.part``, renamed over the file afterwards."""
    full = os.path.join(ctx.workspace.root, path)
    part = full + ".part"
    subprocess.run([sys.executable, "-I", "-c", WRITE_SORTED, full, part], check=True, timeout=30)
    os.replace(part, full)
    return {"path": path}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "text": NAME},
        "required": ["path", "text"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}")],
    world="directory",
)
def append_checked_then_opened(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """The twin with a check-then-open race: the path resolved and checked,
    then opened again by name."""
    root = os.path.realpath(ctx.workspace.root)
    full = os.path.join(ctx.workspace.root, path)
    if not os.path.realpath(full).startswith(root + os.sep):
        raise PermissionError(f"{path} is outside the workspace")
    with open(full, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return {"path": path}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "text": NAME},
        "required": ["path", "text"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}")],
    world="directory",
)
def append_in_a_thread(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """The check-then-open twin, its work done on a thread it starts."""
    failures: list[BaseException] = []

    def work() -> None:
        try:
            append_checked_then_opened.handler(ctx, path=path, text=text)
        except BaseException as exc:  # handed back to the handler's thread
            failures.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    if failures:
        raise failures[0]
    return {"path": path}


@tool(
    input_schema={
        "type": "object",
        "properties": {"name": NAME},
        "required": ["name"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write(DATABASE_DIRECTORY)],
    world="directory",
)
def add_contact_past_deadline(ctx: Any, name: str) -> dict[str, Any]:
    """The twin that never looks at its deadline: it commits after the call was answered TIMEOUT."""
    connection = sqlite3.connect(os.path.join(ctx.workspace.root, DATABASE_DIRECTORY, "crm.db"))
    try:
        with connection:
            connection.execute("insert into contacts values (?)", (name,))
    finally:
        connection.close()
    return {"added": name}


@tool(
    input_schema={
        "type": "object",
        "properties": {"name": NAME},
        "required": ["name"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write(DATABASE_DIRECTORY)],
    world="directory",
)
def add_contact_beside(ctx: Any, name: str) -> dict[str, Any]:
    """The twin that keeps a copy of its database beside the workspace, outside it."""
    beside = os.path.join(os.path.dirname(ctx.workspace.root), "crm-copy.db")
    connection = sqlite3.connect(beside)
    try:
        with connection:
            connection.execute("create table if not exists contacts (name text)")
            connection.execute("insert into contacts values (?)", (name,))
    finally:
        connection.close()
    return {"added": name}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    world="directory",
)
def count_lines_at(ctx: Any, path: str) -> dict[str, Any]:
    """Counts the lines of a file of the workspace named by its absolute path:
    each component opened beneath its parent's descriptor, links refused
    (a link swapped in after a realpath check would be followed)."""
    root = ctx.workspace.root
    *parents, name = os.path.relpath(os.path.normpath(path), root).split(os.sep)
    if ".." in parents or name in ("..", "."):
        raise PermissionError(f"{path} is outside the workspace")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for part in parents:
        try:
            fd_below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = fd_below
    try:
        file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, encoding="utf-8") as handle:
        return {"path": path, "lines": sum(1 for _ in handle)}


@tool(
    input_schema={
        "type": "object",
        "properties": {"name": PATH, "text": NAME},
        "required": ["name", "text"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{name}"), PathAccess.write(".git")],
    world="directory",
)
def commit_note_leaving_temporaries(ctx: Any, name: str, text: str) -> dict[str, Any]:
    """The twin that leaves what a failed git command left: its temporary objects."""
    return _commit(ctx, name, text, clean_up=False)


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "max_lines": {"type": "integer", "minimum": 1}},
        "required": ["path", "max_lines"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}")],
    world="directory",
)
def head_ignoring_its_limit(ctx: Any, path: str, max_lines: int) -> dict[str, Any]:
    """The twin that ignores its limit: every line of the file, whatever ``max_lines`` says."""
    return {"lines": ctx.workspace.read_text(path).splitlines()}


CORRECT = ToolRegistry(
    [add_contact, sort_lines, count_lines_at, commit_note, remember_root, count_remembered]
)
TWINS = ToolRegistry(
    [
        read_note_following_links,
        read_note_prefix_checked,
        sort_lines_leaving_temporary,
        append_checked_then_opened,
        append_in_a_thread,
        add_contact_past_deadline,
        add_contact_beside,
        head_ignoring_its_limit,
        commit_note_leaving_temporaries,
    ]
)
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def registry() -> ToolRegistry:
    """The correct tools, for ``toolguard_registry = directory_cell_tools:registry``."""
    return CORRECT
