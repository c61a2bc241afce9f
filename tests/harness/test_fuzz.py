"""Fuzzing tools from their schemas: the built-in tools pass, and tools broken
on purpose are flagged with the right problem and a minimal reproducing call."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import posixpath
import threading
from dataclasses import replace
from typing import Any

import pytest

from pytest_toolguard import fuzz
from pytest_toolguard.audit import SQLiteAuditStore
from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.contract import ErrorCode, ToolCall, ToolResult
from pytest_toolguard.fuzz import (
    FuzzReport,
    Problem,
    check_call,
    fuzz_registry,
    fuzz_tool,
)
from pytest_toolguard.fuzz import call as fuzz_call
from pytest_toolguard.fuzz.workspace import FUZZ_ROOT, WORKSPACE_ROOT
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.runtime import ToolRuntime
from pytest_toolguard.schema import SchemaValidator
from pytest_toolguard.tools import BUILTIN_TOOLS, builtin_registry

EXAMPLES = 10

COUNT_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
COUNT_OUTPUT = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0}},
    "required": ["count"],
    "additionalProperties": False,
}
RAW_PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}
NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}


@functools.cache
def _report(name: str) -> FuzzReport:
    """One fuzzing run per broken tool, shared by the tests that read it."""
    spec = {"count_up": count_up, "write_unsandboxed": write_unsandboxed}[name]
    return fuzz_tool(spec, examples=EXAMPLES)


def _only(report: FuzzReport, problem: Problem) -> fuzz.FuzzFailure:
    """The one failure of ``problem`` (the report's text shows when missing)."""
    found = [failure for failure in report.failures if failure.problem is problem]
    assert len(found) == 1, report.format()
    return found[0]


def _problems(report: FuzzReport) -> set[Problem]:
    return {failure.problem for failure in report.failures}


def _escapes(path: str) -> bool:
    joined = posixpath.normpath(posixpath.join(WORKSPACE_ROOT, path.replace("\\", "/")))
    return not (joined + "/").startswith(WORKSPACE_ROOT + "/")


# -- tools broken on purpose ------------------------------------------------


@tool(input_schema=COUNT_SCHEMA, output_schema=COUNT_OUTPUT)
def count_up(ctx: ToolContext, n: int) -> dict[str, Any]:
    """Breaks its output schema for negative n."""
    return {"count": n}


@tool(input_schema=RAW_PATH_SCHEMA, risk=Risk.WRITE)
def write_unsandboxed(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Writes with raw open() beneath the root's host path: ../ escapes."""
    full = os.path.join(ctx.workspace.root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(content)
    return {"written": path}


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string", "minLength": 1}},
        "required": ["path"],
        "additionalProperties": False,
    }
)
def read_unsandboxed(ctx: ToolContext, path: str) -> dict[str, Any]:
    """Reads with raw open(): changes nothing, but leaks what it reads."""
    with open(os.path.join(ctx.workspace.root, path), encoding="utf-8") as handle:
        return {"content": handle.read()}


def _raising(exception: type[BaseException]) -> ToolSpec:
    def handler(ctx: ToolContext) -> dict[str, Any]:
        raise exception("from the handler")

    return tool(input_schema=NO_ARGUMENTS, name=f"raises_{exception.__name__}")(handler)


@tool(input_schema=NO_ARGUMENTS)
def returns_a_set(ctx: ToolContext) -> Any:
    """Its output is not JSON data."""
    return {"tags": {"a", "b"}}


def _trusting(spec: ToolSpec) -> ToolSpec:
    """``spec`` as a runtime with a broken argument check would see it: its
    validator accepts every value (schema ``{}``)."""
    object.__setattr__(spec, "input_validator", SchemaValidator({}))
    return spec


# -- the built-in tools pass ------------------------------------------------


@functools.cache
def _builtin_report(name: str) -> FuzzReport:
    registry = builtin_registry()
    spec = registry.get(name)
    assert spec is not None
    # wait_for_file waits until its deadline for files that never come, and
    # stops when cancelled (never a problem): a short deadline keeps it quick.
    deadline = 0.2 if name == "wait_for_file" else None
    return fuzz_tool(spec, examples=EXAMPLES, registry=registry, timeout_seconds=deadline)


@pytest.mark.parametrize("name", [spec.name for spec in BUILTIN_TOOLS])
def test_builtin_tool_passes_fuzzing(name: str) -> None:
    report = _builtin_report(name)

    assert report.ok, report.format()
    assert report.skipped is None
    assert report.valid_calls > 0 and report.invalid_calls > 0
    assert report.handler_calls > 0  # the handler itself was exercised
    assert report.codes.get("OK", 0) > 0  # some calls succeeded: outputs were checked
    assert report.codes.get("INVALID_ARGUMENT", 0) >= report.invalid_calls


@pytest.mark.parametrize("name", ["read_text", "write_file", "list_files", "search_text"])
def test_builtin_path_tools_meet_escapes_and_refuse_them(name: str) -> None:
    report = _builtin_report(name)

    assert report.codes.get("PATH_OUTSIDE_WORKSPACE", 0) > 0
    assert report.codes.get("FORBIDDEN_PATH", 0) > 0  # the .env probes
    assert report.ok, report.format()


# -- each check catches its bug ---------------------------------------------


def test_output_that_breaks_the_output_schema_is_reported_with_a_minimal_call() -> None:
    report = _report("count_up")

    failure = _only(report, Problem.OUTPUT_INVALID)
    assert failure.valid
    assert failure.arguments == {"n": -1}  # shrunk: the smallest breaking value
    assert "output.count" in failure.detail
    assert not report.ok


def test_raw_open_outside_the_workspace_is_caught_by_the_outside_check() -> None:
    report = _report("write_unsandboxed")

    failure = _only(report, Problem.OUTSIDE_CHANGED)
    assert failure.valid
    assert failure.arguments is not None and _escapes(failure.arguments["path"])
    # The simplest escape among the probes, on the simplest other arguments.
    assert failure.arguments == {"path": "../escape.txt", "content": ""}
    assert "created /toolguard-fuzz/escape.txt" in failure.detail


def test_raw_read_outside_the_workspace_is_caught_by_its_decoy_content() -> None:
    report = fuzz_tool(read_unsandboxed, examples=EXAMPLES)

    failure = _only(report, Problem.OUTSIDE_READ)
    assert failure.arguments is not None and _escapes(failure.arguments["path"])
    assert Problem.OUTSIDE_CHANGED not in _problems(report)  # reading changes nothing


@pytest.mark.parametrize("exception", [KeyboardInterrupt, SystemExit])
def test_handler_raising_a_base_exception_is_reported_and_execute_answers(
    exception: type[BaseException],
) -> None:
    report = fuzz_tool(_raising(exception), examples=EXAMPLES)

    failure = _only(report, Problem.HANDLER_BASE_EXCEPTION)
    assert exception.__name__ in failure.detail
    assert failure.arguments == {}
    assert Problem.EXECUTE_RAISED not in _problems(report)  # the runtime answered
    assert Problem.AUDIT_ROWS not in _problems(report)
    assert report.codes.get("EXECUTION_ERROR", 0) > 0


def test_output_that_is_not_json_is_reported() -> None:
    report = fuzz_tool(returns_a_set, examples=EXAMPLES)

    failure = _only(report, Problem.OUTPUT_NOT_JSON)
    assert "dict" in failure.detail and "OUTPUT_INVALID" in failure.detail
    assert Problem.EXECUTE_RAISED not in _problems(report)


def test_invalid_arguments_reaching_the_handler_are_reported() -> None:
    spec = _trusting(
        tool(input_schema=COUNT_SCHEMA, output_schema=COUNT_OUTPUT, name="trusting")(
            lambda ctx, n=0: {"count": abs(n) if isinstance(n, int) else 0}
        )
    )

    report = fuzz_tool(spec, examples=EXAMPLES)

    failure = _only(report, Problem.INVALID_REACHED_HANDLER)
    assert not failure.valid
    assert not SchemaValidator(COUNT_SCHEMA).is_valid(failure.arguments)
    assert report.failures == (failure,)  # valid arguments were fine


def test_the_unbroken_version_of_that_tool_passes() -> None:
    # The control for the test above: same tool, the runtime's own validator.
    spec = tool(input_schema=COUNT_SCHEMA, output_schema=COUNT_OUTPUT, name="counted")(
        lambda ctx, n: {"count": abs(n)}
    )

    report = fuzz_tool(spec, examples=EXAMPLES)

    assert report.ok, report.format()
    assert report.invalid_calls > 0 and report.codes["INVALID_ARGUMENT"] == report.invalid_calls


def test_handler_over_its_deadline_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    @tool(input_schema=NO_ARGUMENTS)
    def slow(ctx: ToolContext) -> dict[str, Any]:
        release.wait(0.15)  # ends on its own, well inside the orphan join bound
        return {}

    report = fuzz_tool(slow, examples=EXAMPLES, timeout_seconds=0.02)

    failure = _only(report, Problem.TIMEOUT)
    assert failure.arguments == {}
    assert report.codes["TIMEOUT"] == report.valid_calls
    assert Problem.HANDLER_STILL_RUNNING not in _problems(report)


# -- runtime faults, simulated at the runtime's collaborators ---------------


def test_execute_that_raises_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class Raising(ToolRuntime):
        def execute(self, call: ToolCall) -> ToolResult:
            raise RuntimeError("executor bug")

    monkeypatch.setattr(fuzz_call, "ToolRuntime", Raising)

    report = fuzz_tool(count_up, examples=EXAMPLES)

    raised = [f for f in report.failures if f.problem is Problem.EXECUTE_RAISED]
    assert {f.valid for f in raised} == {True, False}  # one minimal call of each kind
    assert all("RuntimeError: executor bug" in f.detail for f in raised)


def test_invalid_arguments_answered_another_code_are_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Misparsing(ToolRuntime):
        def execute(self, call: ToolCall) -> ToolResult:
            return super().execute(replace(call, arguments="{not json"))

    monkeypatch.setattr(fuzz_call, "ToolRuntime", Misparsing)

    report = fuzz_tool(count_up, examples=EXAMPLES)

    failure = _only(report, Problem.INVALID_NOT_REFUSED)
    assert not failure.valid
    assert str(ErrorCode.INVALID_REQUEST) in failure.detail
    assert _problems(report) == {Problem.INVALID_NOT_REFUSED}


def test_audit_row_left_running_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class ForgetsToFinish(SQLiteAuditStore):
        def finish(self, audit_id: int, outcome: Any, **fields: Any) -> None:
            pass

    monkeypatch.setattr(fuzz_call, "SQLiteAuditStore", ForgetsToFinish)

    # A WRITE tool: its RUNNING row is committed first, then finished (a READ
    # call writes one finished row, after its handler).
    report = fuzz_tool(replace(count_up, risk=Risk.WRITE), examples=EXAMPLES)

    failure = next(f for f in report.failures if f.problem is Problem.AUDIT_ROWS)
    assert failure.valid  # refused calls write one finished row at once; only runs finish later
    assert "RUNNING" in failure.detail


def test_a_read_call_that_left_no_row_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class ForgetsToRecord(SQLiteAuditStore):
        def record(self, rec: Any) -> int:
            return 0

    monkeypatch.setattr(fuzz_call, "SQLiteAuditStore", ForgetsToRecord)

    report = fuzz_tool(count_up, examples=EXAMPLES)

    failure = next(f for f in report.failures if f.problem is Problem.AUDIT_ROWS)
    assert "found 0" in failure.detail


# -- tools that need approval, and tools no call reaches ----------------------

SEND_SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": "string", "maxLength": 50}},
    "required": ["message"],
    "additionalProperties": False,
}
URL_SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string"}},
    "required": ["url"],
    "additionalProperties": False,
}


