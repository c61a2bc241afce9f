"""Absolute path arguments are judged against the workspace root, and a
local handler reaches the file the policy judged.

A tool that takes absolute paths (``/home/ann/proj/src/a.py``) declares them
with ``PathAccess`` like relative ones. Spelt beneath the root (as the
runtime was given it, or as its real path), such a path is the relative
path that follows the root: allowed or refused by the read and write roots
as that path would be, and reachable through ``ctx.workspace``. Spelt
anywhere else (a sibling sharing the root's prefix, ``..`` out of the root,
a link out, another link to the root) it is refused with the code a relative
escape gets, and nothing outside is touched.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_traversal_corpus import decoded_variants, load_raw_payloads

from pytest_toolguard import (
    Capabilities,
    ErrorCode,
    PathAccess,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.registry import ToolSpec
from pytest_toolguard.sandbox import PathOutsideWorkspace, SandboxError, Workspace

SESSION = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("src",))
SECRET = "outside the workspace\n"
OUTSIDE = ErrorCode.PATH_OUTSIDE_WORKSPACE


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """``base/ws`` (with ``src/a.txt``, ``docs/d.txt``, a link ``src/out``
    to ``base/outside``), siblings ``ws2`` and ``ws-old`` that share the
    root's prefix, and ``base/link-ws``, a link to the root."""
    base = tmp_path / "base"
    root = base / "ws"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "a.txt").write_text("inside\n")
    (root / "docs" / "d.txt").write_text("doc\n")
    for name in ("outside", "ws2", "ws-old"):
        (base / name).mkdir()
        (base / name / "secret.txt").write_text(SECRET)
    (root / "src" / "out").symlink_to(base / "outside")
    (base / "link-ws").symlink_to(root)
    yield {"base": base, "root": root, "link": base / "link-ws"}


def snapshot(base: Path) -> dict[str, str]:
    """Every entry under ``base``: files by content hash, links by target."""
    state: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            if path.is_symlink():
                state[str(path)] = "-> " + os.readlink(path)
            elif path.is_file():
                state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                state[str(path)] = "dir"
    return state


def spell(template: str, tree: dict[str, Path]) -> str:
    root = tree["root"]
    return template.format(
        root=root,
        real=os.path.realpath(root),
        link=tree["link"],
        base=tree["base"],
        name=root.name,
    )


def workspace_tool(*accesses: PathAccess) -> ToolSpec:
    """A local handler that reads or writes every path it is given through
    ``ctx.workspace``, as a tool written for this library does."""

    def handler(ctx: Any, path: str = "", paths: Any = (), files: Any = (), write: bool = False):
        named = ([path] if path else []) + list(paths)
        named += [item["file_path"] for item in files]
        done = {}
        for one in named:
            if write:
                ctx.workspace.write_text(one, "written\n")
                done[one] = "written"
            else:
                done[one] = ctx.workspace.read_text(one)
        return done

    return ToolSpec(
        name="touch",
        description="read or write the paths given",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "paths": {"type": "array", "items": {"type": "string"}},
                "files": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"file_path": {"type": "string"}}},
                },
                "write": {"type": "boolean"},
            },
        },
        handler=handler,
        risk=Risk.WRITE,
        paths=accesses,
    )


def run(root: Path | str, spec: ToolSpec, arguments: dict[str, Any]) -> Any:
    with ToolRuntime(ToolRegistry([spec]), root, SESSION) as runtime:
        return runtime.execute(ToolCall("c1", spec.name, arguments))


# -- one path: inside is its relative path, outside is an escape ---------------

INSIDE = [
    "{root}/src/a.txt",
    "{root}//src/a.txt",
    "{root}/./src/a.txt",
    "/{root}/src/a.txt",
    "{root}/src/../src/a.txt",
    "{root}/src/./a.txt",
    "{real}/src/a.txt",
]

