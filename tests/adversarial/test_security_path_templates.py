"""A path template confines every path a call names, or refuses the call.

An MCP edit tool takes ``files: [{file_path, text}]``. Declared as
``{files}``, the policy judged ``str()`` of the list (``"[{'file_path':
..."``), which always reads as a name inside the workspace: an edit of a
file outside answered OK and the server wrote it. A template now names
strings only: ``{files[*].file_path}`` checks each element, ``{options.target}``
a nested field, and a field on anything but a string is refused (by the
tool's schema at construction, ``INVALID_ARGUMENT`` at the call), never
stringified. The handlers here write through the host filesystem, as a
server does: what the policy lets through is what lands on disk.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
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
)
from pytest_toolguard.bridges import BridgeWarning
from pytest_toolguard.bridges.definitions.mcp import from_mcp
from pytest_toolguard.harness.effects import declared_writes, undeclared_changes
from pytest_toolguard.path_templates import PathValueError
from pytest_toolguard.policy import MAX_PATHS_PER_CALL
from pytest_toolguard.registry import ToolSpec

SESSION = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("src",))
REFUSED = {ErrorCode.PATH_OUTSIDE_WORKSPACE, ErrorCode.PERMISSION_DENIED}

EDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}, "text": {"type": "string"}},
                "required": ["text"],
            },
        },
        "paths": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object", "properties": {"target": {"type": "string"}}},
    },
}
"""Typed as a server declares them: what the schema allows reaches the policy."""

UNTYPED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"files": {}, "paths": {}, "options": {}, "path": {}},
}
"""Nothing typed: every value reaches the call-time check."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path, list[str]]]:
    """A workspace with ``src/``, ``outside/`` next to it, and a link
    ``src/out`` to it; the list the handlers append what they wrote to."""
    root, outside = tmp_path / "workspace", tmp_path / "outside"
    (root / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "target.txt").write_text("original\n")
    (root / "src" / "out").symlink_to(outside)
    yield root, outside, []


def host_writer(root: Path, written: list[str]) -> Any:
    """A handler that writes every path it is given straight through the
    host filesystem, as a server with no confinement of its own does."""

    def write(path: str, text: str) -> None:
        target = Path(root, path)  # an absolute ``path`` replaces ``root``
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(path)

    def handler(ctx: Any, **arguments: Any) -> dict[str, Any]:
        for item in arguments.get("files") or []:
            if isinstance(item, dict) and isinstance(item.get("file_path"), str):
                write(item["file_path"], item.get("text", ""))
        for path in arguments.get("paths") or []:
            if isinstance(path, str):
                write(path, "x\n")
        options = arguments.get("options")
        if isinstance(options, dict) and isinstance(options.get("target"), str):
            write(options["target"], "x\n")
        return {"written": len(written)}

    return handler


def edit_tool(root: Path, written: list[str], *templates: str, schema: Any = None) -> ToolSpec:
    return ToolSpec(
        name="edit",
        description="edit files",
        input_schema=schema or EDIT_SCHEMA,
        handler=host_writer(root, written),
        risk=Risk.WRITE,
        paths=tuple(PathAccess.write(template) for template in templates),
    )


def execute(root: Path, spec: ToolSpec, arguments: dict[str, Any], **options: Any) -> Any:
    with ToolRuntime(ToolRegistry([spec]), root, SESSION, **options) as runtime:
        return runtime.execute(ToolCall("c1", spec.name, arguments))


def files(*paths: str) -> list[dict[str, str]]:
    return [{"file_path": path, "text": "edited\n"} for path in paths]


# -- each element is checked --------------------------------------------------

ESCAPES = [
    pytest.param("../outside/target.txt", id="dotdot"),
    pytest.param("src/../../outside/target.txt", id="dotdot-after-a-name"),
    pytest.param("OUTSIDE", id="absolute-outside"),
    pytest.param("src/out/target.txt", id="symlink-escape"),
    pytest.param("README.md", id="outside-the-write-roots"),
]