@tool(input_schema=SEND_SCHEMA, risk=Risk.EXTERNAL)
def send_message(ctx: ToolContext, message: str) -> dict[str, Any]:
    """Needs approval; sends nothing (a stub)."""
    return {"sent": len(message)}


@tool(input_schema=URL_SCHEMA, risk=Risk.EXTERNAL, network_host_argument="url")
def fetch_stub(ctx: ToolContext, url: str) -> dict[str, Any]:
    """Names its host, so the fuzz workspace's policy (no host allowed) refuses it."""
    return {"fetched": url}


def test_tool_that_needs_approval_runs_its_handler_with_an_approver() -> None:
    report = fuzz_tool(send_message, examples=EXAMPLES)

    assert report.skipped is None, report.format()
    assert report.ok, report.format()
    assert report.handler_calls > 0
    assert report.codes.get("OK", 0) > 0
    assert "APPROVAL_REQUIRED" not in report.codes


def test_tool_refused_approval_is_skipped_naming_the_refusal() -> None:
    report = fuzz_tool(send_message, examples=EXAMPLES, approve=False)

    assert report.handler_calls == 0
    assert report.skipped is not None
    assert "handler never ran" in report.skipped
    assert "APPROVAL_REQUIRED" in report.skipped
    assert report.ok  # not a failure: nothing was tested


