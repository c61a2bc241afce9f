"""The pipeline, layer by layer: parse, lookup, schema, output, truncation."""

from __future__ import annotations

import json

import pytest
from conftest import WRITE_ANYWHERE, spy_tool

from pytest_toolguard import CallState, ErrorCode, ToolCall
from pytest_toolguard.capabilities import Risk


def call(tool_name="spy", arguments=None, **kw):
    kw.setdefault("call_id", "c1")
    return ToolCall(tool_name=tool_name, arguments={} if arguments is None else arguments, **kw)


@pytest.fixture
def runtime(toolguard_runtime, registry_of, spy):
    return toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE)


def test_arguments_as_json_text_are_parsed(runtime, spy):
    result = runtime.execute(call(arguments='{"text": "hi"}'))
    assert (result.ok, result.code, result.state) == (True, ErrorCode.OK, CallState.SUCCEEDED)
    assert spy.calls == [{"text": "hi"}]


@pytest.mark.parametrize(
    "raw", ['{"text": "hi"', "not json", "", "[1, 2]", "42", "null", '{"a": NaN}']
)
def test_unparseable_or_non_object_arguments_are_invalid_requests(runtime, spy, raw):
    result = runtime.execute(call(arguments=raw))
    assert result.code is ErrorCode.INVALID_REQUEST
    assert result.state is CallState.FAILED
    assert spy.count == 0


@pytest.mark.parametrize(
    "arguments",
    [{"text": float("nan")}, {"text": object()}, {1: "x"}, {"text": "\ud800"}],
    ids=["nan", "object", "non-string-key", "lone-surrogate"],
)
def test_arguments_that_are_not_plain_json_are_invalid_requests(runtime, spy, arguments):
    result = runtime.execute(call(arguments=arguments))
    assert result.code is ErrorCode.INVALID_REQUEST
    assert spy.count == 0
    row = runtime.audit.get("c1")
    assert row is not None and row.result_code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    "field, value",
    [
        ("call_id", 7),
        ("tool_name", None),
        ("actor", ""),
        ("session_id", "s" * 1000),
        ("idempotency_key", 5),
        ("metadata", []),
    ],
)
def test_malformed_call_fields_are_invalid_requests(runtime, spy, field, value):
    fields = {"call_id": "c1", "tool_name": "spy", "arguments": {}, field: value}
    result = runtime.execute(ToolCall(**fields))
    assert result.code is ErrorCode.INVALID_REQUEST
    assert spy.count == 0
    assert runtime.audit.count() == 1


def test_something_that_is_not_a_call_is_an_invalid_request(runtime):
    result = runtime.execute({"tool_name": "spy"})  # type: ignore[arg-type]
    assert result.code is ErrorCode.INVALID_REQUEST
    assert runtime.audit.count() == 1


def test_unknown_tool_suggests_the_closest_visible_one(runtime):
    result = runtime.execute(call("spyy"))
    assert result.code is ErrorCode.TOOL_NOT_FOUND
    assert "did you mean spy?" in result.message


def test_schema_error_reaches_the_model_with_its_path_and_the_handler_never_runs(
    toolguard_runtime, registry_of, spy
):
    schema = {
        "type": "object",
        "properties": {"artifact_name": {"type": "string"}, "content": {}},
        "required": ["artifact_name", "content"],
        "additionalProperties": False,
    }
    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, "write_json", schema=schema)), WRITE_ANYWHERE
    )
    result = runtime.execute(call("write_json", {"artifact_name": "a.json"}))
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert "arguments.content: field is required" in result.message
    assert result.retryable is False
    assert spy.count == 0


def test_misspelt_argument_is_refused(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(registry_of(_read_text_like(spy)), WRITE_ANYWHERE)
    result = runtime.execute(call("read_text", {"path": "README.md", "max_char": 4000}))
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert "arguments.max_char" in result.message
    assert spy.count == 0


def _read_text_like(spy):
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "max_chars": {"type": "integer"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    return spy_tool(spy, "read_text", schema=schema)


def test_output_breaking_its_schema_is_output_invalid(toolguard_runtime, registry_of, spy):
    tool = spy_tool(
        spy,
        result=lambda ctx, **a: {"path": 3},
        output_schema={
            "type": "object",
            "required": ["path"],
            "properties": {"path": {"type": "string"}},
        },
    )
    result = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE).execute(call())
    assert (result.code, result.state, result.ok) == (
        ErrorCode.OUTPUT_INVALID,
        CallState.FAILED,
        False,
    )
    assert "output.path" in result.message


def test_output_that_is_not_json_is_output_invalid(toolguard_runtime, registry_of, spy):
    tool = spy_tool(spy, result=lambda ctx, **a: {"when": object()})
    result = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE).execute(call())
    assert result.code is ErrorCode.OUTPUT_INVALID


