"""A template field names a declared key, or the call is refused.

A property literally named ``file.path`` with the template ``{file.path}``
on an open schema was accepted: the template reads ``file``, then
``path``, finds ``file`` absent, takes it for an absent optional field and
checks nothing (``/etc/passwd`` reached the handler). Now a field whose
name an object's declared ``properties`` do not list is refused when the
tool is declared (a top-level name with no steps stays a runtime
variable); and at the call, a field whose key is absent from an object
holding a key with ``.``, ``[`` or ``]`` is refused (INVALID_ARGUMENT),
never skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    tool,
)
from pytest_toolguard.registry import ToolSpec

SESSION = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def obj(properties: dict[str, Any] | None = None, **rest: Any) -> dict[str, Any]:
    return {"type": "object", **({"properties": properties} if properties else {}), **rest}


STRING = {"type": "string"}

REFUSED_AT_DECLARATION = {
    "a dotted key, open schema": (obj({"file.path": STRING}), "{file.path}"),
    "a dotted key, closed schema": (
        obj({"file.path": STRING}, additionalProperties=False),
        "{file.path}",
    ),
    "a bracketed key": (obj({"files[*]": STRING}), "{files[*]}"),
    "a dotted key in each element": (
        obj({"files": {"type": "array", "items": obj({"file.path": STRING})}}),
        "{files[*].file.path}",
    ),
    "an undeclared nested key": (
        obj({"options": obj({"mode": STRING})}),
        "{options.target}",
    ),
    "an undeclared root with steps": (obj({"other": STRING}), "{cfg.path}"),
    "a dotted key behind a prefix": (obj({"a.b": STRING}), "notes/{a.b}"),
}


@pytest.mark.parametrize("name", sorted(REFUSED_AT_DECLARATION))
def test_a_field_naming_an_undeclared_key_is_refused_when_declared(name: str) -> None:
    schema, template = REFUSED_AT_DECLARATION[name]
    with pytest.raises(ValueError, match="does not"):
        ToolSpec(
            name="t",
            description="",
            input_schema=schema,
            handler=lambda ctx, **kw: kw,
            risk=Risk.WRITE,
            paths=(PathAccess.write(template),),
        )


class Recorder:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []


def runtime(
    root: Path, schema: dict[str, Any], template: str, variables: dict[str, str] | None = None
) -> tuple[ToolRuntime, Recorder]:
    seen = Recorder()

    @tool(name="t", input_schema=schema, risk=Risk.WRITE, paths=[PathAccess.write(template)])
    def handler(ctx: Any, **arguments: Any) -> dict[str, Any]:
        seen.ran.append(arguments)
        return {"ok": True}

    root.mkdir(exist_ok=True)
    return ToolRuntime(ToolRegistry([handler]), root, SESSION, variables=variables), seen


REFUSED_AT_THE_CALL = {
    "a dotted key, schema without properties": (
        obj(),
        "{file.path}",
        {"file.path": "/etc/passwd"},
    ),
    "a dotted key beside the absent one": (
        obj(),
        "{target}",
        {"target.x": "/etc/passwd"},
    ),
    "a bracketed key": (obj(), "{files}", {"files[0]": "/etc/passwd"}),
    "a closing bracket": (obj(), "{f}", {"f]": "../../x"}),
    "in each element": (
        obj({"files": {"type": "array", "items": obj()}}),
        "{files[*].file.path}",
        {"files": [{"file.path": "/etc/passwd"}]},
    ),
    "in a nested object": (
        obj({"options": obj()}),
        "{options.target}",
        {"options": {"target.path": "/etc/passwd"}},
    ),
    "under a prefix": (obj(), "notes/{name}", {"name.txt": "../../../etc/passwd"}),
}


@pytest.mark.parametrize("name", sorted(REFUSED_AT_THE_CALL))
def test_a_field_absent_beside_a_key_it_cannot_name_is_refused_at_the_call(
    tmp_path: Path, name: str
) -> None:
    schema, template, arguments = REFUSED_AT_THE_CALL[name]
    with runtime(tmp_path / "ws", schema, template)[0] as guard:
        result = guard.execute(ToolCall(call_id="1", tool_name="t", arguments=arguments))
    assert result.code is ErrorCode.INVALID_ARGUMENT, result.message
    assert "etc" not in result.message


@pytest.mark.parametrize("name", sorted(REFUSED_AT_THE_CALL))
def test_the_handler_never_runs_for_such_a_call(tmp_path: Path, name: str) -> None:
    schema, template, arguments = REFUSED_AT_THE_CALL[name]
    guard, seen = runtime(tmp_path / "ws", schema, template)
    with guard:
        guard.execute(ToolCall(call_id="1", tool_name="t", arguments=arguments))
    assert seen.ran == []


ALLOWED = {
    "a declared key": (obj({"path": STRING}), "{path}", {"path": "a.txt"}, 1),
    "an absent optional key": (obj({"path": STRING, "n": STRING}), "{path}", {"n": "x"}, 1),
    "a declared nested key": (
        obj({"options": obj({"target": STRING})}),
        "{options.target}",
        {"options": {"target": "a.txt"}},
        1,
    ),
    "each element": (
        obj({"files": {"type": "array", "items": obj({"file_path": STRING})}}),
        "{files[*].file_path}",
        {"files": [{"file_path": "a.txt"}, {"file_path": "b.txt"}]},
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_templates_of_declared_keys_still_work(tmp_path: Path, name: str) -> None:
    schema, template, arguments, runs = ALLOWED[name]
    guard, seen = runtime(tmp_path / "ws", schema, template)
    with guard:
        result = guard.execute(ToolCall(call_id="1", tool_name="t", arguments=arguments))
    assert result.ok, result.message
    assert len(seen.ran) == runs


@pytest.mark.parametrize("additional", [None, False])
def test_a_runtime_variable_is_still_a_field_the_schema_does_not_list(
    tmp_path: Path, additional: bool | None
) -> None:
    extra = {} if additional is None else {"additionalProperties": additional}
    schema = obj({"path": STRING}, **extra)
    guard, seen = runtime(tmp_path / "ws", schema, "runs/{run_id}/{path}", {"run_id": "r1"})
    with guard:
        good = guard.execute(ToolCall(call_id="1", tool_name="t", arguments={"path": "a"}))
        bad = guard.execute(
            ToolCall(call_id="2", tool_name="t", arguments={"path": "../../../../etc/x"})
        )
    assert good.ok, good.message
    assert not bad.ok and len(seen.ran) == 1
    # Without the variable the path cannot be built: refused, not skipped.
    unset, _ = runtime(tmp_path / "other", schema, "runs/{run_id}/{path}")
    with unset:
        result = unset.execute(ToolCall(call_id="3", tool_name="t", arguments={"path": "a"}))
    assert result.code is ErrorCode.PERMISSION_DENIED
