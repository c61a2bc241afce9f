"""File names that are not UTF-8 never break the audit row or the key.

``list_files`` on a directory holding ``report-\\xff.txt`` answered
``EXECUTION_ERROR ... UnicodeEncodeError``: the RUNNING row was never
finished, a second FAILED row was written, and the idempotency key stayed
``running`` (every retry answered ``DUPLICATE_CALL``). Results now carry
such names escaped (``report-\\\\udcff.txt``), and a row is always finished,
once, with its key settled.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import CallState, Capabilities, ErrorCode, Risk, ToolCall
from pytest_toolguard.audit import AuditRecord, Outcome, SQLiteAuditStore
from pytest_toolguard.tools import builtin_registry

NAMES = [
    b"report-\xff.txt",
    b"\xe9t\xe9.txt",  # Latin-1
    b"\xed\xa0\x80.txt",  # an encoded surrogate
    b"\xc0\xaf.txt",  # an overlong '/'
    b"\x80",
    b"ok-\xfe\xff-\xff",
]


def plant(root: Path, name: bytes) -> None:
    """Every layout the tools below need, around the undecodable ``name``."""
    base = os.fsencode(root)
    for directory in (b"d", b"runs/r1/artifacts"):
        os.makedirs(os.path.join(base, directory), exist_ok=True)
    with open(os.path.join(base, b"d", name), "w") as handle:
        handle.write("a,b\nneedle,2\n")
    with open(os.path.join(base, b"runs/r1", name), "w") as handle:
        handle.write("run file\n")
    os.makedirs(os.path.join(base, b"dir-" + name))
    os.symlink(name, os.path.join(base, b"d/link.txt"))
    os.symlink(b"../dir-" + name, os.path.join(base, b"d/out"))


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_files", {"path": "d"}),
    ("list_files", {"path": "d", "recursive": True}),
    ("list_files", {"path": ".", "recursive": True}),
    ("search_text", {"query": "needle", "path": "d"}),
    ("list_run_files", {}),
    ("read_text", {"path": "d/link.txt"}),
    ("read_csv", {"path": "d/link.txt"}),
    ("wait_for_file", {"path": "d/link.txt", "wait_seconds": 0.2}),
    ("write_file", {"path": "d/out/new.txt", "content": "written\n"}),
    ("write_markdown_file", {"artifact_name": "report.md", "content": "# r"}),
    ("write_json_file", {"artifact_name": "report.json", "content": {"a": 1}}),
]


@pytest.fixture
def runtime(toolguard_runtime, workspace_dir: Path):
    return toolguard_runtime(
        builtin_registry(),
        Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",)),
        variables={"run_id": "r1"},
    )


def rows_of(store: Any, call_id: str) -> list[AuditRecord]:
    return [row for row in store.rows() if row.call_id == call_id]


@pytest.mark.parametrize("name", NAMES, ids=repr)
@pytest.mark.parametrize(("tool", "arguments"), CALLS, ids=lambda v: str(v)[:30])
def test_an_undecodable_name_gives_a_storable_result_and_one_finished_row(
    runtime, workspace_dir: Path, name: bytes, tool: str, arguments: dict[str, Any]
) -> None:
    plant(workspace_dir, name)
    call = ToolCall(call_id="c1", tool_name=tool, arguments=arguments, idempotency_key="k1")
    result = runtime.execute(call)
    assert result.ok, result.message
    json.dumps(result.data, ensure_ascii=False).encode("utf-8")  # no lone surrogate
    (row,) = rows_of(runtime.audit, "c1")
    assert (row.state, row.result_code) == (CallState.SUCCEEDED, ErrorCode.OK)
    assert row.result_preview


@pytest.mark.parametrize("name", NAMES, ids=repr)
@pytest.mark.parametrize(("tool", "arguments"), CALLS, ids=lambda v: str(v)[:30])
def test_a_retry_after_an_undecodable_name_replays_instead_of_duplicate_call(
    runtime, workspace_dir: Path, name: bytes, tool: str, arguments: dict[str, Any]
) -> None:
    plant(workspace_dir, name)
    first = runtime.execute(
        ToolCall(call_id="c1", tool_name=tool, arguments=arguments, idempotency_key="k1")
    )
    again = runtime.execute(
        ToolCall(call_id="c2", tool_name=tool, arguments=arguments, idempotency_key="k1")
    )
    assert again.code is ErrorCode.IDEMPOTENT_REPLAY
    assert again.data == first.data


def test_a_write_through_an_undecodable_directory_writes_and_reports_success(
    runtime, workspace_dir: Path
) -> None:
    plant(workspace_dir, b"report-\xff.txt")
    result = runtime.execute(
        ToolCall(
            call_id="c1",
            tool_name="write_file",
            arguments={"path": "d/out/new.txt", "content": "written\n"},
        )
    )
    assert result.ok
    assert result.data["path"] == "dir-report-\\udcff.txt/new.txt"
    target = os.path.join(os.fsencode(workspace_dir), b"dir-report-\xff.txt", b"new.txt")
    with open(target) as handle:
        assert handle.read() == "written\n"


class RefusingFinish(SQLiteAuditStore):
    """A store whose ``finish`` raises a non-audit error for rows holding a
    preview: the runtime must still finish the same row and settle its key."""

    def finish(self, audit_id: int, outcome: Outcome, *, claim_key: str | None = None) -> None:
        if outcome.result_preview:
            raise UnicodeEncodeError("utf-8", "x", 0, 1, "surrogates not allowed")
        super().finish(audit_id, outcome, claim_key=claim_key)


def test_an_error_while_finishing_still_finishes_that_row_and_settles_the_key(
    toolguard_runtime, workspace_dir: Path, tmp_path: Path
) -> None:
    (workspace_dir / "a.txt").write_text("a\n")
    store = RefusingFinish(tmp_path / "refusing.db")
    runtime = toolguard_runtime(builtin_registry(), audit=store)
    call = ToolCall(call_id="c1", tool_name="list_files", arguments={}, idempotency_key="k")
    first = runtime.execute(call)
    assert first.ok
    (row,) = rows_of(store, "c1")
    assert row.state is CallState.SUCCEEDED and row.finished_at is not None
    again = runtime.execute(
        ToolCall(call_id="c2", tool_name="list_files", arguments={}, idempotency_key="k")
    )
    assert again.code is not ErrorCode.DUPLICATE_CALL
    assert len(store.rows()) == 2
    store.close()
