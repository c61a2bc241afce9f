"""Calls and hooks that once broke an invariant (found in review)."""

from __future__ import annotations

import contextlib
import warnings

from conftest import EVERY_RISK, WRITE_ANYWHERE, spy_tool

from pytest_toolguard import (
    Approver,
    CallState,
    Capabilities,
    ErrorCode,
    HookDecision,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRuntime,
)


def call(call_id="c1", tool_name="spy", **kw):
    return ToolCall(call_id=call_id, tool_name=tool_name, **kw)


def test_a_huge_integer_is_an_invalid_request_with_one_row(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE)
    for tool_name in ("spy", "nope"):
        result = runtime.execute(call(tool_name=tool_name, arguments={"text": 10**5000}))
        assert result.code is ErrorCode.INVALID_REQUEST
    assert runtime.audit.count() == 2


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def test_a_failure_after_the_handler_finishes_its_own_row_and_frees_no_key(
    toolguard_runtime, registry_of, spy
):
    def boom(ctx, **arguments):
        raise Unprintable()

    runtime = toolguard_runtime(registry_of(spy_tool(spy, result=boom)), WRITE_ANYWHERE)
    first = runtime.execute(call(idempotency_key="k"))
    assert first.code is ErrorCode.EXECUTION_ERROR and "Unprintable" in first.message
    again = runtime.execute(call("c2", idempotency_key="k"))
    assert again.code is ErrorCode.EXECUTION_ERROR and "replayed" in again.message
    rows = runtime.audit.rows()
    assert [(r.call_id, r.state) for r in rows] == [
        ("c1", CallState.FAILED),
        ("c2", CallState.FAILED),
    ]
    assert spy.count == 1


def test_warnings_as_errors_never_make_execute_raise(registry_of, spy, workspace_dir, tmp_path):
    store = SQLiteAuditStore(tmp_path / "a.db")
    runtime = ToolRuntime(registry_of(spy_tool(spy)), str(workspace_dir), WRITE_ANYWHERE, store)
    store.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runtime.execute(call(tool_name="nope")).code is ErrorCode.TOOL_NOT_FOUND
        assert runtime.execute(call("c2")).code is ErrorCode.AUDIT_UNAVAILABLE
        assert runtime.close() == ["2 audit write(s) could not be stored"]


def test_an_approval_does_not_cover_arguments_a_later_hook_rewrote(
    toolguard_runtime, registry_of, spy
):
    class Rewriter:
        name = "rewriter"

        def pre_tool_use(self, event):
            return HookDecision.proceed({"text": "mallory@example.com"})

    tool = spy_tool(spy, risk=Risk.EXTERNAL)
    runtime = toolguard_runtime(
        registry_of(tool),
        Capabilities(allowed_risks=EVERY_RISK),
        hooks=[Approver(lambda e: True), Rewriter()],
    )
    assert (
        runtime.execute(call(arguments={"text": "bob@example.com"})).code
        is ErrorCode.APPROVAL_REQUIRED
    )
    assert spy.count == 0


def test_a_hook_changing_the_arguments_in_place_changes_nothing(
    toolguard_runtime, registry_of, spy
):
    class Sneaky:
        name = "sneaky"

        def pre_tool_use(self, event):
            with contextlib.suppress(TypeError):  # read-only: the expected outcome
                event.arguments["text"] = "changed"
            return HookDecision.proceed()

    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[Sneaky()])
    assert runtime.execute(call(arguments={"text": "original"})).ok
    assert spy.calls == [{"text": "original"}]


def test_a_misspelt_hook_action_fails_closed(toolguard_runtime, registry_of, spy):
    class Typo:
        name = "typo"

        def pre_tool_use(self, event):
            return HookDecision("block", "no")  # type: ignore[arg-type]

    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE, hooks=[Typo()])
    assert runtime.execute(call()).code is ErrorCode.BLOCKED
    assert spy.count == 0


def test_a_token_in_an_identifier_is_not_stored(toolguard_runtime, registry_of, spy, tmp_path):
    token = "ghp_" + "a1B2" * 9
    runtime = toolguard_runtime(registry_of(spy_tool(spy)), WRITE_ANYWHERE)
    runtime.execute(call(call_id=token, tool_name=token))
    row = runtime.audit.rows()[0]
    assert token not in row.call_id and token not in row.tool_name


def test_only_a_tool_that_opts_in_may_read_a_hard_linked_file(toolguard_runtime, workspace_dir):
    import os

    from pytest_toolguard.registry import PathAccess, ToolRegistry, tool

    (workspace_dir / "a.txt").write_text("shared")
    os.link(workspace_dir / "a.txt", workspace_dir / "b.txt")

    def reader(name, allow):
        @tool(
            name=name,
            input_schema={"type": "object"},
            paths=[PathAccess.read("b.txt")],
            allow_hardlinks=allow,
        )
        def read(ctx):
            return {"text": ctx.workspace.read_text("b.txt")}

        return read

    runtime = toolguard_runtime(ToolRegistry([reader("strict", False), reader("lenient", True)]))
    assert (
        runtime.execute(ToolCall(call_id="1", tool_name="strict")).code is ErrorCode.FORBIDDEN_PATH
    )
    lenient = runtime.execute(ToolCall(call_id="2", tool_name="lenient"))
    assert lenient.ok and lenient.data == {"text": "shared"}