def spelt(path: str, outside: Path) -> str:
    return str(outside / "target.txt") if path == "OUTSIDE" else path


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize(
    ("template", "arguments_of"),
    [
        pytest.param("{files[*].file_path}", lambda *p: {"files": files(*p)}, id="objects"),
        pytest.param("{paths[*]}", lambda *p: {"paths": list(p)}, id="strings"),
    ],
)
@pytest.mark.parametrize("inside_first", [True, False], ids=["bad-last", "bad-first"])
def test_one_element_outside_refuses_the_whole_call(
    world, escape, template, arguments_of, inside_first
) -> None:
    root, outside, written = world
    bad = spelt(escape, outside)
    elements = ["src/a.txt", bad] if inside_first else [bad, "src/a.txt"]
    result = execute(root, edit_tool(root, written, template), arguments_of(*elements))
    assert result.code in REFUSED
    assert written == []
    assert (outside / "target.txt").read_text() == "original\n"
    assert not (root / "src" / "a.txt").exists() and not (root / "README.md").exists()


@pytest.mark.parametrize(
    ("template", "arguments", "landed"),
    [
        pytest.param(
            "{files[*].file_path}",
            {"files": files("src/a.txt", "src/deep/b.txt")},
            ["src/a.txt", "src/deep/b.txt"],
            id="objects",
        ),
        pytest.param(
            "{paths[*]}",
            {"paths": ["src/a.txt", "src/b.txt"]},
            ["src/a.txt", "src/b.txt"],
            id="strings",
        ),
        pytest.param(
            "{options.target}", {"options": {"target": "src/a.txt"}}, ["src/a.txt"], id="nested"
        ),
        pytest.param("{files[*].file_path}", {"files": []}, [], id="empty-array"),
        pytest.param("{paths[*]}", {}, [], id="array-absent"),
        pytest.param("{options.target}", {}, [], id="object-absent"),
        pytest.param("{options.target}", {"options": {}}, [], id="nested-field-absent"),
        pytest.param(
            "{files[*].file_path}",
            {"files": [{"text": "no path"}, *files("src/a.txt")]},
            ["src/a.txt"],
            id="element-field-absent",
        ),
    ],
)
def test_elements_inside_the_write_roots_run(world, template, arguments, landed) -> None:
    root, _, written = world
    result = execute(root, edit_tool(root, written, template), arguments)
    assert result.code is ErrorCode.OK, result.message
    assert written == landed
    assert all((root / path).read_text() for path in landed)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        pytest.param({"options": {"target": "src/a.txt"}}, ErrorCode.OK, id="inside"),
        pytest.param(
            {"options": {"target": "../outside/t"}}, ErrorCode.PATH_OUTSIDE_WORKSPACE, id="dotdot"
        ),
        pytest.param(
            {"options": {"target": "src/out/t"}}, ErrorCode.PATH_OUTSIDE_WORKSPACE, id="link"
        ),
        pytest.param({"options": {"target": "docs/t"}}, ErrorCode.PERMISSION_DENIED, id="root"),
    ],
)
def test_a_nested_field_is_judged_by_where_it_leads(world, arguments, code) -> None:
    root, _, written = world
    result = execute(root, edit_tool(root, written, "{options.target}"), arguments)
    assert result.code is code
    assert (written != []) is (code is ErrorCode.OK)


def test_more_elements_than_the_limit_are_refused_before_any_is_opened(world) -> None:
    root, _, written = world
    spec = edit_tool(root, written, "{paths[*]}")
    many = [f"src/{i}.txt" for i in range(MAX_PATHS_PER_CALL + 1)]
    assert execute(root, spec, {"paths": many}).code is ErrorCode.LIMIT_EXCEEDED
    assert execute(root, spec, {"paths": many[:-1]}).code is ErrorCode.OK
    assert len(written) == MAX_PATHS_PER_CALL


# -- a template never stringifies a value that is not a string ----------------

NOT_STRINGS = [
    pytest.param(["../outside/target.txt"], id="list"),
    pytest.param({"path": "../outside/target.txt"}, id="dict"),
    pytest.param(7, id="int"),
    pytest.param(1.5, id="float"),
    pytest.param(True, id="bool"),
    pytest.param(None, id="null"),
]


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize(
    ("template", "arguments_of"),
    [
        pytest.param("{files}", lambda v: {"files": v}, id="top-level"),
        pytest.param("{options.target}", lambda v: {"options": {"target": v}}, id="nested"),
        pytest.param("{paths[*]}", lambda v: {"paths": ["src/a.txt", v]}, id="element"),
        pytest.param(
            "{files[*].file_path}",
            lambda v: {"files": [{"file_path": "src/a.txt"}, {"file_path": v}]},
            id="element-field",
        ),
    ],
)
def test_a_value_that_is_not_a_string_is_refused_at_the_call(
    world, value, template, arguments_of
) -> None:
    root, outside, written = world
    spec = edit_tool(root, written, template, schema=UNTYPED_SCHEMA)
    with ToolRuntime(ToolRegistry([spec]), root, SESSION) as runtime:
        result = runtime.execute(ToolCall("c1", "edit", arguments_of(value)))
        row = runtime.audit.get("c1")
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert row is not None and row.rule == "policy.path_value"
    assert written == [] and (outside / "target.txt").read_text() == "original\n"


