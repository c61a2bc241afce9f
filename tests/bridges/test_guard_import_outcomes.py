"""An importer never invents a call's outcome. OpenAI Chat and Responses
carry no error flag: a tool message's text says nothing about failure, so
its outcome is unknown and never compared with the re-executed one (only
an observation toolguard wrote, ``ToolResult.to_observation()``, says
it). Anthropic's ``is_error`` and MCP's ``isError`` do say: compared."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_toolguard.bridges import transcript_to_cassette
from pytest_toolguard.bridges.transcripts.anthropic import read_messages
from pytest_toolguard.bridges.transcripts.mcp import read_jsonrpc_log
from pytest_toolguard.bridges.transcripts.openai import read_chat, read_responses
from pytest_toolguard.cli import main
from pytest_toolguard.replay import load
from pytest_toolguard.tools import builtin_registry

WORKSPACE = Path(__file__).parents[1] / "data" / "transcripts" / "workspace"

Flag = bool | None
"""The format's error flag for the result: True (an error), False, None (not given)."""


def chat(path: str, content: str, flag: Flag) -> str:
    arguments = json.dumps({"path": path})
    return json.dumps(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_text", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": content},
        ]
    )


def responses(path: str, content: str, flag: Flag) -> str:
    return json.dumps(
        [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "read_text",
                "arguments": json.dumps({"path": path}),
            },
            {"type": "function_call_output", "call_id": "c1", "output": content},
        ]
    )


def anthropic(path: str, content: str, flag: Flag) -> str:
    result: dict[str, object] = {"type": "tool_result", "tool_use_id": "c1", "content": content}
    if flag is not None:
        result["is_error"] = flag
    return json.dumps(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "read_text", "input": {"path": path}}
                ],
            },
            {"role": "user", "content": [result]},
        ]
    )


def mcp(path: str, content: str, flag: Flag) -> str:
    result: dict[str, object] = {"content": [{"type": "text", "text": content}]}
    if flag is not None:
        result["isError"] = flag
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "read_text", "arguments": {"path": path}},
    }
    return "\n".join(
        json.dumps(m) for m in (request, {"jsonrpc": "2.0", "id": 1, "result": result})
    )


FORMATS: dict[str, tuple[Callable[[str, str, Flag], str], Callable[[str], object]]] = {
    "openai-chat": (chat, read_chat),
    "openai-responses": (responses, read_responses),
    "anthropic": (anthropic, read_messages),
    "mcp": (mcp, read_jsonrpc_log),
}

OBSERVATION_FAILED = json.dumps(
    {"ok": False, "code": "EXECUTION_ERROR", "message": "no such file", "retryable": False}
)
OBSERVATION_OK = json.dumps({"ok": True, "code": "OK", "message": "", "data": "x"})

FOUND, MISSING = "README.md", "missing.md"
"""A path the re-executed call reads, and one it fails on."""

# format, path, the transcript's content, its flag -> what the transcript says, differs
CASES = {
    "chat: a validation error as text, re-executed ok": (
        "openai-chat", FOUND, "arguments.item: required", None, None, False),
    "chat: an error-looking object, re-executed ok": (
        "openai-chat", FOUND, '{"error": "boom"}', None, None, False),
    "chat: a plain text, re-executed failing": (
        "openai-chat", MISSING, "here is the file", None, None, False),
    "chat: toolguard's failed observation, re-executed ok": (
        "openai-chat", FOUND, OBSERVATION_FAILED, None, False, True),
    "chat: toolguard's ok observation, re-executed failing": (
        "openai-chat", MISSING, OBSERVATION_OK, None, True, True),
    "responses: a validation error as text, re-executed ok": (
        "openai-responses", FOUND, "arguments.item: required", None, None, False),
    "responses: an ok-looking object without a code, re-executed failing": (
        "openai-responses", MISSING, '{"ok": true}', None, None, False),
    "responses: toolguard's failed observation, re-executed ok": (
        "openai-responses", FOUND, OBSERVATION_FAILED, None, False, True),
    "anthropic: is_error, re-executed ok": ("anthropic", FOUND, "boom", True, False, True),
    "anthropic: no is_error, re-executed failing": ("anthropic", MISSING, "ok", None, True, True),
    "anthropic: is_error false, re-executed ok": ("anthropic", FOUND, "x", False, True, False),
    "mcp: isError, re-executed ok": ("mcp", FOUND, "boom", True, False, True),
    "mcp: isError false, re-executed failing": ("mcp", MISSING, "x", False, True, True),
}  # fmt: skip


@pytest.mark.parametrize(
    ("format", "path", "content", "flag", "said", "differs"), list(CASES.values()), ids=list(CASES)
)
def test_an_outcome_is_compared_only_where_the_format_says_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    format: str,
    path: str,
    content: str,
    flag: Flag,
    said: bool | None,
    differs: bool,
) -> None:
    write, read = FORMATS[format]
    text = write(path, content, flag)
    (call,) = read(text).calls  # type: ignore[attr-defined]
    assert call.result is not None and call.result.ok is said

    report = transcript_to_cassette(
        read(text),  # type: ignore[arg-type]
        builtin_registry(),
        workspace=WORKSPACE,
        output=tmp_path / "library.yaml",
    )
    assert len(report.mismatches) == int(differs)
    assert report.unknown_outcomes == int(said is None)
    (interaction,) = load(tmp_path / "library.yaml").interactions
    assert interaction.transcript_result is not None
    assert interaction.transcript_result["ok"] is said

    # The command exits 1 for a differing outcome, never for an unknown one.
    session = tmp_path / "session.json"
    session.write_text(text, encoding="utf-8")
    status = main(
        [
            "import",
            format,
            str(session),
            "--workspace",
            str(WORKSPACE),
            "-o",
            str(tmp_path / "c.yaml"),
        ]
    )
    capsys.readouterr()
    assert status == int(differs)
