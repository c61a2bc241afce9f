"""Sessions in: the five transcript readers on their shipped samples and on
malformed input, and transcripts re-executed into cassettes that replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall, ToolRegistry, ToolRuntime
from pytest_toolguard.bridges import BridgeError, Transcript, transcript_to_cassette
from pytest_toolguard.bridges.definitions.claude_code import claude_code_registry
from pytest_toolguard.bridges.transcripts.anthropic import read_messages
from pytest_toolguard.bridges.transcripts.claude_code import read_session, relative_arguments
from pytest_toolguard.bridges.transcripts.into_cassette import IMPORT_CAPABILITIES, registry_name
from pytest_toolguard.bridges.transcripts.mcp import read_jsonrpc_log
from pytest_toolguard.bridges.transcripts.openai import read_chat, read_responses
from pytest_toolguard.replay import CassetteError, dumps, load, loads, replay
from pytest_toolguard.tools import builtin_registry, read_text

SAMPLES = Path(__file__).parents[1] / "data" / "transcripts"
WORKSPACE = SAMPLES / "workspace"

Reader = Callable[[str], Transcript]

FORMATS: dict[str, tuple[str, Reader, Callable[[], ToolRegistry]]] = {
    "claude-code": ("claude_code.jsonl", read_session, claude_code_registry),
    "openai-responses": ("openai_responses.json", read_responses, builtin_registry),
    "openai-chat": ("openai_chat.json", read_chat, builtin_registry),
    "anthropic": ("anthropic.json", read_messages, builtin_registry),
    "mcp": ("mcp.jsonl", read_jsonrpc_log, builtin_registry),
}


def sample(format: str) -> Transcript:
    file, reader, _ = FORMATS[format]
    return reader((SAMPLES / file).read_text(encoding="utf-8"))


def summary(transcript: Transcript) -> list[tuple[str, str, bool | None]]:
    return [
        (c.call_id, c.tool_name, None if c.result is None else c.result.ok)
        for c in transcript.calls
    ]


# -- the shipped samples ----------------------------------------------------------


def test_claude_code_sample_reads_calls_results_session_and_cwd() -> None:
    transcript = sample("claude-code")
    assert summary(transcript) == [
        ("toolu_01Read", "Read", True),
        ("toolu_02Edit", "Edit", True),
        ("toolu_03Grep", "Grep", True),
        ("toolu_04Write", "Write", True),
        ("toolu_05Bash", "Bash", True),
    ]
    assert transcript.session_id == "7b1c1d2e-4f5a-4b6c-9d8e-0f1a2b3c4d5e"
    assert transcript.cwd == "/home/dev/demo"
    assert transcript.problems == ()


def test_claude_code_paths_inside_cwd_become_relative() -> None:
    calls = sample("claude-code").calls
    assert calls[0].arguments == {"file_path": "src/app.py"}
    assert calls[2].arguments["path"] == "."


def test_claude_code_tool_use_result_is_kept_as_data() -> None:
    result = sample("claude-code").calls[0].result
    assert result is not None and result.data["file"]["numLines"] == 2


def test_openai_responses_sample_matches_outputs_by_call_id() -> None:
    assert summary(sample("openai-responses")) == [
        ("call_list1", "list_files", True),
        ("call_read2", "read_text", True),
        ("call_write3", "write_file", True),
    ]


def test_openai_chat_sample_reads_tool_calls_and_an_error_observation() -> None:
    assert summary(sample("openai-chat")) == [
        ("call_s1", "search_text", True),
        ("call_r2", "read_text", True),
        ("call_r3", "read_text", False),
    ]


def test_anthropic_sample_reads_is_error() -> None:
    assert summary(sample("anthropic")) == [
        ("toolu_a1", "read_text", True),
        ("toolu_a2", "write_file", True),
        ("toolu_a3", "read_text", False),
    ]


def test_mcp_log_sample_reads_tools_call_and_skips_other_methods() -> None:
    transcript = sample("mcp")
    assert summary(transcript) == [
        ("2", "write_file", True),
        ("3", "read_text", True),
        ("4", "read_text", False),
    ]
    assert transcript.calls[1].result.data == {"content": "started\n"}  # type: ignore[union-attr]
    assert transcript.problems == ()


# -- into cassettes ---------------------------------------------------------------


@pytest.mark.parametrize("format", sorted(FORMATS))
def test_each_sample_becomes_a_cassette_that_replays(format: str, tmp_path: Path) -> None:
    registry = FORMATS[format][2]()
    output = tmp_path / f"{format}.yaml"
    report = transcript_to_cassette(sample(format), registry, workspace=WORKSPACE, output=output)
    assert report.imported == len(sample(format).calls)
    replayed = replay(load(output), registry)
    assert replayed.ok, [str(d) for d in replayed.differences]


def test_import_keeps_ids_order_session_and_transcript_results(tmp_path: Path) -> None:
    transcript = sample("claude-code")
    output = tmp_path / "c.yaml"
    transcript_to_cassette(transcript, claude_code_registry(), workspace=WORKSPACE, output=output)
    cassette = load(output)
    assert [i.call.call_id for i in cassette.interactions] == [c.call_id for c in transcript.calls]
    assert cassette.session.session_id == transcript.session_id
    assert cassette.workspace.root == "/home/dev/demo"
    first = cassette.interactions[0].transcript_result
    assert first is not None and first["ok"] is True and first["data"]["type"] == "text"


def test_import_reports_calls_whose_outcome_differs(tmp_path: Path) -> None:
    report = transcript_to_cassette(
        sample("claude-code"),
        claude_code_registry(),
        workspace=WORKSPACE,
        output=tmp_path / "c.yaml",
    )
    assert [(m.call_id, m.transcript_ok, m.result.code) for m in report.mismatches] == [
        ("toolu_05Bash", True, ErrorCode.PERMISSION_DENIED)
    ]


def test_import_leaves_the_named_workspace_unchanged(tmp_path: Path) -> None:
    before = {p: p.read_bytes() for p in WORKSPACE.rglob("*") if p.is_file()}
    transcript_to_cassette(
        sample("anthropic"), builtin_registry(), workspace=WORKSPACE, output=tmp_path / "a.yaml"
    )
    assert {p: p.read_bytes() for p in WORKSPACE.rglob("*") if p.is_file()} == before


def test_imported_cassette_records_the_re_executed_files(tmp_path: Path) -> None:
    output = tmp_path / "a.yaml"
    transcript_to_cassette(
        sample("anthropic"), builtin_registry(), workspace=WORKSPACE, output=output
    )
    final = load(output).final_files["notes/todo.md"]
    assert final is not None and final.content == b"- fix greet\n- write notes\n- add tests\n"


def test_imported_cassette_dumps_stably(tmp_path: Path) -> None:
    output = tmp_path / "m.yaml"
    transcript_to_cassette(sample("mcp"), builtin_registry(), workspace=WORKSPACE, output=output)
    assert dumps(load(output)) == output.read_text(encoding="utf-8")


def test_import_into_a_missing_workspace_raises_bridge_error(tmp_path: Path) -> None:
    with pytest.raises(BridgeError, match="not a directory"):
        transcript_to_cassette(
            sample("mcp"),
            builtin_registry(),
            workspace=tmp_path / "nope",
            output=tmp_path / "x.yaml",
        )


def test_import_calls_progress_after_each_call(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    transcript_to_cassette(
        sample("mcp"),
        builtin_registry(),
        workspace=WORKSPACE,
        output=tmp_path / "m.yaml",
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_transcript_result_without_ok_is_refused_by_the_schema(tmp_path: Path) -> None:
    output = tmp_path / "m.yaml"
    transcript_to_cassette(sample("mcp"), builtin_registry(), workspace=WORKSPACE, output=output)
    broken = output.read_text(encoding="utf-8").replace(
        "    ok: true\n- call", "    okay: true\n- call", 1
    )
    with pytest.raises(CassetteError, match="transcript_result"):
        loads(broken)


# -- malformed transcripts --------------------------------------------------------


def claude_line(kind: str, blocks: list[dict], **extra: object) -> str:
    role = "assistant" if kind == "assistant" else "user"
    return json.dumps(
        {
            "type": kind,
            "sessionId": "s",
            "cwd": "/w",
            "message": {"role": role, "content": blocks},
            **extra,
        }
    )


def use(call_id: str, name: str = "Read", **arguments: object) -> dict:
    return {
        "type": "tool_use",
        "id": call_id,
        "name": name,
        "input": arguments or {"file_path": "/w/a"},
    }


def result(call_id: str, **extra: object) -> dict:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "x", **extra}


def test_truncated_jsonl_line_is_a_problem_and_good_calls_stay() -> None:
    text = "\n".join(
        [
            claude_line("assistant", [use("t1")]),
            claude_line("user", [result("t1")]),
            claude_line("assistant", [use("t2")])[:40],
        ]
    )
    transcript = read_session(text)
    assert [c.call_id for c in transcript.calls] == ["t1"]
    assert [p.where for p in transcript.problems] == ["line 3"]
    assert "not valid JSON" in transcript.problems[0].message


def test_tool_result_without_tool_use_is_a_problem_naming_its_place() -> None:
    transcript = read_session(claude_line("user", [result("ghost")]))
    assert transcript.calls == ()
    assert str(transcript.problems[0]) == (
        "line 1 content[0]: result for 'ghost' with no matching tool call: skipped"
    )


def test_duplicated_call_id_keeps_the_first_and_names_both_places() -> None:
    text = "\n".join(
        [
            claude_line("assistant", [use("t1")]),
            claude_line("assistant", [use("t1", "Glob", pattern="*")]),
        ]
    )
    transcript = read_session(text)
    assert [c.tool_name for c in transcript.calls] == ["Read"]
    assert "duplicate call id t1 (first at line 1 content[0])" in transcript.problems[0].message


def test_non_json_arguments_string_is_a_problem_and_the_call_is_skipped() -> None:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "read_text", "arguments": '{"path": "a'},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "read_text",
            "arguments": '{"path": "b"}',
        },
    ]
    transcript = read_responses(json.dumps(items))
    assert [c.call_id for c in transcript.calls] == ["c2"]
    assert [p.where for p in transcript.problems] == ["item 1"]
    assert "not valid JSON" in transcript.problems[0].message


def test_chat_arguments_that_are_not_an_object_are_a_problem() -> None:
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
            ],
        }
    ]
    transcript = read_chat(json.dumps({"messages": messages}))
    assert transcript.calls == ()
    assert transcript.problems[0].where == "message 1 tool_calls[0]"


def test_mcp_response_with_no_request_is_a_problem() -> None:
    text = json.dumps({"jsonrpc": "2.0", "id": 9, "result": {"content": []}})
    transcript = read_jsonrpc_log(text)
    assert "'9' with no matching tool call" in transcript.problems[0].message


def test_mcp_jsonrpc_error_is_a_failed_result() -> None:
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "nope", "arguments": {}},
        },
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Unknown tool: nope"}},
    ]
    (call,) = read_jsonrpc_log("\n".join(map(json.dumps, lines))).calls
    assert (
        call.result is not None
        and not call.result.ok
        and call.result.content == "Unknown tool: nope"
    )


def test_malformed_transcript_still_imports_its_good_calls(tmp_path: Path) -> None:
    text = "\n".join(
        [
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "read_text", "arguments": {"path": "README.md"}},
                }
            ),
            '{"jsonrpc": "2.0", "id": 1, "res',
            json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": []}}),
        ]
    )
    report = transcript_to_cassette(
        read_jsonrpc_log(text), builtin_registry(), workspace=WORKSPACE, output=tmp_path / "m.yaml"
    )
    assert report.imported == 1
    assert [p.where for p in report.problems] == ["line 2", "line 3"]


# -- names, paths and the Claude Code tools ------------------------------------


def test_mcp_tool_names_of_claude_code_find_the_bare_registry_name() -> None:
    registry = ToolRegistry([read_text])
    assert registry_name("mcp__files__read_text", registry) == "read_text"
    assert registry_name("mcp__files__other", registry) == "mcp__files__other"


def test_paths_outside_cwd_stay_absolute_and_are_refused(tmp_path: Path) -> None:
    arguments = relative_arguments({"file_path": "/etc/passwd"}, "/home/dev/demo")
    assert arguments == {"file_path": "/etc/passwd"}
    runtime = ToolRuntime(claude_code_registry(), tmp_path)
    code = runtime.execute(ToolCall("1", "Read", arguments)).code
    runtime.close()
    assert code is ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_claude_code_edit_of_a_non_unique_string_fails_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x x\n")
    runtime = ToolRuntime(claude_code_registry(), tmp_path, IMPORT_CAPABILITIES)
    result = runtime.execute(
        ToolCall("1", "Edit", {"file_path": "a.txt", "old_string": "x", "new_string": "y"})
    )
    runtime.close()
    assert result.code is ErrorCode.EXECUTION_ERROR and "occurs 2 times" in result.message
    assert (tmp_path / "a.txt").read_text() == "x x\n"


def test_claude_code_multi_edit_is_all_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one two\n")
    runtime = ToolRuntime(claude_code_registry(), tmp_path, IMPORT_CAPABILITIES)
    edits = [{"old_string": "one", "new_string": "1"}, {"old_string": "three", "new_string": "3"}]
    result = runtime.execute(ToolCall("1", "MultiEdit", {"file_path": "a.txt", "edits": edits}))
    runtime.close()
    assert not result.ok
    assert (tmp_path / "a.txt").read_text() == "one two\n"


def test_claude_code_bash_needs_an_approval_and_never_runs(tmp_path: Path) -> None:
    runtime = ToolRuntime(
        claude_code_registry(), tmp_path, Capabilities(allowed_risks=frozenset({Risk.DANGEROUS}))
    )
    code = runtime.execute(ToolCall("1", "Bash", {"command": "touch x"})).code
    runtime.close()
    assert code is ErrorCode.APPROVAL_REQUIRED
    assert not (tmp_path / "x").exists()


def test_arguments_nested_too_deeply_are_a_problem_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    items = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": deep}]
    transcript = read_responses(json.dumps(items))
    assert transcript.calls == ()
    assert "nested too deeply" in transcript.problems[0].message
