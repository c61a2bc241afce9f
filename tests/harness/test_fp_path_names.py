"""An argument is a path by the tool's declarations first, and by its name
only where the schema and value do not say otherwise: a time-zone
converter's ``source_timezone``, a lookup's ``file_hash`` or a ``source``
described as a time zone are not paths; a tool that declares ``paths=[]``
has none; an undeclared ``source_path`` still gets escapes tried."""

from __future__ import annotations

import warnings
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from test_faults_catch_bugs import one_call_case, reported, run, run_all

from pytest_toolguard.bridges import BridgeWarning
from pytest_toolguard.bridges.definitions.mcp import from_mcp
from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import targets
from pytest_toolguard.path_templates import looks_like_path, named_like_path
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool

OFFSETS = {"UTC": 0, "Europe/Warsaw": 1, "America/New_York": -5, "Asia/Tokyo": 9}


def _convert(source: str, target: str, hour: int) -> dict[str, Any]:
    if source not in OFFSETS or target not in OFFSETS:
        raise ValueError("unknown time zone")
    return {"hour": (hour - OFFSETS[source] + OFFSETS[target]) % 24}


def zone(description: str = "", **extra: Any) -> dict[str, Any]:
    return (
        {"type": "string", "description": description, **extra}
        if description
        else {
            "type": "string",
            **extra,
        }
    )


def converter(first: str, second: str, schema: dict[str, Any], **declared: Any) -> ToolSpec:
    """A time-zone converter whose zone arguments are ``first`` and
    ``second``; it reads no file."""

    def convert_time(ctx: ToolContext, hour: int, **zones: str) -> dict[str, Any]:
        return _convert(zones[first], zones[second], hour)

    made: ToolSpec = tool(
        name="convert_time",
        input_schema={
            "type": "object",
            "properties": {first: schema, second: schema, "hour": {"type": "integer"}},
            "required": [first, second, "hour"],
            "additionalProperties": False,
        },
        **declared,
    )(convert_time)
    return made


CONVERTERS = [
    pytest.param(converter("source_timezone", "target_timezone", zone()), id="named-timezone"),
    pytest.param(
        converter("source", "target", zone("Source IANA time zone name, e.g. Europe/London")),
        id="described-as-zone",
    ),
    pytest.param(
        converter("source", "target", zone(examples=["Europe/London", "UTC"])),
        id="zone-examples",
    ),
    pytest.param(converter("src", "dst", zone(), paths=[]), id="declared-no-paths"),
]


def zone_call(spec: ToolSpec) -> dict[str, Any]:
    first, second = [name for name in spec.input_schema["properties"] if name != "hour"]
    return {first: "Europe/Warsaw", second: "America/New_York", "hour": 12}


@pytest.mark.parametrize("spec", CONVERTERS)
def test_a_time_zone_argument_is_no_path_argument(spec: ToolSpec) -> None:
    cassette = one_call_case(spec.name, zone_call(spec), {})
    (target,) = targets(cassette, ToolRegistry([spec]), cassette.source)

    assert target.path_arguments == ()


ZONEINFO_SCHEMA = {
    "type": "object",
    "properties": {
        "source_timezone": {"type": "string"},
        "target_timezone": {"type": "string"},
        "time": {"type": "string"},
    },
    "required": ["source_timezone", "target_timezone", "time"],
    "additionalProperties": False,
}


def zoneinfo_converter(world: str) -> ToolSpec:
    """mcp-server-time's convert_time, in short: zoneinfo reads its database."""

    @tool(name="convert_time", input_schema=ZONEINFO_SCHEMA, world=world)
    def convert_time(
        ctx: ToolContext, source_timezone: str, target_timezone: str, time: str
    ) -> dict[str, Any]:
        hour, minute = map(int, time.split(":"))
        when = datetime(2026, 1, 5, hour, minute, tzinfo=ZoneInfo(source_timezone))
        return {"time": when.astimezone(ZoneInfo(target_timezone)).strftime("%H:%M")}

    made: ToolSpec = convert_time
    return made


@pytest.mark.parametrize("world", ["fake", "directory"])
def test_a_time_zone_converter_passes_every_cell(world: str) -> None:
    spec = zoneinfo_converter(world)
    arguments = {
        "source_timezone": "Europe/Warsaw",
        "target_timezone": "America/New_York",
        "time": "12:00",
    }

    outcomes = run_all(spec, arguments, {})

    failed = {name: o.problems for name, o in outcomes.items() if o.status == "fail"}
    assert not failed
    assert outcomes["path_traversal"].status == "n/a"


