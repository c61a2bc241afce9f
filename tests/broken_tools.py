"""Tools written wrong on purpose, each with one bug the fault matrix should
catch, beside the correct way to write the same tool.

``tests/test_faults_catch_bugs.py`` runs them against the faults. The
broken ones open host paths with the builtin ``open`` because the bug is
the point: never copy them. The correct way is ``pytest_toolguard.tools``:
every file through ``ctx.workspace``.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.registry import PathAccess, ToolSpec, tool
from pytest_toolguard.sandbox import CallCancelled
from pytest_toolguard.tools import read_text, write_file

WRITE_INPUT: Mapping[str, Any] = write_file.input_schema
WRITE_OUTPUT: Mapping[str, Any] = write_file.output_schema or {}
READ_INPUT: Mapping[str, Any] = read_text.input_schema
READ_OUTPUT: Mapping[str, Any] = read_text.output_schema or {}

CHUNK = 8
"""Bytes per write of ``write_in_chunks``: small, so a full disk tears the file."""


def _host_path(ctx: ToolContext, path: str) -> str:
    return os.path.join(ctx.workspace.root, path)


def _written(path: str, content: str, created: bool) -> dict[str, Any]:
    return {"path": path, "bytes_written": len(content.encode("utf-8")), "created": created}


# -- 1. a path check before the handler, a raw open() inside it -----------------------


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_trusting_the_check(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Relies on the executor's path check (made before the handler runs),
    then opens the host path: a symlink swapped in meanwhile is followed."""
    full = _host_path(ctx, path)
    created = not os.path.exists(full)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(content)
    return _written(path, content, created)


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_check_then_open(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Checks ``realpath`` against the root, then opens the path it checked:
    a symlink swapped in between the two is followed (a race the
    ``symlink_escape`` fault does not provoke: see the test)."""
    root = os.path.realpath(ctx.workspace.root)
    full = os.path.realpath(_host_path(ctx, path))
    if not full.startswith(root + os.sep):
        raise PermissionError(f"{path} leads outside the workspace")
    created = not os.path.exists(full)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(content)
    return _written(path, content, created)


# -- 2. a non-atomic write --------------------------------------------------------------


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_in_chunks(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Truncates the file, then writes it a few bytes at a time: a full disk
    leaves it torn. Otherwise careful: the path is checked where it leads
    and the write is skipped once the call timed out (so that only the
    tearing is wrong with it, as far as the matrix can tell)."""
    root = os.path.realpath(ctx.workspace.root)
    full = os.path.realpath(_host_path(ctx, path))
    if not full.startswith(root + os.sep):
        raise PermissionError(f"{path} leads outside the workspace")
    if ctx.cancelled.is_set():
        raise CallCancelled(f"call {ctx.call_id} timed out", path)
    created = not os.path.exists(full)
    data = content.encode("utf-8")
    with open(full, "wb") as handle:
        for start in range(0, len(data), CHUNK):
            handle.write(data[start : start + CHUNK])
            handle.flush()
    return _written(path, content, created)


# -- 3. a side effect that ignores the idempotency key -------------------------------

LINE_INPUT = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}, "line": {"type": "string"}},
    "required": ["path", "line"],
    "additionalProperties": False,
}
LINE_OUTPUT = {
    "type": "object",
    "properties": {"lines": {"type": "integer", "minimum": 1}},
    "required": ["lines"],
    "additionalProperties": False,
}


def _append(ctx: ToolContext, path: str, line: str) -> dict[str, Any]:
    old = ctx.workspace.read_text(path) if ctx.workspace.exists(path) else ""
    new = old + line + "\n"
    ctx.workspace.write_text(path, new)
    return {"lines": new.count("\n")}


append_line_claiming_idempotence = tool(
    name="append_line_claiming_idempotence",
    description="Appends a line to a log; declared idempotent, which it is not.",
    input_schema=LINE_INPUT,
    output_schema=LINE_OUTPUT,
    risk=Risk.WRITE,
    idempotent=True,
    paths=[PathAccess.write("{path}", content="line")],
)(_append)

append_line = tool(
    name="append_line",
    description="Appends a line to a log (not idempotent, and not declared so).",
    input_schema=LINE_INPUT,
    output_schema=LINE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="line")],
)(_append)


