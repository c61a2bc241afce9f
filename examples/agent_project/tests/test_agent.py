"""The agent's tools through the toolguard fixture: recorded once
(``pytest --toolguard-record-mode=once``), played back on every later run.
The set-up is plain code; it runs unchanged in every record mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_toolguard import ErrorCode, ToolCall

WRITE_NOTES = {"allowed_risks": ["read", "write"], "write_roots": ["notes"]}


def call(runtime, number, tool, arguments):
    # As model APIs send them: the arguments are JSON text.
    return runtime.execute(
        ToolCall(call_id=f"call_{number}", tool_name=tool, arguments=json.dumps(arguments))
    )


@pytest.mark.toolguard(capabilities=WRITE_NOTES)
def test_the_agent_takes_notes_from_a_log(toolguard):
    root = Path(toolguard.workspace.root)
    (root / "logs").mkdir()
    (root / "logs" / "app.log").write_text("INFO start\nERROR disk full\nINFO retry\nERROR again\n")

    found = call(toolguard, 1, "grep_file", {"path": "logs/app.log", "pattern": "^ERROR"})
    assert found.code is ErrorCode.OK
    assert [match["line"] for match in found.data["matches"]] == [2, 4]

    saved = call(toolguard, 2, "save_note", {"path": "notes/errors.md", "text": "2 errors\n"})
    assert saved.ok

    counted = call(toolguard, 3, "word_count", {"path": "notes/errors.md"})
    assert counted.data == {"words": 2}


@pytest.mark.toolguard(capabilities=WRITE_NOTES)
def test_the_agent_copies_a_file_and_is_kept_inside_its_roots(toolguard):
    root = Path(toolguard.workspace.root)
    (root / "notes").mkdir()
    (root / "notes" / "todo.md").write_text("- ship it\n")
    (root / ".env").write_text("API_KEY=never-leaves\n")

    copied = call(toolguard, 1, "copy_file", {"source": "notes/todo.md", "destination": "notes/done.md"})
    assert copied.ok
    escaped = call(toolguard, 2, "copy_file", {"source": ".env", "destination": "notes/env.md"})
    assert escaped.code is ErrorCode.FORBIDDEN_PATH
    outside = call(toolguard, 3, "save_note", {"path": "todo.md", "text": "outside notes/"})
    assert outside.code is ErrorCode.PERMISSION_DENIED