@pytest.mark.parametrize(
    ("template", "arguments"),
    [
        pytest.param("{paths[*]}", {"paths": "src/a.txt"}, id="wildcard-over-a-string"),
        pytest.param("{paths[*]}", {"paths": {"a": "src/a.txt"}}, id="wildcard-over-an-object"),
        pytest.param("{paths[*]}", {"paths": 3}, id="wildcard-over-a-number"),
        pytest.param("{options.target}", {"options": ["src/a.txt"]}, id="key-of-an-array"),
        pytest.param("{options.target}", {"options": "src/a.txt"}, id="key-of-a-string"),
        pytest.param(
            "{files[*].file_path}", {"files": ["src/a.txt"]}, id="key-of-a-string-element"
        ),
    ],
)
def test_a_step_on_the_wrong_kind_of_value_is_refused_at_the_call(
    world, template, arguments
) -> None:
    root, _, written = world
    spec = edit_tool(root, written, template, schema=UNTYPED_SCHEMA)
    assert execute(root, spec, arguments).code is ErrorCode.INVALID_ARGUMENT
    assert written == []


def test_the_refusal_never_quotes_the_value(world) -> None:
    root, _, written = world
    spec = edit_tool(root, written, "{files}", schema=UNTYPED_SCHEMA)
    result = execute(root, spec, {"files": [{"file_path": "../secret-name-xyz"}]})
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert "secret-name-xyz" not in result.message


# -- the schema refuses a template at construction ----------------------------

TYPED = {
    "type": "object",
    "properties": {
        "files": EDIT_SCHEMA["properties"]["files"],
        "options": EDIT_SCHEMA["properties"]["options"],
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
        "path": {"type": "string"},
        "strict": {
            "type": "object",
            "properties": {"dir": {"type": "string"}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{files}", id="array"),
        pytest.param("{options}", id="object"),
        pytest.param("{count}", id="integer"),
        pytest.param("{ratio}", id="number"),
        pytest.param("{flag}", id="boolean"),
        pytest.param("{nothing}", id="null"),
        pytest.param("{files[*]}", id="elements-are-objects"),
        pytest.param("{files[*].text.x}", id="key-of-a-string"),
        pytest.param("{count[*]}", id="wildcard-over-a-non-array"),
        pytest.param("{path[*]}", id="wildcard-over-a-string"),
        pytest.param("{options.target[*]}", id="wildcard-over-a-nested-string"),
        pytest.param("{strict.nope}", id="key-the-schema-forbids"),
        pytest.param("{undeclared.dir}", id="steps-into-a-name-not-in-the-schema"),
        pytest.param("src/{count}/x", id="inside-a-longer-template"),
    ],
)
def test_a_template_the_schema_cannot_fill_with_a_string_is_refused(template) -> None:
    with pytest.raises(ValueError, match="path template"):
        ToolSpec(
            name="t",
            description="",
            input_schema=TYPED,
            handler=lambda ctx, **_: None,
            paths=(PathAccess.write(template),),
        )


@pytest.mark.parametrize(
    "template",
    ["{path}", "{files[*].file_path}", "{options.target}", "{strict.dir}", "runs/{run_id}/{path}"],
)
def test_templates_that_reach_a_string_are_accepted(template) -> None:
    spec = ToolSpec(
        name="t",
        description="",
        input_schema=TYPED,
        handler=lambda ctx, **_: None,
        paths=(PathAccess.write(template),),
    )
    assert spec.paths[0].template == template


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{files[0]}", id="index"),
        pytest.param("{files[x]}", id="bracketed-key"),
        pytest.param("{path!r}", id="conversion"),
        pytest.param("{path:.3}", id="format-spec-cutting-the-path"),
        pytest.param("{}", id="positional"),
        pytest.param("{a..b}", id="empty-key"),
        pytest.param("{a.}", id="trailing-dot"),
        pytest.param("{a[*]}/{b[*]}", id="two-wildcard-fields"),
        pytest.param("{path", id="unbalanced"),
    ],
)
def test_a_template_outside_the_syntax_is_refused_when_declared(template) -> None:
    with pytest.raises(ValueError):
        PathAccess.read(template)


