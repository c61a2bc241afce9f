"""Recorded sessions of the real tools (``real_tools``): each one recorded
for real in a directory of its own, which the tests then delete.

A session is a name, the workspace it starts from and its calls; calls may
name the workspace's absolute root as ``{root}``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from real_tools import CAPS, GIT_ENVIRONMENT, NOTES_CAPS, TWINS, run_git

from pytest_toolguard import Capabilities, SQLiteAuditStore, ToolCall, ToolRegistry, ToolRuntime
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import dump


def _git_repository(workspace: Path) -> None:
    (workspace / "README.md").write_text("hello\n")
    run_git(str(workspace), "init", "-q")
    run_git(str(workspace), "add", "README.md")
    run_git(str(workspace), "commit", "-q", "-m", "first")


def _notes(workspace: Path) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.txt").write_text("first\n")


@dataclass(frozen=True)
class Session:
    name: str
    calls: tuple[tuple[str, dict[str, Any]], ...]
    setup: Callable[[Path], None] | None = None
    volatile: tuple[str, ...] = ()
    """Cassette-level volatile paths: git's index holds inode numbers and times."""
    capabilities: Capabilities = CAPS


SESSIONS = {
    session.name: session
    for session in (
        Session("sqlite", (("crm_add", {"name": "Ada"}), ("crm_add", {"name": "Grace"}))),
        Session(
            "git",
            (
                ("git_save", {"name": "a.txt", "text": "one\n"}),
                ("git_save", {"name": "b.txt", "text": "two\n"}),
            ),
            volatile=("files..git/index",),
        ),
        Session(
            "absolute",
            (
                ("write_at", {"path": "{root}/notes/b.txt", "text": "second\n"}),
                ("read_at", {"path": "{root}/notes/a.txt"}),
            ),
            setup=_notes,
            capabilities=NOTES_CAPS,
        ),
        Session(
            "server", (("ask_server", {"question": "ping"}), ("ask_server", {"question": "pong"}))
        ),
        Session(
            "time",
            (
                (
                    "convert_time",
                    {
                        "source_timezone": "Europe/Warsaw",
                        "time": "12:00",
                        "target_timezone": "Asia/Kolkata",
                    },
                ),
                ("get_current_time", {"timezone": "America/New_York"}),
            ),
        ),
        Session(
            "mcp_git",
            (
                ("git_status", {"repo_path": "{root}"}),
                ("git_add", {"repo_path": "{root}", "files": ["README.md"]}),
                ("git_log", {"repo_path": "{root}", "max_count": 5}),
                ("git_show", {"repo_path": "{root}", "revision": "HEAD"}),
            ),
            setup=_git_repository,
            volatile=("files..git/index",),
        ),
    )
}

TWIN_ARGUMENTS = {
    "read_at_following_links": {"path": "{root}/notes/a.txt"},
    "read_at_by_prefix": {"path": "{root}/notes/a.txt"},
    "write_at_and_log": {"path": "{root}/notes/b.txt", "text": "second\n"},
    "write_at_leaving_temporary": {"path": "{root}/notes/b.txt", "text": "second\n"},
    "ask_server_waiting": {"question": "ping"},
}
TWIN_SESSIONS = {
    twin: Session(twin, ((twin, TWIN_ARGUMENTS[twin]),), setup=_notes, capabilities=NOTES_CAPS)
    for twin in TWINS
}
"""One call of each twin, recorded as its correct tool's would be."""


@contextmanager
def git_environment() -> Iterator[None]:
    """``GIT_ENVIRONMENT`` in ``os.environ`` (GitPython reads it there), then put back."""
    saved = {name: os.environ.get(name) for name in GIT_ENVIRONMENT}
    os.environ.update(GIT_ENVIRONMENT)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def record(
    session: Session, registry: ToolRegistry, base: Path, cassettes: Path
) -> tuple[Path, Path]:
    """Record ``session`` in ``base/<name>/proj``; returns (cassette, workspace)."""
    workspace = base / session.name / "proj"
    workspace.mkdir(parents=True)
    if session.setup is not None:
        session.setup(workspace)
    runtime = ToolRuntime(
        registry, str(workspace), session.capabilities, SQLiteAuditStore(":memory:")
    )
    cassettes.mkdir(parents=True, exist_ok=True)
    path = cassettes / f"{session.name}.yaml"
    with git_environment(), record_session(runtime, path):
        results = [
            runtime.execute(
                ToolCall(
                    call_id=f"c{index}",
                    tool_name=name,
                    arguments=_with_root(arguments, str(workspace)),
                )
            )
            for index, (name, arguments) in enumerate(session.calls)
        ]
    runtime.close()
    failed = [
        (result.tool_name, result.code, result.message) for result in results if not result.ok
    ]
    assert not failed, failed
    if session.volatile:
        dump(replace(load(path), volatile=session.volatile), path)
    return path, workspace


def _with_root(value: Any, root: str) -> Any:
    if isinstance(value, str):
        return value.replace("{root}", root)
    if isinstance(value, list):
        return [_with_root(item, root) for item in value]
    if isinstance(value, dict):
        return {key: _with_root(item, root) for key, item in value.items()}
    return value


def delete(workspace: Path) -> None:
    """The recorded root and the directory made for it, gone."""
    shutil.rmtree(workspace.parent)
