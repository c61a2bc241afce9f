"""Faults the pipeline must refuse before any handler runs: arguments off
the schema (``schema_drift``), a session that may not write
(``capability_revoked``), a misspelt tool (``unknown_tool``), a plan step
that allows another tool (``plan_violation``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ..capabilities import Risk
from ..contract import ErrorCode
from ..plan import PlanProgress, PlanStep
from .cell import Cell
from .fault import AfterSuccess, Fault
from .target import Target

_UNKNOWN_FIELD = "toolguard_unknown_field"


class SchemaDriftFault(Fault):
    name = "schema_drift"
    applies_to = "calls whose recorded arguments passed the input schema"
    injection = (
        "a required field dropped, an unknown field added, a wrong type, a value out of range "
        "(each that the schema can refuse)"
    )
    expected = "INVALID_ARGUMENT naming the field; the handler never runs; no file changed"

    def applies(self, target: Target) -> bool:
        return (
            target.spec is not None
            and target.arguments is not None
            and target.interaction.result.code
            not in (ErrorCode.INVALID_ARGUMENT.value, ErrorCode.INVALID_REQUEST.value)
            and any(True for _ in _drifts(target))
        )

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        for what, field, arguments in _drifts(cell.target):
            result = cell.execute(cell.call(arguments))
            if cell.expect(result, ErrorCode.INVALID_ARGUMENT):
                cell.check(
                    field in result.message,
                    f"{what}: the message does not name {field!r}: {result.message!r}",
                )
        cell.check_refused(before, "every call was invalid")


def _drifts(target: Target) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(what, field, arguments) for each drift the schema can refuse."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None:
        return
    schema = spec.input_schema
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name in arguments:
            yield "required field dropped", name, {k: v for k, v in arguments.items() if k != name}
            break
    if schema.get("additionalProperties") is False:
        yield "unknown field", _UNKNOWN_FIELD, {**arguments, _UNKNOWN_FIELD: 1}
    for name in arguments:
        wrong = _wrong_type(properties.get(name))
        if wrong is not _NOTHING:
            yield "wrong type", name, {**arguments, name: wrong}
            break
    for name in arguments:
        bad = _out_of_range(properties.get(name))
        if bad is not _NOTHING:
            yield "out of range", name, {**arguments, name: bad}
            break


_NOTHING = object()


def _wrong_type(schema: Any) -> Any:
    if not isinstance(schema, Mapping) or "type" not in schema:
        return _NOTHING
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    for candidate, kinds in (
        (12345, ("integer", "number")),
        ("not-a-number", ("string",)),
        ([], ("array",)),
        ({"x": 1}, ("object",)),
    ):
        if not any(kind in types for kind in kinds):
            return candidate
    return _NOTHING


def _out_of_range(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return _NOTHING
    if "maxLength" in schema:
        return "x" * (int(schema["maxLength"]) + 1)
    if "minLength" in schema and int(schema["minLength"]) > 0:
        return ""
    if "maximum" in schema:
        return schema["maximum"] + 1
    if "minimum" in schema:
        return schema["minimum"] - 1
    if "enum" in schema:
        return "toolguard-not-in-enum"
    return _NOTHING


# -- capability_revoked ----------------------------------------------------------------


class CapabilityRevokedFault(AfterSuccess):
    name = "capability_revoked"
    injection = "the same call in a read-only session (read risk only, no write roots)"
    expected = (
        "PERMISSION_DENIED for a tool that is not read-only (the handler never runs); "
        "a read still answers OK"
    )

    def inject(self, cell: Cell) -> None:
        session = cell.target.cassette.session
        read_only = replace(
            session.capabilities, allowed_risks=frozenset({Risk.READ}), write_roots=()
        )
        runtime = cell.make_runtime(capabilities=read_only)
        before = cell.tree()
        result = cell.execute(cell.call(), runtime)
        if cell.target.writes:
            cell.expect(result, ErrorCode.PERMISSION_DENIED)
            cell.check_refused(before, "the session is read-only")
        else:
            cell.expect(result, ErrorCode.OK)
            cell.check_unchanged(before, "a read-only tool ran in a read-only session")


# -- unknown_tool ----------------------------------------------------------------------


class UnknownToolFault(Fault):
    name = "unknown_tool"
    applies_to = "calls of a registered tool whose arguments parse"
    injection = "the tool name misspelt (last letter changed)"
    expected = "TOOL_NOT_FOUND suggesting the real name; no handler runs"

    def applies(self, target: Target) -> bool:
        return target.spec is not None and target.arguments is not None

    def inject(self, cell: Cell) -> None:
        name = cell.target.call.tool_name
        wrong = name[:-1] + ("y" if name.endswith("x") else "x")
        while wrong in cell.registry:
            wrong += "x"
        before = cell.tree()
        result = cell.execute(cell.call(tool_name=wrong))
        if cell.expect(result, ErrorCode.TOOL_NOT_FOUND):
            cell.check(f"did you mean {name}" in result.message, "no suggestion of the real name")
        cell.check_refused(before, "the tool does not exist")


# -- plan_violation --------------------------------------------------------------------


class PlanViolationFault(AfterSuccess):
    name = "plan_violation"
    injection = "a plan whose current step allows only another tool"
    expected = "BLOCKED; the handler never runs; no file changed"

    def inject(self, cell: Cell) -> None:
        step = PlanStep("toolguard_other_step", frozenset({"toolguard_other_tool"}))
        runtime = cell.make_runtime(hooks=[PlanProgress([step])])
        before = cell.tree()
        result = cell.execute(cell.call(), runtime)
        cell.expect(result, ErrorCode.BLOCKED)
        cell.check_refused(before, "the plan's step does not allow the tool")
