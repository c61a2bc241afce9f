"""``toolguard mcp check`` and ``toolguard import mcp --command``: an MCP
server started as a command, tested from the outside.

The servers are ``tests/mcp_check_servers``: ``files_server.py`` confines
its paths, ``--unconfined`` is its twin with a planted confinement bug, and
two are no servers at all (garbage on stdout, an exit at once)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_toolguard.cli import main

SERVERS = Path(__file__).resolve().parents[1] / "mcp_check_servers"
FILES = [sys.executable, str(SERVERS / "files_server.py"), "{workspace}"]
TWIN = [*FILES, "--unconfined"]
ESCAPES = "path_traversal,symlink_escape"
DECLARED = ["--path", "read_file={path}", "--path", "write_file={path}:write"]

LOG = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hello"}},
    },
    {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ok"}]}},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "readme.txt"}},
    },
    {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "read me"}]}},
]


@pytest.fixture
def log(tmp_path: Path) -> str:
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(message) + "\n" for message in LOG))
    return str(path)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    place = tmp_path / "before"
    place.mkdir()
    (place / "readme.txt").write_text("read me")
    return place


def tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry with its mode, mtime and bytes: a change of any shows."""
    found = {}
    for path in sorted(root.rglob("*")):
        status = path.lstat()
        body = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (status.st_mode, status.st_mtime_ns, body)
    return found


