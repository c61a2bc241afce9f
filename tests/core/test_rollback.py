"""Rollback: a write tool's call can be undone, and the undo is audited."""

from __future__ import annotations

from pytest_toolguard import CallState, Capabilities, ErrorCode, Risk, ToolCall
from pytest_toolguard.tools import builtin_registry

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("src",))


def write(path, content, call_id):
    return ToolCall(
        call_id=call_id, tool_name="write_file", arguments={"path": path, "content": content}
    )


def test_rollback_restores_an_overwritten_file(toolguard_runtime, workspace_dir):
    (workspace_dir / "src").mkdir()
    (workspace_dir / "src" / "a.py").write_text("old\n")
    runtime = toolguard_runtime(builtin_registry(), CAPS)
    assert runtime.execute(write("src/a.py", "new\n", "w1")).ok
    assert (workspace_dir / "src" / "a.py").read_text() == "new\n"
    result = runtime.rollback("w1")
    assert result.ok and result.data == {"restored": ["src/a.py"], "removed": []}
    assert (workspace_dir / "src" / "a.py").read_text() == "old\n"


def test_rollback_removes_a_created_file(toolguard_runtime, workspace_dir):
    runtime = toolguard_runtime(builtin_registry(), CAPS)
    assert runtime.execute(write("src/new.py", "x\n", "w1")).ok
    assert runtime.rollback("w1").ok
    assert not (workspace_dir / "src" / "new.py").exists()


def test_rollback_is_recorded_in_the_audit_log(toolguard_runtime, workspace_dir):
    runtime = toolguard_runtime(builtin_registry(), CAPS)
    runtime.execute(write("src/new.py", "x\n", "w1"))
    runtime.rollback("w1")
    row = runtime.audit.get("rollback-w1")
    assert row is not None
    assert (row.tool_name, row.replay_of, row.state, row.rule) == (
        "toolguard.rollback",
        "w1",
        CallState.SUCCEEDED,
        "runtime.rollback",
    )


def test_rollback_of_an_unknown_call_is_an_invalid_request(toolguard_runtime):
    runtime = toolguard_runtime(builtin_registry(), CAPS)
    assert runtime.rollback("never").code is ErrorCode.INVALID_REQUEST


def test_only_the_first_previous_state_of_a_path_is_kept(toolguard_runtime, workspace_dir):
    from pytest_toolguard.registry import PathAccess, ToolRegistry, tool

    @tool(input_schema={"type": "object"}, risk=Risk.WRITE, paths=[PathAccess.write("src/a.py")])
    def twice(ctx):
        ctx.workspace.write_text("src/a.py", "one")
        ctx.workspace.write_text("src/a.py", "two")
        return {}

    (workspace_dir / "src").mkdir()
    (workspace_dir / "src" / "a.py").write_text("zero")
    runtime = toolguard_runtime(ToolRegistry([twice]), CAPS)
    assert runtime.execute(ToolCall(call_id="t", tool_name="twice")).ok
    runtime.rollback("t")
    assert (workspace_dir / "src" / "a.py").read_text() == "zero"


def test_the_journal_forgets_the_oldest_calls_past_its_budget(tmp_path):
    from pytest_toolguard.rollback import ChangeJournal

    journal = ChangeJournal(max_bytes=10)
    journal.record("old", "a.txt", b"123456")
    journal.record("new", "b.txt", b"789012")
    assert journal.changes("old") == []
    assert [c.path for c in journal.changes("new")] == ["b.txt"]


def test_a_journal_told_only_the_previous_state_restores_but_follows_no_link(tmp_path):
    """Without ``on_leave`` the rollback cannot check for later work, but it
    still walks the recorded path without following a planted link."""
    import os

    import pytest

    from pytest_toolguard.rollback import ChangeJournal
    from pytest_toolguard.sandbox import UNRECORDED, ForbiddenPath, Workspace

    (tmp_path / "notes").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "c.py").write_text("kept\n")
    journal = ChangeJournal()
    with Workspace(tmp_path) as ws:
        ws.with_journal(lambda p, b: journal.record("A", p, b)).write_bytes("notes/c.py", b"x")
        assert journal.changes("A")[0].leaves is UNRECORDED
        os.rename(tmp_path / "notes", tmp_path / "notes.old")
        os.symlink("src", tmp_path / "notes")
        with pytest.raises(ForbiddenPath):
            journal.rollback("A", ws)
        assert (tmp_path / "src" / "c.py").read_text() == "kept\n"
        os.unlink(tmp_path / "notes")
        os.rename(tmp_path / "notes.old", tmp_path / "notes")
        assert [c.path for c in journal.rollback("A", ws)] == ["notes/c.py"]
    assert not (tmp_path / "notes" / "c.py").exists()


def test_undo_check_only_touches_nothing(tmp_path):
    from pytest_toolguard.sandbox import Fingerprint, Workspace

    (tmp_path / "a.txt").write_text("by A")
    with Workspace(tmp_path) as ws:
        assert ws.undo("a.txt", None, Fingerprint.of(b"by A"), check_only=True)
        assert ws.undo("gone/b.txt", b"old", None, check_only=True)
        assert not ws.undo("a.txt", b"by A", Fingerprint.of(b"other"), check_only=True)
    assert (tmp_path / "a.txt").read_text() == "by A"
    assert not (tmp_path / "gone").exists()


def test_a_rollback_conflict_keeps_its_paths_through_pickle():
    import pickle

    from pytest_toolguard.sandbox import RollbackConflict

    conflict = RollbackConflict("m", "a", conflicts=("a", "b"), restored=("c",))
    again = pickle.loads(pickle.dumps(conflict))
    assert (again.path, again.conflicts, again.restored, again.code) == (
        "a",
        ("a", "b"),
        ("c",),
        ErrorCode.ROLLBACK_CONFLICT,
    )
