"""Hypothesis strategies from tool schemas: valid values pass the real
validator, invalid ones fail it, unsupported schemas are refused up front."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_toolguard.registry import ToolSpec
from pytest_toolguard.schema import SchemaValidator
from pytest_toolguard.strategies import UnsupportedSchema, arguments_for, from_schema
from pytest_toolguard.tools import BUILTIN_TOOLS

FAST = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _examples(strategy: st.SearchStrategy[Any]) -> list[Any]:
    """Draws a batch of examples (the strategy's own filters included)."""
    seen: list[Any] = []

    @FAST
    @given(strategy)
    def collect(value: Any) -> None:
        seen.append(value)

    collect()
    return seen


def _assert_generates(schema: dict[str, Any], *, valid: bool) -> list[Any]:
    validator = SchemaValidator(schema)
    examples = _examples(from_schema(schema, valid=valid))
    assert examples
    for value in examples:
        assert validator.is_valid(value) is valid, (value, validator.errors(value))
    return examples


TOOL_IDS = [spec.name for spec in BUILTIN_TOOLS]


# -- built-in tools ---------------------------------------------------------


@pytest.mark.parametrize("spec", BUILTIN_TOOLS, ids=TOOL_IDS)
def test_valid_arguments_pass_the_tools_validator(spec: ToolSpec) -> None:
    @FAST
    @given(arguments_for(spec))
    def check(arguments: dict[str, Any]) -> None:
        assert isinstance(arguments, dict)
        assert spec.input_validator.errors(arguments) == []

    check()


@pytest.mark.parametrize("spec", BUILTIN_TOOLS, ids=TOOL_IDS)
def test_invalid_arguments_fail_the_tools_validator(spec: ToolSpec) -> None:
    @FAST
    @given(arguments_for(spec, valid=False))
    def check(arguments: dict[str, Any]) -> None:
        assert isinstance(arguments, dict)
        assert spec.input_validator.errors(arguments) != []

    check()


def test_invalid_arguments_include_a_dropped_required_field() -> None:
    spec = next(s for s in BUILTIN_TOOLS if s.name == "write_file")
    examples = _examples(arguments_for(spec, valid=False))
    assert any(
        set(a) < {"path", "content"} and all(isinstance(v, str) for v in a.values())
        for a in examples
    )


# -- keyword families ---------------------------------------------------------

VALID_AND_INVALID = {
    "type_list": {"type": ["string", "null"]},
    "integer_range": {"type": "integer", "minimum": -3, "maximum": 7},
    "exclusive_range": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "integer_multiple": {"type": "integer", "multipleOf": 5, "minimum": 10, "maximum": 100},
    "number_multiple": {"type": "number", "multipleOf": 0.5, "maximum": 10},
    "string_length": {"type": "string", "minLength": 2, "maxLength": 5},
    "pattern": {"type": "string", "pattern": r"^[a-z]{2,4}-[0-9]+$", "maxLength": 12},
    "enum": {"enum": ["red", "green", 3, None]},
    "const": {"const": {"kind": "fixed"}},
    "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
    "prefix_items": {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "boolean"}],
        "items": False,
        "minItems": 2,
    },
    "unique_items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    "closed_object": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    },
    "additional_schema": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    },
    "any_of": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 0}]},
    "one_of": {
        "oneOf": [
            {"type": "integer", "multipleOf": 2},
            {"type": "integer", "multipleOf": 3},
        ]
    },
    "all_of": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        ]
    },
    "ref": {
        "$defs": {"name": {"type": "string", "minLength": 1, "maxLength": 8}},
        "type": "object",
        "properties": {"first": {"$ref": "#/$defs/name"}, "last": {"$ref": "#/$defs/name"}},
        "required": ["first"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "integer", "minimum": 1}},
                    "required": ["id"],
                    "additionalProperties": False,
                },
                "maxItems": 3,
            }
        },
        "required": ["rows"],
    },
    "not": {"type": "integer", "not": {"const": 0}},
}


@pytest.mark.parametrize("schema", VALID_AND_INVALID.values(), ids=VALID_AND_INVALID.keys())
def test_valid_values_pass_the_validator(schema: dict[str, Any]) -> None:
    _assert_generates(schema, valid=True)


@pytest.mark.parametrize("schema", VALID_AND_INVALID.values(), ids=VALID_AND_INVALID.keys())
def test_invalid_values_fail_the_validator(schema: dict[str, Any]) -> None:
    _assert_generates(schema, valid=False)


def test_anchored_pattern_values_match_the_whole_string() -> None:
    schema = {"type": "string", "pattern": r"^run-[0-9]{3}\.json$"}
    for value in _assert_generates(schema, valid=True):
        # Python's $ (the validator's) also matches before a final newline.
        assert re.fullmatch(r"run-[0-9]{3}\.json\n?", value)


def test_a_pattern_is_searched_for_as_json_schema_says_not_matched_whole() -> None:
    schema = {"type": "string", "pattern": "^https?://"}
    values = _assert_generates(schema, valid=True)
    assert all(re.match("https?://", value) for value in values)
    assert any(len(value) > len("https://") for value in values)