def test_tool_every_call_of_which_the_policy_refuses_is_skipped_naming_the_rule() -> None:
    report = fuzz_tool(fetch_stub, examples=EXAMPLES)

    assert report.handler_calls == 0
    assert report.skipped is not None
    assert "policy.network_host" in report.skipped
    assert "skipped" in report.format()


def test_tool_without_valid_arguments_is_skipped() -> None:
    spec = tool(
        input_schema={
            "type": "object",
            "properties": {"s": {"type": "string", "minLength": 10**12}},
            "required": ["s"],
        },
        name="unreachable",
    )(lambda ctx, s: {})

    report = fuzz_tool(spec, examples=EXAMPLES)

    assert report.skipped is not None
    assert "no valid arguments" in report.skipped


def test_string_with_a_max_length_beyond_hypothesis_buffer_is_fuzzed() -> None:
    spec = tool(
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 10_000}},
            "required": ["text"],
            "additionalProperties": False,
        },
        name="long_text",
    )(lambda ctx, text: {"length": len(text)})

    report = fuzz_tool(spec, examples=EXAMPLES)

    assert report.ok, report.format()
    assert report.skipped is None
    assert report.invalid_calls > 0 and report.handler_calls > 0


# -- async def handlers ----------------------------------------------------------

needs_async_runtime = pytest.mark.skipif(
    not hasattr(ToolRuntime, "aexecute"), reason="the runtime does not await handlers yet"
)


