"""JSON as the second syntax of a cassette: written for large cassettes,
read like YAML, the same document either way."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.replay import CassetteError, dumps, load, loads, record_session
from pytest_toolguard.replay import cassette as cassette_module
from pytest_toolguard.schema import SchemaValidator
from pytest_toolguard.tools import builtin_registry

SHIPPED = sorted((Path(__file__).resolve().parents[2] / "cassettes").glob("*.yaml"))


@pytest.fixture(params=[path.name for path in SHIPPED])
def shipped(request):
    return load(SHIPPED[[path.name for path in SHIPPED].index(request.param)])


@pytest.fixture
def small_json_above(monkeypatch):
    monkeypatch.setattr(cassette_module, "JSON_ABOVE", 3)
    return 3


def _many(cassette, count):
    items = [cassette.interactions[i % len(cassette.interactions)] for i in range(count)]
    made = [replace(item, call=replace(item.call, call_id=f"c{i}")) for i, item in enumerate(items)]
    return replace(cassette, interactions=tuple(made))


def test_a_cassette_of_more_than_json_above_interactions_is_written_as_json(
    shipped, small_json_above
):
    big = _many(shipped, small_json_above + 1)
    text = dumps(big)
    assert (
        json.loads(text)["interactions"][-1]["call"]["call_id"] == big.interactions[-1].call.call_id
    )


def test_a_cassette_of_json_above_interactions_stays_yaml(shipped, small_json_above):
    text = dumps(_many(shipped, small_json_above))
    assert not text.startswith("{")
    assert yaml.safe_load(text)["kind"] == "cassette"


def test_the_json_and_the_yaml_text_load_to_the_same_cassette(shipped):
    as_json = loads(dumps(shipped, syntax="json"), source=shipped.source)
    as_yaml = loads(dumps(shipped, syntax="yaml"), source=shipped.source)
    assert as_json == as_yaml == shipped


def test_a_json_cassette_dumps_back_byte_for_byte(shipped):
    text = dumps(shipped, syntax="json")
    assert dumps(loads(text), syntax="json") == text


def test_a_json_cassette_reads_the_same_with_a_yaml_loader(shipped):
    text = dumps(shipped, syntax="json")
    assert yaml.safe_load(text) == json.loads(text)


def test_a_json_cassette_off_the_schema_names_the_field():
    text = json.dumps(
        {
            "format_version": 1,
            "kind": "case",
            "session": {},
            "interactions": [{"call": {"tool_name": 3}}],
        }
    )
    with pytest.raises(CassetteError) as caught:
        loads(text, source="cassettes/bad.json.yaml")
    assert str(caught.value).startswith(
        "cassettes/bad.json.yaml: $.interactions[0].call.tool_name:"
    )


def test_a_yaml_flow_mapping_that_is_not_json_still_loads_as_yaml():
    loaded = loads("{format_version: 1, kind: case, session: {}, interactions: []}")
    assert loaded.kind == "case"


def test_a_broken_json_cassette_is_refused_with_its_line():
    with pytest.raises(CassetteError) as caught:
        loads('{"format_version": 1,\n "kind": "case",\n "session": {\n', source="x.yaml")
    assert "line" in caught.value.where


def test_a_value_json_cannot_hold_is_written_as_yaml(shipped):
    first = shipped.interactions[0]
    odd = replace(
        shipped,
        interactions=(
            replace(first, result=replace(first.result, data=float("nan"), check_data=True)),
        ),
    )
    text = dumps(odd, syntax="json")
    assert not text.startswith("{")
    assert math.isnan(loads(text).interactions[0].result.data)


def test_a_recorded_session_of_many_calls_is_written_as_json(tmp_path, small_json_above):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("a\n")
    runtime = ToolRuntime(
        builtin_registry(),
        str(tmp_path / "ws"),
        Capabilities(allowed_risks=frozenset({Risk.READ})),
        SQLiteAuditStore(":memory:"),
    )
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        for index in range(small_json_above + 1):
            runtime.execute(ToolCall(f"c{index}", "read_text", {"path": "a.txt"}))
    runtime.close()
    text = path.read_text()
    assert json.loads(text)["interactions"][-1]["result"]["ok"] is True
    assert dumps(load(path)) == text


def _refs(node, found):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                found.add(value.rsplit("/", 1)[-1])
            else:
                _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)
    return found


def _keywords(node):
    if isinstance(node, dict):
        yield from node.items()
        for value in node.values():
            yield from _keywords(value)
    elif isinstance(node, list):
        for value in node:
            yield from _keywords(value)


def test_the_cassette_schema_has_no_recursive_reference():
    definitions = cassette_module.schema()["$defs"]
    graph = {name: _refs(body, set()) for name, body in definitions.items()}

    def reaches(start, goal, seen):
        for name in graph.get(start, ()):
            if name == goal or (name not in seen and reaches(name, goal, seen | {name})):
                return True
        return False

    assert "#" not in _refs(cassette_module.schema(), set())
    assert [name for name in graph if reaches(name, name, set())] == []


def test_the_cassette_schema_holds_to_the_metaschema():
    # The loader skips this check in every process and relies on this test.
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(cassette_module.schema())


def test_a_schema_not_marked_checked_is_still_held_to_the_metaschema():
    from pytest_toolguard.schema import InvalidSchema

    with pytest.raises(InvalidSchema):
        SchemaValidator({"type": "no such type"})
    SchemaValidator({"type": "no such type"}, checked=True)


def test_the_cassette_schema_compares_no_whole_values():
    for key, value in _keywords(cassette_module.schema()):
        assert key not in ("uniqueItems", "const", "$dynamicRef")
        if key == "enum":
            assert all(isinstance(item, str) for item in value)


def test_a_depth_bounded_schema_takes_a_deeply_nested_value_without_a_depth_walk():
    deep: list = []
    cursor = deep
    for _ in range(100_000):
        cursor.append([])
        cursor = cursor[0]
    checker = SchemaValidator({"type": "object", "properties": {"data": {}}}, depth_bounded=True)
    if not checker.accelerated:
        pytest.skip("jsonschema-rs is not installed")
    assert checker.is_valid({"data": deep})
