"""Real tools, as agents' tools are written: a SQLite database, ``git`` run
as a subprocess, a tool that takes absolute paths, and two MCP servers from
the package index wrapped in process (mcp-server-time, mcp-server-git).
Each tool that reaches its files past Python's own ``open`` declares
``world="directory"``. The plugin tests copy this file into their pytester
project as ``real_tools.py``; ``registry()`` is its ``toolguard_registry``.

Nothing here knows the harness: the tools and servers are the user's, and
the twins below each carry one bug an oracle must catch.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pytest_toolguard import Capabilities, PathAccess, Risk
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool

GIT_DATE = "2024-05-01T12:00:00+00:00"
GIT_ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.com",
    "GIT_AUTHOR_DATE": GIT_DATE,
    "GIT_COMMITTER_DATE": GIT_DATE,
}
"""What makes a commit the same on every run, for git and GitPython alike
(both read these variables): the tests set them in ``os.environ``."""

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
"""The session's capabilities: read and write, anywhere in the workspace."""
NOTES_CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("notes",))
"""Read anywhere, write under ``notes/`` only."""


# -- a SQLite tool -----------------------------------------------------------------------

DATABASE = "crm.db"
"""The CRM database, at the workspace's top: what ``crm_add`` declares it writes."""


def _late(ctx: Any) -> None:
    """Raise when the call was already answered TIMEOUT: a late handler
    commits nothing (the agent was told the call did not happen)."""
    if ctx.cancelled.is_set():
        raise TimeoutError("the call was answered TIMEOUT: nothing committed")


def _database_file(database: str) -> tuple[int, bool]:
    """The database file opened never through a link (a link at its name is
    refused, ``ELOOP``), made when absent; and whether this call made it."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(database, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        return os.open(database, flags), False


def _count_after_insert(ctx: Any, database: str, name: str) -> int:
    """One transaction: the table (when new) and the row, committed together
    or not at all. A database this call made and could not commit is
    removed: a failed call leaves the workspace as it found it."""
    _late(ctx)  # answered TIMEOUT already: not even the database file is made
    fd, created = _database_file(database)
    try:
        # SQLite opens the file the descriptor holds, whatever its name leads
        # to by now. isolation_level=None: the module begins no transaction of
        # its own, so the CREATE TABLE is in this one, not committed at once.
        connection = sqlite3.connect(f"/proc/self/fd/{fd}", isolation_level=None)
        try:
            connection.execute("begin immediate")
            try:
                connection.execute("create table if not exists contacts (name text)")
                connection.execute("insert into contacts values (?)", (name,))
                count: int = connection.execute("select count(*) from contacts").fetchone()[0]
                _late(ctx)
                connection.execute("commit")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("rollback")
                raise
        finally:
            connection.close()
    except BaseException:
        if created:
            os.unlink(database)
        raise
    finally:
        os.close(fd)
    return count


# Each call adds a row, a repeat too: declared, so duplicate_submission accepts it.
@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write(DATABASE)], acts_on_repeat=True)
def crm_add(ctx: Any, name: str) -> dict[str, Any]:
    """Adds a contact to the CRM database in the workspace; returns how many there are."""
    return {"count": _count_after_insert(ctx, os.path.join(ctx.workspace.root, DATABASE), name)}


# -- git as a subprocess -----------------------------------------------------------------


def run_git(root: str, *arguments: str, git_dir: int | None = None) -> str:
    """``git`` in ``root``, with what makes its answers the same every run;
    with ``git_dir``, the repository is the directory that descriptor holds."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": root}
    environment.update(GIT_ENVIRONMENT)
    if git_dir is not None:
        environment.update(GIT_DIR=f"/proc/self/fd/{git_dir}", GIT_WORK_TREE=root)
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *arguments],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        pass_fds=() if git_dir is None else (git_dir,),
    )
    return done.stdout


def _git_directory(root: str) -> tuple[int, bool]:
    """The repository's ``.git`` opened never through a link (a link there
    is refused, ``ELOOP``), made when absent; and whether this call made it."""
    path = os.path.join(root, ".git")
    try:
        os.mkdir(path)
        created = True
    except FileExistsError:
        created = False
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC), created


def _remove_git_temporaries(git_dir: int) -> None:
    """What a failed git command leaves (a full disk): temporary objects and locks."""
    top = f"/proc/self/fd/{git_dir}"
    for directory, _subdirs, names in os.walk(top):
        for name in names:
            if name.startswith("tmp_obj_") or name.endswith(".lock"):
                os.unlink(os.path.join(directory, name))


def _empty(directory: int) -> None:
    """Everything in the directory the descriptor holds, removed (never
    through a link)."""
    for name in os.listdir(directory):
        if stat.S_ISDIR(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=directory)
        else:
            os.unlink(name, dir_fd=directory)