ESCAPES = [
    # Refused with the code of a relative escape. The ``..`` of a path spelt
    # beneath the root is walked from the root, so a spelling that leaves the
    # root and comes back (``/ws/../ws/x``) is refused too, never normalised.
    "{root}/../outside/secret.txt",
    "{root}/src/../../outside/secret.txt",
    "{root}/src/out/secret.txt",
    "{root}/../{name}/src/a.txt",
    "{base}/outside/../{name}/src/a.txt",
    "{base}/{name}2/secret.txt",
    "{base}/{name}-old/secret.txt",
    "{link}/../outside/secret.txt",
    "{base}/outside/secret.txt",
    "/etc/passwd",
    "{root}/..",
]


@pytest.mark.parametrize("spelt", INSIDE)
@pytest.mark.parametrize("given_root", ["root", "link"])
def test_an_absolute_path_inside_reads_through_the_handlers_workspace(tree, spelt, given_root):
    # The runtime may be given the root through a link: both spellings hold.
    spec = workspace_tool(PathAccess.read("{path}"))
    where = spell(spelt.replace("{root}", "{" + given_root + "}"), tree)
    result = run(tree[given_root], spec, {"path": where})
    assert result.ok, result.message
    assert result.data == {where: "inside\n"}


@pytest.mark.parametrize("spelt", INSIDE)
def test_an_absolute_path_inside_the_write_roots_is_written(tree, spelt):
    spec = workspace_tool(PathAccess.write("{path}"))
    before = snapshot(tree["base"])
    result = run(tree["root"], spec, {"path": spell(spelt, tree), "write": True})
    assert result.ok, result.message
    assert (tree["root"] / "src" / "a.txt").read_text() == "written\n"
    after = snapshot(tree["base"])
    assert {k for k in before if before[k] != after.get(k)} == {str(tree["root"] / "src/a.txt")}


@pytest.mark.parametrize("spelt", ["{root}/docs/d.txt", "{real}/docs/new.txt", "{root}"])
def test_an_absolute_path_outside_the_write_roots_is_refused_as_its_relative_path(tree, spelt):
    spec = workspace_tool(PathAccess.write("{path}"))
    before = snapshot(tree["base"])
    absolute = run(tree["root"], spec, {"path": spell(spelt, tree), "write": True})
    relative = run(tree["root"], spec, {"path": os.path.relpath(spell(spelt, tree), tree["root"])})
    assert absolute.code is relative.code is ErrorCode.PERMISSION_DENIED
    assert snapshot(tree["base"]) == before


@pytest.mark.parametrize("spelt", ESCAPES)
@pytest.mark.parametrize("mode", ["read", "write"])
def test_an_absolute_path_outside_is_refused_as_a_relative_escape(tree, spelt, mode):
    access = PathAccess.read("{path}") if mode == "read" else PathAccess.write("{path}")
    spec = workspace_tool(access)
    before = snapshot(tree["base"])
    result = run(tree["root"], spec, {"path": spell(spelt, tree), "write": mode == "write"})
    escape = run(tree["root"], spec, {"path": "../outside/secret.txt", "write": mode == "write"})
    assert result.code is escape.code is OUTSIDE
    assert snapshot(tree["base"]) == before
    assert str(tree["base"]) not in result.message


@pytest.mark.parametrize("spelt", ESCAPES)
def test_an_undeclared_absolute_path_outside_never_reaches_the_workspace(tree, spelt):
    # No PathAccess: the handler's own workspace is the last line.
    spec = workspace_tool()
    before = snapshot(tree["base"])
    result = run(tree["root"], spec, {"path": spell(spelt, tree), "write": True})
    assert not result.ok
    assert result.code is OUTSIDE
    assert snapshot(tree["base"]) == before


# -- arrays and nested fields ---------------------------------------------------


