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
write_labels (a set    with PYTHONHASHSEED=1 and N the files it left differ:
joined, open() in the  notes/labels.txt
directory world)
=====================  ==================================================================

Where it cannot run: a handler defined inside a function (a fresh
interpreter cannot import it) is n/a saying so; a handler that builds no
set and calls no ``hash`` is not a cell at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
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


def run(spec: ToolSpec, arguments: Mapping[str, Any], parent: Path | None = None) -> CellOutcome:
    """The ``hash_seed`` cell of the one call of ``spec``; in a directory
    world made in ``parent`` when the tool declares that world."""
    registry = ToolRegistry([spec])
    cassette = one_call_case(spec.name, arguments, FILES)
    (fault,) = select_faults("hash_seed")
    target = targets(cassette, registry, cassette.source)[0]
    if spec.world == "directory":
        outcome = run_cell(fault, target, registry, world="directory", parent=str(parent))
        assert parent is not None and os.listdir(parent) == []
        return outcome
    return run_cell(fault, target, registry)


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


def _write_labels(ctx: ToolContext, tags: list[str], order: Any) -> dict[str, Any]:
    labels = order({tag.lower() for tag in tags})
    with open(os.path.join(ctx.workspace.root, "notes/labels.txt"), "w") as handle:
        handle.write(",".join(labels))
    return {"written": len(labels)}


@tool(
    risk=Risk.WRITE,
    world="directory",
    paths=[PathAccess.write("notes/labels.txt")],
    input_schema=TAGS_SCHEMA,
)
def write_labels(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
    """Writes the labels, once each, with open() in the directory world."""
    return _write_labels(ctx, tags, list)


@tool(
    risk=Risk.WRITE,
    world="directory",
    paths=[PathAccess.write("notes/labels.txt")],
    input_schema=TAGS_SCHEMA,
)
def write_labels_sorted(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
    """Writes the labels, once each, in order."""
    return _write_labels(ctx, tags, sorted)


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
    (write_labels, TAGS, "the files it left differ: notes/labels.txt"),
]


@pytest.mark.parametrize(("spec", "arguments", "problem"), CAUGHT, ids=[c[0].name for c in CAUGHT])
def test_tool_answering_a_sets_order_fails(
    spec: ToolSpec, arguments: Any, problem: str, tmp_path: Path
) -> None:
    outcome = run(spec, arguments, tmp_path)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "with PYTHONHASHSEED=1 and ", problem, "sorted(...)"), outcome


@pytest.mark.parametrize(
    ("spec", "arguments"),
    [(unique_tags_sorted, TAGS), (write_members_sorted, NAMES), (write_labels_sorted, TAGS)],
    ids=["unique_tags_sorted", "write_members_sorted", "write_labels_sorted"],
)
def test_tool_sorting_its_set_passes(spec: ToolSpec, arguments: Any, tmp_path: Path) -> None:
    outcome = run(spec, arguments, tmp_path)

    assert outcome.status == "pass", outcome.problems


def test_tool_without_a_set_is_no_cell() -> None:
    outcome = run(first_seen_tags, TAGS)

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "not applicable: applies to calls that succeeded"), outcome


@pytest.mark.parametrize(("spec", "arguments", "problem"), CAUGHT, ids=[c[0].name for c in CAUGHT])
def test_declaring_the_hash_seed_accepts_the_dependency(
    spec: ToolSpec, arguments: Any, problem: str, tmp_path: Path
) -> None:
    declared = tool(
        name=spec.name,
        input_schema=spec.input_schema,
        risk=spec.risk,
        paths=spec.paths,
        world=spec.world,
        depends_on_environment=("PYTHONHASHSEED",),
    )(spec.handler)

    outcome = run(declared, arguments, tmp_path)

    assert outcome.status == "n/a", outcome


def test_handler_defined_in_a_function_is_not_applicable_saying_why() -> None:
    @tool(input_schema=TAGS_SCHEMA)
    def local_tags(ctx: ToolContext, tags: list[str]) -> dict[str, Any]:
        return {"tags": list(set(tags))}

    outcome = run(local_tags, TAGS)

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "nothing to inject: a fresh interpreter cannot load it", "<locals>")
