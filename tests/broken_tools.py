"""Tools written wrong on purpose, each with one bug the fault matrix should
catch, beside the correct way to write the same tool.

``tests/test_faults_catch_bugs.py`` runs them against the faults. The
broken ones open host paths with the builtin ``open`` because the bug is
the point: never copy them. The correct way is ``pytest_toolguard.tools``:
every file through ``ctx.workspace``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import threading
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.registry import PathAccess, ToolSpec, tool
from pytest_toolguard.sandbox import CallCancelled, ForbiddenPath
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
    description="Appends a line to a log: a repeat appends again, and it says so.",
    input_schema=LINE_INPUT,
    output_schema=LINE_OUTPUT,
    risk=Risk.WRITE,
    acts_on_repeat=True,
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


# -- 8. what the harness's oracles see ----------------------------------------------------
#
# Each is the twin of a correct tool (the same schemas and declarations) with
# one bug an earlier matrix let through; tests/harness/test_oracles_catch_bugs.py
# names the cell that catches each.

INFO_OUTPUT = {
    "type": "object",
    "properties": {"exists": {"type": "boolean"}, "size": {"type": ["integer", "null"]}},
    "required": ["exists", "size"],
    "additionalProperties": False,
}
PATH_INPUT = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}},
    "required": ["path"],
    "additionalProperties": False,
}


@tool(input_schema=PATH_INPUT, output_schema=INFO_OUTPUT, paths=[PathAccess.read("{path}")])
def file_info_expanding_home(ctx: ToolContext, path: str) -> dict[str, Any]:
    """Expands ``~`` and ``$VARS`` in its path after the executor's check
    and stats the host path: ``~/.ssh/id_rsa`` passes the check as a name
    and is looked at in $HOME. Nothing it returns is recognisable."""
    full = os.path.join(ctx.workspace.root, os.path.expandvars(os.path.expanduser(path)))
    exists = os.path.exists(full)
    return {"exists": exists, "size": os.path.getsize(full) if os.path.isfile(full) else None}


@tool(input_schema=PATH_INPUT, output_schema=INFO_OUTPUT, paths=[PathAccess.read("{path}")])
def file_info(ctx: ToolContext, path: str) -> dict[str, Any]:
    """The size of a workspace file, through the workspace."""
    exists = ctx.workspace.exists(path)
    return {"exists": exists, "size": ctx.workspace.size(path) if exists else None}


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_staged_in_tmp(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Stages the content in a temporary file under /tmp, then writes it
    through the workspace and removes the temporary file: nothing outside
    is left changed, but the handler wrote outside the workspace."""
    handle, staged = tempfile.mkstemp(dir="/tmp")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(content)
    with open(staged, encoding="utf-8") as file:
        staged_content = file.read()
    os.unlink(staged)
    created = not ctx.workspace.exists(path)
    ctx.workspace.write_text(path, staged_content)
    return _written(path, content, created)


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_keeping_a_backup(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Writes ``path``, and the old content to ``path.bak``: a write it
    never declared."""
    created = not ctx.workspace.exists(path)
    if not created:
        ctx.workspace.write_text(path + ".bak", ctx.workspace.read_text(path))
    ctx.workspace.write_text(path, content)
    return _written(path, content, created)


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_url_decoded_name(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """URL-decodes its path after the executor checked it: the write lands
    on another file than the one checked."""
    created = not ctx.workspace.exists(unquote(path))
    ctx.workspace.write_text(unquote(path), content)
    return _written(path, content, created)


SUMMARY_OUTPUT = {
    "type": "object",
    "properties": {"first_lines": {"type": "object", "additionalProperties": {"type": "string"}}},
    "required": ["first_lines"],
    "additionalProperties": False,
}


@tool(input_schema=PATH_INPUT, output_schema=SUMMARY_OUTPUT, paths=[PathAccess.read("{path}")])
def first_lines_on_host(ctx: ToolContext, path: str) -> dict[str, Any]:
    """The first line of every file beneath a directory, walked on the
    host path: a ``.env`` file is read like any other."""
    top = os.path.join(ctx.workspace.root, path)
    lines = {}
    for directory, _subdirs, names in os.walk(top):
        for name in sorted(names):
            full = os.path.join(directory, name)
            with open(full, encoding="utf-8", errors="replace") as handle:
                lines[os.path.relpath(full, ctx.workspace.root)] = handle.readline().strip()
    return {"first_lines": lines}


@tool(input_schema=PATH_INPUT, output_schema=SUMMARY_OUTPUT, paths=[PathAccess.read("{path}")])
def first_lines(ctx: ToolContext, path: str) -> dict[str, Any]:
    """The first line of every file beneath a directory, through the
    workspace, which refuses forbidden files."""
    lines = {}
    for relative in ctx.workspace.walk(path):
        try:
            text = ctx.workspace.read_text(relative, max_bytes=ctx.max_read_bytes)
        except (ForbiddenPath, UnicodeDecodeError):
            continue
        lines[relative] = text.split("\n", 1)[0].strip()
    return {"first_lines": lines}


def _append_verified(ctx: ToolContext, path: str, line: str) -> dict[str, Any]:
    result = _append(ctx, path, line)
    ctx.workspace.exists(path)  # a check after the write has landed
    return result


@tool(
    name="append_line_retrying",
    input_schema=LINE_INPUT,
    output_schema=LINE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="line")],
)
def append_line_retrying(ctx: ToolContext, path: str, line: str) -> dict[str, Any]:
    """Appends, checks, and retries the whole append on any OSError: an
    error after the line landed appends it twice."""
    for _attempt in range(3):
        try:
            return _append_verified(ctx, path, line)
        except OSError:
            continue
    raise OSError(f"could not append to {path}")


@tool(
    name="append_line_verified",
    input_schema=LINE_INPUT,
    output_schema=LINE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="line")],
)
def append_line_verified(ctx: ToolContext, path: str, line: str) -> dict[str, Any]:
    """Appends and checks, once: an error is the call's error."""
    return _append_verified(ctx, path, line)


@tool(
    input_schema=WRITE_INPUT,
    output_schema=WRITE_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}", content="content")],
)
def write_swallowing_errors(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Writes through the workspace, and answers success when the write
    failed."""
    created = not ctx.workspace.exists(path)
    try:
        ctx.workspace.write_text(path, content)
    except OSError:
        return _written(path, content, created)  # the bug: an error answered as success
    return _written(path, content, created)


LOGIN_INPUT = {
    "type": "object",
    "properties": {"user": {"type": "string", "minLength": 1}, "password": {"type": "string"}},
    "required": ["user", "password"],
    "additionalProperties": False,
}
LOGIN_OUTPUT = {
    "type": "object",
    "properties": {"user": {"type": "string"}, "session": {"type": "string"}},
    "required": ["user", "session"],
    "additionalProperties": False,
}


@tool(input_schema=LOGIN_INPUT, output_schema=LOGIN_OUTPUT)
def login_echoing_password(ctx: ToolContext, user: str, password: str) -> dict[str, Any]:
    """Returns a session token built from the password itself."""
    return {"user": user, "session": f"{user}:{password}"}


@tool(input_schema=LOGIN_INPUT, output_schema=LOGIN_OUTPUT)
def login(ctx: ToolContext, user: str, password: str) -> dict[str, Any]:
    """Returns a session token derived from the password."""
    digest = hashlib.sha256(f"{user}\0{password}".encode()).hexdigest()[:16]
    return {"user": user, "session": digest}


KNOWN_PASSWORD = "correct horse"


@tool(input_schema=LOGIN_INPUT, output_schema=LOGIN_OUTPUT)
def login_refusing_with_the_password(ctx: ToolContext, user: str, password: str) -> dict[str, Any]:
    """Refuses a wrong password with a message that quotes it, hex-encoded
    (the runtime hides a secret argument's value quoted as it is, as ``repr``
    or JSON quote it, but cannot know every encoding of it)."""
    if password != KNOWN_PASSWORD:
        raise PermissionError(f"wrong password {password.encode().hex()} for {user}")
    return {"user": user, "session": "ok"}


@tool(input_schema=LOGIN_INPUT, output_schema=LOGIN_OUTPUT)
def login_refusing(ctx: ToolContext, user: str, password: str) -> dict[str, Any]:
    """Refuses a wrong password without quoting it."""
    if password != KNOWN_PASSWORD:
        raise PermissionError(f"wrong password for {user}")
    return {"user": user, "session": "ok"}


@tool(
    input_schema=TEXT_INPUT,
    output_schema={
        "type": "object",
        "properties": {"chars": {"type": "integer"}},
        "required": ["chars"],
        "additionalProperties": False,
    },
)
def count_chars(ctx: ToolContext, text: str) -> dict[str, Any]:
    """How long its input is (never the input itself)."""
    return {"chars": len(text)}


@tool(input_schema=READ_INPUT, output_schema=READ_OUTPUT, paths=[PathAccess.read("{path}")])
def read_nfkc_normalised(ctx: ToolContext, path: str, max_chars: int = 4000) -> dict[str, Any]:
    """NFKC-normalises its path after the executor's check and opens the
    host path: a two-dot leader (U+2025) becomes ``..``."""
    with open(_host_path(ctx, unicodedata.normalize("NFKC", path)), encoding="utf-8") as handle:
        content = handle.read()
    return {
        "path": path,
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


@tool(input_schema=READ_INPUT, output_schema=READ_OUTPUT, paths=[PathAccess.read("{path}")])
def read_nfkc_normalised_in_sandbox(
    ctx: ToolContext, path: str, max_chars: int = 4000
) -> dict[str, Any]:
    """NFKC-normalises its path too, but reads through the workspace."""
    normal = unicodedata.normalize("NFKC", path)
    content = ctx.workspace.read_text(normal, max_bytes=ctx.max_read_bytes)
    return {
        "path": ctx.workspace.resolve(normal),
        "content": content[:max_chars],
        "truncated": len(content) > max_chars,
        "total_chars": len(content),
    }


COPY_INPUT = {
    "type": "object",
    "properties": {
        "source": {"type": "string", "minLength": 1},
        "destination": {"type": "string", "minLength": 1},
    },
    "required": ["source", "destination"],
    "additionalProperties": False,
}


@tool(input_schema=COPY_INPUT, risk=Risk.WRITE, paths=[PathAccess.read("{source}")])
def copy_to_host_destination(ctx: ToolContext, source: str, destination: str) -> dict[str, Any]:
    """Reads its source through the workspace (a missing one fails first),
    then writes the destination's host path: ``../`` escapes, but only
    once the source exists."""
    data = ctx.workspace.read_bytes(source)
    with open(_host_path(ctx, destination), "wb") as handle:
        handle.write(data)
    return {"copied": len(data)}


@tool(
    input_schema=COPY_INPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.read("{source}"), PathAccess.write("{destination}")],
)
def copy_in_workspace(ctx: ToolContext, source: str, destination: str) -> dict[str, Any]:
    """Copies through the workspace."""
    data = ctx.workspace.read_bytes(source)
    ctx.workspace.write_bytes(destination, data)
    return {"copied": len(data)}


def starting_a_job(done: threading.Event) -> ToolSpec:
    """A tool that starts a job on a thread of its own and answers at once;
    the thread waits for ``done``."""

    @tool(name="start_job", input_schema=WAIT_INPUT)
    def start_job(ctx: ToolContext, job: str) -> dict[str, Any]:
        """Starts a job on a thread and returns without waiting for it."""
        threading.Thread(target=done.wait, args=(30,), daemon=True).start()
        return {"job": job}

    return start_job


@tool(name="start_job", input_schema=WAIT_INPUT)
def run_job(ctx: ToolContext, job: str) -> dict[str, Any]:
    """Runs the job on a thread and waits for it before answering."""
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    return {"job": job}


GREP_INPUT = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "query": {"type": "string", "minLength": 1},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["path", "query"],
    "additionalProperties": False,
}
GREP_OUTPUT = {
    "type": "object",
    "properties": {"matches": {"type": "array", "items": {"type": "string"}}},
    "required": ["matches"],
    "additionalProperties": False,
}


@tool(input_schema=GREP_INPUT, output_schema=GREP_OUTPUT, paths=[PathAccess.read("{path}")])
def grep_ignoring_max_results(
    ctx: ToolContext, path: str, query: str, max_results: int = 20
) -> dict[str, Any]:
    """Every matching line: ``max_results`` is never applied (a small file
    never has more matches than it)."""
    lines = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes).splitlines()
    return {"matches": [line for line in lines if query in line]}


@tool(input_schema=GREP_INPUT, output_schema=GREP_OUTPUT, paths=[PathAccess.read("{path}")])
def grep_lines(ctx: ToolContext, path: str, query: str, max_results: int = 20) -> dict[str, Any]:
    """At most ``max_results`` matching lines."""
    lines = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes).splitlines()
    return {"matches": [line for line in lines if query in line][:max_results]}


HEAD_OUTPUT = {
    "type": "object",
    "properties": {"last_line": {"type": "string", "maxLength": 200}},
    "required": ["last_line"],
    "additionalProperties": False,
}


@tool(input_schema=PATH_INPUT, output_schema=HEAD_OUTPUT, paths=[PathAccess.read("{path}")])
def last_line_uncut(ctx: ToolContext, path: str) -> dict[str, Any]:
    """A file's last line, however long: the output schema allows 200
    characters, which every recorded file's lines fit in."""
    text = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    return {"last_line": text.rstrip("\n").rsplit("\n", 1)[-1]}


@tool(input_schema=PATH_INPUT, output_schema=HEAD_OUTPUT, paths=[PathAccess.read("{path}")])
def last_line(ctx: ToolContext, path: str) -> dict[str, Any]:
    """A file's last line, cut to the 200 characters its schema allows."""
    text = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    return {"last_line": text.rstrip("\n").rsplit("\n", 1)[-1][:200]}
