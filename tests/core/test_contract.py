"""The data contract: codes, states, observations."""

import json
import re
from pathlib import Path

import pytest

from pytest_toolguard.contract import CallState, ErrorCode, ToolResult


def test_error_codes_are_spelt_as_their_values():
    assert all(code.value == code.name for code in ErrorCode)
    assert str(ErrorCode.PATH_OUTSIDE_WORKSPACE) == "PATH_OUTSIDE_WORKSPACE"


def _documented_codes() -> dict[str, str]:
    """docs/error-codes.md's table: each code and its retryable column."""
    page = Path(__file__).resolve().parents[2] / "docs" / "error-codes.md"
    rows = re.findall(r"^\| `([A-Z_]+)` \|.*\| (yes|no|-) \|$", page.read_text(), re.MULTILINE)
    return dict(rows)


def test_the_codes_are_the_ones_the_error_code_page_documents():
    # The page users read is the list: a new code is one row there, and a
    # code the page forgot (or a row for one that is gone) fails here.
    documented = _documented_codes()
    assert set(documented) == {code.value for code in ErrorCode}
    assert {code for code, retryable in documented.items() if retryable == "yes"} == {
        code.value for code in ErrorCode if code.retryable
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
