"""Tool declarations and the registry."""

import pytest

from pytest_toolguard.capabilities import Capabilities, Risk
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.schema import InvalidSchema
from pytest_toolguard.tools import builtin_registry

OBJECT = {"type": "object", "additionalProperties": False}


def _spec(name, risk=Risk.READ):
    return ToolSpec(
        name=name, description=name, input_schema=OBJECT, handler=lambda ctx: {}, risk=risk
    )


def test_register_refuses_a_duplicate_name():
    registry = ToolRegistry([_spec("a")])
    with pytest.raises(ValueError, match="duplicate tool: a"):
        registry.register(_spec("a"))


def test_get_returns_none_for_unknown_tools():
    assert ToolRegistry().get("nope") is None


def test_decorator_takes_name_and_description_from_the_function():
    @tool(input_schema=OBJECT)
    def greet(ctx):
        """Say hello."""

    assert (greet.name, greet.description, greet.risk) == ("greet", "Say hello.", Risk.READ)


def test_invalid_schema_fails_at_declaration_not_at_call_time():
    with pytest.raises(InvalidSchema):
        _ = ToolSpec(name="x", description="", input_schema={"type": 3}, handler=lambda ctx: None)


def test_specs_for_shows_only_what_the_session_may_call():
    registry = ToolRegistry([_spec("read"), _spec("write", Risk.WRITE), _spec("other")])
    caps = Capabilities(
        allowed_tools=frozenset({"read", "write"}), allowed_risks=frozenset({Risk.READ})
    )
    assert registry.specs_for(caps) == [
        {"name": "read", "description": "read", "input_schema": OBJECT}
    ]


def test_specs_for_never_exposes_handlers_or_limits():
    for described in builtin_registry().specs_for(Capabilities(allowed_risks=frozenset(Risk))):
        assert set(described) == {"name", "description", "input_schema"}


def test_path_template_fields():
    assert PathAccess.write("runs/{run_id}/artifacts/{artifact_name}").fields == (
        "run_id",
        "artifact_name",
    )


def test_builtin_tools_all_have_output_schemas():
    registry = builtin_registry()
    assert registry.names() == sorted(
        [
            "read_text",
            "write_file",
            "list_files",
            "search_text",
            "read_csv",
            "write_json_file",
            "write_markdown_file",
            "list_run_files",
            "wait_for_file",
        ]
    )
    assert all(spec.output_validator is not None for spec in registry)


def test_path_template_selectors_go_into_arrays_and_objects():
    access = PathAccess.write("{root_dir}/{files[*].file_path}")
    assert access.fields == ("root_dir", "files")
    assert access.selectors == ("root_dir", "files[*].file_path")


def test_a_path_template_on_a_list_argument_fails_at_declaration():
    with pytest.raises(ValueError, match=r"\{paths\[\*\]\}"):

        @tool(paths=[PathAccess.write("{paths}")])
        def touch(ctx, paths: list[str]): ...

    @tool(paths=[PathAccess.write("{paths[*]}")])
    def touch_each(ctx, paths: list[str]): ...

    assert touch_each.paths[0].selectors == ("paths[*]",)
