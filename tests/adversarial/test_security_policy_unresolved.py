"""A path the policy cannot resolve is refused, never judged by its spelling.

The policy judges a path by where the sandbox's walk really leads. When the
walk fails because what the path names is not there (ENOENT, ENOTDIR: a file
to be created, ``file.txt/x``), its spelling is judged and the handler meets
the error. Any other failure (out of descriptors, a directory it may not
search, an I/O error) says nothing about the links on the way: judging the
spelling then would let ``ln/x``, with ``ln`` a link out of the workspace,
through to a handler that acts elsewhere (an MCP server, Claude Code's own
tools). Those calls are refused with PERMISSION_DENIED,
``policy.path_unresolved``, and the handler never runs."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import python_path

from pytest_toolguard import (
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRuntime,
)
from pytest_toolguard.registry import ToolRegistry, ToolSpec

ROOT = Path(__file__).parents[2]
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
REFUSED_ERRORS = [
    errno.EMFILE,
    errno.ENFILE,
    errno.EACCES,
    errno.EPERM,
    errno.EIO,
    errno.ENOMEM,
    errno.ENAMETOOLONG,
    errno.EOVERFLOW,
]


def remote_registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    """Tools whose handler acts elsewhere (as an MCP server would): it only
    records what it was sent, so nothing in it needs a descriptor."""

    def remember(ctx: Any, **arguments: Any) -> dict[str, Any]:
        seen.append(dict(arguments))
        return {"done": True}

    registry = ToolRegistry()
    for name, access, risk in (
        ("remote_write", PathAccess.write("{path}"), Risk.WRITE),
        ("remote_read", PathAccess.read("{path}"), Risk.READ),
    ):
        registry.register(
            ToolSpec(
                name=name,
                description=f"{name} a file elsewhere",
                input_schema={
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
                risk=risk,
                handler=remember,
                paths=(access,),
            )
        )
    return registry


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[ToolRuntime, list[dict[str, Any]], Path]]:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "x.txt").write_text("outside\n")
    (workspace / "ln").symlink_to(outside)
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.txt").write_text("a\n")
    (workspace / "file.txt").write_text("f\n")
    seen: list[dict[str, Any]] = []
    runtime = ToolRuntime(remote_registry(seen), str(workspace), CAPS, SQLiteAuditStore())
    yield runtime, seen, workspace
    runtime.close()


def failing_walk(monkeypatch: pytest.MonkeyPatch, error: int) -> None:
    """Every step of the sandbox's walk (an open relative to a directory
    descriptor) fails with ``error``."""
    real_open = os.open

    def walk_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if dir_fd is not None:
            raise OSError(error, os.strerror(error))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", walk_open)


@pytest.mark.parametrize("tool", ["remote_write", "remote_read"])
@pytest.mark.parametrize("path", ["ln/x.txt", "ln/new.txt", "notes/../ln/x.txt", "./ln/x.txt"])
@pytest.mark.parametrize("error", REFUSED_ERRORS, ids=[errno.errorcode[e] for e in REFUSED_ERRORS])
def test_a_walk_that_cannot_look_refuses_the_call(
    world: tuple[ToolRuntime, list[dict[str, Any]], Path],
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
    path: str,
    error: int,
) -> None:
    runtime, seen, _ = world
    failing_walk(monkeypatch, error)
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments={"path": path}))
    monkeypatch.undo()
    assert result.code is ErrorCode.PERMISSION_DENIED, result
    assert seen == []
    row = runtime.audit.get("c1")
    assert row is not None and row.rule == "policy.path_unresolved"
    assert errno.errorcode[error] in result.message


@pytest.mark.parametrize("tool", ["remote_write", "remote_read"])
@pytest.mark.parametrize("path", ["notes/a.txt", "notes/new.txt"])
@pytest.mark.parametrize(
    "error", REFUSED_ERRORS[:3], ids=[errno.errorcode[e] for e in REFUSED_ERRORS[:3]]
)
def test_even_a_path_inside_is_refused_when_it_cannot_be_resolved(
    world: tuple[ToolRuntime, list[dict[str, Any]], Path],
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
    path: str,
    error: int,
) -> None:
    runtime, seen, _ = world
    failing_walk(monkeypatch, error)
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments={"path": path}))
    monkeypatch.undo()
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert seen == []


@pytest.mark.parametrize(
    ("tool", "path"),
    [
        ("remote_write", "new/dir/x.txt"),  # ENOENT: a directory to be made
        ("remote_write", "file.txt/x"),  # ENOTDIR: the handler meets the error
        ("remote_read", "missing.txt"),
        ("remote_read", "file.txt/x"),
        ("remote_write", "notes/a.txt"),
    ],
)
def test_a_path_not_there_yet_is_still_judged_by_its_spelling(
    world: tuple[ToolRuntime, list[dict[str, Any]], Path], tool: str, path: str
) -> None:
    runtime, seen, _ = world
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments={"path": path}))
    assert result.ok, result
    assert seen == [{"path": path}]


@pytest.mark.parametrize("tool", ["remote_write", "remote_read"])
def test_without_a_failure_the_link_out_is_refused_by_the_sandbox(
    world: tuple[ToolRuntime, list[dict[str, Any]], Path], tool: str
) -> None:
    runtime, seen, _ = world
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments={"path": "ln/x.txt"}))
    assert result.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert seen == []


CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    sys.path.insert(0, "tests/adversarial")
    from test_security_policy_unresolved import CAPS, remote_registry
    from pytest_toolguard import SQLiteAuditStore, ToolCall, ToolRuntime

    workspace, tool = sys.argv[1], sys.argv[2]
    seen = []
    runtime = ToolRuntime(remote_registry(seen), workspace, CAPS, SQLiteAuditStore())
    runtime.execute(ToolCall(call_id="warm", tool_name=tool, arguments={"path": "notes/a.txt"}))
    held = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments={"path": "ln/x.txt"}))
    for fd in held:
        os.close(fd)
    row = runtime.audit.get("c1")
    print(json.dumps({"code": result.code.value, "seen": seen[1:], "rule": row and row.rule}))
    """
)


@pytest.mark.parametrize("tool", ["remote_write", "remote_read"])
def test_out_of_descriptors_the_link_out_is_refused(
    world: tuple[ToolRuntime, list[dict[str, Any]], Path], tool: str
) -> None:
    _, _, workspace = world
    environment = {
        **os.environ,
        # The child imports this module, which imports tests/conftest.py.
        "PYTHONPATH": python_path(ROOT, ROOT / "tests"),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(workspace), tool],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    outcome = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert outcome["seen"] == []
    assert outcome["code"] != "OK"