@tool(input_schema=COUNT_SCHEMA, output_schema=COUNT_OUTPUT)
async def count_up_async(ctx: ToolContext, n: int) -> dict[str, Any]:
    """count_up as a coroutine: breaks its output schema for negative n."""
    return {"count": n}


@needs_async_runtime
def test_async_handler_is_awaited_and_its_output_checked() -> None:
    report = fuzz_tool(count_up_async, examples=EXAMPLES)

    assert report.handler_calls > 0 and report.codes.get("OK", 0) > 0, report.format()
    failure = _only(report, Problem.OUTPUT_INVALID)
    assert failure.arguments == {"n": -1}


@needs_async_runtime
def test_async_handler_cancelled_at_its_deadline_is_no_problem() -> None:
    @tool(input_schema=NO_ARGUMENTS)
    async def sleeps(ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(30)
        return {}

    report = fuzz_tool(sleeps, examples=2, timeout_seconds=0.05)

    assert report.codes.get("TIMEOUT", 0) > 0, report.format()
    assert report.ok, report.format()


# -- reports ----------------------------------------------------------------


def test_schema_outside_the_supported_subset_is_skipped_not_crashed() -> None:
    spec = tool(
        input_schema={"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        name="unsupported",
    )(lambda ctx, **kwargs: {})

    report = fuzz_tool(spec, examples=EXAMPLES)

    assert report.skipped is not None and "patternProperties" in report.skipped
    assert report.ok and report.valid_calls == report.invalid_calls == 0
    assert "skipped" in report.format()


def test_schema_without_invalid_arguments_is_noted() -> None:
    spec = tool(input_schema={"type": "object"}, name="anything_goes")(lambda ctx, **kw: {})

    report = fuzz_tool(spec, examples=EXAMPLES)

    assert report.ok, report.format()
    assert report.invalid_calls == 0
    assert any("no invalid arguments" in note for note in report.notes)


def test_same_seed_same_report() -> None:
    first = fuzz_tool(count_up, examples=5, seed=7)
    second = fuzz_tool(count_up, examples=5, seed=7)

    assert first == second


def test_a_failure_is_reproduced_by_check_call() -> None:
    failure = _only(_report("write_unsandboxed"), Problem.OUTSIDE_CHANGED)
    assert failure.arguments is not None

    again = check_call(write_unsandboxed, json.loads(failure.arguments_json))

    assert Problem.OUTSIDE_CHANGED in {f.problem for f in again}
    inside = check_call(write_unsandboxed, {"path": "notes.txt", "content": "x"})
    # It declares no paths: a write inside is an undeclared change, not an escape.
    assert {f.problem for f in inside} == {Problem.UNDECLARED_CHANGE}


def test_report_text_names_the_problem_and_the_call() -> None:
    text = _report("count_up").format()

    assert text.startswith("fuzz count_up: 1 failure(s)")
    assert "[output-invalid] with valid arguments" in text
    assert '{"arguments": {"n": -1}, "tool_name": "count_up"}' in text
    assert "check_call(spec, json.loads('{\"n\": -1}'))" in text


def test_registry_is_fuzzed_tool_by_tool_in_name_order() -> None:
    registry = ToolRegistry([returns_a_set, _raising(SystemExit), count_up])

    reports = fuzz_registry(
        registry, examples=EXAMPLES, tools=["returns_a_set", "raises_SystemExit"]
    )

    assert [report.tool for report in reports] == ["raises_SystemExit", "returns_a_set"]
    assert _problems(reports[0]) == {Problem.HANDLER_BASE_EXCEPTION}
    assert _problems(reports[1]) == {Problem.OUTPUT_NOT_JSON}
    with pytest.raises(KeyError, match="missing"):
        fuzz_registry(registry, tools=["missing"])


def test_fuzzing_leaves_the_real_filesystem_alone() -> None:
    report = _report("write_unsandboxed")

    assert not report.ok
    assert not os.path.exists(FUZZ_ROOT)


def test_examples_must_be_positive() -> None:
    with pytest.raises(ValueError, match="examples"):
        fuzz_tool(count_up, examples=0)


def test_valid_arguments_refused_by_the_input_check_are_reported() -> None:
    spec = tool(input_schema=COUNT_SCHEMA, name="refusing")(lambda ctx, n: {})
    object.__setattr__(spec, "input_validator", SchemaValidator({"not": {}}))

    report = fuzz_tool(spec, examples=EXAMPLES)

    failure = _only(report, Problem.VALID_REFUSED)
    assert failure.valid and failure.arguments == {"n": 0}
    assert "INVALID_ARGUMENT" in failure.detail


def test_ok_result_whose_output_breaks_the_schema_is_reported() -> None:
    spec = tool(input_schema=COUNT_SCHEMA, output_schema=COUNT_OUTPUT, name="unchecked")(
        lambda ctx, n: {"count": n}
    )
    object.__setattr__(spec, "output_validator", SchemaValidator({}, root="output"))

    report = fuzz_tool(spec, examples=EXAMPLES)

    failure = _only(report, Problem.OUTPUT_UNCHECKED)
    assert failure.arguments == {"n": -1}
    assert "answered OK" in failure.detail


def test_handler_run_twice_for_one_call_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class Twice(ToolRuntime):
        def execute(self, call: ToolCall) -> ToolResult:
            super().execute(replace(call, call_id="first-of-two"))
            return super().execute(call)

    monkeypatch.setattr(fuzz_call, "ToolRuntime", Twice)

    report = fuzz_tool(_raising(ValueError), examples=EXAMPLES)

    assert _only(report, Problem.HANDLER_RAN_TWICE).detail == "the handler ran 2 times"
    audit = [f for f in report.failures if f.problem is Problem.AUDIT_ROWS]
    assert audit and all("calls never made: first-of-two" in f.detail for f in audit)


def test_handler_still_running_after_the_join_bound_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    @tool(input_schema=NO_ARGUMENTS)
    def hangs(ctx: ToolContext) -> dict[str, Any]:
        release.wait(10)  # until the test releases it: it touches no file
        return {}

    monkeypatch.setattr(fuzz_call, "ORPHAN_JOIN_SECONDS", 0.02)
    try:
        report = fuzz_tool(hangs, examples=EXAMPLES, timeout_seconds=0.02)
    finally:
        release.set()

    failure = _only(report, Problem.HANDLER_STILL_RUNNING)
    assert "real disk" in failure.detail
    assert Problem.TIMEOUT in _problems(report)


def test_failure_that_does_not_repeat_is_reported_as_flaky() -> None:
    calls = iter(range(1_000_000))

    @tool(input_schema=NO_ARGUMENTS, output_schema=COUNT_OUTPUT)
    def unsteady(ctx: ToolContext) -> dict[str, Any]:
        return {"count": -1 if next(calls) == 0 else 0}  # breaks its schema once

    report = fuzz_tool(unsteady, examples=EXAMPLES)

    failure = _only(report, Problem.FLAKY)
    assert failure.arguments == {}
    assert "output.count" in failure.detail


def test_report_survives_a_trip_through_plain_json() -> None:
    report = _report("write_unsandboxed")

    data = json.loads(json.dumps(report.as_dict()))

    assert FuzzReport.from_dict(data) == report
    assert "outside-changed" in {failure["problem"] for failure in data["failures"]}
