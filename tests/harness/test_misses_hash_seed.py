"""``hash_seed`` runs the call in kept interpreters of the fixed hash seeds
1 to 4: a tool that answers (or writes) a set's iteration order fails it
on every run, whatever the test process's own seed; the correct twin
(the same set, sorted) passes, and so does a broken tool that declares
``depends_on_environment=("PYTHONHASHSEED",)``.

=====================  ==================================================================
broken tool (its bug)  problem the ``hash_seed`` cell reports
=====================  ==================================================================
unique_tags            with PYTHONHASHSEED=1 and N the result's data.tags differs
(list of a set)
write_members (a set   with PYTHONHASHSEED=1 and N the files it left differ:
joined into a file,    notes/members.txt
by a helper)
shard_of (hash(key))   with PYTHONHASHSEED=1 and N the result's data.shard differs
=====================  ==================================================================

Where it cannot run: a handler defined inside a function (a fresh
interpreter cannot import it) is n/a saying so; a handler that builds no
set and calls no ``hash`` is not a cell at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from test_faults_catch_bugs import one_call_case, reported

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool

FILES = {"notes/todo.md": "- old\n"}
TAGS = {"tags": ["Red", "blue", "GREEN", "red", "Blue", "amber"]}
NAMES = {"names": ["ada", "grace", "linus", "ada", "barbara"]}
TAGS_SCHEMA = {"type": "object", "properties": {"tags": {"type": "array"}}}
NAMES_SCHEMA = {"type": "object", "properties": {"names": {"type": "array"}}}


def run(spec: ToolSpec, arguments: Mapping[str, Any]) -> CellOutcome:
    registry = ToolRegistry([spec])
    cassette = one_call_case(spec.name, arguments, FILES)
    (fault,) = select_faults("hash_seed")
    return run_cell(fault, targets(cassette, registry, cassette.source)[0], registry)


@tool(input_schema=TAGS_SCHEMA)
def unique_tags(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
    """The tags, once each, lower-cased."""
    return {"tags": list({tag.lower() for tag in tags})}


def _dedupe(names: list[str]) -> list[str]:
    return list(set(names))


@tool(risk=Risk.WRITE, paths=[PathAccess.write("notes/members.txt")], input_schema=NAMES_SCHEMA)
def write_members(ctx: ToolContext, names: list[str]) -> dict[str, Any]:
    """Writes the members, once each."""
    members = _dedupe(names)
    ctx.workspace.write_text("notes/members.txt", "\n".join(members) + "\n")
    return {"count": len(members)}


@tool(input_schema={"type": "object", "properties": {"key": {"type": "string"}}})
def shard_of(ctx: ToolContext, key: str) -> dict[str, Any]:
    """The shard a key goes to."""
    return {"shard": hash(key) % 16}


@tool(input_schema=TAGS_SCHEMA)
def unique_tags_sorted(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
    """The tags, once each, lower-cased, sorted."""
    return {"tags": sorted({tag.lower() for tag in tags})}


@tool(risk=Risk.WRITE, paths=[PathAccess.write("notes/members.txt")], input_schema=NAMES_SCHEMA)
def write_members_sorted(ctx: ToolContext, names: list[str]) -> dict[str, Any]:
    """Writes the members, once each, in order."""
    members = sorted(_dedupe(names))
    ctx.workspace.write_text("notes/members.txt", "\n".join(members) + "\n")
    return {"count": len(members)}


@tool(input_schema=TAGS_SCHEMA)
def first_seen_tags(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
    """The tags, once each, in the order first seen (no set)."""
    return {"tags": list(dict.fromkeys(tag.lower() for tag in tags))}


CAUGHT = [
    (unique_tags, TAGS, "the result's data.tags"),
    (write_members, NAMES, "the files it left differ: notes/members.txt"),
    (shard_of, {"key": "customer-42"}, "the result's data.shard differs"),
]


@pytest.mark.parametrize(("spec", "arguments", "problem"), CAUGHT, ids=[c[0].name for c in CAUGHT])
def test_tool_answering_a_sets_order_fails(spec: ToolSpec, arguments: Any, problem: str) -> None:
    outcome = run(spec, arguments)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "with PYTHONHASHSEED=1 and ", problem, "sorted(...)"), outcome


@pytest.mark.parametrize(
    ("spec", "arguments"),
    [(unique_tags_sorted, TAGS), (write_members_sorted, NAMES)],
    ids=["unique_tags_sorted", "write_members_sorted"],
)
def test_tool_sorting_its_set_passes(spec: ToolSpec, arguments: Any) -> None:
    outcome = run(spec, arguments)

    assert outcome.status == "pass", outcome.problems


def test_tool_without_a_set_is_no_cell() -> None:
    outcome = run(first_seen_tags, TAGS)

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "not applicable: applies to calls that succeeded"), outcome


@pytest.mark.parametrize(("spec", "arguments", "problem"), CAUGHT, ids=[c[0].name for c in CAUGHT])
def test_declaring_the_hash_seed_accepts_the_dependency(
    spec: ToolSpec, arguments: Any, problem: str
) -> None:
    declared = tool(
        name=spec.name,
        input_schema=spec.input_schema,
        risk=spec.risk,
        paths=spec.paths,
        depends_on_environment=("PYTHONHASHSEED",),
    )(spec.handler)

    outcome = run(declared, arguments)

    assert outcome.status == "n/a", outcome


def test_handler_defined_in_a_function_is_not_applicable_saying_why() -> None:
    @tool(input_schema=TAGS_SCHEMA)
    def local_tags(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
        return {"tags": list(set(tags))}

    outcome = run(local_tags, TAGS)

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "nothing to inject: a fresh interpreter cannot load it", "<locals>")