def test_a_name_the_schema_cannot_take_is_a_variable_and_refused_without_it(world) -> None:
    root, _, written = world
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
    }
    spec = edit_tool(root, written, "{target_dir}/out.txt", schema=schema)
    denied = execute(root, spec, {})
    assert denied.code is ErrorCode.PERMISSION_DENIED
    escaping = execute(root, spec, {}, variables={"target_dir": "../outside"})
    assert escaping.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert execute(root, spec, {}, variables={"target_dir": "src"}).code is ErrorCode.OK


def test_expand_names_one_path_per_element_and_variables_first() -> None:
    access = PathAccess.write("runs/{run_id}/{files[*].file_path}")
    arguments = {"run_id": "mine", "files": files("a", "b")}
    assert access.expand(arguments, {"run_id": "r1"}) == ["runs/r1/a", "runs/r1/b"]
    assert access.fields == ("run_id", "files")
    assert access.selectors == ("run_id", "files[*].file_path")
    with pytest.raises(PathValueError):
        access.expand({"files": [{"file_path": ["a"]}]}, {"run_id": "r1"})


# -- absolute paths are judged against the workspace root ---------------------


@pytest.mark.parametrize(
    ("spelling", "code"),
    [
        pytest.param("{root}/src/a.txt", ErrorCode.OK, id="inside"),
        pytest.param("{root}/src/./deep/../a.txt", ErrorCode.OK, id="inside-with-dots"),
        pytest.param(
            "{root}/README.md", ErrorCode.PERMISSION_DENIED, id="inside-outside-the-roots"
        ),
        pytest.param("{root}", ErrorCode.PERMISSION_DENIED, id="the-root-itself"),
        pytest.param("{outside}/target.txt", ErrorCode.PATH_OUTSIDE_WORKSPACE, id="outside"),
        pytest.param("/etc/passwd", ErrorCode.PATH_OUTSIDE_WORKSPACE, id="etc-passwd"),
        pytest.param("{root}/../outside/target.txt", ErrorCode.PATH_OUTSIDE_WORKSPACE, id="climbs"),
        pytest.param(
            "{root}/src/out/target.txt", ErrorCode.PATH_OUTSIDE_WORKSPACE, id="through-link"
        ),
        pytest.param(
            "{root}/src/out/../x", ErrorCode.PATH_OUTSIDE_WORKSPACE, id="link-then-dotdot"
        ),
        pytest.param("{root}x/src/a.txt", ErrorCode.PATH_OUTSIDE_WORKSPACE, id="sibling-prefix"),
    ],
)
def test_an_absolute_path_is_judged_against_the_workspace_root(world, spelling, code) -> None:
    root, outside, written = world
    (root.parent / "workspacex" / "src").mkdir(parents=True)
    path = spelling.format(root=root, outside=outside)
    result = execute(root, edit_tool(root, written, "{paths[*]}"), {"paths": [path]})
    assert result.code is code, result.message
    assert (outside / "target.txt").read_text() == "original\n"
    if code is ErrorCode.OK:
        assert (root / "src" / "a.txt").exists()


def test_an_absolute_path_through_the_roots_real_spelling_is_inside(world, tmp_path) -> None:
    root, _, written = world
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    result = execute(
        alias, edit_tool(alias, written, "{paths[*]}"), {"paths": [f"{root}/src/a.txt"]}
    )
    assert result.code is ErrorCode.OK, result.message


# -- the harness's declared writes follow the same templates ------------------


def test_declared_writes_name_each_element(world) -> None:
    root, _, written = world
    spec = edit_tool(root, written, "{files[*].file_path}", "{options.target}")
    arguments = {"files": files("src/a.txt", "src/b/../c.txt"), "options": {"target": "src/d"}}
    assert declared_writes(spec, arguments, {}) == ["src/a.txt", "src/c.txt", "src/d"]
    changed = ["src/a.txt", "src/c.txt", "src/d", "src/e.txt"]
    problems = undeclared_changes(spec, arguments, {}, ["src"], changed)
    assert len(problems) == 1 and problems[0].startswith("src/e.txt")
    assert declared_writes(spec, {"files": [{"file_path": 3}]}, {}) == []


# -- the MCP bridge advises a template that confines --------------------------


@dataclass
class FileEdit:
    """One element of a live server's ``files`` argument."""

    file_path: str
    text: str


ADVICE = re.compile(r"PathAccess\.(read|write)\('(\{[^']*\})'\)")


