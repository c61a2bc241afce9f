"""The ``toolguard`` command: each subcommand through ``main([...])``, the
pytest-running ones and the Claude Code hook as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import python_path

from pytest_toolguard import CallState, ErrorCode, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.cli import main
from pytest_toolguard.replay import load, replay
from pytest_toolguard.tools import builtin_registry

ROOT = Path(__file__).parents[2]
SAMPLES = Path(__file__).parents[1] / "data" / "transcripts"
CLAUDE_REGISTRY = "pytest_toolguard.bridges.definitions.claude_code:claude_code_registry"

SAMPLE_OF = {
    "claude-code": "claude_code.jsonl",
    "openai-chat": "openai_chat.json",
    "openai-responses": "openai_responses.json",
    "anthropic": "anthropic.json",
    "mcp": "mcp.jsonl",
}


def toolguard(
    *arguments: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PYTHONPATH": python_path(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest_toolguard", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=environment,
        timeout=300,
    )


# -- help and usage errors ------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["import", "tools", "replay", "matrix", "fuzz", "audit", "cassette", "hook"]
)
def test_every_subcommand_help_shows_an_example(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    assert "example:\n  " in capsys.readouterr().out


def test_no_subcommand_prints_usage_and_exits_2(capsys) -> None:
    assert main([]) == 2
    assert "commands" in capsys.readouterr().err


def usage_error(capsys, *arguments: str) -> str:
    with pytest.raises(SystemExit) as exit:
        main(list(arguments))
    assert exit.value.code == 2
    return capsys.readouterr().err


def test_unknown_format_exits_2_naming_the_choices(capsys) -> None:
    err = usage_error(capsys, "import", "slack", "x.json", "--workspace", ".", "-o", "x.yaml")
    assert "invalid choice: 'slack'" in err and "claude-code" in err


def one_line_error(capsys, *arguments: str) -> str:
    assert main(list(arguments)) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err.count("\n") == 1 and captured.err.startswith("toolguard: ")
    return captured.err


def test_missing_transcript_file_is_one_line_and_exit_2(capsys, tmp_path: Path) -> None:
    err = one_line_error(
        capsys,
        "import",
        "mcp",
        str(tmp_path / "none.jsonl"),
        "--workspace",
        str(tmp_path),
        "-o",
        "x.yaml",
    )
    assert "cannot read" in err


def test_transcript_of_another_format_is_one_line_and_exit_2(capsys, tmp_path: Path) -> None:
    err = one_line_error(
        capsys,
        "import",
        "mcp",
        str(SAMPLES / "anthropic.json"),
        "--workspace",
        str(SAMPLES / "workspace"),
        "-o",
        str(tmp_path / "x.yaml"),
    )
    assert "no tool call could be read as mcp" in err


def test_bad_registry_is_one_line_and_exit_2(capsys) -> None:
    err = one_line_error(capsys, "tools", "--registry", "no_such_module:registry")
    assert "cannot import 'no_such_module'" in err


def test_missing_workspace_is_one_line_and_exit_2(capsys, tmp_path: Path) -> None:
    err = one_line_error(
        capsys,
        "import",
        "mcp",
        str(SAMPLES / "mcp.jsonl"),
        "--workspace",
        str(tmp_path / "none"),
        "-o",
        str(tmp_path / "x.yaml"),
    )
    assert "not a directory" in err


# -- import and tools --------------------------------------------------------------


@pytest.mark.parametrize("format", sorted(SAMPLE_OF))
def test_import_writes_a_cassette_that_replays(format: str, tmp_path: Path, capsys) -> None:
    registry = (
        CLAUDE_REGISTRY if format == "claude-code" else "pytest_toolguard.tools:builtin_registry"
    )
    output = tmp_path / "imported.yaml"
    status = main(
        [
            "import",
            format,
            str(SAMPLES / SAMPLE_OF[format]),
            "--registry",
            registry,
            "--workspace",
            str(SAMPLES / "workspace"),
            "-o",
            str(output),
        ]
    )
    out = capsys.readouterr().out
    assert "call(s) imported" in out
    # Only the Claude Code sample holds a call (Bash) that cannot re-run as it did.
    assert status == (1 if format == "claude-code" else 0)
    from pytest_toolguard.replay.registry_loading import load_registry

    assert replay(load(output), load_registry(registry)).ok


def test_import_records_the_command_that_re_records_it(tmp_path: Path, capsys) -> None:
    output = tmp_path / "m.yaml"
    main(
        [
            "import",
            "mcp",
            str(SAMPLES / "mcp.jsonl"),
            "--workspace",
            str(SAMPLES / "workspace"),
            "-o",
            str(output),
        ]
    )
    assert (load(output).recorded_by or "").startswith("toolguard import mcp ")


@pytest.mark.parametrize(
    ("format", "name_of"),
    [
        ("mcp", lambda body: [tool["name"] for tool in body["tools"]]),
        ("openai", lambda body: [tool["function"]["name"] for tool in body]),
        ("openai-responses", lambda body: [tool["name"] for tool in body]),
        ("anthropic", lambda body: [tool["name"] for tool in body]),
    ],
)
def test_tools_prints_the_registry_in_each_format(format: str, name_of, capsys) -> None:
    assert main(["tools", "--format", format]) == 0
    assert name_of(json.loads(capsys.readouterr().out)) == builtin_registry().names()


# -- audit ---------------------------------------------------------------------------


def audit_database(tmp_path: Path) -> Path:
    database = tmp_path / "audit.db"
    (tmp_path / "ws").mkdir()
    with (
        SQLiteAuditStore(database) as store,
        ToolRuntime(builtin_registry(), tmp_path / "ws", audit=store) as runtime,
    ):
        runtime.execute(ToolCall("c1", "list_files", {}, session_id="s1"))
        runtime.execute(
            ToolCall("c2", "write_file", {"path": "a", "content": "x"}, session_id="s1")
        )
        runtime.execute(ToolCall("c3", "list_files", {}, session_id="s2"))
    return database


def test_audit_filters_by_session_and_tool_as_json_lines(tmp_path: Path, capsys) -> None:
    database = audit_database(tmp_path)
    assert main(["audit", str(database), "--session", "s1", "--tool", "write_file", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["call_id"], row["result_code"], row["state"]) for row in rows] == [
        ("c2", "PERMISSION_DENIED", "DENIED")
    ]


def test_audit_table_counts_rows_since_a_time(tmp_path: Path, capsys) -> None:
    database = audit_database(tmp_path)
    assert main(["audit", str(database), "--since", "2000-01-01"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("3 row(s)")
    assert main(["audit", str(database), "--since", "2999-01-01"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("0 row(s)")


def test_audit_of_a_missing_database_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    one_line_error(capsys, "audit", str(tmp_path / "none.db"))
    assert not (tmp_path / "none.db").exists()


# -- cassette check and upgrade --------------------------------------------------------


def test_cassette_check_passes_the_shipped_ones(capsys) -> None:
    files = sorted(str(path) for path in (ROOT / "cassettes").glob("*.yaml"))
    assert main(["cassette", "check", *files]) == 0
    assert capsys.readouterr().out.count(": ok (cassette") == len(files)


def test_cassette_check_of_a_broken_file_names_it_and_exits_2(tmp_path: Path, capsys) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("format_version: 1\nkind: tape\nsession: {}\ninteractions: []\n")
    assert main(["cassette", "check", str(broken)]) == 2
    assert f"{broken}: $.kind" in capsys.readouterr().err


def test_cassette_upgrade_of_an_unknown_old_version_says_to_re_record(
    tmp_path: Path, capsys
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(
        "format_version: 0\nkind: cassette\nrecorded_by: python record.py\n"
        "session: {}\ninteractions: []\n"
    )
    assert main(["cassette", "upgrade", str(old)]) == 2
    assert (
        "no migration from format_version 0; re-record it: python record.py"
        in capsys.readouterr().err
    )


def test_cassette_upgrade_rewrites_a_current_one_in_its_stable_form(tmp_path: Path, capsys) -> None:
    target = tmp_path / "c.yaml"
    target.write_text((ROOT / "cassettes" / "code_editing.yaml").read_text())
    assert main(["cassette", "upgrade", str(target)]) == 0
    assert target.read_text() == (ROOT / "cassettes" / "code_editing.yaml").read_text()


# -- pytest runs (subprocesses) --------------------------------------------------------


def test_replay_runs_pytest_and_ends_with_its_summary() -> None:
    run = toolguard("replay", "cases/dotdot_escape.yaml", "--", "-q", "-p", "no:cacheprovider")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "toolguard: 0 cassettes and 1 case replayed" in run.stdout


def test_replay_of_an_imported_cassette_outside_the_cassette_dir(tmp_path: Path) -> None:
    output = tmp_path / "imported.yaml"
    imported = toolguard(
        "import",
        "mcp",
        str(SAMPLES / "mcp.jsonl"),
        "--workspace",
        str(SAMPLES / "workspace"),
        "-o",
        str(output),
    )
    assert imported.returncode == 0, imported.stderr
    run = toolguard("replay", str(output), "--", "-q", "-p", "no:cacheprovider")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "toolguard: 1 cassette and 0 cases replayed, 3 interactions" in run.stdout


def test_replay_of_a_missing_path_is_one_line_and_exit_2() -> None:
    run = toolguard("replay", "cases/none.yaml")
    assert (
        run.returncode == 2
        and run.stderr == "toolguard: no such file or directory: cases/none.yaml\n"
    )


@pytest.mark.parametrize("spec", ["no_such_module:registry", "pytest_toolguard:__version__"])
def test_replay_with_a_bad_ini_registry_is_one_line_and_exit_2(tmp_path: Path, spec: str) -> None:
    (tmp_path / "pytest.ini").write_text(f"[pytest]\ntoolguard_registry = {spec}\n")
    (tmp_path / "cases").mkdir()
    run = toolguard("replay", "cases", "--", "-p", "no:cacheprovider", cwd=tmp_path)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2, run.stdout + run.stderr
    assert len(lines) == 1 and lines[0].startswith("ERROR: ini toolguard_registry: ")


def test_matrix_runs_the_faults_and_writes_the_report(tmp_path: Path) -> None:
    report = tmp_path / "matrix.md"
    run = toolguard(
        "matrix",
        "cases/handler_exception.yaml",
        "--faults",
        "unknown_tool",
        "--report",
        str(report),
        "--",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "unknown_tool" in report.read_text()


def test_fuzz_runs_only_the_fuzz_items_of_the_registry(tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(
        "from pytest_toolguard import ToolRegistry, tool\n"
        "@tool()\n"
        "def echo(ctx, text: str) -> str:\n"
        "    return text\n"
        "registry = ToolRegistry([echo])\n"
    )
    run = toolguard(
        "fuzz", "--registry", "mytools:registry", "--examples", "5", "--", "-q", cwd=tmp_path
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


@pytest.mark.parametrize("network", [False, True])
def test_fuzz_reaches_the_network_only_with_its_flag_and_says_so(
    tmp_path: Path, network: bool
) -> None:
    (tmp_path / "mytools.py").write_text(
        "from pytest_toolguard import ToolRegistry, tool\n"
        "@tool()\n"
        "def echo(ctx, text: str) -> str:\n"
        "    return text\n"
        "registry = ToolRegistry([echo])\n"
    )
    flag = ["--network"] if network else []
    run = toolguard(
        "fuzz",
        "--registry",
        "mytools:registry",
        "--examples",
        "2",
        *flag,
        "--",
        "-q",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = [line for line in run.stdout.splitlines() if line.startswith("toolguard fuzz:")]
    assert len(summary) == 1 and summary[0].endswith("network allowed") is network


# -- the Claude Code hook ----------------------------------------------------------------


def hook_event(
    cwd: Path, tool_name: str, tool_input: dict, tool_use_id: str, **extra: object
) -> str:
    return json.dumps(
        {
            "session_id": "abc123",
            "transcript_path": str(cwd / "t.jsonl"),
            "cwd": str(cwd),
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": tool_name,
            "tool_input": tool_input,
            "tool_use_id": tool_use_id,
            **extra,
        }
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("x = 1\n")
    (tmp_path / "toolguard.yaml").write_text(
        yaml.safe_dump(
            {
                "audit": "audit.db",
                "capabilities": {
                    "allowed_risks": ["read", "write", "dangerous"],
                    "write_roots": ["src"],
                },
            }
        )
    )
    return tmp_path


def decision(run: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert run.returncode == 0, run.stderr
    output = json.loads(run.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse"
    return output["permissionDecision"], output["permissionDecisionReason"]


def pre(project: Path, tool_name: str, tool_input: dict, tool_use_id: str) -> tuple[str, str]:
    event = hook_event(project, tool_name, tool_input, tool_use_id)
    config = str(project / "toolguard.yaml")
    return decision(toolguard("hook", "pre-tool-use", "--config", config, stdin=event, cwd=project))


def test_hook_allows_a_read_inside_the_project_and_leaves_a_running_row(project: Path) -> None:
    verdict, _ = pre(project, "Read", {"file_path": str(project / "src" / "app.py")}, "toolu_1")
    assert verdict == "allow"
    with SQLiteAuditStore(project / "audit.db") as store:
        row = store.get("toolu_1")
    assert row is not None and row.state is CallState.RUNNING and row.session_id == "abc123"


def test_hook_denies_a_read_outside_the_project_with_the_code(project: Path) -> None:
    verdict, reason = pre(project, "Read", {"file_path": "/etc/passwd"}, "toolu_2")
    assert verdict == "deny" and ErrorCode.PATH_OUTSIDE_WORKSPACE.value in reason
    with SQLiteAuditStore(project / "audit.db") as store:
        row = store.get("toolu_2")
    assert row is not None and row.state is CallState.DENIED


def test_hook_denies_a_write_outside_the_write_roots(project: Path) -> None:
    verdict, reason = pre(
        project, "Write", {"file_path": str(project / "README.md"), "content": "x"}, "toolu_3"
    )
    assert verdict == "deny" and "PERMISSION_DENIED" in reason


def test_hook_asks_for_a_dangerous_tool(project: Path) -> None:
    verdict, reason = pre(project, "Bash", {"command": "rm -rf build"}, "toolu_4")
    assert verdict == "ask" and "needs your approval" in reason


def test_hook_asks_for_a_tool_it_does_not_know(project: Path) -> None:
    verdict, _ = pre(project, "TodoWrite", {"todos": []}, "toolu_5")
    assert verdict == "ask"


def test_post_tool_use_finishes_the_row_the_pre_hook_left(project: Path) -> None:
    pre(project, "Read", {"file_path": str(project / "src" / "app.py")}, "toolu_6")
    event = hook_event(
        project,
        "Read",
        {"file_path": str(project / "src" / "app.py")},
        "toolu_6",
        hook_event_name="PostToolUse",
        tool_response={"type": "text", "file": {"content": "x = 1\n"}},
    )
    config = str(project / "toolguard.yaml")
    run = toolguard("hook", "post-tool-use", "--config", config, stdin=event, cwd=project)
    assert run.returncode == 0, run.stderr
    with SQLiteAuditStore(project / "audit.db") as store:
        row = store.get("toolu_6")
    assert (
        row is not None
        and row.state is CallState.SUCCEEDED
        and "x = 1" in (row.result_preview or "")
    )


def test_hook_with_input_that_is_not_json_exits_2_to_block(project: Path) -> None:
    run = toolguard("hook", "pre-tool-use", stdin="{not json", cwd=project)
    assert run.returncode == 2
    assert run.stderr.startswith("toolguard: the hook input on stdin is not JSON")


def test_hook_with_an_unknown_config_key_exits_2(project: Path) -> None:
    (project / "bad.yaml").write_text("registy: x:y\n")
    event = hook_event(project, "Read", {"file_path": "src/app.py"}, "t")
    run = toolguard(
        "hook", "pre-tool-use", "--config", str(project / "bad.yaml"), stdin=event, cwd=project
    )
    assert run.returncode == 2 and "unknown key 'registy'" in run.stderr
