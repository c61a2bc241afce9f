"""Foreign tool definitions in (MCP, OpenAI, Anthropic, LangChain, typed
functions) and ours out (to_mcp, to_openai, to_anthropic)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Literal, Optional, TypedDict

import pytest

from pytest_toolguard import ErrorCode, PathAccess, Risk, ToolCall, ToolRegistry, ToolRuntime, tool
from pytest_toolguard.bridges import (
    BridgeError,
    BridgeWarning,
    from_anthropic,
    from_function,
    from_mcp,
    from_openai,
)
from pytest_toolguard.bridges.definitions.mcp import risk_from_annotations

OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def mcp_tool(name: str = "t", annotations: dict | None = None, **extra: object) -> dict:
    body: dict = {"name": name, "description": "d", "inputSchema": OBJECT, **extra}
    if annotations is not None:
        body["annotations"] = annotations
    return body


# -- MCP risk -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "risk"),
    [
        ({"readOnlyHint": True, "openWorldHint": False}, Risk.READ),
        ({"readOnlyHint": True}, Risk.EXTERNAL),  # open world by default
        ({"readOnlyHint": True, "openWorldHint": True}, Risk.EXTERNAL),
        ({"readOnlyHint": False}, Risk.DANGEROUS),  # destructive by default
        ({"destructiveHint": True, "openWorldHint": False}, Risk.DANGEROUS),
        ({"destructiveHint": False}, Risk.EXTERNAL),  # open world by default
        ({"destructiveHint": False, "openWorldHint": False}, Risk.WRITE),
        ({"title": "Only a title"}, Risk.DANGEROUS),
    ],
)
def test_mcp_risk_follows_the_annotation_table(annotations: dict, risk: Risk) -> None:
    assert risk_from_annotations(annotations, tool="t")[0] is risk


def test_mcp_tool_without_annotations_is_dangerous() -> None:
    (spec,) = from_mcp(mcp_tool())
    assert spec.risk is Risk.DANGEROUS
    assert spec.idempotent is False


def test_mcp_default_risk_applies_to_tools_without_annotations() -> None:
    (spec,) = from_mcp(mcp_tool(), default_risk="write")
    assert spec.risk is Risk.WRITE


def test_mcp_untrusted_annotations_give_the_default_risk() -> None:
    readonly = {"readOnlyHint": True, "openWorldHint": False}
    (spec,) = from_mcp(mcp_tool(annotations=readonly), trust_annotations=False)
    assert spec.risk is Risk.DANGEROUS


def test_mcp_idempotent_hint_sets_idempotent() -> None:
    (spec,) = from_mcp(mcp_tool(annotations={"idempotentHint": True, "readOnlyHint": True}))
    assert spec.idempotent is True


def test_mcp_non_boolean_hint_warns_naming_the_tool_and_is_never_read_only() -> None:
    with pytest.warns(BridgeWarning, match="odd: annotation readOnlyHint='yes'"):
        (spec,) = from_mcp(
            mcp_tool("odd", annotations={"readOnlyHint": "yes", "openWorldHint": False})
        )
    assert spec.risk is not Risk.READ


def test_mcp_unknown_annotation_warns_naming_the_tool() -> None:
    with pytest.warns(BridgeWarning, match="odd: unknown annotation 'riskHint'"):
        from_mcp(mcp_tool("odd", annotations={"riskHint": "low"}))


def test_mcp_schema_of_another_dialect_warns_naming_the_tool() -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
    with pytest.warns(BridgeWarning, match="old: its input schema declares"):
        from_mcp({"name": "old", "inputSchema": schema})


def test_mcp_schema_2020_12_declared_does_not_warn() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_mcp({"name": "new", "inputSchema": schema})


def test_mcp_reads_a_tools_list_result_with_output_schema() -> None:
    output = {"type": "object", "properties": {"n": {"type": "integer"}}}
    specs = from_mcp({"tools": [mcp_tool("a", outputSchema=output), mcp_tool("b")]})
    assert [spec.name for spec in specs] == ["a", "b"]
    assert specs[0].output_schema == output


def test_mcp_invalid_schema_raises_bridge_error_naming_the_tool() -> None:
    with pytest.raises(BridgeError, match="broken"):
        from_mcp({"name": "broken", "inputSchema": {"type": "no-such-type"}})


def test_mcp_risks_override_names_tools() -> None:
    (spec,) = from_mcp(mcp_tool("x"), risks={"x": "read"})
    assert spec.risk is Risk.READ


# -- paths ----------------------------------------------------------------------


def test_undeclared_path_argument_warns_naming_tool_and_argument() -> None:
    schema = {"type": "object", "properties": {"file_path": {"type": "string"}}}
    with pytest.warns(BridgeWarning, match="save: argument 'file_path' looks like a path"):
        from_mcp({"name": "save", "inputSchema": schema})


def test_declared_paths_are_checked_by_the_policy(tmp_path) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (spec,) = from_openai(
            {"type": "function", "function": {"name": "read", "parameters": schema}},
            handlers={"read": lambda ctx, path: "read"},
            paths={"read": [PathAccess.read("{path}")]},
        )
    runtime = ToolRuntime(ToolRegistry([spec]), tmp_path)
    result = runtime.execute(ToolCall("1", "read", {"path": "../outside"}))
    runtime.close()
    assert result.code is ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_imported_tool_without_handler_fails_saying_how_to_give_one(tmp_path) -> None:
    (spec,) = from_anthropic({"name": "lookup", "input_schema": OBJECT})
    runtime = ToolRuntime(ToolRegistry([spec]), tmp_path)
    result = runtime.execute(ToolCall("1", "lookup", {"q": "x"}))
    runtime.close()
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert "handlers=" in result.message


# -- OpenAI, Anthropic -----------------------------------------------------------


def test_openai_chat_and_responses_shapes_give_the_same_spec() -> None:
    chat = {"type": "function", "function": {"name": "f", "description": "d", "parameters": OBJECT}}
    responses = {"type": "function", "name": "f", "description": "d", "parameters": OBJECT}
    (a,) = from_openai(chat)
    (b,) = from_openai(responses)
    assert (a.name, a.description, a.input_schema) == (b.name, b.description, b.input_schema)


def test_openai_responses_output_schema_is_kept() -> None:
    output = {"type": "object"}
    (spec,) = from_openai(
        {"type": "function", "name": "f", "parameters": OBJECT, "output_schema": output}
    )
    assert spec.output_schema == output


def test_openai_non_function_tool_raises_bridge_error() -> None:
    with pytest.raises(BridgeError, match="web_search"):
        from_openai({"type": "web_search"})


def test_anthropic_server_tool_raises_bridge_error() -> None:
    with pytest.raises(BridgeError, match="web_search_20250305"):
        from_anthropic({"type": "web_search_20250305", "name": "web_search"})


def test_anthropic_risk_comes_from_risks() -> None:
    (spec,) = from_anthropic({"name": "send", "input_schema": OBJECT}, risks={"send": "external"})
    assert spec.risk is Risk.EXTERNAL


# -- the reverse ----------------------------------------------------------------


@pytest.mark.parametrize("risk", list(Risk))
def test_to_mcp_annotations_read_back_as_the_same_risk(risk: Risk) -> None:
    spec = from_mcp(mcp_tool(), risks={"t": risk})[0]
    (back,) = from_mcp(spec.to_mcp())
    assert back.risk is risk


def test_to_mcp_keeps_idempotent_and_output_schema() -> None:
    @tool(idempotent=True, output_schema={"type": "object"})
    def f(ctx, q: str) -> dict:
        return {}

    wire = f.to_mcp()
    assert wire["annotations"]["idempotentHint"] is True
    assert wire["outputSchema"] == {"type": "object"}
    assert wire["inputSchema"] == f.input_schema


def test_to_openai_chat_and_responses_shapes() -> None:
    @tool()
    def f(ctx, q: str) -> str:
        """Find."""
        return q

    assert f.to_openai()["function"] == {
        "name": "f",
        "description": "Find.",
        "parameters": f.input_schema,
    }
    responses = f.to_openai("responses")
    assert responses["type"] == "function" and responses["parameters"] == f.input_schema
    assert from_openai(responses)[0].input_schema == f.input_schema


def test_to_anthropic_round_trips() -> None:
    @tool()
    def f(ctx, q: str) -> str:
        return q

    assert from_anthropic(f.to_anthropic())[0].input_schema == f.input_schema


def test_to_openai_unknown_api_raises() -> None:
    @tool()
    def f(ctx) -> str:
        return ""

    with pytest.raises(ValueError, match="chat"):
        f.to_openai("assistants")  # type: ignore[arg-type]


# -- typed Python functions -------------------------------------------------------


class Options(TypedDict, total=False):
    depth: int


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


def test_tool_without_input_schema_takes_it_from_the_signature() -> None:
    @tool()
    def find(ctx, q: str, limit: int = 10, mode: Literal["a", "b"] = "a") -> list[str]:
        return []

    assert find.input_schema == {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "mode": {"enum": ["a", "b"], "default": "a"},
        },
        "required": ["q"],
        "additionalProperties": False,
    }


def test_signature_schema_refuses_wrong_arguments_before_the_handler(tmp_path) -> None:
    calls = []

    @tool()
    def find(ctx, q: str, limit: Optional[int] = None) -> str:  # noqa: UP045 (Optional too)
        calls.append(q)
        return q

    runtime = ToolRuntime(ToolRegistry([find]), tmp_path)
    bad = runtime.execute(ToolCall("1", "find", {"q": "x", "limit": "ten"}))
    good = runtime.execute(ToolCall("2", "find", {"q": "x", "limit": None}))
    runtime.close()
    assert bad.code is ErrorCode.INVALID_ARGUMENT and "arguments.limit" in bad.message
    assert good.ok and calls == ["x"]


def test_typeddict_parameter_becomes_an_object_schema() -> None:
    @tool()
    def f(ctx, options: Options) -> str:
        return ""

    assert f.input_schema["properties"]["options"] == {
        "type": "object",
        "properties": {"depth": {"type": "integer"}},
        "additionalProperties": False,
    }


def test_dataclass_parameter_arrives_as_the_dataclass(tmp_path) -> None:
    seen = []

    @tool()
    def move(ctx, to: Point, via: Point | None = None) -> str:
        seen.append((to, via))
        return "moved"

    assert move.input_schema["properties"]["to"]["required"] == ["x"]
    runtime = ToolRuntime(ToolRegistry([move]), tmp_path)
    result = runtime.execute(ToolCall("1", "move", {"to": {"x": 1}, "via": {"x": 2, "y": 3}}))
    runtime.close()
    assert result.ok
    assert seen == [(Point(1, 0), Point(2, 3))]


class Opaque:
    pass


def test_untyped_class_parameter_raises_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="'thing'"):

        @tool()
        def f(ctx, thing: Opaque) -> str:
            return ""


def test_from_function_runs_a_plain_function_without_context(tmp_path) -> None:
    def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    spec = from_function(add)
    assert spec.description == "Add two numbers."
    runtime = ToolRuntime(ToolRegistry([spec]), tmp_path)
    result = runtime.execute(ToolCall("1", "add", {"a": 1}))
    runtime.close()
    assert result.data == 3


def test_from_function_keeps_async_functions_async(tmp_path) -> None:
    async def shout(text: str) -> str:
        return text.upper()

    spec = from_function(shout)
    assert spec.is_async
    runtime = ToolRuntime(ToolRegistry([spec]), tmp_path)
    result = runtime.execute(ToolCall("1", "shout", {"text": "hi"}))
    runtime.close()
    assert result.data == "HI"
