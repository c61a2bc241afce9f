"""The data contract: codes, states, observations."""

import json

import pytest

from pytest_toolguard.contract import CallState, ErrorCode, ToolResult


def test_error_codes_are_spelt_as_their_values():
    assert all(code.value == code.name for code in ErrorCode)
    assert str(ErrorCode.PATH_OUTSIDE_WORKSPACE) == "PATH_OUTSIDE_WORKSPACE"


def test_error_code_set_is_the_documented_one():
    assert {code.value for code in ErrorCode} == {
        "OK",
        "IDEMPOTENT_REPLAY",
        "INVALID_REQUEST",
        "TOOL_NOT_FOUND",
        "INVALID_ARGUMENT",
        "PERMISSION_DENIED",
        "PATH_OUTSIDE_WORKSPACE",
        "FORBIDDEN_PATH",
        "LIMIT_EXCEEDED",
        "BLOCKED",
        "APPROVAL_REQUIRED",
        "DUPLICATE_CALL",
        "IDEMPOTENCY_CONFLICT",
        "AUDIT_UNAVAILABLE",
        "TIMEOUT",
        "EXECUTION_ERROR",
        "OUTPUT_INVALID",
        "ROLLBACK_CONFLICT",
    }


def test_only_transient_codes_are_retryable():
    retryable = {code for code in ErrorCode if code.retryable}
    assert retryable == {ErrorCode.TIMEOUT, ErrorCode.DUPLICATE_CALL, ErrorCode.AUDIT_UNAVAILABLE}


def test_every_code_is_documented():
    import inspect

    source = inspect.getsource(ErrorCode)
    for code in ErrorCode:
        line = f'{code.name} = "{code.value}"\n    """'
        assert line in source, f"{code.name} has no docstring"


def test_finished_states():
    assert not CallState.RUNNING.finished
    assert CallState.INTERRUPTED.finished and CallState.TIMED_OUT.finished


def _result(data, **kw):
    return ToolResult("c1", "read_text", True, ErrorCode.OK, "ok", data=data, **kw)


def test_observation_is_json_with_code_and_data():
    body = json.loads(_result({"content": "hi"}).to_observation())
    assert body == {
        "ok": True,
        "code": "OK",
        "message": "ok",
        "retryable": False,
        "data": {"content": "hi"},
    }


@pytest.mark.parametrize("limit", [200, 1000, 8000])
@pytest.mark.parametrize(
    "payload", ["x" * 50_000, 'é"\\\n' * 20_000, {"rows": list(range(20_000))}]
)
def test_observation_stays_within_limit_and_valid_json(limit, payload):
    text = _result(payload).to_observation(limit=limit)
    assert len(text) <= limit
    body = json.loads(text)
    assert body["truncated"] is True
    assert body["total_size"] > limit