def toolguard(*arguments: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: a fresh process, its exit status and streams."""
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run(
        [sys.executable, "-m", "pytest_toolguard", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


# -- --help -------------------------------------------------------------------


def test_the_help_names_every_option_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["mcp", "--help"])
    assert exit.value.code == 0
    shown = capsys.readouterr().out
    for option in ("--cassette", "--calls", "--faults", "--fuzz", "--workspace", "--report"):
        assert option in shown
    assert "--path" in shown and "TOOL=TEMPLATE" in shown
    assert "-- python server.py {workspace}" in shown  # the example
    assert "-- COMMAND ..." in shown  # the usage line
    assert "exit 0 clean, 1 a problem found, 2 a usage error" in " ".join(shown.split())


def test_the_import_help_names_the_command_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    assert "--command" in capsys.readouterr().out


def test_the_top_level_help_lists_mcp(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "mcp" in capsys.readouterr().out


# -- bad input: one line, exit 2 ---------------------------------------------


def _truncated(tmp_path: Path, log: str) -> str:
    text = Path(log).read_text()
    cut = tmp_path / "truncated.jsonl"
    cut.write_text(text[: len(text) - 40])
    return str(cut)


def _unknown_tool(tmp_path: Path, log: str) -> str:
    odd = tmp_path / "unknown.jsonl"
    odd.write_text(Path(log).read_text().replace('"read_file"', '"delete_everything"'))
    return str(odd)


BAD_INPUTS = {
    "command not found": lambda t, log: ["mcp", "check", "--", "no-such-server-xyz", "{workspace}"],
    "exits at once": lambda t, log: [
        "mcp", "check", "--", sys.executable, str(SERVERS / "exits_server.py"),
    ],
    "prints garbage": lambda t, log: [
        "mcp", "check", "--", sys.executable, str(SERVERS / "garbage_server.py"),
    ],
    "log names an unknown tool": lambda t, log: [
        "mcp", "check", "--calls", _unknown_tool(t, log), "--", *FILES,
    ],
    "truncated log": lambda t, log: ["mcp", "check", "--calls", _truncated(t, log), "--", *FILES],
    "no log file": lambda t, log: ["mcp", "check", "--calls", str(t / "none.jsonl"), "--", *FILES],
    "log with no call": lambda t, log: ["mcp", "check", "--calls", os.devnull, "--", *FILES],
    "-- missing, no command": lambda t, log: ["mcp", "check", "--calls", log],
    "-- missing, a command": lambda t, log: ["mcp", "check", *FILES],
    "unknown fault": lambda t, log: ["mcp", "check", "--faults", "nope", "--", *FILES],
    "report of another kind": lambda t, log: [
        "mcp", "check", "--report", str(t / "r.txt"), "--", *FILES,
    ],
    "--workspace without --calls": lambda t, log: [
        "mcp", "check", "--workspace", str(t), "--", *FILES,
    ],
    "--path of no tool": lambda t, log: ["mcp", "check", "--path", "nope={path}", "--", *FILES],
    "--path without a template": lambda t, log: [
        "mcp", "check", "--path", "read_file", "--", *FILES,
    ],
    "--fuzz 0": lambda t, log: ["mcp", "check", "--fuzz", "0", "--", *FILES],
    "--env without =": lambda t, log: ["mcp", "check", "--env", "ROOT", "--", *FILES],
    "report cannot be written": lambda t, log: [
        "mcp", "check", "--calls", log, "--faults", "timeout", "--report", f"{os.devnull}/r.md",
        "--", *FILES,
    ],
    "not a cassette": lambda t, log: ["mcp", "check", "--cassette", log, "--", *FILES],
    "import: command not found": lambda t, log: [
        "import", "mcp", log, "--workspace", str(t), "-o", str(t / "c.yaml"),
        "--command", "no-such-server-xyz {workspace}",
    ],
    "import: log names an unknown tool": lambda t, log: [
        "import", "mcp", _unknown_tool(t, log), "--workspace", str(t), "-o", str(t / "c.yaml"),
        "--command", shlex.join(FILES),
    ],
    "import: unbalanced quote": lambda t, log: [
        "import", "mcp", log, "--workspace", str(t), "-o", str(t / "c.yaml"),
        "--command", "python 'server.py",
    ],
    "import: --command and --": lambda t, log: [
        "import", "mcp", log, "--workspace", str(t), "-o", str(t / "c.yaml"),
        "--command", shlex.join(FILES), "--", *FILES,
    ],
}  # fmt: skip


SAID = {
    "command not found": "no-such-server-xyz",
    "exits at once": "cannot start: no configuration",  # the server's stderr
    "prints garbage": "Welcome to my server",  # the first bytes it wrote
    "log names an unknown tool": "delete_everything",
    "truncated log": "line 4",
    "-- missing, no command": "after --",
}
"""What the line must say, where the input's fault is in someone else's words."""


def in_process(capsys: pytest.CaptureFixture[str], arguments: list[str]) -> tuple[int, str, str]:
    """``main(arguments)``'s exit status and streams (argparse's usage
    errors exit through ``SystemExit``)."""
    try:
        status = main(arguments)
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 2
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(
    case: str, tmp_path: Path, log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = in_process(capsys, BAD_INPUTS[case](tmp_path, log))
    assert status == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("toolguard"), err
    assert SAID.get(case, "") in lines[0]
    assert "Traceback" not in err + out
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("case", ["command not found", "prints garbage", "unknown fault"])
def test_a_fresh_process_prints_the_same_one_line_and_nothing_else(
    case: str, tmp_path: Path, log: str
) -> None:
    """As a user runs it: nothing else reaches stderr (no warning, no
    traceback from an interpreter shutting down)."""
    done = toolguard(*BAD_INPUTS[case](tmp_path, log))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("toolguard"), done.stderr
    assert SAID.get(case, "") in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


# -- the two views ------------------------------------------------------------


def check(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    status = main(["mcp", "check", *arguments])
    return status, capsys.readouterr().out


@pytest.mark.parametrize("fault", ["path_traversal", "symlink_escape"])
def test_the_authors_view_catches_the_unconfined_twin(
    fault: str, capsys: pytest.CaptureFixture[str], log: str, workspace: Path
) -> None:
    arguments = ["--calls", log, "--workspace", str(workspace), "--faults", fault, "--"]
    status, out = check(capsys, *arguments, *TWIN)
    assert status == 1, out
    failed = [line for line in out.splitlines() if line.strip().startswith("fail:")]
    reading = [line for line in failed if f"read_file x {fault}" in line]
    assert reading and "outside" in reading[0], out
    assert "toolguard-world-" not in out  # a cell's fresh world is <world>


@pytest.mark.parametrize("fault", ["path_traversal", "symlink_escape"])
def test_the_authors_view_passes_the_confined_server(
    fault: str, capsys: pytest.CaptureFixture[str], log: str, workspace: Path
) -> None:
    arguments = ["--calls", log, "--workspace", str(workspace), "--faults", fault, "--"]
    status, out = check(capsys, *arguments, *FILES)
    assert status == 0, out
    assert "0 fail" in out and out.rstrip().endswith("clean")


def test_the_agent_developers_view_contains_the_unconfined_twin(
    capsys: pytest.CaptureFixture[str], log: str, workspace: Path
) -> None:
    # The boundary judges the declared paths before the server sees them (a
    # link swapped in during the call reaches the server: symlink_escape's
    # second half is the server's own to defend).
    arguments = ["--calls", log, "--workspace", str(workspace), "--faults", "path_traversal"]
    arguments += DECLARED
    status, out = check(capsys, *arguments, "--", *TWIN)
    assert status == 0, out
    assert "agent developer's view" in out


@pytest.mark.slow
def test_the_confined_server_passes_every_cell(
    capsys: pytest.CaptureFixture[str], log: str, workspace: Path
) -> None:
    status, out = check(capsys, "--calls", log, "--workspace", str(workspace), "--", *FILES)
    assert status == 0, out
    assert " 0 fail" in out


def test_the_workspace_named_is_never_written(
    capsys: pytest.CaptureFixture[str], log: str, workspace: Path
) -> None:
    before = tree(workspace)
    arguments = ["--calls", log, "--workspace", str(workspace), "--faults", ESCAPES, "--"]
    check(capsys, *arguments, *TWIN)
    assert tree(workspace) == before


# -- import --command, then --cassette -----------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        ["--command", shlex.join(FILES)],
        [part for word in FILES for part in (f"--command={word}",)],
        ["--", *FILES],
    ],
    ids=["one string", "repeated", "after --"],
)
def test_import_re_executes_against_the_server_in_a_copy(
    how: list[str], tmp_path: Path, log: str, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(workspace)
    cassette = tmp_path / "session.yaml"
    arguments = ["import", "mcp", log, "--workspace", str(workspace), "-o", str(cassette)]
    status = main([*arguments, *how])
    out = capsys.readouterr().out
    assert status == 0, out
    assert tree(workspace) == before  # notes.txt was written in the copy
    text = cassette.read_text()
    assert "notes.txt" in text and "hello" in text
    assert "root: /workspace" in text and "toolguard-import-" not in text
    assert "--command" in text and "files_server.py" in text  # recorded_by


def _imported(tmp_path: Path, log: str, workspace: Path) -> str:
    cassette = tmp_path / "session.yaml"
    arguments = ["import", "mcp", log, "--workspace", str(workspace), "-o", str(cassette)]
    assert main([*arguments, "--command", shlex.join(FILES)]) == 0
    return str(cassette)


@pytest.mark.parametrize(("server", "expected"), [(FILES, 0), (TWIN, 1)], ids=["confined", "twin"])
def test_a_cassette_is_replayed_and_its_matrix_run(
    server: list[str],
    expected: int,
    tmp_path: Path,
    log: str,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cassette = _imported(tmp_path, log, workspace)
    capsys.readouterr()
    status, out = check(capsys, "--cassette", cassette, "--faults", ESCAPES, "--", *server)
    assert status == expected, out
    assert "replay: 2 call(s), as recorded" in out


# -- reports and fuzzing ------------------------------------------------------


def test_the_reports_hold_the_matrix_and_the_failing_cells(
    tmp_path: Path, log: str, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--calls", log, "--workspace", str(workspace), "--faults", "path_traversal"]
    markdown, data = tmp_path / "out" / "r.md", tmp_path / "r.json"
    assert check(capsys, *common, "--report", str(markdown), "--", *TWIN)[0] == 1
    assert check(capsys, *common, "--report", str(data), "--", *TWIN)[0] == 1
    assert "path_traversal" in markdown.read_text() and "❌" in markdown.read_text()
    body = json.loads(data.read_text())
    assert body["tools"] == ["read_file", "write_file"] and body["paths_declared"] is False
    failed = [cell for cell in body["matrix"]["cells"] if cell["status"] == "fail"]
    assert {cell["tool"] for cell in failed} >= {"read_file"}


@pytest.mark.slow
@pytest.mark.parametrize(("server", "expected"), [(FILES, 0), (TWIN, 1)], ids=["confined", "twin"])
def test_fuzzing_reads_outside_only_through_the_twin(
    server: list[str], expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = check(capsys, "--fuzz", "2", "--", *server)
    assert status == expected, out
    assert "fuzz read_file:" in out and "fuzz write_file:" in out


HTTP_SERVER = [
    sys.executable,
    str(Path(__file__).resolve().parents[1] / "mcp_servers" / "http_server.py"),
    "{workspace}",
    "--port",
    "{port}",
]
HTTP_LOG = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "write_note", "arguments": {"path": "notes.txt", "text": "hello"}},
    },
    {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ok"}]}},
]


@pytest.mark.slow
def test_a_server_over_streamable_http_is_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, workspace: Path
) -> None:
    """``--http``: the same check, the server started on a free port of the
    loopback in each world; its confined writes pass the escapes."""
    log = tmp_path / "http.jsonl"
    log.write_text("".join(json.dumps(message) + "\n" for message in HTTP_LOG))
    arguments = ["--calls", str(log), "--workspace", str(workspace), "--faults", ESCAPES]
    status, out = check(capsys, *arguments, "--http", "--", *HTTP_SERVER)
    assert status == 0, out
    assert "matrix: 2 cell(s): 2 pass, 0 fail" in out and out.rstrip().endswith("clean")


# -- the same through main(), with a node server that is no server ------------------

NODE_SERVER = str(Path(__file__).resolve().parents[1] / "mcp_servers" / "misbehaving_server.js")


def _import(t: Path, log: str, *command: str) -> list[str]:
    return ["import", "mcp", log, "--workspace", str(t), "-o", str(t / "c.yaml"), "--", *command]


NODE_INPUTS = {
    "check: exits at once": (
        lambda t, log: ["mcp", "check", "--", "node", NODE_SERVER, "--exit"],
        2,
        "bad config | line two",
    ),
    "check: prints garbage": (
        lambda t, log: ["mcp", "check", "--", "node", NODE_SERVER, "--garbage"],
        2,
        "Server ready on stdio",
    ),
    "check: command not found": (
        lambda t, log: ["mcp", "check", "--calls", log, "--", "no-such-node-server", "x"],
        2,
        "no-such-node-server",
    ),
    "check: log names an unknown tool": (
        lambda t, log: ["mcp", "check", "--calls", log, "--", "node", NODE_SERVER],
        2,
        "write_file",
    ),
    "check: truncated log": (
        lambda t, log: ["mcp", "check", "--calls", _truncated(t, log), "--", "node", NODE_SERVER],
        2,
        "line 4",
    ),
    "import: exits at once": (
        lambda t, log: _import(t, log, "node", NODE_SERVER, "--exit"),
        2,
        "bad config",
    ),
    "import: prints garbage": (
        lambda t, log: _import(t, log, "node", NODE_SERVER, "--garbage"),
        2,
        "Server ready on stdio",
    ),
    "import: command not found": (
        lambda t, log: _import(t, log, "no-such-node-server", "x"),
        2,
        "no-such-node-server",
    ),
    "import: log names an unknown tool": (
        lambda t, log: _import(t, log, "node", NODE_SERVER),
        2,
        "write_file",
    ),
    # import keeps the calls it can read and lists the rest: exit 1, no cassette of a bad line.
    "import: truncated log": (
        lambda t, log: _import(t, _truncated(t, log), sys.executable, *FILES[1:]),
        1,
        "line 4: not valid JSON",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(NODE_INPUTS))
def test_a_server_or_log_that_is_wrong_says_so_without_a_traceback(
    case: str, tmp_path: Path, log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments, status, said = NODE_INPUTS[case]
    assert main(arguments(tmp_path, log)) == status
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if status == 2:
        assert len(err.splitlines()) == 1 and err.startswith("toolguard: "), err
        assert not (tmp_path / "c.yaml").exists()
    assert said in out + err, out + err


def test_a_server_that_needs_its_workspace_lists_its_tools_in_a_copy_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server exits unless its workspace holds a file: listed in a copy
    of --workspace (never the workspace itself, which stays as it was)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "config.json").write_text("{}")
    before = tree(workspace)
    log = tmp_path / "hello.jsonl"
    call = {"name": "hello", "arguments": {"name": "x"}}
    log.write_text(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
        + "\n"
        + json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"content": [{"type": "text", "text": "hello x"}]},
            }
        )
        + "\n"
    )
    server = ["node", NODE_SERVER, "--needs", "{workspace}/config.json"]
    arguments = ["--calls", str(log), "--workspace", str(workspace), "--faults", "timeout"]
    status, out = check(capsys, *arguments, "--", *server)
    assert status == 0, out + capsys.readouterr().err
    assert "replay: 1 call(s), as recorded" in out
    assert tree(workspace) == before