@tool(
    risk=Risk.WRITE,
    world="directory",
    paths=[PathAccess.write("{name}", content="text"), PathAccess.write(".git")],
)
def git_save(ctx: Any, name: str, text: str) -> dict[str, Any]:
    """Writes a file and commits it with git; returns the commit's one-line log.
    The file is written through the workspace, which keeps it inside; git
    works in the ``.git`` this call opened, one save at a time (an
    exclusive ``flock`` of the workspace's directory). A repository this call made and
    could not commit to is removed; after any other failure, what git left
    half done is."""
    root = ctx.workspace.root
    _late(ctx)
    ctx.workspace.write_text(name, text)
    # One save at a time in a repository: git's index is shared, so another
    # save's add would ride on this commit, and its own commit find nothing.
    workspace = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(workspace, fcntl.LOCK_EX)
        return _commit(root, name)
    finally:
        os.close(workspace)  # lets go of the lock


def _commit(root: str, name: str) -> dict[str, Any]:
    git_dir, created = _git_directory(root)
    try:
        if created:
            run_git(root, "init", "-q", git_dir=git_dir)
        run_git(root, "add", "--", name, git_dir=git_dir)
        run_git(root, "commit", "-q", "-m", f"save {name}", git_dir=git_dir)
        return {"log": run_git(root, "log", "--oneline", git_dir=git_dir)}
    except BaseException:
        if created:
            _empty(git_dir)
            os.rmdir(os.path.join(root, ".git"))
        else:
            _remove_git_temporaries(git_dir)
        raise
    finally:
        os.close(git_dir)


# -- a tool that takes absolute paths ----------------------------------------------------


def _inside(root: str, path: str) -> str:
    """``path`` (absolute) once links are followed, refused unless it stays
    in ``root``: compared on whole components, after ``realpath``."""
    if not os.path.isabs(path):
        raise ValueError(f"{path}: give an absolute path")
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise PermissionError(f"{path} is outside the workspace")
    return real


def _directory_inside(root: str, path: str) -> tuple[int, str]:
    """The directory holding ``path`` opened, and the file's name in it.
    It is opened one component at a time from the root, never through a
    link (``O_NOFOLLOW``): a link swapped in after ``_inside`` looked is
    refused there (``ELOOP``), never opened."""
    real_root = os.path.realpath(root)
    target = _inside(root, path)
    relative = os.path.relpath(os.path.dirname(target), real_root)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    directory = os.open(real_root, flags)
    for part in [] if relative == "." else relative.split(os.sep):
        try:
            inner = os.open(part, flags | os.O_NOFOLLOW, dir_fd=directory)
        finally:
            os.close(directory)
        directory = inner
    return directory, os.path.basename(target)


def _write_atomically(ctx: Any, root: str, path: str, text: str) -> None:
    """Write through a temporary file beside ``path`` (both named in the
    directory ``_directory_inside`` opened), removed on failure or when the
    call was answered TIMEOUT meanwhile."""
    directory, name = _directory_inside(root, path)
    try:
        temporary = f".tmp-{name}-{os.urandom(4).hex()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o644, dir_fd=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            _late(ctx)
            os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            os.unlink(temporary, dir_fd=directory)
            raise
    finally:
        os.close(directory)


@tool(world="directory")
def read_at(ctx: Any, path: str) -> dict[str, Any]:
    """Reads a text file named by its absolute path, inside the workspace.
    No ``PathAccess``: the tool confines itself, and the faults' payloads
    reach it (the server author's view). Opened beneath the directory
    ``_directory_inside`` opened, never through a link swapped in since."""
    directory, name = _directory_inside(ctx.workspace.root, path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    finally:
        os.close(directory)
    with os.fdopen(fd, encoding="utf-8") as handle:
        return {"path": path, "text": handle.read()}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}", content="text")])
