"""``replay()`` and its report, through the library: no difference, and no
text ``format_report`` makes of one, holds a real secret replay sent for a
placeholder, in any form ``KnownSecrets`` knows; a value cut at the
report's limit is cut after the secret was replaced, never through it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from pytest_toolguard import Risk, ToolRegistry, tool
from pytest_toolguard.harness.known_secrets import KnownSecrets
from pytest_toolguard.replay import loads
from pytest_toolguard.replay.player import replay
from pytest_toolguard.replay.report import VALUE_LIMIT, format_report

SECRET = "rEaL-S3cret-0x5e7a-long"
SECRETS = {"api_key": SECRET}


@tool(input_schema={"type": "object"}, risk=Risk.WRITE)
def save(ctx: Any, path: str, content: str) -> dict[str, Any]:
    ctx.workspace.write_text(path, content)
    return {"written": content}


@tool(input_schema={"type": "object"}, risk=Risk.READ)
def fail(ctx: Any, text: str) -> dict[str, Any]:
    raise ValueError(f"refused {text}")


REGISTRY = ToolRegistry([save, fail])

HEAD = """\
format_version: 1
kind: case
session:
  capabilities: {allowed_risks: [read, write], write_roots: ["."]}
"""

CASES = {
    "file content": """
interactions:
  - call: {tool_name: save, arguments: {path: a.txt, content: "note <redacted:api_key>"}}
    result: {ok: true, code: OK}
final_files: {a.txt: "other"}
""",
    "result data": """
interactions:
  - call: {tool_name: save, arguments: {path: a.txt, content: "<redacted:api_key>"}}
    result: {ok: true, code: OK, data: {written: other}}
""",
    "result data past the value limit": f"""
interactions:
  - call:
      tool_name: save
      arguments: {{path: a.txt, content: "{"x" * (VALUE_LIMIT - 20)}<redacted:api_key>"}}
    result: {{ok: true, code: OK, data: {{written: other}}}}
""",
    "error message": """
interactions:
  - call: {tool_name: fail, arguments: {text: "<redacted:api_key>"}}
    result: {ok: true, code: OK}
""",
    "file name": """
interactions:
  - call: {tool_name: save, arguments: {path: "<redacted:api_key>.txt", content: "x"}}
    result: {ok: true, code: OK}
final_files_exact: true
final_files: {}
""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_difference_and_no_report_line_holds_the_real_secret(name):
    cassette = loads(HEAD + CASES[name], source="case.yaml")
    report = replay(cassette, REGISTRY, secrets=SECRETS)
    assert not report.ok
    text = format_report(report, cassette_path="case.yaml", rerecord="edit it")
    shown = text + repr(report.differences)
    assert "<redacted:api_key>" in text
    # Not the secret, nor any piece of it a cut could leave.
    assert [SECRET[:n] for n in range(6, len(SECRET) + 1) if SECRET[:n] in shown] == []


def test_a_file_holding_the_secret_is_sized_and_hashed_as_its_placeholder():
    cassette = loads(HEAD + CASES["file content"], source="case.yaml")
    report = replay(cassette, REGISTRY, secrets=SECRETS)
    [files] = [d for d in report.differences if d.where == "files"]
    assert files.replayed.startswith(f"{len(b'note <redacted:api_key>')} bytes")


MULTILINE = "-----first line-----\nsecond-line-of-it"


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        json.dumps(MULTILINE)[1:-1],
        json.dumps("é" + SECRET)[1:-1],
        repr("é" + SECRET + "'")[1:-1],
        quote(SECRET + "/+ ", safe=""),
        quote_plus(SECRET + "/+ "),
        "-----first line-----",
        "second-line-of-it",
    ],
)
def test_known_secrets_replace_every_form_of_a_value(form):
    known = KnownSecrets(
        {
            "a": SECRET,
            "b": MULTILINE,
            "c": "é" + SECRET,
            "d": "é" + SECRET + "'",
            "e": SECRET + "/+ ",
        }
    )
    assert form not in known.text(f"before {form} after")
    assert form.encode() not in known.data(f"before {form} after".encode())
    assert known.scrub({form: [form, (form,)]}) == known.scrub(
        {known.text(form): [known.text(form), (known.text(form),)]}
    )


def test_known_secrets_replace_latin_1_bytes_and_leave_short_values_alone():
    known = KnownSecrets({"a": "Geheimnis-ä-42", "short": "abc"})
    assert b"<redacted:a>" in known.data("x Geheimnis-ä-42 y".encode("latin-1"))
    assert known.text("abc abc") == "abc abc"
    assert not KnownSecrets({"short": "abc"})
