"""No absolute host path reaches a model or the audit log."""

from __future__ import annotations

import dataclasses
import os

from pytest_toolguard import Capabilities, Risk, ToolCall
from pytest_toolguard.tools import builtin_registry

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("src", "runs"))


def test_no_result_message_or_audit_row_names_the_host_directory(
    toolguard_runtime, workspace_dir, tmp_path
):
    (tmp_path / "outside.txt").write_text("outside")
    (workspace_dir / "src").mkdir()
    (workspace_dir / "src" / "a.txt").write_text("a")
    (workspace_dir / "src" / "dir").mkdir()
    os.symlink(tmp_path / "outside.txt", workspace_dir / "src" / "abs-link")
    os.symlink("../../outside.txt", workspace_dir / "src" / "rel-link")
    os.symlink("loop", workspace_dir / "src" / "loop")
    os.link(workspace_dir / "src" / "a.txt", workspace_dir / "src" / "hard.txt")
    runtime = toolguard_runtime(builtin_registry(), CAPS, variables={"run_id": "r1"})
    calls = [
        ("read_text", {"path": "src/missing.txt"}),
        ("read_text", {"path": "src/dir"}),
        ("read_text", {"path": "src/a.txt/x"}),
        ("read_text", {"path": "src/abs-link"}),
        ("read_text", {"path": "src/rel-link"}),
        ("read_text", {"path": "src/loop"}),
        ("read_text", {"path": "src/hard.txt"}),
        ("read_text", {"path": str(tmp_path / "outside.txt")}),
        ("write_file", {"path": "src/a.txt/x", "content": "x"}),
        ("write_file", {"path": "src/abs-link/x", "content": "x"}),
        ("write_file", {"path": "src/dir", "content": "x"}),
        ("list_files", {"path": "src/a.txt"}),
        ("search_text", {"query": "a", "path": "src/missing"}),
        ("read_csv", {"path": "src/a.txt"}),
    ]
    results = [
        runtime.execute(ToolCall(call_id=f"c{i}", tool_name=name, arguments=arguments))
        for i, (name, arguments) in enumerate(calls)
    ]
    assert not any(r.ok for r in results[:-1])
    host = str(tmp_path)
    for result in results:
        assert host not in result.to_observation(), result
    for row in runtime.audit.rows():
        for name, value in dataclasses.asdict(row).items():
            if name == "arguments_json" and row.call_id == "c7":
                continue  # the model sent that absolute path itself
            assert host not in str(value), (row.call_id, name, value)