# -- 4. a handler that outlives its deadline and writes anyway --------------------------


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_after_deadline(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Writes through the workspace, and when that refuses because the call
    timed out (``CallCancelled``), writes with a raw ``open()`` instead."""
    created = not ctx.workspace.exists(path)
    try:
        ctx.workspace.write_text(path, content)
    except CallCancelled:
        with open(_host_path(ctx, path), "w", encoding="utf-8") as handle:
            handle.write(content)
    return _written(path, content, created)


# -- 5. a secret echoed in an encoded form ------------------------------------------------

TEXT_INPUT = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 1}},
    "required": ["text"],
    "additionalProperties": False,
}


@tool(
    input_schema=TEXT_INPUT,
    output_schema={
        "type": "object",
        "properties": {"encoded": {"type": "string"}},
        "required": ["encoded"],
        "additionalProperties": False,
    },
)
def encode_base64(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Returns its input as base64: a token in the input reaches the audit
    log and the cassette in a form no redaction pattern matches."""
    return {"encoded": base64.b64encode(text.encode("utf-8")).decode("ascii")}


@tool(
    input_schema=TEXT_INPUT,
    output_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
)
def echo_text(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Returns its input as it is: the redactor sees a token in it."""
    return {"text": text}


# -- 6. an output that breaks its schema ----------------------------------------------


@tool(
    input_schema=READ_INPUT,
    output_schema=READ_OUTPUT,
    paths=[PathAccess.read("{path}")],
)
def read_text_returning_a_number(
    ctx: ToolContext, path: str, max_chars: int = 4000
) -> dict[str, Any]:
    """``read_text`` whose ``content`` is the number of characters, where the
    output schema says a string."""
    content = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    return {
        "path": ctx.workspace.resolve(path),
        "content": len(content[:max_chars]),
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


# -- 7. more ------------------------------------------------------------------------------


@tool(input_schema=READ_INPUT, output_schema=READ_OUTPUT, paths=[PathAccess.read("{path}")])
def read_url_decoded(ctx: ToolContext, path: str, max_chars: int = 4000) -> dict[str, Any]:
    """URL-decodes its path after the executor checked it, then opens the
    host path: ``..%2f..%2fetc%2fpasswd`` passes the check as one odd name
    and reads outside."""
    with open(_host_path(ctx, unquote(path)), encoding="utf-8") as handle:
        content = handle.read()
    return {
        "path": path,
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


@tool(input_schema=READ_INPUT, output_schema=READ_OUTPUT, paths=[PathAccess.read("{path}")])
def read_url_decoded_in_sandbox(
    ctx: ToolContext, path: str, max_chars: int = 4000
) -> dict[str, Any]:
    """Decodes its path too, but reads through the workspace, which refuses
    what the decoding turned into an escape."""
    decoded = unquote(path)
    content = ctx.workspace.read_text(decoded, max_bytes=ctx.max_read_bytes)
    return {
        "path": ctx.workspace.resolve(decoded),
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


@tool(input_schema=READ_INPUT, output_schema=READ_OUTPUT)
def read_undeclared_path(ctx: ToolContext, path: str, max_chars: int = 4000) -> dict[str, Any]:
    """Declares no ``paths``, so the executor checks nothing, and opens the
    host path: ``../`` reads outside."""
    with open(_host_path(ctx, path), encoding="utf-8") as handle:
        content = handle.read()
    return {
        "path": path,
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


WAIT_INPUT = {
    "type": "object",
    "properties": {"job": {"type": "string", "minLength": 1}},
    "required": ["job"],
    "additionalProperties": False,
}


def waiting_ignoring_cancel(done: threading.Event) -> ToolSpec:
    """A tool that waits for ``done`` (an outside job finishing) and never
    looks at ``ctx.cancelled``: past its deadline, its thread keeps running
    until ``done`` is set. The caller sets ``done`` when the test ends."""

    @tool(name="wait_for_job", input_schema=WAIT_INPUT)
    def wait_for_job(ctx: ToolContext, job: str) -> dict[str, Any]:
        """Waits for a job to finish."""
        return {"job": job, "finished": done.wait(30)}

    return wait_for_job


def waiting_until_cancelled(done: threading.Event) -> ToolSpec:
    """The same wait, ending as soon as the call is cancelled."""

    @tool(name="wait_for_job", input_schema=WAIT_INPUT)
    def wait_for_job(ctx: ToolContext, job: str) -> dict[str, Any]:
        """Waits for a job to finish, or for the call's deadline."""
        while not done.is_set() and not ctx.cancelled.wait(0.05):
            pass
        return {"job": job, "finished": done.is_set()}

    return wait_for_job


@tool(input_schema=READ_INPUT, output_schema=READ_OUTPUT, paths=[PathAccess.read("{path}")])
def read_leaving_a_cache(ctx: ToolContext, path: str, max_chars: int = 4000) -> dict[str, Any]:
    """Declared ``Risk.READ``, but writes a cache file beside what it read,
    through the workspace (which checks containment, not capabilities)."""
    content = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    ctx.workspace.write_text(path + ".cache", content)
    return {
        "path": ctx.workspace.resolve(path),
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }
