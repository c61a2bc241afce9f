"""What a call leaves open on its error paths is the resources family's:
the ``resource_leak`` cell forces those paths (``faults.leaks``: each
event of a clean run at which the handler holds more than before, a file
operation, a write, an HTTP request or a process start, fails in turn)
and judges what each call left open (``faults.resources``): a file left
open, a temporary file never removed, a process left running, a thread
left working. The correct twins, which give each back however the call
ends, pass every cell.

Catch table (twin, world: the ``resource_leak`` cell's problem; "after"
names the failure that left it):

=============================  ===============  ===============================================
broken twin                    world            resource_leak reports
=============================  ===============  ===============================================
write_leaving_descriptors_     fake, directory  left open: files still open when the call
open (``os.open`` without                       ended: .../workspace (after EIO on the
``try``/``finally``)                            handler's file operation 2 (open notes))
write_staging_in_tmp_unsafe    directory        left open: temporary files never removed:
(``NamedTemporaryFile``                         /tmp/tmpXXXX (after EIO on the handler's file
(delete=False), removed only                    operation 5 (open /tmp/tmpXXXX))
on success)
write_leaving_helper_running   directory        left open: processes still running: python -c
(a helper process, stopped                      ... (pid N) (after EIO on the handler's file
only on success)                                operation 1 (open todo.md))
write_leaving_worker_waiting   fake             the handler answered with threads it started
(a worker told to stop only                     still running: Thread-N (the cell's own thread
on success)                                     check, on the path the EIO forced)
upload_leaving_note_open (the  fake, directory  left open: files still open when the call
file it uploads, closed only                    ended: .../workspace/notes/template.md (after
when the upload succeeded)                      the connection reset on the handler's HTTP
                                                request 1 (POST http://127.0.0.1:9/notes))
format_leaving_server_running  directory        left open: processes still running: python -c
(a second process exiting                       ... (pid N) (after the handler's process 2
non-zero raises before the                      (python -c ...) killed as it started)
first is stopped)
write_leaving_staging_open     fake             left open: files still open when the call
(``os.write`` to a staging                      ended: .../notes/.todo.md.partial (after
descriptor, closed only when                    ENOSPC on the handler's write 1 (to
the write succeeded)                            .todo.md.partial))
write_leaving_staging_open     directory        left open: files still open when the call
                                                ended: .../notes/.todo.md.partial (deleted)
                                                (after ENOSPC on the handler's first write,
                                                the workspace's disk full)
=============================  ===============  ===============================================

Before this cell, only ``disk_failure`` caught the first four, when one of
its spread-out k happened to land between the acquiring and the release.
"""

from __future__ import annotations

import http.client
import json
import os
import posixpath
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import pytest
from test_faults_catch_bugs import one_call_case, reported, run

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import loads

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
STAGING = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW


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


STAGED = ".todo.md.partial"


def _staged_name(ctx: ToolContext, path: str) -> str:
    """The file of ``notes/`` that ``path`` names; refused for any other
    path, or once the call's deadline has passed (nothing written then)."""
    directory, name = posixpath.split(path)
    if directory != "notes" or name in ("", ".", "..") or name == STAGED:
        raise ValueError(f"{path!r} is not a file of notes/")
    if ctx.cancelled.is_set():
        raise TimeoutError("the call was cancelled before it wrote")
    return name


def write_leaving_staging_open(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    name = _staged_name(ctx, path)
    notes = _open_notes(ctx)
    try:
        staging = os.open(STAGED, STAGING, 0o644, dir_fd=notes)
        os.write(staging, content.encode())  # the bug: a failed write leaves it open...
        os.close(staging)
        os.replace(STAGED, name, src_dir_fd=notes, dst_dir_fd=notes)
    except BaseException:
        os.remove(STAGED, dir_fd=notes)  # ...though the staging file is removed
        raise
    finally:
        os.close(notes)
    return {"written": path}


def write_closing_staging(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    name = _staged_name(ctx, path)
    notes = _open_notes(ctx)
    try:
        staging = os.open(STAGED, STAGING, 0o644, dir_fd=notes)
        try:
            os.write(staging, content.encode())
        finally:
            os.close(staging)
        os.replace(STAGED, name, src_dir_fd=notes, dst_dir_fd=notes)
    except BaseException:
        os.remove(STAGED, dir_fd=notes)
        raise
    finally:
        os.close(notes)
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


# -- a descriptor kept across an HTTP exchange ----------------------------------------

URL = "http://127.0.0.1:9/notes"
UPLOAD = {"name": "template.md", "url": URL}
UPLOAD_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "url": {"type": "string"}},
    "required": ["name", "url"],
    "additionalProperties": False,
}


