"""A write never escapes its write root through a symlink at the final
component.

With ``README.md -> docs/README.md`` and ``write_roots=("docs",)``, the
policy judged where the link points (inside ``docs``) while the write
replaced the link entry itself (outside ``docs``), and rollback then deleted
``README.md``. A write is now judged by the entry it acts on (the parent
resolved, plus the final name) and a symlink there is neither followed nor
replaced; rollback restores a link as a link.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import EVERY_RISK, spy_tool

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall, Workspace
from pytest_toolguard.registry import PathAccess
from pytest_toolguard.rollback import ChangeJournal
from pytest_toolguard.sandbox import ForbiddenPath, Symlink
from pytest_toolguard.tools import builtin_registry

REFUSED = {ErrorCode.FORBIDDEN_PATH, ErrorCode.PATH_OUTSIDE_WORKSPACE, ErrorCode.PERMISSION_DENIED}


def tree(root: Path) -> dict[str, Any]:
    """Every entry beneath ``root``: a file's bytes, a link's target, or 'dir'."""
    found: dict[str, Any] = {}
    for directory, subdirs, names in os.walk(root):
        for name in subdirs + names:
            path = Path(directory, name)
            key = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes()
    return found


def link(root: Path, name: str, target: str) -> None:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).symlink_to(target)


# (id, write roots, links to plant, tool, arguments)
LAYOUTS: list[tuple[str, tuple[str, ...], dict[str, str], str, dict[str, Any]]] = [
    (
        "readme-into-docs",  # the README's own example, through write_file
        ("docs",),
        {"README.md": "docs/README.md"},
        "write_file",
        {"path": "README.md", "content": "agent text"},
    ),
    (
        "dangling-into-docs",
        ("docs",),
        {"README.md": "docs/new.md"},
        "write_file",
        {"path": "README.md", "content": "agent text"},
    ),
    (
        "sibling-dir-into-docs",
        ("docs",),
        {"notes/a.md": "../docs/a.md"},
        "write_file",
        {"path": "notes/a.md", "content": "agent text"},
    ),
    (
        "chain-into-docs",
        ("docs",),
        {"a.md": "b.md", "b.md": "docs/README.md"},
        "write_file",
        {"path": "a.md", "content": "agent text"},
    ),
    (
        "link-inside-the-root",
        ("docs",),
        {"docs/alias.md": "README.md"},
        "write_file",
        {"path": "docs/alias.md", "content": "agent text"},
    ),
    (
        "link-to-a-directory",
        ("docs",),
        {"docs/sub": "."},
        "write_file",
        {"path": "docs/sub", "content": "agent text"},
    ),
    (
        "link-leaving-the-workspace",
        (".",),
        {"docs/out.md": "../../outside.md"},
        "write_file",
        {"path": "docs/out.md", "content": "agent text"},
    ),
    (
        "link-to-forbidden-name",
        (".",),
        {"docs/conf": "../.env"},
        "write_file",
        {"path": "docs/conf", "content": "agent text"},
    ),
    (
        "markdown-artifact-into-docs",
        ("docs",),
        {"runs/r1/artifacts/report.md": "../../../docs/report.md"},
        "write_markdown_file",
        {"artifact_name": "report.md", "content": "agent text"},
    ),
    (
        "json-artifact-into-docs",
        ("docs",),
        {"runs/r1/artifacts/data.json": "../../../docs/data.json"},
        "write_json_file",
        {"artifact_name": "data.json", "content": {"a": 1}},
    ),
    (
        "artifact-inside-the-run",
        ("runs",),
        {"runs/r1/artifacts/report.md": "other.md"},
        "write_markdown_file",
        {"artifact_name": "report.md", "content": "agent text"},
    ),
]


@pytest.fixture
def planted(workspace_dir: Path) -> Path:
    (workspace_dir / "docs").mkdir()
    (workspace_dir / "docs" / "README.md").write_text("# real docs\n")
    (workspace_dir / ".env").write_text("TOKEN=x\n")
    (workspace_dir / "runs" / "r1" / "artifacts").mkdir(parents=True)
    (workspace_dir / "runs" / "r1" / "artifacts" / "other.md").write_text("other\n")
    (workspace_dir.parent / "outside.md").write_text("outside\n")
    return workspace_dir


@pytest.mark.parametrize(
    ("roots", "links", "tool", "arguments"),
    [layout[1:] for layout in LAYOUTS],
    ids=[layout[0] for layout in LAYOUTS],
)
def test_a_write_to_a_final_symlink_is_refused_and_changes_nothing(
    toolguard_runtime, planted: Path, roots, links, tool, arguments
) -> None:
    for name, target in links.items():
        link(planted, name, target)
    before, outside = tree(planted), (planted.parent / "outside.md").read_bytes()
    runtime = toolguard_runtime(
        builtin_registry(),
        Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=roots),
        variables={"run_id": "r1"},
    )
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments=arguments))
    assert result.code in REFUSED
    row = runtime.audit.get("c1")
    assert row is not None and row.decision == "deny"
    assert tree(planted) == before
    assert (planted.parent / "outside.md").read_bytes() == outside
    assert runtime.rollback("c1").code is ErrorCode.INVALID_REQUEST  # nothing was changed


def test_a_write_through_a_symlinked_parent_directory_lands_in_its_target(
    toolguard_runtime, planted: Path
) -> None:
    link(planted, "notes", "docs")
    runtime = toolguard_runtime(
        builtin_registry(),
        Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("docs",)),
    )
    result = runtime.execute(
        ToolCall(
            call_id="c1", tool_name="write_file", arguments={"path": "notes/a.md", "content": "x"}
        )
    )
    assert result.ok and result.data["path"] == "docs/a.md"
    assert (planted / "docs" / "a.md").read_text() == "x"
    assert (planted / "notes").is_symlink()


@pytest.mark.parametrize(
    ("name", "target"),
    [("link", "b.txt"), ("dangling", "nowhere/x.txt"), ("dirlink", "sub"), ("up", "sub/../b.txt")],
)
def test_rollback_of_a_deleted_symlink_recreates_the_link(
    tmp_path: Path, name: str, target: str
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.txt").write_bytes(b"bee")
    (tmp_path / name).symlink_to(target)
    journal = ChangeJournal()
    with Workspace(tmp_path) as ws:
        view = ws.with_journal(lambda path, previous: journal.record("c1", path, previous))
        view.delete(name)
        assert journal.changes("c1")[0].previous == Symlink(target)
        journal.rollback("c1", ws)
    assert (tmp_path / name).is_symlink() and os.readlink(tmp_path / name) == target
    assert (tmp_path / "b.txt").read_bytes() == b"bee"


def test_rollback_replaces_a_file_written_where_a_link_was(tmp_path: Path) -> None:
    """A handler that deletes a link and writes a file under its name is
    rolled back to the link."""
    (tmp_path / "b.txt").write_bytes(b"bee")
    (tmp_path / "link").symlink_to("b.txt")
    journal = ChangeJournal()
    with Workspace(tmp_path) as ws:
        view = ws.with_journal(lambda path, previous: journal.record("c1", path, previous))
        view.delete("link")
        view.write_bytes("link", b"a file now")
        journal.rollback("c1", ws)
    assert os.readlink(tmp_path / "link") == "b.txt"
    assert (tmp_path / "b.txt").read_bytes() == b"bee"


def test_runtime_rollback_restores_a_link_a_handler_removed(
    toolguard_runtime, registry_of, spy
) -> None:
    def unlink_and_write(ctx: Any, **arguments: Any) -> Any:
        ctx.workspace.delete("current")
        ctx.workspace.write_text("current", "replaced\n")
        return {}

    tool = spy_tool(
        spy,
        "relink",
        risk=Risk.WRITE,
        result=unlink_and_write,
        paths=(PathAccess.write("log.txt"),),
    )
    runtime = toolguard_runtime(
        registry_of(tool), Capabilities(allowed_risks=EVERY_RISK, write_roots=(".",))
    )
    root = Path(runtime.workspace.root)
    (root / "v1.txt").write_text("v1\n")
    (root / "current").symlink_to("v1.txt")
    assert runtime.execute(ToolCall(call_id="c1", tool_name="relink", arguments={})).ok
    assert not (root / "current").is_symlink()
    assert runtime.rollback("c1").ok
    assert os.readlink(root / "current") == "v1.txt"


def test_resolve_write_judges_the_parent_and_refuses_a_final_link(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "notes").symlink_to("docs")
    (tmp_path / "README.md").symlink_to("docs/README.md")
    with Workspace(tmp_path) as ws:
        assert ws.resolve_write("notes/a.md") == "docs/a.md"
        assert ws.resolve_write("new/a.md") == "new/a.md"
        with pytest.raises(ForbiddenPath):
            ws.resolve_write("README.md")
        assert ws.resolve("README.md") == "docs/README.md"  # a read still follows it