def write_at(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Writes a text file named by its absolute path, inside the workspace."""
    _write_atomically(ctx, ctx.workspace.root, path, text)
    return {"path": path, "bytes": len(text.encode())}


# -- MCP servers from the package index, in process ----------------------------------------


@contextmanager
def constructing() -> Iterator[None]:
    """Servers built in a controlled scope: what they change in the process
    (environment, working directory, logging) is put back."""
    from pytest_toolguard.bridges.guards.mcp_server import restoring_process_state

    with restoring_process_state():
        yield


def time_server_tools() -> list[ToolSpec]:
    """mcp-server-time's tools. Its descriptions name the local time zone: pinned."""
    from mcp_server_time.server import create_server

    from pytest_toolguard.bridges.guards.mcp_server import from_mcp_server

    with constructing():
        server = create_server("UTC")
    return from_mcp_server(server)


def git_server_tools() -> list[ToolSpec]:
    """mcp-server-git's tools, unconfined (``repository=None``): the calls
    name the repository by its absolute path. GitPython runs ``git``."""
    from mcp_server_git.server import create_server

    from pytest_toolguard.bridges.guards.mcp_server import from_mcp_server

    with constructing():
        server = create_server(None)
    return from_mcp_server(server, world="directory")


def _quiet(build: Any) -> list[ToolSpec]:
    """``build()``, without the bridge's advice on undeclared path
    arguments (absolute-path arguments cannot be declared yet)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        specs: list[ToolSpec] = build()
    return specs


# -- twins, one planted bug each ---------------------------------------------------------


def _lexically_inside(root: str, path: str) -> str:
    """The check without following links: a link inside leads outside."""
    normal = os.path.normpath(path)
    if os.path.commonpath([root, normal]) != root:
        raise PermissionError(f"{path} is outside the workspace")
    return normal


def _prefix_inside(root: str, path: str) -> str:
    """The check on characters, not components: ``<root>2`` passes."""
    real = os.path.realpath(path)
    if not real.startswith(os.path.realpath(root)):
        raise PermissionError(f"{path} is outside the workspace")
    return real


@tool(world="directory")
def read_at_following_links(ctx: Any, path: str) -> dict[str, Any]:
    """Twin of read_at whose check never follows links."""
    with open(_lexically_inside(ctx.workspace.root, path), encoding="utf-8") as handle:
        return {"path": path, "text": handle.read()}


@tool(world="directory")
def read_at_by_prefix(ctx: Any, path: str) -> dict[str, Any]:
    """Twin of read_at whose check compares characters."""
    with open(_prefix_inside(ctx.workspace.root, path), encoding="utf-8") as handle:
        return {"path": path, "text": handle.read()}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}", content="text")])
def write_at_and_log(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Twin of write_at that also appends to a log of its own, outside the
    session's write roots (``notes``) and never declared."""
    _write_atomically(ctx, ctx.workspace.root, path, text)
    log = os.path.join(ctx.workspace.root, "writes.log")
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"{path}\n")
    return {"path": path, "bytes": len(text.encode())}


@tool(risk=Risk.WRITE, world="directory", paths=[PathAccess.write("{path}", content="text")])
def write_at_leaving_temporary(ctx: Any, path: str, text: str) -> dict[str, Any]:
    """Twin of write_at that never removes its temporary file when the write fails."""
    target = _inside(ctx.workspace.root, path)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    _late(ctx)
    os.replace(temporary, target)
    return {"path": path, "bytes": len(text.encode())}


SERVER = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    sys.stdout.write(line.upper())\n"
    "    sys.stdout.flush()\n"
)
"""A server in a process of its own: answers each line, upper-cased."""


def _start_server() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@tool(world="directory", timeout_seconds=5.0)
def ask_server(ctx: Any, question: str) -> dict[str, Any]:
    """Asks a server process it starts; a server that dies is an error."""
    server = _start_server()
    try:
        answer, _ = server.communicate(question + "\n", timeout=4.0)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    if server.returncode != 0:
        raise RuntimeError(f"the server died (exit {server.returncode})")
    return {"answer": answer.strip()}


@tool(world="directory", timeout_seconds=5.0)
def ask_server_waiting(ctx: Any, question: str) -> dict[str, Any]:
    """Twin of ask_server that, when its server dies, waits for another one
    that never comes: its call never ends."""
    server = _start_server()
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(question + "\n")
    server.stdin.flush()
    answer = server.stdout.readline()
    if not answer:  # the server died: wait for it to come back (bounded, for the tests' sake)
        threading.Event().wait(30.0)
        raise RuntimeError("no server came back")
    server.stdin.close()
    server.wait()
    return {"answer": answer.strip()}


TWINS: Mapping[str, str] = {
    "read_at_following_links": "a link followed outside",
    "read_at_by_prefix": "a sibling-prefix check",
    "write_at_and_log": "a write outside the write roots",
    "write_at_leaving_temporary": "a temporary file left",
    "ask_server_waiting": "a server that dies mid-call, its call left running",
}
"""Each twin and the bug it plants."""


def own_tools() -> list[ToolSpec]:
    """The SQLite, git, absolute-path and server-process tools."""
    return [crm_add, git_save, read_at, write_at, ask_server]


def twin_tools() -> list[ToolSpec]:
    return [
        read_at_following_links,
        read_at_by_prefix,
        write_at_and_log,
        write_at_leaving_temporary,
        ask_server_waiting,
    ]


def registry() -> ToolRegistry:
    """Every real tool and server here, for ``toolguard_registry = real_tools:registry``."""
    return ToolRegistry(
        [*own_tools(), *twin_tools(), *_quiet(time_server_tools), *_quiet(git_server_tools)]
    )