def upload_case() -> str:
    return f"""
format_version: 1
kind: case
session:
  capabilities:
    allowed_risks: [read, external]
    network_hosts: ["127.0.0.1"]
workspace:
  files: {json.dumps(FILES)}
interactions:
  - call:
      call_id: call-01
      tool_name: upload_note
      arguments: {json.dumps(UPLOAD)}
    approval: {{rule: hook.approver}}
    result:
      ok: true
      code: OK
      data: {{"uploaded": "template.md", "id": "n1"}}
    http:
      - request: {{method: POST, uri: "{URL}"}}
        response:
          status: {{code: 201, message: Created}}
          headers: {{Content-Type: [application/json]}}
          body: '{{"id": "n1"}}'
"""


def _open_notes(ctx: ToolContext) -> int:
    """The workspace's ``notes`` directory, opened without following a link."""
    top = os.open(ctx.workspace.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.open("notes", DIRECTORY, dir_fd=top)
    finally:
        os.close(top)


def _open_note(ctx: ToolContext, name: str) -> BinaryIO:
    """``notes/<name>``, opened without following a link."""
    notes = _open_notes(ctx)
    try:
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=notes)
    finally:
        os.close(notes)
    return os.fdopen(file, "rb")


def _post(url: str, data: bytes) -> str:
    """POST ``data``, no redirect followed (one is a failure)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
    try:
        connection.request("POST", parts.path, data)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    if response.status >= 300:
        raise OSError(f"the upload answered {response.status} {response.reason}")
    return str(json.loads(raw)["id"])


def upload_leaving_note_open(ctx: ToolContext, name: str, url: str) -> dict[str, Any]:
    source = _open_note(ctx, name)
    sent = _post(url, source.read())
    source.close()  # the bug: only when the upload succeeded
    return {"uploaded": name, "id": sent}


def upload_closing_note(ctx: ToolContext, name: str, url: str) -> dict[str, Any]:
    with _open_note(ctx, name) as source:
        sent = _post(url, source.read())
    return {"uploaded": name, "id": sent}


def _upload_spec(handler: Any, world: str) -> ToolSpec:
    made: ToolSpec = tool(
        name="upload_note",
        input_schema=UPLOAD_SCHEMA,
        risk=Risk.EXTERNAL,
        paths=[PathAccess.read("notes/{name}")],
        network_host_argument="url",
        world=world,
    )(handler)
    return made


def run_upload(fault: str, handler: Any, world: str) -> CellOutcome:
    registry = ToolRegistry([_upload_spec(handler, world)])
    cassette = loads(upload_case(), source="<upload_note>")
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


# -- a process left running when another one exits non-zero --------------------------

FORMAT = {"text": "a line to shout"}
FORMAT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
UPPER = "import sys; sys.stdout.write(sys.stdin.read().upper())"


def _shout(text: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", UPPER], input=text.encode(), capture_output=True, check=True
    )
    return done.stdout.decode()


def format_leaving_server_running(ctx: ToolContext, text: str) -> dict[str, Any]:
    server = _helper()  # a helper the formatting talks to, in a real tool
    shouted = _shout(text)  # raises when the formatter exits non-zero...
    assert server.stdin is not None
    server.stdin.close()  # ...and then the server is never stopped
    if server.wait() != 0:
        raise RuntimeError("the server ended with an error")
    return {"text": shouted}


def format_stopping_server(ctx: ToolContext, text: str) -> dict[str, Any]:
    server = _helper()
    try:
        shouted = _shout(text)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        ended = server.wait()
    if ended != 0:
        raise RuntimeError(f"the server ended with {ended}")
    return {"text": shouted}


def _format_spec(handler: Any, world: str) -> ToolSpec:
    made: ToolSpec = tool(
        name=handler.__name__, input_schema=FORMAT_SCHEMA, risk=Risk.READ, world=world
    )(handler)
    return made


def run_format(fault: str, handler: Any, world: str) -> CellOutcome:
    spec = _format_spec(handler, world)
    registry = ToolRegistry([spec])
    cassette = one_call_case(spec.name, FORMAT, FILES)
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


# -- the catch table and the correct twins ---------------------------------------------


def run_twin(fault: str, handler: Any, world: str) -> CellOutcome:
    """``fault`` injected into the one call of ``handler``'s case."""
    if handler.__name__.startswith("upload_"):
        return run_upload(fault, handler, world)
    if handler.__name__.startswith("format_"):
        return run_format(fault, handler, world)
    return run(fault, _spec(handler, world), WRITE, FILES)


