"""The fuzzer tries path probes in the arguments a tool declares as paths,
and in those its name heuristic judges paths by name, schema and values:
never in a time zone, a hash, or any argument of a tool that declares
``paths=[]``."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_toolguard.fuzz.arguments import path_probes
from pytest_toolguard.registry import PathAccess, ToolSpec, tool


def spec(properties: dict[str, Any], **declared: Any) -> ToolSpec:
    def handler(ctx: Any, **arguments: Any) -> dict[str, Any]:
        return {"seen": sorted(arguments)}

    made: ToolSpec = tool(
        name="probe_me",
        input_schema={"type": "object", "properties": properties, "additionalProperties": False},
        **declared,
    )(handler)
    return made


TEXT = {"type": "string"}


@pytest.mark.parametrize(
    ("tool_spec", "probed"),
    [
        pytest.param(spec({"source_timezone": TEXT, "target_timezone": TEXT}), set(), id="zones"),
        pytest.param(spec({"file_hash": TEXT}), set(), id="hash"),
        pytest.param(
            spec({"source": {"type": "string", "description": "IANA time zone, e.g. UTC"}}),
            set(),
            id="described-zone",
        ),
        pytest.param(spec({"source": TEXT, "target": TEXT}, paths=[]), set(), id="declared-none"),
        pytest.param(spec({"source_path": TEXT, "note": TEXT}), {"source_path"}, id="undeclared"),
        pytest.param(
            spec({"ticket": TEXT, "dest": TEXT}, paths=[PathAccess.read("outbox/{ticket}.md")]),
            {"ticket", "dest"},
            id="declared-field-then-guessed",
        ),
    ],
)
def test_probes_go_where_declarations_then_names_say(tool_spec: ToolSpec, probed: set[str]) -> None:
    assert set(path_probes(tool_spec)) == probed
