"""Compiled input schemas and their error paths."""

import json
import uuid

import pytest

from pytest_toolguard import schema as schema_module
from pytest_toolguard.schema import InvalidSchema, SchemaValidator

WRITE_JSON = {
    "type": "object",
    "properties": {"artifact_name": {"type": "string"}, "content": {}},
    "required": ["artifact_name", "content"],
    "additionalProperties": False,
}
READ_TEXT = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "max_chars": {"type": "integer", "minimum": 1, "maximum": 20000},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_missing_field_names_its_path():
    errors = SchemaValidator(WRITE_JSON).errors({"artifact_name": "a.json"})
    assert errors == ["arguments.content: field is required"]


def test_misspelt_field_is_caught_by_additional_properties():
    errors = SchemaValidator(READ_TEXT).errors({"path": "README.md", "max_char": 4000})
    assert len(errors) == 1
    assert errors[0].startswith("arguments.max_char: unexpected field")


def test_every_error_is_reported_sorted_by_path():
    errors = SchemaValidator(READ_TEXT).errors({"path": "", "max_chars": "all"})
    assert [e.split(":")[0] for e in errors] == ["arguments.max_chars", "arguments.path"]


def test_nested_paths_use_dots_and_indices():
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "object", "required": ["name"]}}
        },
    }
    errors = SchemaValidator(schema).errors({"items": [{"name": "a"}, {}]})
    assert errors == ["arguments.items[1].name: field is required"]


def test_odd_keys_are_quoted():
    schema = {"type": "object", "properties": {"a b": {"type": "integer"}}}
    assert SchemaValidator(schema).errors({"a b": "x"})[0].startswith('arguments["a b"]:')


def test_huge_values_do_not_flood_the_message():
    errors = SchemaValidator(READ_TEXT).errors(
        {"path": "x" * 1_000_000, "max_chars": "y" * 100_000}
    )
    assert sum(len(e) for e in errors) < 1000


def test_invalid_schema_is_refused_when_compiled():
    with pytest.raises(InvalidSchema, match="schema"):
        SchemaValidator({"type": "objectt"})


def test_pathologically_deep_value_is_an_error_not_a_crash():
    value: object = "x"
    for _ in range(100_000):
        value = [value]
    assert SchemaValidator({"type": "array", "items": {"$ref": "#"}}).errors(value)


@pytest.mark.parametrize(
    "subschema",
    [
        {"type": "integer"},
        {"enum": ["a", "b"]},
        {"const": "a"},
        {"pattern": "^a$"},
        {"maxLength": 3},
        {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        {"oneOf": [{"type": "string"}, {"minLength": 1}]},
        {"not": {"type": "string"}},
        {"format": "email", "type": "integer"},
    ],
)
def test_error_messages_never_echo_the_offending_value(subschema):
    # The value may be a secret under a harmless field name.
    secret = "sk-live-4f9a8b7c6d5e"
    schema = {"type": "object", "properties": {"note": subschema}}
    errors = SchemaValidator(schema).errors({"note": secret})
    assert errors and all(e.startswith("arguments.note: ") for e in errors)
    assert not any(secret in e or "4f9a8b7c" in e for e in errors)


# -- the optional jsonschema-rs fast path --------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_toolguard.tools import BUILTIN_TOOLS  # noqa: E402

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
FIELD_NAMES = [
    "path",
    "content",
    "max_chars",
    "query",
    "recursive",
    "max_rows",
    "entries",
    "rows",
    "x",
]
argument_like = st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=4)
SCHEMAS = [s for spec in BUILTIN_TOOLS for s in (spec.input_schema, spec.output_schema) if s]


def test_schemas_with_regex_or_format_are_never_accelerated():
    assert not SchemaValidator({"type": "string", "pattern": "^a"}).accelerated
    assert not SchemaValidator({"properties": {"a": {"format": "email"}}}).accelerated


