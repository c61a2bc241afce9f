"""Recorded calls whose ids repeat or are empty replay.

Models reuse tool call ids, and some send none. A cassette binds each call
to its own audit row by position; the id is kept as data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.cassette import Cassette
from pytest_toolguard.tools import builtin_registry

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


def _record(tmp_path: Path, calls: list[ToolCall]) -> Cassette:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    runtime = ToolRuntime(builtin_registry(), str(workspace), CAPS, SQLiteAuditStore())
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        for call in calls:
            runtime.execute(call)
    runtime.close()
    return load(path)


def _write(call_id: str, **fields: Any) -> ToolCall:
    arguments = {"path": "out.txt", "content": "x"}
    return ToolCall(call_id=call_id, tool_name="write_file", arguments=arguments, **fields)


def test_calls_sharing_an_id_each_keep_their_own_audit_row(tmp_path: Path) -> None:
    cassette = _record(
        tmp_path,
        [
            _write("call_0", idempotency_key="once"),
            _write("call_0", idempotency_key="once"),  # answered from the key
        ],
    )
    first, second = cassette.interactions
    assert (first.call.call_id, second.call.call_id) == ("call_0", "call_0")
    assert (first.audit.result_code, second.audit.result_code) == ("OK", "IDEMPOTENT_REPLAY")
    report = replay(cassette, builtin_registry())
    assert report.differences == ()


def test_a_repeated_id_with_different_outcomes_replays(tmp_path: Path) -> None:
    read = "read_text"
    cassette = _record(
        tmp_path,
        [
            ToolCall(call_id="toolu_1", tool_name=read, arguments={"path": "a.txt"}),
            ToolCall(call_id="toolu_1", tool_name=read, arguments={"path": "missing.txt"}),
        ],
    )
    report = replay(cassette, builtin_registry())
    assert report.differences == ()
    assert [result.ok for result in report.results] == [True, False]


def test_calls_without_an_id_replay_and_keep_the_empty_id(tmp_path: Path) -> None:
    cassette = _record(
        tmp_path,
        [
            ToolCall(call_id="", tool_name="read_text", arguments={"path": "a.txt"}),
            ToolCall(call_id="", tool_name="read_text", arguments={"path": "a.txt"}),
        ],
    )
    assert [i.call.call_id for i in cassette.interactions] == ["", ""]
    report = replay(cassette, builtin_registry())
    assert report.differences == ()
