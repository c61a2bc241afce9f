"""The shipped cases/ and cassettes/: every file replays clean through the
library (no plugin), the cassettes are current (re-recording them writes the
same bytes), and no secret the recordings used reaches any of them."""

from __future__ import annotations

import difflib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pytest_toolguard.replay import load, replay
from pytest_toolguard.replay.variants import replay_variants
from pytest_toolguard.tools import builtin_registry

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "cases").glob("*.yaml"))
CASSETTES = sorted((ROOT / "cassettes").glob("*.yaml"))
RECORD_SCRIPT = ROOT / "cassettes" / "record.py"

# One case per row of the seed article's fault table that a single call can
# show, and per flow of seed 000: file -> the code it must show.
EXPECTED_CASES = {
    "unregistered_tool": "TOOL_NOT_FOUND",
    "missing_required_field": "INVALID_ARGUMENT",
    "extra_field": "INVALID_ARGUMENT",
    "dotdot_escape": "PATH_OUTSIDE_WORKSPACE",
    "symlink_to_outside": "PATH_OUTSIDE_WORKSPACE",
    "read_only_session_write_tool": "PERMISSION_DENIED",
    "duplicate_idempotency_key": "IDEMPOTENT_REPLAY",
    "handler_exception": "EXECUTION_ERROR",
    "oversized_output": "OK",
    "missing_content": "INVALID_ARGUMENT",
    "plan_blocks_write_markdown": "BLOCKED",
    "env_path": "FORBIDDEN_PATH",
    "path_into_another_run": "PERMISSION_DENIED",
    "write_too_large": "LIMIT_EXCEEDED",
}
EXPECTED_CASSETTES = ("code_editing", "feedback_analysis", "refusals")


def _id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _record_module() -> ModuleType:
    name = "_toolguard_shipped_record"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, RECORD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", CASES + CASSETTES, ids=_id)
def test_every_shipped_file_replays_without_difference(path):
    cassette = load(path)
    assert cassette.kind == ("case" if path.parent.name == "cases" else "cassette")
    report = replay(cassette, builtin_registry())
    assert not report.differences, "\n".join(
        f"{d.where}: {d.field}: recorded {d.recorded!r}, replayed {d.replayed!r}\n{d.diff}"
        for d in report.differences
    )
    assert len(report.results) == len(cassette.interactions) > 0
    assert len(report.audit_rows) == len(cassette.interactions)


@pytest.mark.parametrize("path", CASES + CASSETTES, ids=_id)
def test_every_shipped_file_replays_its_amplified_variants_without_difference(path):
    report = replay_variants(load(path), builtin_registry())
    assert not report.differences, "\n".join(
        f"{d.where}: {d.field}: recorded {d.recorded!r}, replayed {d.replayed!r}"
        for d in report.differences
    )


def test_the_three_cassettes_are_amplified():
    for path in CASSETTES:
        assert any(interaction.variants for interaction in load(path).interactions), path


def test_every_fault_table_row_and_seed_flow_has_its_case():
    assert {path.stem for path in CASES} >= set(EXPECTED_CASES)
    for name, code in EXPECTED_CASES.items():
        case = load(ROOT / "cases" / f"{name}.yaml")
        assert case.description, name
        assert code in [item.result.code for item in case.interactions], name
    truncated = load(ROOT / "cases" / "oversized_output.yaml").interactions[0].result
    assert truncated.truncated is True


def test_the_three_cassettes_are_shipped():
    assert [path.stem for path in CASSETTES] == list(EXPECTED_CASSETTES)
    for path in CASSETTES:
        assert load(path).recorded_by == f"python cassettes/record.py {path.stem}"


@pytest.mark.slow
def test_re_recording_writes_byte_identical_cassettes(tmp_path):
    """Proves the recording is stable and the shipped cassettes are current."""
    completed = subprocess.run(
        [sys.executable, str(RECORD_SCRIPT), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    fresh = sorted(path.name for path in tmp_path.glob("*.yaml"))
    assert fresh == [path.name for path in CASSETTES]
    for shipped in CASSETTES:
        old, new = shipped.read_bytes(), (tmp_path / shipped.name).read_bytes()
        if old != new:
            diff = "".join(
                difflib.unified_diff(
                    old.decode().splitlines(keepends=True),
                    new.decode().splitlines(keepends=True),
                    f"shipped {shipped.name}",
                    f"re-recorded {shipped.name}",
                )
            )
            pytest.fail(
                f"{_id(shipped)} is stale or unstable; re-record it with "
                f"`python cassettes/record.py {shipped.stem}`:\n{diff}"
            )


def test_the_recordings_really_use_their_fake_secrets():
    """Otherwise the next test would pass for want of secrets."""
    record = _record_module()
    used = json.dumps(
        [
            [spec.files, spec.outside_files, [(c.arguments, c.tool_name) for c in spec.calls]]
            for spec in (make() for make in record.SESSIONS.values())
        ]
    )
    for secret in record.SECRETS:
        assert secret in used


@pytest.mark.parametrize("path", CASES + CASSETTES, ids=_id)
def test_no_secret_bytes_in_any_shipped_file(path):
    data = path.read_bytes()
    for secret in _record_module().SECRETS:
        assert secret.encode() not in data, f"{_id(path)} holds a secret"


def test_the_secrets_sent_in_the_refusals_session_are_redacted_in_place():
    text = (ROOT / "cassettes" / "refusals.yaml").read_text(encoding="utf-8")
    for placeholder in (
        "Authorization: <redacted:authorization>",
        "GITHUB_TOKEN=<redacted:token>",
        "aws_key: <redacted:aws_access_key>",
        "postgres://agent:<redacted:url_password>@db.internal/app",
    ):
        assert placeholder in text
    assert ".env" not in load(ROOT / "cassettes" / "refusals.yaml").workspace.files
