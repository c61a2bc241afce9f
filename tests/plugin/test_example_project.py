"""The example project (``examples/agent_project``) works as a user's own
project: its fixture tests pass on every run, its cassettes replay with no
network, the fault matrix over them has no failing cell, the fuzzer takes
exactly its tools from its conftest.py fixture, and its recording script
records a run that replays once the service it called is gone.

Each check runs pytest in a copy of the project, in a subprocess, with the
project's own ``pytest.ini`` (as ``cd examples/agent_project && pytest``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NOT_OURS

from pytest_toolguard.replay import load

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "agent_project"
TOOLS = ["copy_file", "fetch_status", "grep_file", "save_note", "word_count"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "agent_project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return copy


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    environment.pop("PYTEST_ADDOPTS", None)
    environment.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(project, "-m", "pytest", "-p", "no:cacheprovider", *NOT_OURS, "-q", *args)


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


def test_its_fixture_tests_play_back_from_the_recorded_cassettes(project: Path) -> None:
    result = _pytest(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b2 passed\b", _last_line(result))


def test_its_cassettes_replay_with_no_network(project: Path) -> None:
    result = _pytest(project, "--toolguard-replay", "cassettes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(
        r"toolguard: 3 cassettes and 0 cases replayed, \d+ interactions", result.stdout
    )
    assert re.search(r", 0 failed$", result.stdout.strip().splitlines()[-2])


@pytest.mark.slow
def test_the_fault_matrix_over_it_has_no_failing_cell(project: Path) -> None:
    result = _pytest(project, "--toolguard-replay", "--toolguard-faults=all", "cassettes")
    assert result.returncode == 0, result.stdout + result.stderr
    cells = re.search(r"fault matrix: (\d+) cells: (\d+) pass, (\d+) fail", result.stdout)
    assert cells, result.stdout
    assert int(cells.group(3)) == 0 and int(cells.group(2)) > 50


@pytest.mark.slow
def test_the_fuzzer_takes_exactly_its_tools_from_the_conftest_fixture(project: Path) -> None:
    result = _pytest(project, "--toolguard-fuzz", "--toolguard-fuzz-examples=10", "-rs", "-vv")
    assert result.returncode == 0, result.stdout + result.stderr
    outcomes = dict(re.findall(r"toolguard-fuzz::(\w+) (PASSED|SKIPPED|FAILED)", result.stdout))
    assert sorted(outcomes) == TOOLS
    # An external tool is only ever called with hosts this session may not
    # reach (the fuzzer makes no network call): skipped, and it says why.
    assert outcomes.pop("fetch_status") == "SKIPPED"
    assert "policy.network_host" in result.stdout
    assert set(outcomes.values()) == {"PASSED"}


def test_its_recording_script_records_a_run_that_replays_without_the_service(
    project: Path,
) -> None:
    recorded = _run(project, "scripts/record_run.py")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    cassette = load(project / "cassettes" / "agent_run.yaml")
    codes = [interaction.result.code for interaction in cassette.interactions]
    assert codes[:5] == ["OK"] * 5
    assert "APPROVAL_REQUIRED" not in codes and len(set(codes)) >= 4
    raw = (project / "cassettes" / "agent_run.yaml").read_text()
    assert "sk_live_do_not_record" not in raw
    # The service the script started is gone with it: replay needs none.
    replayed = _pytest(project, "--toolguard-replay", "cassettes/agent_run.yaml")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