def test_one_of_values_match_exactly_one_branch() -> None:
    schema = VALID_AND_INVALID["one_of"]
    for value in _assert_generates(schema, valid=True):
        assert (value % 2 == 0) != (value % 3 == 0)


def test_unique_items_are_unique() -> None:
    for value in _assert_generates(VALID_AND_INVALID["unique_items"], valid=True):
        assert len(set(value)) == len(value)


def test_closed_object_never_has_unknown_fields() -> None:
    for value in _assert_generates(VALID_AND_INVALID["closed_object"], valid=True):
        assert "a" in value
        assert set(value) <= {"a", "b"}


def test_empty_schema_generates_any_json_value() -> None:
    examples = _assert_generates({}, valid=True)
    assert len({type(value) for value in examples}) > 1


def test_false_schema_generates_nothing() -> None:
    assert from_schema(False).is_empty


def test_empty_schema_has_no_invalid_values() -> None:
    with pytest.raises(ValueError, match="no invalid example"):
        from_schema({}, valid=False)


# -- bounds beyond what Hypothesis draws element by element ------------------------
# Hypothesis refuses min_size above its buffer (8 * 1024): lengths this large
# used to raise InvalidArgument from inside the strategy.

LARGE_BOUNDS = {
    "string_max_length": {"type": "string", "maxLength": 10_000},
    "string_min_length": {"type": "string", "minLength": 10_000},
    "string_length_window": {"type": "string", "minLength": 20_000, "maxLength": 20_004},
    "array_max_items": {"type": "array", "items": {"type": "integer"}, "maxItems": 10_000},
    "array_min_items": {"type": "array", "items": {"type": "integer"}, "minItems": 10_000},
    "array_prefix_then_min_items": {
        "type": "array",
        "prefixItems": [{"type": "string"}],
        "items": {"type": "boolean"},
        "minItems": 9_000,
    },
    "object_min_properties": {"type": "object", "minProperties": 10_000},
    "object_max_properties": {"type": "object", "maxProperties": 10_000},
    "object_min_properties_typed": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": {"type": "integer"},
        "minProperties": 9_000,
    },
    "nested_argument": {
        "type": "object",
        "properties": {"content": {"type": "string", "maxLength": 100_000}},
        "required": ["content"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("schema", LARGE_BOUNDS.values(), ids=LARGE_BOUNDS.keys())
def test_large_bound_valid_values_pass_the_validator(schema: dict[str, Any]) -> None:
    _assert_generates(schema, valid=True)


@pytest.mark.parametrize("schema", LARGE_BOUNDS.values(), ids=LARGE_BOUNDS.keys())
def test_large_bound_invalid_values_fail_the_validator(schema: dict[str, Any]) -> None:
    _assert_generates(schema, valid=False)


@pytest.mark.parametrize(
    ("schema", "too_far"),
    [
        ({"type": "string", "maxLength": 10_000}, lambda value: len(value) > 10_000),
        ({"type": "string", "minLength": 10_000}, lambda value: len(value) < 10_000),
        (
            {"type": "array", "items": {"type": "integer"}, "maxItems": 10_000},
            lambda value: len(value) > 10_000,
        ),
        ({"type": "object", "maxProperties": 10_000}, lambda value: len(value) > 10_000),
        ({"type": "object", "minProperties": 10_000}, lambda value: len(value) < 10_000),
    ],
    ids=["max_length", "min_length", "max_items", "max_properties", "min_properties"],
)
def test_invalid_values_reach_just_past_a_large_bound(schema: dict[str, Any], too_far: Any) -> None:
    examples = _examples(from_schema(schema, valid=False))
    assert any(isinstance(value, (str, list, dict)) and too_far(value) for value in examples)


def test_length_beyond_what_can_be_built_generates_nothing_instead_of_crashing() -> None:
    assert from_schema({"type": "string", "minLength": 10**12}).is_empty


# -- refusals -------------------------------------------------------------------


def test_recursive_ref_is_refused() -> None:
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"child": {"$ref": "#/$defs/node"}},
            }
        },
        "$ref": "#/$defs/node",
    }
    with pytest.raises(UnsupportedSchema, match="recursive") as caught:
        from_schema(schema)
    assert caught.value.keyword == "$ref"


def test_non_local_ref_is_refused() -> None:
    with pytest.raises(UnsupportedSchema) as caught:
        from_schema({"$ref": "https://example.com/schema.json"})
    assert caught.value.keyword == "$ref"


def test_unsupported_keyword_names_keyword_and_path() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "object", "patternProperties": {"^x": {}}}},
    }
    with pytest.raises(UnsupportedSchema) as caught:
        from_schema(schema)
    assert caught.value.keyword == "patternProperties"
    assert caught.value.path == "schema.properties.tags"


def test_unsupported_keyword_in_a_tool_is_refused_by_arguments_for() -> None:
    spec = ToolSpec(
        name="conditional",
        description="uses if/then",
        input_schema={"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
        handler=lambda ctx: {},
    )
    with pytest.raises(UnsupportedSchema) as caught:
        arguments_for(spec)
    assert caught.value.keyword in {"if", "then"}
