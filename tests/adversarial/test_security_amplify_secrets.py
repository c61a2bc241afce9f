"""Amplification never writes a ``toolguard_secrets`` value into a cassette.

Replaying a cassette with ``secrets`` sends the real value where the
cassette holds its placeholder (``<redacted:KEYWORD>``): a handler then
writes it into files, echoes it in its data, finds it with a search. Every
variant amplification records from that run (its data, its changed files,
its files and arguments) is redacted with the secrets' patterns on top of
the default rules, as fault cells and replay are. The secrets here have no
shape a default rule knows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.amplify import amplify_file
from pytest_toolguard.harness.session import secrets_redactor
from pytest_toolguard.redaction import Redactor
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.tools import builtin_registry

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
SECRETS = {
    "plain words": "Zebra-Quartz-Mango-7781",
    "quote and backslash": 'Zebra"Quartz\\Mango-7781',
    "not ascii": "Zébra-Quärtz-Mangö-7781",
    "spaces": "zebra quartz mango 7781",
}


def session(name: str, secret: str) -> list[ToolCall]:
    placeholder = secret  # recorded with the real value, as a test with the secrets would
    write = ToolCall("c1", "write_file", {"path": "conf.txt", "content": f"key {placeholder}\n"})
    calls = {
        "write then read": [write, ToolCall("c2", "read_text", {"path": "conf.txt"})],
        "write then search": [write, ToolCall("c2", "search_text", {"query": "key"})],
        "write twice": [
            write,
            ToolCall("c2", "write_file", {"path": "b.txt", "content": f"{placeholder} again"}),
        ],
    }
    return calls[name]


def forms(secret: str) -> list[bytes]:
    """The secret as a cassette could spell it: as it is, JSON-escaped
    (ASCII or not), URL-encoded, and as YAML may escape it."""
    spelt = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret),
        secret.replace("\\", "\\\\"),
    }
    return [form.encode("utf-8") for form in spelt]


def recorded(tmp_path: Path, calls: list[ToolCall], secret: str) -> Path:
    """Recorded as the ``toolguard`` fixture records with the secrets: the
    runtime redacts them, so the cassette holds the placeholder."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        CAPS,
        SQLiteAuditStore(),
        redactor=secrets_redactor({"api_key": secret}),
    )
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        for call in calls:
            runtime.execute(call)
    runtime.close()
    return path


@pytest.mark.parametrize("calls", ["write then read", "write then search", "write twice"])
@pytest.mark.parametrize("secret", list(SECRETS.values()), ids=list(SECRETS))
def test_amplified_variants_never_hold_a_real_secret(
    tmp_path: Path, calls: str, secret: str
) -> None:
    assert Redactor().redact_text(secret) == secret  # no default rule knows it
    path = recorded(tmp_path, session(calls, secret), secret)
    assert b"<redacted:api_key>" in path.read_bytes()
    assert all(form not in path.read_bytes() for form in forms(secret))
    report = amplify_file(path, builtin_registry(), secrets={"api_key": secret})
    assert report.ok, report.lines()
    assert report.written and report.kept > 0
    data = path.read_bytes()
    for form in forms(secret):
        assert form not in data, form
    cassette = load(path)
    assert sum(len(i.variants) for i in cassette.interactions) == report.kept


def test_the_amplified_cassette_still_replays_with_the_secrets(tmp_path: Path) -> None:
    from pytest_toolguard.replay.variants import replay_variants

    secret = SECRETS["plain words"]
    path = recorded(tmp_path, session("write then read", secret), secret)
    amplify_file(path, builtin_registry(), secrets={"api_key": secret})
    report: Any = replay_variants(load(path), builtin_registry(), secrets={"api_key": secret})
    assert report.ok, report.differences
