"""A user's own tools, called the way model APIs call them, record
faithfully: a replay from the cassette alone answers what was recorded.

Before these fixes a call whose arguments came as JSON text, or whose tool
read a file it did not declare in ``paths``, left the file out of the
cassette; the replay then answered EXECUTION_ERROR where OK was recorded,
and its report did not say why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.registry import PathAccess, ToolRegistry, tool
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.report import format_report
from pytest_toolguard.tools import builtin_registry

OBJECT = {"type": "object"}


@tool(input_schema=OBJECT)
def read_named(ctx: Any, name: str) -> dict[str, Any]:
    """Reads a file it never declared in ``paths``."""
    return {"text": ctx.workspace.read_text(name)}


@tool(input_schema=OBJECT)
def count_entries(ctx: Any, folder: str) -> dict[str, Any]:
    """Lists a directory it never declared."""
    return {"names": [entry.name for entry in ctx.workspace.list_dir(folder)]}


@tool(input_schema=OBJECT)
def sizes(ctx: Any, folder: str) -> dict[str, Any]:
    """Walks a tree and asks for sizes, undeclared."""
    return {path: ctx.workspace.size(path) for path in ctx.workspace.walk(folder)}


@tool(input_schema=OBJECT)
def maybe_read(ctx: Any, name: str) -> dict[str, Any]:
    """Only checks whether a file exists."""
    return {"exists": ctx.workspace.exists(name)}


@tool(input_schema=OBJECT, risk=Risk.WRITE)
def append_line(ctx: Any, target: str, line: str) -> dict[str, Any]:
    """Appends to a file: the old content decides the new one."""
    old = ctx.workspace.read_text(target) if ctx.workspace.exists(target) else ""
    ctx.workspace.write_text(target, old + line + "\n")
    return {"lines": (old + line + "\n").count("\n")}


@tool(
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    paths=[PathAccess.read("{path}")],
)
def declared_read(ctx: Any, path: str) -> dict[str, Any]:
    return {"text": ctx.workspace.read_text(path)}


REGISTRY = ToolRegistry([read_named, count_entries, sizes, maybe_read, append_line, declared_read])
CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def _record(tmp_path: Path, calls: list[tuple[str, Any]], registry: ToolRegistry = REGISTRY):
    workspace = tmp_path / "ws"
    (workspace / "notes" / "deep").mkdir(parents=True)
    (workspace / "notes" / "a.md").write_text("alpha\n")
    (workspace / "notes" / "deep" / "b.md").write_text("beta\n")
    (workspace / "other.txt").write_text("not touched\n")
    (workspace / "log.txt").write_text("first\n")
    runtime = ToolRuntime(registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        results = [
            runtime.execute(ToolCall(call_id=f"c{i}", tool_name=name, arguments=arguments))
            for i, (name, arguments) in enumerate(calls)
        ]
    runtime.close()
    assert all(result.ok for result in results), [r.message for r in results]
    return load(path)


# Each call reaches a file only through ctx.workspace, given as JSON text
# (OpenAI's `arguments`) or as an object, declared or not.
CALLS = {
    "declared path, JSON text": ("declared_read", '{"path": "notes/a.md"}'),
    "undeclared read, object": ("read_named", {"name": "notes/a.md"}),
    "undeclared read, JSON text": ("read_named", json.dumps({"name": "notes/a.md"})),
    "undeclared listing": ("count_entries", {"folder": "notes"}),
    "undeclared walk and sizes": ("sizes", '{"folder": "notes"}'),
    "undeclared exists": ("maybe_read", {"name": "notes/a.md"}),
    "undeclared read-then-write": ("append_line", '{"target": "log.txt", "line": "second"}'),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
def test_a_call_replays_from_its_cassette_alone(tmp_path: Path, call: tuple[str, Any]) -> None:
    cassette = _record(tmp_path, [call])
    report = replay(cassette, REGISTRY)
    assert report.differences == ()
    assert [result.code.value for result in report.results] == ["OK"]


def test_the_files_a_handler_reads_are_kept_and_others_are_not(tmp_path: Path) -> None:
    cassette = _record(tmp_path, [("read_named", '{"name": "notes/a.md"}')])
    assert set(cassette.workspace.files) == {"notes/a.md"}


def test_a_listed_directory_keeps_everything_beneath_it(tmp_path: Path) -> None:
    cassette = _record(tmp_path, [("count_entries", {"folder": "notes"})])
    assert set(cassette.workspace.files) == {"notes/a.md", "notes/deep/b.md"}


def test_a_read_through_a_symlink_keeps_the_link_and_its_target(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "real.txt").write_text("real\n")
    (workspace / "link.txt").symlink_to("real.txt")
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    with record_session(runtime, tmp_path / "s.yaml"):
        assert runtime.execute(
            ToolCall(call_id="1", tool_name="read_named", arguments={"name": "link.txt"})
        ).ok
    runtime.close()
    cassette = load(tmp_path / "s.yaml")
    assert cassette.workspace.symlinks == {"link.txt": "real.txt"}
    assert set(cassette.workspace.files) == {"real.txt"}
    assert replay(cassette, REGISTRY).differences == ()


def test_builtin_tools_called_with_json_text_replay(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "a.py").write_text("x = 1\n")
    runtime = ToolRuntime(builtin_registry(), str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    with record_session(runtime, tmp_path / "s.yaml"):
        for index, (name, arguments) in enumerate(
            [
                ("read_text", '{"path": "src/a.py"}'),
                ("search_text", '{"query": "x", "path": "src"}'),
                ("write_file", '{"path": "src/b.py", "content": "y = 2\\n"}'),
            ]
        ):
            result = runtime.execute(
                ToolCall(call_id=str(index), tool_name=name, arguments=arguments)
            )
            assert result.ok, result.message
    runtime.close()
    report = replay(load(tmp_path / "s.yaml"), builtin_registry())
    assert report.differences == ()


def test_a_changed_code_is_reported_with_both_messages(tmp_path: Path) -> None:
    cassette = _record(tmp_path, [("read_named", {"name": "notes/a.md"})])
    emptied = cassette.__class__(
        **{
            **{name: getattr(cassette, name) for name in cassette.__dataclass_fields__},
            "workspace": cassette.workspace.__class__(root=cassette.workspace.root),
        }
    )
    report = replay(emptied, REGISTRY)
    text = format_report(report, cassette_path="session.yaml", rerecord="python record.py")
    assert "result.code" in text
    assert "recorded message: ok" in text
    assert "replayed message: handler raised FileNotFoundError" in text


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_watch_files_hears_every_path_a_handler_asks_about(tmp_path: Path, isolation: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "log.txt").write_text("one\n")
    heard: list[tuple[str, tuple[str, ...]]] = []
    runtime = ToolRuntime(REGISTRY, str(workspace), CAPS, isolation=isolation)  # type: ignore[arg-type]
    runtime.watch_files(lambda call_id, paths: heard.append((call_id, tuple(paths))))
    result = runtime.execute(
        ToolCall(call_id="w", tool_name="append_line", arguments={"target": "log.txt", "line": "2"})
    )
    runtime.close()
    assert result.ok, result.message
    assert heard == [("w", ("log.txt", "log.txt", "log.txt"))]  # exists, read, write
