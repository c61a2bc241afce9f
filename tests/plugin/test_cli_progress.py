"""``toolguard import`` shows its progress: one line a call with
``--progress``, rewritten in place on a terminal, nothing in a log unless
asked."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_toolguard.cli import main

ROOT = Path(__file__).parents[2]
SAMPLES = Path(__file__).parents[1] / "data" / "transcripts"


def import_arguments(output: Path) -> list[str]:
    return [
        "import",
        "mcp",
        str(SAMPLES / "mcp.jsonl"),
        "--workspace",
        str(SAMPLES / "workspace"),
        "-o",
        str(output),
    ]


def test_import_with_progress_reports_each_call_on_stderr(tmp_path: Path, capsys) -> None:
    assert main([*import_arguments(tmp_path / "m.yaml"), "--progress"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "toolguard: re-executing call 1/3",
        "toolguard: re-executing call 2/3",
        "toolguard: re-executing call 3/3",
    ]


def test_import_into_a_log_shows_no_progress_unless_asked(tmp_path: Path, capsys) -> None:
    assert main(import_arguments(tmp_path / "m.yaml")) == 0
    assert "re-executing" not in capsys.readouterr().err


def on_a_terminal(arguments: list[str]) -> tuple[int, bytes]:
    """Run ``toolguard`` with its stderr on a pseudo-terminal; its status
    and everything written there."""
    controller, terminal = pty.openpty()
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "pytest_toolguard", *arguments],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env=environment,
    ) as process:
        os.close(terminal)
        written = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal's last end
                break
            if not chunk:
                break
            written += chunk
        status = process.wait(timeout=120)
    os.close(controller)
    return status, written


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_import_on_a_terminal_rewrites_one_progress_line(tmp_path: Path) -> None:
    status, written = on_a_terminal(import_arguments(tmp_path / "m.yaml"))
    assert status == 0
    # The terminal turns "\n" into "\r\n"; each update starts with "\r".
    assert written.replace(b"\r\n", b"\n") == (
        b"\rtoolguard: re-executing call 1/3"
        b"\rtoolguard: re-executing call 2/3"
        b"\rtoolguard: re-executing call 3/3\n"
    )


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_no_progress_keeps_a_terminal_quiet(tmp_path: Path) -> None:
    status, written = on_a_terminal([*import_arguments(tmp_path / "m.yaml"), "--no-progress"])
    assert (status, written) == (0, b"")