@pytest.mark.skipif(
    not SchemaValidator({"type": "object"}).accelerated, reason="jsonschema-rs not installed"
)
@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, len(SCHEMAS) - 1), value=argument_like | json_values)
def test_fast_path_agrees_with_jsonschema(index, value):
    fast = SchemaValidator(SCHEMAS[index])
    slow = SchemaValidator(SCHEMAS[index], fast=False)
    assert fast.errors(value) == slow.errors(value)


def test_keys_in_error_paths_can_be_redacted():
    from pytest_toolguard import Redactor

    token = "ghp_" + "a1B2" * 9
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "additionalProperties": False,
    }
    errors = SchemaValidator(schema).errors({token: 1}, show_key=Redactor().redact_text)
    assert errors == ['arguments["<redacted:github_token>"]: unexpected field (allowed: path)']


@pytest.mark.parametrize(
    "schema, value",
    [
        ({"type": "object", "properties": {"x": False}}, {"x": "SECRET"}),
        ({"type": "array", "prefixItems": [{"type": "string"}], "items": False}, ["a", "SECRET"]),
        ({"type": "object", "unevaluatedProperties": False}, {"SECRET": 1}),
        ({"type": "object", "dependentRequired": {"SECRET": ["other"]}}, {"SECRET": 1}),
    ],
)
def test_no_keyword_lets_a_value_or_key_into_the_message(schema, value):
    errors = SchemaValidator(schema).errors(value)
    assert errors and not any("SECRET" in e for e in errors)


# -- compiling a schema once ----------------------------------------------------


def _counting_checks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every schema ``check_schema`` is asked to check, from here on."""
    seen: list[object] = []
    check = schema_module.Draft202012Validator.check_schema

    def counted(schema: object, *args: object, **kwargs: object) -> None:
        seen.append(schema)
        check(schema, *args, **kwargs)

    monkeypatch.setattr(schema_module.Draft202012Validator, "check_schema", counted)
    return seen


def test_an_equal_schema_is_checked_once_and_validates_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = _counting_checks(monkeypatch)
    unique = f"once-{uuid.uuid4()}"  # never compiled before in this process
    first = {"type": "object", "properties": {unique: {"type": "integer"}}, "required": [unique]}
    second = json.loads(json.dumps(first))  # equal, another object, other key order
    second["properties"] = dict(reversed(list(second["properties"].items())))
    one, two = SchemaValidator(first), SchemaValidator(second)
    assert len(checks) == 1
    for value in ({unique: 1}, {unique: "x"}, {}, [], {unique: 2**70}):
        assert one.errors(value) == two.errors(value)
        assert one.is_valid(value) is two.is_valid(value)
    assert two.schema is second


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"n": {"type": "nope"}}},
        {"type": "object", "required": "n"},
        {"minimum": "zero"},
    ],
)
def test_an_invalid_schema_is_refused_every_time(schema: dict[str, object]) -> None:
    for _ in range(2):
        with pytest.raises(InvalidSchema):
            SchemaValidator(schema)


@pytest.mark.parametrize(
    "schema, good, bad",
    [
        # not plain JSON (a tuple): compiled as given, never looked up by its spelling
        ({"enum": [(1, 2)]}, [1, 2], [2, 1]),
        ({"enum": [{"a": (1,)}]}, {"a": [1]}, {"a": [2]}),
        # values Python calls equal across types: each keeps its own meaning
        ({"const": 1}, 1, True),
        ({"const": True}, True, 1),
        ({"enum": [1.0]}, 1, "1"),
        ({"type": "integer", "maximum": 2**70}, 2**69, 2**71),
    ],
)
def test_a_schema_that_is_not_plain_json_still_validates(
    monkeypatch: pytest.MonkeyPatch, schema: dict[str, object], good: object, bad: object
) -> None:
    checks = _counting_checks(monkeypatch)
    validator = SchemaValidator(schema)
    assert validator.is_valid(good) and validator.errors(good) == []
    assert not validator.is_valid(bad) and validator.errors(bad)
    assert len(checks) <= 1