def test_importing_the_converter_warns_of_no_path() -> None:
    definition = {"name": "convert_time", "inputSchema": ZONEINFO_SCHEMA}
    with warnings.catch_warnings():
        warnings.simplefilter("error", BridgeWarning)
        (spec,) = from_mcp(definition)

    assert spec.guesses_path_arguments


def test_an_import_given_no_paths_for_a_tool_guesses_none() -> None:
    schema = {"type": "object", "properties": {"source": {"type": "string"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", BridgeWarning)
        (spec,) = from_mcp({"name": "pick", "inputSchema": schema}, paths={"pick": []})
    cassette = one_call_case("pick", {"source": "notes/a.md"}, {})

    assert targets(cassette, ToolRegistry([spec]), cassette.source)[0].path_arguments == ()


def test_an_import_still_warns_of_an_undeclared_source_path() -> None:
    with pytest.warns(BridgeWarning, match="'source_path' looks like a path"):
        from_mcp({"name": "read_source", "inputSchema": SOURCE_SCHEMA})


HASH_SCHEMA = {
    "type": "object",
    "properties": {"file_hash": {"type": "string"}},
    "required": ["file_hash"],
    "additionalProperties": False,
}


@tool(name="lookup_blob", input_schema=HASH_SCHEMA)
def lookup_blob(ctx: ToolContext, file_hash: str) -> dict[str, Any]:
    """Looks a blob up by its digest; reads no file."""
    return {"known": file_hash.startswith("d41d8")}


def test_a_hash_argument_is_no_path_argument() -> None:
    arguments = {"file_hash": "d41d8cd98f00b204e9800998ecf8427e"}
    cassette = one_call_case("lookup_blob", arguments, {})
    (target,) = targets(cassette, ToolRegistry([lookup_blob]), cassette.source)

    assert target.path_arguments == ()
    assert run("path_traversal", lookup_blob, arguments, {}).status == "n/a"


SOURCE_SCHEMA = {
    "type": "object",
    "properties": {"source_path": {"type": "string"}},
    "required": ["source_path"],
    "additionalProperties": False,
}


@tool(name="read_source", input_schema=SOURCE_SCHEMA, risk=Risk.READ)
def read_source_on_host(ctx: ToolContext, source_path: str) -> dict[str, Any]:
    """Reads its undeclared path with open() under the root: ../ escapes."""
    with open(f"{ctx.workspace.root}/{source_path}", encoding="utf-8") as file:
        return {"content": file.read()}


def test_an_undeclared_source_path_still_gets_escapes() -> None:
    outcome = run("path_traversal", read_source_on_host, {"source_path": "notes/todo.md"})

    assert outcome.status == "fail", outcome
    assert reported(outcome, "outside the workspace"), outcome.problems


@pytest.mark.parametrize(
    ("name", "schema", "value", "path"),
    [
        ("source_timezone", None, "Europe/Warsaw", False),
        ("target_timezone", None, None, False),
        ("file_hash", None, None, False),
        ("file_size", None, None, False),
        ("targetLanguage", None, None, False),
        ("source", {"description": "IANA time zone"}, None, False),
        ("source", {"format": "uri"}, None, False),
        ("target", {"enum": ["Europe/London", "Asia/Tokyo"]}, None, False),
        ("source", None, "https://example.com/a", False),
        ("dest", None, "someone@example.com", False),
        ("source", None, "sha256:" + "ab" * 32, False),
        ("source_path", None, "notes/a.md", True),
        ("source", None, "notes/a.md", True),
        ("target_file", None, None, True),
        ("outputFile", None, None, True),
        ("file_name", None, None, True),
        ("path_prefix", None, None, True),
        ("src_dir", {"description": "the directory holding the time zone data"}, None, True),
        ("source", None, "file:///etc/passwd", True),
    ],
)
def test_the_name_heuristic_reads_name_schema_and_value(
    name: str, schema: Any, value: Any, path: bool
) -> None:
    assert looks_like_path(name, schema, value) is path


def test_named_like_path_reads_the_head_word() -> None:
    assert named_like_path("target_file") and not named_like_path("file_target_zone")
