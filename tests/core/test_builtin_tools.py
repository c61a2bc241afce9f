"""The seed's built-in tools, through the executor."""

from __future__ import annotations

import json

import pytest

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall
from pytest_toolguard.tools import builtin_registry

RUN = "runs/r1"
CAPS = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
    write_roots=(f"{RUN}/artifacts", "src"),
)


@pytest.fixture
def runtime(toolguard_runtime, workspace_dir):
    (workspace_dir / "src").mkdir()
    (workspace_dir / "src" / "app.py").write_text("def main():\n    return 'TODO: fix'\n")
    (workspace_dir / "src" / "util.py").write_text("# todo later\n")
    (workspace_dir / "data").mkdir()
    (workspace_dir / "data" / "feedback.csv").write_text(
        '\ufeffid,channel,text\n1,app,"crash, on export"\n2,web,héllo\n', encoding="utf-8"
    )
    return toolguard_runtime(builtin_registry(), CAPS, variables={"run_id": "r1"})


def run(runtime, tool_name, **arguments):
    result = runtime.execute(
        ToolCall(
            call_id=f"{tool_name}-{len(runtime.audit.rows())}",
            tool_name=tool_name,
            arguments=arguments,
        )
    )
    assert result.ok, result.message
    return result.data


def test_read_text_returns_relative_path_and_bounded_content(runtime):
    data = run(runtime, "read_text", path="src/app.py", max_chars=10)
    assert data == {
        "path": "src/app.py",
        "content": "def main()",
        "truncated": True,
        "total_chars": 35,
    }


def test_write_file_reports_bytes_and_creation(runtime, workspace_dir):
    assert run(runtime, "write_file", path="src/new/mod.py", content="é") == {
        "path": "src/new/mod.py",
        "bytes_written": 2,
        "created": True,
    }
    assert run(runtime, "write_file", path="src/new/mod.py", content="x")["created"] is False
    assert (workspace_dir / "src" / "new" / "mod.py").read_text() == "x"


def test_list_files_flat_and_recursive(runtime):
    flat = run(runtime, "list_files", path="src")
    assert [e["path"] for e in flat["entries"]] == ["src/app.py", "src/util.py"]
    deep = run(runtime, "list_files", recursive=True)
    assert [e["path"] for e in deep["entries"]] == [
        "data/feedback.csv",
        "src/app.py",
        "src/util.py",
    ]


def test_search_text_finds_lines_case_insensitively(runtime):
    data = run(runtime, "search_text", query="todo", path="src", case_sensitive=False)
    assert [(m["path"], m["line"]) for m in data["matches"]] == [
        ("src/app.py", 2),
        ("src/util.py", 1),
    ]
    assert data["truncated"] is False


def test_read_csv_reads_rows_with_quoted_commas_and_bom(runtime):
    data = run(runtime, "read_csv", path="data/feedback.csv")
    assert data["columns"] == ["id", "channel", "text"]
    assert data["rows"][0] == {"id": "1", "channel": "app", "text": "crash, on export"}
    assert data["row_count"] == 2


def test_write_json_file_writes_sorted_indented_utf8_in_the_run(runtime, workspace_dir):
    data = run(runtime, "write_json_file", artifact_name="a.json", content={"b": "é", "a": [1]})
    assert data == {"path": f"{RUN}/artifacts/a.json", "artifact_name": "a.json"}
    text = (workspace_dir / RUN / "artifacts" / "a.json").read_text(encoding="utf-8")
    assert (
        text
        == json.dumps({"a": [1], "b": "é"}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )


@pytest.mark.parametrize(
    "name", ["../../r2/a.json", "sub/a.json", ".hidden.json", "a.txt", "a\\b.json"]
)
def test_write_json_file_takes_a_bare_json_file_name_only(runtime, name):
    result = runtime.execute(
        ToolCall(
            call_id="x",
            tool_name="write_json_file",
            arguments={"artifact_name": name, "content": {}},
        )
    )
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert "arguments.artifact_name" in result.message


def test_write_markdown_and_list_run_files(runtime):
    run(runtime, "write_markdown_file", artifact_name="report.md", content="# R")
    assert run(runtime, "list_run_files") == {
        "run_id": "r1",
        "files": [f"{RUN}/artifacts/report.md"],
    }


def test_run_tools_need_the_run_id_variable(toolguard_runtime):
    runtime = toolguard_runtime(builtin_registry(), CAPS)
    result = runtime.execute(
        ToolCall(
            call_id="x",
            tool_name="write_json_file",
            arguments={"artifact_name": "a.json", "content": 1},
        )
    )
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert "run_id" in result.message


def test_reading_a_missing_file_is_an_execution_error_naming_it(runtime):
    result = runtime.execute(
        ToolCall(call_id="x", tool_name="read_text", arguments={"path": "src/missing.py"})
    )
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert "FileNotFoundError" in result.message and "src/missing.py" in result.message