@pytest.mark.parametrize(
    ("template", "arguments"),
    [
        ("{paths[*]}", lambda good, bad: {"paths": [good, bad]}),
        ("{paths[*]}", lambda good, bad: {"paths": [bad, good]}),
        (
            "{files[*].file_path}",
            lambda good, bad: {"files": [{"file_path": good}, {"file_path": bad}]},
        ),
    ],
)
@pytest.mark.parametrize("bad", ESCAPES[:8])
def test_one_absolute_element_outside_refuses_the_whole_call(tree, template, arguments, bad):
    spec = workspace_tool(PathAccess.write(template))
    before = snapshot(tree["base"])
    good = spell("{root}/src/new.txt", tree)
    result = run(tree["root"], spec, {**arguments(good, spell(bad, tree)), "write": True})
    assert result.code is OUTSIDE
    assert snapshot(tree["base"]) == before


@pytest.mark.parametrize(
    ("template", "arguments", "names"),
    [
        (
            "{paths[*]}",
            lambda r: {"paths": [f"{r}/src/x.txt", "src/y.txt", f"{r}//src/./z.txt"]},
            {"x.txt", "y.txt", "z.txt"},
        ),
        (
            "{files[*].file_path}",
            lambda r: {"files": [{"file_path": f"{r}/src/x.txt"}, {"file_path": "src/y.txt"}]},
            {"x.txt", "y.txt"},
        ),
    ],
)
def test_absolute_and_relative_elements_inside_are_each_written(tree, template, arguments, names):
    spec = workspace_tool(PathAccess.write(template))
    result = run(tree["root"], spec, {**arguments(tree["root"]), "write": True})
    assert result.ok, result.message
    for name in names:
        assert (tree["root"] / "src" / name).read_text() == "written\n"


NESTED = {
    "type": "object",
    "properties": {
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"files": {"type": "array", "items": {"type": "string"}}},
            },
        },
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "options": {
            "type": "object",
            "properties": {
                "output": {"type": "object", "properties": {"path": {"type": "string"}}}
            },
        },
    },
}


def host_tool(template: str, written: list[str]) -> ToolSpec:
    """A server-like handler: writes every string it is handed, unconfined."""

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    def handler(ctx: Any, **arguments: Any) -> dict[str, int]:
        for path in strings(arguments):
            Path(path).write_text("written\n")
            written.append(path)
        return {"written": len(written)}

    return ToolSpec(
        name="nested",
        description="write nested paths",
        input_schema=NESTED,
        handler=handler,
        risk=Risk.WRITE,
        paths=(PathAccess.write(template),),
    )


@pytest.mark.parametrize(
    ("template", "shape"),
    [
        (
            "{groups[*].files[*]}",
            lambda paths: {"groups": [{"files": paths[:1]}, {"files": paths[1:]}]},
        ),
        ("{matrix[*][*]}", lambda paths: {"matrix": [paths[:1], [], paths[1:]]}),
        ("{options.output.path}", lambda paths: {"options": {"output": {"path": paths[-1]}}}),
    ],
)
@pytest.mark.parametrize("bad", [None, *ESCAPES[:3], ESCAPES[5]])
def test_nested_arrays_and_objects_judge_every_absolute_element(tree, template, shape, bad):
    written: list[str] = []
    good = spell("{root}/src/new.txt", tree)
    paths = [good] if bad is None else [good, spell(bad, tree)]
    before = snapshot(tree["base"])
    result = run(tree["root"], host_tool(template, written), shape(paths))
    if bad is None:
        assert result.ok, result.message
        assert written == [good]
    else:
        assert result.code is OUTSIDE
        assert written == []
        assert snapshot(tree["base"]) == before


# -- the handler acts where the policy judged -----------------------------------


