"""What a call leaves open is judged by every cell, on the error paths the
faults force too (``faults.resources``): a file left open, a temporary
file never removed, a process left running. The correct twins, which give
each back however the call ends, pass every cell.

Catch table (tool: cell, problem):

=============================  ===============  ===============================================
broken twin                    world            caught by
=============================  ===============  ===============================================
write_leaving_descriptors_     fake, directory  disk_failure: left open: files still open when
open (``os.open`` without                       the call ended: .../workspace, .../notes
``try``/``finally``; the                        (EIO on the template's open)
template's open fails)
write_staging_in_tmp_unsafe    directory        disk_failure: left open: temporary files never
(``NamedTemporaryFile``                         removed: /tmp/tmpXXXX
(delete=False), removed only
on success)
success)
write_leaving_helper_running   directory        disk_failure: left open: processes still
(a helper process, stopped                      running: python -c ... (pid N)
only on success)
write_leaving_worker_waiting   fake             disk_failure: the handler answered with threads
(a worker told to stop only                     it started still running: Thread-N (the cell's
on success)                                     own thread check, shared by every cell)
=============================  ===============  ===============================================
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from test_faults_catch_bugs import reported, run, run_all

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.registry import PathAccess, ToolSpec, tool

FILES = {"notes/template.md": "# note\n", "notes/todo.md": "- old\n"}
WRITE = {"path": "notes/todo.md", "content": "- new\n"}
SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}
HELPER = "import sys; sys.stdin.read()"
"""A helper process that runs until its input ends."""


def _spec(handler: Any, world: str) -> ToolSpec:
    made: ToolSpec = tool(
        name=handler.__name__,
        input_schema=SCHEMA,
        risk=Risk.WRITE,
        paths=[PathAccess.write("{path}", content="content"), PathAccess.read("notes/*")],
        world=world,
    )(handler)
    return made


DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def write_leaving_descriptors_open(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    top = os.open(ctx.workspace.root, os.O_RDONLY | os.O_DIRECTORY)
    notes = os.open("notes", DIRECTORY, dir_fd=top)
    # the bug: when this open fails, top and notes are never closed
    template = os.open("template.md", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=notes)
    with os.fdopen(template, encoding="utf-8") as source:
        header = source.read()
    os.close(notes)
    os.close(top)
    ctx.workspace.write_text(path, header + content)
    return {"written": path}


def write_closing_descriptors(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    top = os.open(ctx.workspace.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        notes = os.open("notes", DIRECTORY, dir_fd=top)
        try:
            template = os.open("template.md", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=notes)
            with os.fdopen(template, encoding="utf-8") as source:
                header = source.read()
        finally:
            os.close(notes)
    finally:
        os.close(top)
    ctx.workspace.write_text(path, header + content)
    return {"written": path}


def write_staging_in_tmp_unsafe(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", delete=False, encoding="utf-8") as file:
        file.write(content)
    with open(file.name, encoding="utf-8") as staged:
        ctx.workspace.write_text(path, staged.read())
    os.unlink(file.name)  # the bug: only when nothing failed
    return {"written": path}


def write_staging_in_tmp(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", delete=False, encoding="utf-8") as file:
        try:
            file.write(content)
        except BaseException:
            file.close()
            os.unlink(file.name)
            raise
    try:
        with open(file.name, encoding="utf-8") as staged:
            ctx.workspace.write_text(path, staged.read())
    finally:
        os.unlink(file.name)
    return {"written": path}


def _helper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", HELPER], stdin=subprocess.PIPE)


def write_leaving_helper_running(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    helper = _helper()
    ctx.workspace.write_text(path, content)
    assert helper.stdin is not None
    helper.stdin.close()  # the bug: only when nothing failed
    helper.wait()
    return {"written": path}


def write_stopping_helper(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    helper = _helper()
    try:
        ctx.workspace.write_text(path, content)
    finally:
        assert helper.stdin is not None
        helper.stdin.close()
        ended = helper.wait()
    if ended != 0:
        raise RuntimeError(f"the helper ended with {ended}")
    return {"written": path}


RELEASED = threading.Event()
"""Lets the threads a broken twin left waiting end (``released``)."""


def write_leaving_worker_waiting(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    done = threading.Event()
    worker = threading.Thread(target=lambda: done.wait(30) or RELEASED.wait(30), daemon=True)
    worker.start()
    ctx.workspace.write_text(path, content)
    done.set()  # the bug: only when nothing failed
    worker.join()
    return {"written": path}


def write_joining_worker(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    done = threading.Event()
    worker = threading.Thread(target=done.wait, args=(30,), daemon=True)
    worker.start()
    try:
        ctx.workspace.write_text(path, content)
    finally:
        done.set()
        worker.join()
    return {"written": path}


@pytest.fixture(autouse=True)
def released() -> Iterator[None]:
    RELEASED.clear()
    yield
    RELEASED.set()


BROKEN = [
    (
        write_leaving_descriptors_open,
        "fake",
        "left open: files still open when the call ended",
        "workspace",
    ),
    (write_leaving_descriptors_open, "directory", "left open: files still open when", "workspace"),
    (write_staging_in_tmp_unsafe, "directory", "left open: temporary files never removed", "tmp"),
    (write_leaving_helper_running, "directory", "left open: processes still running", "-c"),
    (write_leaving_worker_waiting, "fake", "threads it started still running", "Thread-"),
]
CORRECT = [
    (write_closing_descriptors, "fake"),
    (write_closing_descriptors, "directory"),
    (write_staging_in_tmp, "directory"),
    (write_stopping_helper, "directory"),
    (write_joining_worker, "fake"),
]


@pytest.mark.parametrize(
    ("handler", "world", "problem", "named"),
    BROKEN,
    ids=[f"{handler.__name__}-{world}" for handler, world, *_ in BROKEN],
)
def test_a_resource_left_on_an_error_path_fails_disk_failure(
    handler: Any, world: str, problem: str, named: str
) -> None:
    outcome = run("disk_failure", _spec(handler, world), WRITE, FILES)

    assert outcome.status == "fail", outcome
    assert reported(outcome, problem, named), outcome.problems


@pytest.mark.parametrize(
    ("handler", "world"), CORRECT, ids=[f"{h.__name__}-{world}" for h, world in CORRECT]
)
@pytest.mark.slow
def test_a_tool_giving_back_what_it_opened_passes_every_cell(handler: Any, world: str) -> None:
    outcomes = run_all(_spec(handler, world), WRITE, FILES)

    failed = {name: o.problems for name, o in outcomes.items() if o.status == "fail"}
    assert failed == {}
    assert outcomes["disk_failure"].status == "pass"
