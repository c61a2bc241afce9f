"""``execute`` never raises, whatever a call contains."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall, ToolResult
from pytest_toolguard.tools import builtin_registry

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
names = st.sampled_from(builtin_registry().names()) | st.text(max_size=20)
anything = json_values | st.binary(max_size=20) | st.builds(object)
paths = st.sampled_from(
    ["a.txt", "../x", "/etc/passwd", ".env", "", "\x00", "runs/r1/x", "src\\..\\..\\y", "%2e%2e/x"]
)


@st.composite
def calls(draw):
    tool_name = draw(names | anything)
    if draw(st.booleans()):
        arguments = draw(
            st.dictionaries(
                st.sampled_from(["path", "content", "query", "artifact_name", "max_chars"]),
                paths | json_values,
                max_size=3,
            )
        )
    else:
        arguments = draw(json_values | st.text(max_size=40) | anything)
    if draw(st.booleans()) and isinstance(arguments, dict):
        arguments = json.dumps(arguments, allow_nan=True)
    return ToolCall(
        call_id=draw(st.text(max_size=10) | anything),
        tool_name=tool_name,
        arguments=arguments,
        actor=draw(st.text(max_size=10) | anything),
        session_id=draw(st.text(max_size=10)),
        idempotency_key=draw(st.none() | st.text(max_size=10) | anything),
        metadata=draw(st.dictionaries(st.text(max_size=5), json_values, max_size=2) | anything),
    )


@pytest.fixture
def runtime(toolguard_runtime):
    # Hypothesis shares one runtime across the examples of a test: good, a
    # bad call must not poison the next one either.
    caps = Capabilities(allowed_risks=frozenset(Risk), write_roots=("runs",))
    return toolguard_runtime(builtin_registry(), caps, variables={"run_id": "r1"})


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(call=calls())
def test_execute_never_raises_and_always_answers_a_known_code(runtime, call):
    result = runtime.execute(call)
    assert isinstance(result, ToolResult)
    assert isinstance(result.code, ErrorCode)
    assert result.ok == result.code.ok
    json.loads(result.to_observation())