def test_output_over_the_limit_is_truncated_with_flag_and_total_size(
    toolguard_runtime, registry_of, spy
):
    tool = spy_tool(spy, result=lambda ctx, **a: {"content": "x" * 50_000}, result_limit=1000)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE)
    result = runtime.execute(call())
    assert (result.ok, result.truncated) == (True, True)
    assert result.total_size == len(json.dumps({"content": "x" * 50_000}))
    assert len(result.data) == 1000
    row = runtime.audit.get("c1")
    assert row is not None and len(row.result_preview) <= 500


@pytest.mark.parametrize(
    ("output", "preview"),
    [
        ({"b": "two", "a": 1.5, "c": None}, '{"a": 1.5, "b": "two", "c": null}'),
        # Keys that are not text sort as numbers, then as text once parsed back.
        ({10: "ten", 9: "nine"}, '{"10": "ten", "9": "nine"}'),
        ({"z": {9: "x", 10: "y"}}, '{"z": {"10": "y", "9": "x"}}'),
    ],
)
def test_the_preview_is_the_json_text_of_the_output_as_parsed_back(
    toolguard_runtime, registry_of, spy, output, preview
):
    tool = spy_tool(spy, result=lambda ctx, **a: output)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE)
    assert runtime.execute(call()).ok
    row = runtime.audit.get("c1")
    assert row is not None and row.result_preview == preview


def test_the_preview_of_an_output_holding_a_secret_is_redacted(toolguard_runtime, registry_of, spy):
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    tool = spy_tool(spy, result=lambda ctx, **a: {"note": f"the token is {token}"})
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE)
    assert runtime.execute(call()).ok
    row = runtime.audit.get("c1")
    assert row is not None and row.result_preview.startswith('{"note": "the token is ')
    assert token not in row.result_preview


def test_handler_exception_names_its_type_without_traceback_or_host_path(
    toolguard_runtime, registry_of, spy, workspace_dir
):
    def boom(ctx, **a):
        raise KeyError(f"{workspace_dir}/secret/place.txt")

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=boom)), WRITE_ANYWHERE)
    result = runtime.execute(call())
    assert (result.code, result.state) == (ErrorCode.EXECUTION_ERROR, CallState.FAILED)
    assert "KeyError" in result.message
    assert "Traceback" not in result.message
    assert str(workspace_dir) not in result.message
    row = runtime.audit.get("c1")
    assert row is not None and str(workspace_dir) not in row.error_message


def test_handler_system_exit_is_a_failure_not_a_crash(toolguard_runtime, registry_of, spy):
    def leave(ctx, **a):
        raise SystemExit(3)

    result = toolguard_runtime(registry_of(spy_tool(spy, result=leave)), WRITE_ANYWHERE).execute(
        call()
    )
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert "SystemExit" in result.message


def test_every_call_leaves_exactly_one_finished_row(runtime):
    runtime.execute(call(call_id="a"))
    runtime.execute(call("nope", call_id="b"))
    runtime.execute(call(arguments="{", call_id="c"))
    runtime.execute(call(arguments={"bad": 1}, call_id="d"))
    rows = runtime.audit.rows()
    assert [r.call_id for r in rows] == ["a", "b", "c", "d"]
    assert all(r.state.finished for r in rows)
    assert [r.result_code for r in rows] == [
        ErrorCode.OK,
        ErrorCode.TOOL_NOT_FOUND,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_ARGUMENT,
    ]


def test_a_reused_call_id_still_gets_its_own_row(runtime):
    runtime.execute(call(call_id="same"))
    runtime.execute(call(call_id="same"))
    assert runtime.audit.count() == 2


def test_audit_row_holds_the_seed_columns(runtime):
    runtime.execute(call(arguments={"text": "hi"}, actor="bot", session_id="s9"))
    row = runtime.audit.get("c1")
    assert row is not None
    assert (row.session_id, row.actor, row.tool_name, row.risk) == ("s9", "bot", "spy", "read")
    assert json.loads(row.arguments_json) == {"text": "hi"}
    assert len(row.arguments_hash) == 64
    assert (row.decision, row.state, row.result_code) == (
        "allow",
        CallState.SUCCEEDED,
        ErrorCode.OK,
    )
    assert row.started_at and row.finished_at and row.duration_ms is not None
    assert json.loads(row.result_preview) == {"echo": {"text": "hi"}}


def test_risk_is_recorded_for_refusals_too(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(registry_of(spy_tool(spy, risk=Risk.WRITE)))
    runtime.execute(call())
    row = runtime.audit.get("c1")
    assert row is not None and (row.risk, row.decision, row.rule) == (
        "write",
        "deny",
        "policy.risk_allowlist",
    )
