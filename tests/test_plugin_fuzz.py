"""``pytest --toolguard-fuzz``: one item per registered tool, failing
examples reported with the call that reproduces them, and xdist."""

from __future__ import annotations

import pytest

NO_XDIST = ("-p", "no:xdist")

TOOLS = '''
from pytest_toolguard import ToolRegistry, tool

@tool(
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"double": {"type": "integer"}},
                   "required": ["double"], "additionalProperties": False},
)
def double(ctx, n):
    """Twice n."""
    return {"double": 2 * n}

@tool(
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"sign": {"type": "string"}},
                   "required": ["sign"], "additionalProperties": False},
)
def sign(ctx, n):
    """Broken: a negative n gets an integer, not the string its schema says."""
    return {"sign": "+" if n >= 0 else -1}

registry = ToolRegistry([double, sign])
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mytools=TOOLS)
    pytester.makeini("[pytest]\ntoolguard_registry = mytools:registry\n")
    pytester.syspathinsert()
    return pytester


def test_one_item_per_tool(project: pytest.Pytester) -> None:
    result = project.runpytest("--toolguard-fuzz", "--collect-only", "-q", *NO_XDIST)
    result.stdout.fnmatch_lines(["toolguard-fuzz::double", "toolguard-fuzz::sign"])
    plain = project.runpytest("--collect-only", "-q", *NO_XDIST)
    assert "toolguard-fuzz" not in plain.stdout.str()


def test_a_broken_tool_fails_with_the_call_that_reproduces_it(project: pytest.Pytester) -> None:
    result = project.runpytest("--toolguard-fuzz", "--toolguard-fuzz-examples=20", *NO_XDIST)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]output-invalid[]] with valid arguments*",
            '*call:*"arguments": {"n": -1}*"tool_name": "sign"*',
            "*reproduce: pytest_toolguard.fuzz.check_call(spec, *",
            "toolguard fuzz: 2 tools, * 1 failing examples",
        ]
    )


def test_xdist_runs_the_same_items_and_sums_them(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(
        "--toolguard-fuzz", "--toolguard-fuzz-examples=5", "-n", "2"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["toolguard fuzz: 2 tools, * 1 failing examples"])


def test_k_selects_fuzz_items_like_any_other(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--toolguard-fuzz", "-k", "double", "--collect-only", "-q", *NO_XDIST
    )
    result.stdout.fnmatch_lines(["toolguard-fuzz::double"])
    assert "toolguard-fuzz::sign" not in result.stdout.str()