def test_an_absolute_spelling_is_served_from_the_location_the_policy_judged(tree):
    # The policy locates src/a.txt; src is then swapped for a link to docs
    # (inside, outside the write roots). The handler's absolute spelling is
    # the judged relative path: served from the directory held, never docs.
    root = tree["root"]
    with Workspace(root) as ws:
        location = ws.locate(ws.relative(str(root / "src" / "a.txt")), "write")
        try:
            view = ws.with_journal(lambda path, previous: None, locations=[location])
            os.rename(root / "src", root / "src-moved")
            (root / "src").symlink_to(root / "docs")
            view.write_text(str(root / "src" / "a.txt"), "judged\n")
        finally:
            location.close()
    assert (root / "src-moved" / "a.txt").read_text() == "judged\n"
    assert not (root / "docs" / "a.txt").exists()


# -- every traversal payload, spelt beneath the root ----------------------------


def outcome(ws: Workspace, operation: str, path: str) -> str:
    try:
        if operation == "read":
            return "read " + hashlib.sha256(ws.read_bytes(path, max_bytes=1 << 20)).hexdigest()
        if operation == "resolve":
            return "resolved " + ws.resolve(path)
        return "normalized " + ws.normalize(path)
    except (SandboxError, OSError) as exc:
        return type(exc).__name__


def test_every_traversal_payload_spelt_beneath_the_root_is_its_relative_path(tmp_path):
    # The workspace sits deep, with a sentinel beside every ancestor, so a
    # payload that got out would meet something. Raw and decoded payloads.
    level = tmp_path
    for depth in range(16):
        (level / "etc").mkdir()
        (level / "etc" / "passwd").write_text(SECRET)
        level = level / f"l{depth:02d}"
        level.mkdir()
    root = level / "ws"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("inside\n")
    raw = load_raw_payloads()
    payloads = list(dict.fromkeys(v for payload in raw for v in decoded_variants(payload)))
    before = snapshot(tmp_path)
    differ: list[tuple[str, str, str, str]] = []
    escaped: list[str] = []
    with Workspace(root) as ws:
        for payload in payloads:
            relative = payload.lstrip("/") or "."
            absolute = f"{root}/{payload}"
            target = os.path.normpath(absolute)
            outside = target != str(root) and not target.startswith(f"{root}/")
            for operation in ("read", "resolve", "normalize"):
                got, want = outcome(ws, operation, absolute), outcome(ws, operation, relative)
                if got != want:
                    differ.append((operation, payload, got, want))
                if outside and "\\" not in payload and got != PathOutsideWorkspace.__name__:
                    escaped.append(f"{operation} {payload!r}: {got}")
    print(f"\n{len(payloads)} payloads spelt beneath the root, 3 operations each")
    assert differ == []
    assert escaped == []
    assert snapshot(tmp_path) == before


# -- recorded and replayed where the recorded root does not exist ---------------


@pytest.mark.parametrize("world", ["fake", "directory"])
def test_an_absolute_path_tool_replays_after_its_recorded_root_is_gone(tmp_path, world):
    from pytest_toolguard.replay import load, record_session, replay

    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("inside\n")
    registry = ToolRegistry(
        [workspace_tool(PathAccess.read("{paths[*]}"), PathAccess.write("{path}"))]
    )
    runtime = ToolRuntime(registry, root, SESSION)
    with runtime, record_session(runtime, tmp_path / "c.yaml"):
        read = runtime.execute(ToolCall("1", "touch", {"paths": [f"{root}/src/a.txt"]}))
        wrote = runtime.execute(
            ToolCall("2", "touch", {"path": f"{root}/src/b.txt", "write": True})
        )
    assert read.ok and wrote.ok, (read.message, wrote.message)
    cassette = load(tmp_path / "c.yaml")
    assert dict(cassette.workspace.files) == {"src/a.txt": b"inside\n"}
    assert set(cassette.final_files) == {"src/a.txt", "src/b.txt"}
    for path in sorted(root.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    root.rmdir()
    report = replay(cassette, registry, world=world)
    assert report.ok, [str(d) for d in report.differences]
    assert not root.exists()
