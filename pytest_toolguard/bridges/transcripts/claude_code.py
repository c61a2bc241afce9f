"""Claude Code session files read.

``read_session(text)`` reads a session transcript
(``~/.claude/projects/<project>/<sessionId>.jsonl``): one event per line;
``tool_use`` blocks in assistant lines, ``tool_result`` blocks (and the
line's ``toolUseResult``) in user lines; the ``sessionId`` and ``cwd`` of
the lines. Claude Code's tools take absolute paths: with
``relative_to_cwd`` (the default) a path argument inside the session's
``cwd`` becomes workspace-relative, so the call replays in a workspace.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from .anthropic import read_blocks
from .transcript import CallCollector, Transcript, json_records

PATH_ARGUMENTS = ("file_path", "path", "notebook_path")
"""Claude Code's tool arguments that hold an absolute path."""


def read_session(text: str, *, relative_to_cwd: bool = True) -> Transcript:
    """The calls of a Claude Code session file. A line that is not JSON
    (a truncated last line) is a problem naming it; lines of other types
    (``summary``, ``system``) are skipped."""
    collector = CallCollector("claude-code")
    for where, event in json_records(text, collector, noun="line"):
        if not isinstance(event, Mapping):
            collector.problem(where, "not a JSON object")
            continue
        if collector.session_id is None and isinstance(event.get("sessionId"), str):
            collector.session_id = event["sessionId"]
        if collector.cwd is None and isinstance(event.get("cwd"), str):
            collector.cwd = event["cwd"]
        message = event.get("message")
        if event.get("type") not in ("assistant", "user") or not isinstance(message, Mapping):
            continue
        read_blocks(collector, where, message, event.get("toolUseResult"))
    transcript = collector.transcript()
    if not relative_to_cwd or transcript.cwd is None:
        return transcript
    cwd = transcript.cwd
    calls = tuple(
        type(call)(
            call_id=call.call_id,
            tool_name=call.tool_name,
            arguments=relative_arguments(call.arguments, cwd),
            where=call.where,
            result=call.result,
        )
        for call in transcript.calls
    )
    return Transcript(transcript.format, calls, transcript.problems, transcript.session_id, cwd)


def relative_arguments(arguments: Mapping[str, Any], cwd: str) -> dict[str, Any]:
    """``arguments`` with each absolute path argument inside ``cwd`` made
    relative to it (``cwd`` itself is ``.``); others unchanged.

    Only the ``cwd`` prefix is taken off, component by component (``.``
    and empty components dropped); every ``..`` after it is kept, for the
    sandbox to apply to the directory it actually reaches. Collapsing
    ``ln/../secret`` as text would judge ``secret`` when ``ln`` is a link
    elsewhere, and the kernel goes to ``ln``'s target's parent.

    A path beginning with ``~`` is a home directory to Claude Code (and to
    a shell), never a folder of the project: ``~`` and ``~user`` are
    expanded first (``os.path.expanduser``), so the result is judged as the
    absolute path it is (outside the project: refused). One that cannot be
    expanded (no such user) is left as it is, and the hook's workspace
    refuses it (``own_files.GuardedWorkspace``). A path inside ``cwd``
    whose relative form would begin with ``~`` is written ``./~...``, the
    project's own folder of that name."""
    root = _components(posixpath.normpath(cwd))  # as the workspace's root is spelt
    changed = dict(arguments)
    for name in PATH_ARGUMENTS:
        value = changed.get(name)
        if isinstance(value, str) and value.startswith("~"):
            value = changed[name] = os.path.expanduser(value)
        if isinstance(value, str) and value.startswith("/"):
            parts = _components(value)
            if parts[: len(root)] == root:
                relative = "/".join(parts[len(root) :]) or "."
                changed[name] = f"./{relative}" if relative.startswith("~") else relative
    return changed


def _components(path: str) -> list[str]:
    """The components of an absolute POSIX path, ``.`` and empty ones
    dropped, ``..`` kept as it is."""
    return [part for part in path.split("/") if part not in ("", ".")]