BROKEN = [
    (
        write_leaving_descriptors_open,
        "fake",
        "left open: files still open when the call ended",
        "workspace (after EIO on the handler's file operation",
    ),
    (
        write_leaving_descriptors_open,
        "directory",
        "left open: files still open when",
        "workspace (after EIO on the handler's file operation",
    ),
    (
        write_staging_in_tmp_unsafe,
        "directory",
        "left open: temporary files never removed: /tmp",
        "(after EIO on the handler's file operation",
    ),
    (
        write_leaving_helper_running,
        "directory",
        "left open: processes still running",
        "-c import sys; sys.stdin.read() (pid",
    ),
    (write_leaving_worker_waiting, "fake", "threads it started still running", "Thread-"),
    (
        upload_leaving_note_open,
        "fake",
        "left open: files still open when the call ended",
        "notes/template.md (after the connection reset on the handler's HTTP request 1 (POST ",
    ),
    (
        upload_leaving_note_open,
        "directory",
        "left open: files still open when the call ended",
        "notes/template.md (after the connection reset on the handler's HTTP request 1 (POST ",
    ),
    (
        format_leaving_server_running,
        "directory",
        "left open: processes still running",
        "(after the handler's process 2 (",
    ),
    (
        write_leaving_staging_open,
        "fake",
        "left open: files still open when the call ended",
        "notes/.todo.md.partial (after ENOSPC on the handler's write 1",
    ),
    (
        write_leaving_staging_open,
        "directory",
        "left open: files still open when the call ended",
        "notes/.todo.md.partial (deleted) (after ENOSPC on the handler's first write, the "
        "workspace's disk full)",
    ),
]
CORRECT = [
    (write_closing_descriptors, "fake"),
    (write_closing_descriptors, "directory"),
    (write_staging_in_tmp, "directory"),
    (write_stopping_helper, "directory"),
    (write_joining_worker, "fake"),
    (upload_closing_note, "fake"),
    (upload_closing_note, "directory"),
    (format_stopping_server, "directory"),
    (write_closing_staging, "fake"),
    (write_closing_staging, "directory"),
]


@pytest.mark.parametrize(
    ("handler", "world", "problem", "named"),
    BROKEN,
    ids=[f"{handler.__name__}-{world}" for handler, world, *_ in BROKEN],
)
def test_a_resource_left_on_an_error_path_fails_resource_leak(
    handler: Any, world: str, problem: str, named: str
) -> None:
    outcome = run_twin("resource_leak", handler, world)

    assert outcome.status == "fail", outcome
    assert reported(outcome, problem, named), outcome.problems


@pytest.mark.parametrize(
    ("handler", "world"), CORRECT, ids=[f"{h.__name__}-{world}" for h, world in CORRECT]
)
@pytest.mark.slow
def test_a_tool_giving_back_what_it_opened_passes_every_cell(handler: Any, world: str) -> None:
    outcomes = {fault.name: run_twin(fault.name, handler, world) for fault in BUILTIN_FAULTS}

    failed = {name: o.problems for name, o in outcomes.items() if o.status == "fail"}
    assert failed == {}
    assert outcomes["resource_leak"].status == "pass"


def test_each_resource_left_open_is_named_once_with_the_failure_that_left_it() -> None:
    # The cell-wide watch (every cell's) says nothing resource_leak named
    # already, even once the world removed the directory a descriptor is on.
    outcome = run_twin("resource_leak", write_leaving_descriptors_open, "directory")

    left = [problem for problem in outcome.problems if problem.startswith("left open: ")]
    assert left, outcome.problems
    assert all(" (after " in problem for problem in left), left


def echo_path(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    return {"path": path, "length": len(content)}


@pytest.mark.parametrize("world", ["fake", "directory"])
def test_a_call_with_no_event_of_its_own_is_not_applicable_never_a_pass(world: str) -> None:
    outcome = run("resource_leak", _spec(echo_path, world), WRITE, FILES)

    assert outcome.status == "n/a", outcome
    assert outcome.problems[0].startswith("nothing to inject: no file operation"), outcome
