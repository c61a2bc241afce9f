"""A read never escapes its read roots through a file name holding ``\\``.

``\\`` is an ordinary character in a POSIX name, but a separator in a
workspace path. ``walk`` yielded ``public/..\\private\\secret.txt`` as a path,
and ``search_text`` read it again by that path, which the sandbox split into
``public/../private/secret.txt``: the content of ``private/secret.txt`` came
back with ``read_roots=("public",)``. Tools now act on what the walk opened,
and names holding a separator are never handed back as paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, ToolCall, Workspace
from pytest_toolguard.tools import builtin_registry

SECRET = "TOP-SECRET-CONTENT"

# Names planted beneath public/ (files, or with a trailing "/" a directory
# holding x.txt) whose re-parsed spelling names something else.
NAMES = [
    "..\\private\\secret.txt",
    "sub\\..\\..\\private\\secret.txt",
    ".\\..\\private\\secret.txt",
    "..\\private\\",  # a directory: its x.txt re-parsed is private/x.txt
    "a\\b.txt",  # re-parsed: public/a/b.txt, another file of the root
    "..\\..\\outside.txt",
    "x\\.env",
    "trailing\\",
]


@pytest.fixture
def planted(workspace_dir: Path) -> Path:
    private = workspace_dir / "private"
    private.mkdir()
    (private / "secret.txt").write_text(f"{SECRET} secret line\n" * 40)
    (private / "x.txt").write_text(f"{SECRET} x line\n" * 70)
    public = workspace_dir / "public"
    (public / "a").mkdir(parents=True)
    (public / "a" / "b.txt").write_text("another file of the root, much longer\n" * 9)
    (public / "readme.txt").write_text("public line\n")
    (workspace_dir.parent / "outside.txt").write_text(f"{SECRET} outside\n")
    return workspace_dir


def plant(public: Path, name: str) -> None:
    if name.endswith("\\") and name != "trailing\\":
        (public / name[:-1]).mkdir()
        (public / name[:-1] / "x.txt").write_text("decoy line\n")
    else:
        (public / name).write_text("decoy line\n")


def every_string(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in every_string(item)]
    if isinstance(value, list):
        return [text for item in value for text in every_string(item)]
    return []


CALLS = [
    ("search_text", {"query": "line", "path": "public"}),
    ("search_text", {"query": SECRET, "path": "public"}),
    ("list_files", {"path": "public", "recursive": True}),
    ("list_files", {"path": "public"}),
]


@pytest.mark.parametrize("name", NAMES, ids=repr)
@pytest.mark.parametrize(("tool", "arguments"), CALLS, ids=lambda v: str(v)[:40])
def test_a_backslash_name_never_reads_or_reports_outside_the_read_root(
    toolguard_runtime, planted: Path, name: str, tool: str, arguments: dict[str, Any]
) -> None:
    plant(planted / "public", name)
    runtime = toolguard_runtime(builtin_registry(), Capabilities(read_roots=("public",)))
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments=arguments))
    assert result.ok
    texts = every_string(result.data)
    assert not any(SECRET in text for text in texts)
    assert not any("\\" in text for text in texts)
    row = runtime.audit.get("c1")
    assert row is not None and SECRET not in (row.result_preview or "")


@pytest.mark.parametrize("name", NAMES, ids=repr)
def test_recursive_listing_reports_each_files_own_size(
    toolguard_runtime, planted: Path, name: str
) -> None:
    plant(planted / "public", name)
    runtime = toolguard_runtime(builtin_registry(), Capabilities(read_roots=("public",)))
    result = runtime.execute(
        ToolCall(
            call_id="c1",
            tool_name="list_files",
            arguments={"path": "public", "recursive": True},
        )
    )
    assert result.ok
    for entry in result.data["entries"]:
        assert entry["size"] == (planted / entry["path"]).stat().st_size


@pytest.mark.parametrize("name", NAMES, ids=repr)
def test_workspace_listings_never_hand_back_a_name_holding_a_separator(
    planted: Path, name: str
) -> None:
    plant(planted / "public", name)
    with Workspace(planted) as ws:
        listed = (
            [entry.path for entry in ws.list_dir("public")]
            + ws.walk("public")
            + [entry.path for entry in ws.walk_entries("public")]
            + [path for path, _ in ws.read_tree("public")]
        )
        contents = [content for _, content in ws.read_tree("public")]
    assert listed and not any("\\" in path for path in listed)
    assert not any(SECRET.encode() in content for content in contents)


def test_read_tree_reads_what_the_walk_found_in_sorted_path_order(tmp_path: Path) -> None:
    for name in ("a-b.txt", "a/c.txt", "a/b/d.txt", "b.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    with Workspace(tmp_path) as ws:
        found = list(ws.read_tree("."))
        assert [path for path, _ in found] == sorted(ws.walk(".")) == ws.walk(".")
    assert all(content == path.encode() for path, content in found)
