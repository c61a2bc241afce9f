"""A handler killed in process isolation can still be rolled back.

In process mode the journal entries were made in the child and travelled
back with its outcome: a child killed at its deadline (or dead of its own
accord) took them along, its file stayed, and ``rollback`` said "no changes
recorded". Each entry now reaches the parent before its change is made.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, spy_tool

from pytest_toolguard import CallState, ErrorCode, ToolCall
from pytest_toolguard.isolation import ChildLog

DEADLINE = 1.0


def hang(ctx: Any) -> None:
    threading.Event().wait(60)  # until the deadline kills the process


def die(ctx: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def exit_abruptly(ctx: Any) -> None:
    os._exit(3)


ENDS = {"killed at the deadline": hang, "killed by a signal": die, "exited": exit_abruptly}

# (id, files before, what the handler changes, files expected after rollback)
CHANGES: list[tuple[str, dict[str, str], Any]] = [
    ("creates", {}, lambda ws: ws.write_text("new.txt", "made by the child\n")),
    ("overwrites", {"kept.txt": "before\n"}, lambda ws: ws.write_text("kept.txt", "after\n")),
    ("deletes", {"gone.txt": "before\n"}, lambda ws: ws.delete("gone.txt")),
    (
        "several",
        {"a.txt": "a\n"},
        lambda ws: (ws.write_text("a.txt", "A\n"), ws.write_text("sub/b.txt", "B\n")),
    ),
]


def tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.startswith(".toolguard-tmp-")
    }


CASES = [
    pytest.param(
        change,
        end,
        id=f"{change[0]}-{end}",
        marks=[pytest.mark.slow] if end == "killed at the deadline" else [],
    )
    for change in CHANGES
    for end in sorted(ENDS)
    # The deadline costs its second: once, on the change with most files.
    if end != "killed at the deadline" or change[0] == "several"
]


@pytest.mark.parametrize(("case", "end"), CASES)
def test_a_killed_childs_changes_are_rolled_back(
    toolguard_runtime, registry_of, spy, workspace_dir: Path, case: Any, end: str
) -> None:
    _, before, change = case
    for name, text in before.items():
        (workspace_dir / name).write_text(text)

    def work(ctx: Any, **arguments: Any) -> Any:
        change(ctx.workspace)
        ENDS[end](ctx)
        return {}

    tool = spy_tool(spy, result=work, timeout_seconds=DEADLINE)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, isolation="process")
    result = runtime.execute(ToolCall("c1", "spy", {}))
    expected = ErrorCode.TIMEOUT if end == "killed at the deadline" else ErrorCode.EXECUTION_ERROR
    assert result.code is expected
    assert tree(workspace_dir) != before  # the change happened before the child died
    rolled = runtime.rollback("c1")
    assert rolled.ok, rolled.message
    assert tree(workspace_dir) == before


def test_a_finished_childs_changes_are_still_rolled_back(
    toolguard_runtime, registry_of, spy, workspace_dir: Path
) -> None:
    (workspace_dir / "kept.txt").write_text("before\n")

    def work(ctx: Any, **arguments: Any) -> Any:
        ctx.workspace.write_text("kept.txt", "after\n")
        return {"pid": os.getpid()}

    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, result=work)), WRITE_ANYWHERE, isolation="process"
    )
    result = runtime.execute(ToolCall("c1", "spy", {}))
    assert result.ok and result.state is CallState.SUCCEEDED
    assert runtime.rollback("c1").ok
    assert (workspace_dir / "kept.txt").read_text() == "before\n"


def test_a_child_log_keeps_whole_records_and_drops_a_cut_one() -> None:
    log = ChildLog()
    try:
        log.send(("a.txt", b"x" * 200_000))  # larger than a pipe could hold
        log.send(("b.txt", None))
        os.write(log._file.fileno(), (999).to_bytes(8, "big") + b"cut")  # killed mid-record
        assert log.receive() == [("a.txt", b"x" * 200_000), ("b.txt", None)]
    finally:
        log.close()