def advised(definition: dict[str, Any]) -> list[PathAccess]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from_mcp(definition)
    found = [ADVICE.search(str(w.message)) for w in caught if issubclass(w.category, BridgeWarning)]
    return [getattr(PathAccess, m.group(1))(m.group(2)) for m in found if m]


@pytest.mark.parametrize(
    ("properties", "template", "escape"),
    [
        pytest.param(
            {"files": EDIT_SCHEMA["properties"]["files"]},
            "{files[*].file_path}",
            {"files": files("src/a.txt", "../outside/target.txt")},
            id="array-of-objects",
        ),
        pytest.param(
            {"paths": {"type": "array", "items": {"type": "string"}}},
            "{paths[*]}",
            {"paths": ["src/a.txt", "src/out/target.txt"]},
            id="array-of-strings",
        ),
        pytest.param(
            {"options": EDIT_SCHEMA["properties"]["options"]},
            "{options.target}",
            {"options": {"target": "OUTSIDE"}},
            id="nested-object",
        ),
        pytest.param(
            {"paths": {"type": "array"}},
            "{paths[*]}",
            {"paths": ["../outside/target.txt"]},
            id="array-of-untyped",
        ),
    ],
)
def test_following_the_bridges_advice_confines_the_call(
    world, properties, template, escape
) -> None:
    root, outside, written = world
    definition = {
        "name": "edit_text_file_contents",
        "inputSchema": {"type": "object", "properties": properties},
        "annotations": {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": False},
    }
    accesses = advised(definition)
    assert [access.template for access in accesses] == [template]
    assert accesses[0].mode == "write"
    (spec,) = from_mcp(
        definition,
        handlers={"edit_text_file_contents": host_writer(root, written)},
        paths={"edit_text_file_contents": accesses},
    )
    if "options" in escape:
        escape = {"options": {"target": str(outside / "target.txt")}}
    result = execute(root, spec, escape)
    assert result.code in REFUSED
    assert written == [] and (outside / "target.txt").read_text() == "original\n"


def test_the_old_advice_on_an_array_is_refused_when_imported() -> None:
    definition = {
        "name": "edit",
        "inputSchema": {"type": "object", "properties": EDIT_SCHEMA["properties"]},
    }
    with pytest.raises(ValueError, match=r"files\[\*\]\.file_path"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_mcp(definition, paths={"edit": [PathAccess.write("{files}")]})


def test_a_declared_selector_silences_its_warning() -> None:
    definition = {
        "name": "edit",
        "inputSchema": {"type": "object", "properties": EDIT_SCHEMA["properties"]},
    }
    declared = [
        PathAccess.write(t) for t in ("{files[*].file_path}", "{paths[*]}", "{options.target}")
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_mcp(definition, paths={"edit": declared})


def test_a_live_servers_out_of_workspace_edit_is_refused_following_the_advice(world) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from pytest_toolguard.bridges.guards.mcp_server import from_mcp_server, restoring_process_state

    root, outside, written = world

    with restoring_process_state():
        server = MCPServer("editor")

    @server.tool(annotations=ToolAnnotations(destructiveHint=False, openWorldHint=False))
    def edit_text_file_contents(files: list[FileEdit]) -> dict:
        """Edit files, each by its own path, with no confinement of its own."""
        for item in files:
            Path(root, item.file_path).write_text(item.text)
            written.append(item.file_path)
        return {"edited": len(files)}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from_mcp_server(server)
    advice = [ADVICE.search(str(w.message)) for w in caught]
    ((mode, template),) = [m.groups() for m in advice if m]
    assert "[*]" in template and "file_path" in template
    paths = {"edit_text_file_contents": [getattr(PathAccess, mode)(template)]}
    registry = ToolRegistry(from_mcp_server(server, paths=paths))
    with ToolRuntime(registry, root, SESSION) as runtime:
        outside_edit = runtime.execute(
            ToolCall("1", "edit_text_file_contents", {"files": files(str(outside / "target.txt"))})
        )
        mixed = runtime.execute(
            ToolCall(
                "2",
                "edit_text_file_contents",
                {"files": files("src/a.txt", "../outside/target.txt")},
            )
        )
        inside = runtime.execute(
            ToolCall("3", "edit_text_file_contents", {"files": files("src/a.txt")})
        )
    assert outside_edit.code in REFUSED and mixed.code in REFUSED
    assert (outside / "target.txt").read_text() == "original\n"
    assert inside.code is ErrorCode.OK and written == ["src/a.txt"]
    assert os.path.exists(root / "src" / "a.txt")
