"""A number the loaders refuse is refused where it comes in.

JSON is held to YAML's ``MAX_NUMBER_CHARS``: an integer of more than 1,000
characters (its ``-`` included) is refused by ``documents.parse_json``, so
the hook blocks such an event up front (exit 2) instead of recording a
cassette its own loader then refuses, and a JSON cassette cannot hold what
its YAML form could not. A recipe's ``times`` is an integer: ``10.0``,
``true`` or ``"10"`` is refused in one line when the cassette is loaded,
never a traceback at replay.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_toolguard.cli import USAGE_ERROR, main
from pytest_toolguard.documents import MAX_NUMBER_CHARS, DocumentRefused, parse_json
from pytest_toolguard.replay.cassette import CassetteError, GeneratedContent, load, loads

LIMIT = MAX_NUMBER_CHARS

TOO_LONG = {
    "limit + 1 digits": "9" * (LIMIT + 1),
    "10 ** limit": "1" + "0" * LIMIT,
    "1,500 digits": "7" * 1500,
    "4,300 digits (Python's own limit)": "8" * 4300,
    "negative, limit digits": "-" + "9" * LIMIT,
    "negative, 10 ** (limit - 1)": "-1" + "0" * (LIMIT - 1),
}

WITHIN = {
    "limit digits": "9" * LIMIT,
    "10 ** limit - 1": "9" * LIMIT,
    "negative, limit - 1 digits": "-" + "9" * (LIMIT - 1),
    "a long float": "1" * 1200 + ".5",
    "a float with a long exponent": "1e" + "0" * 1200 + "5",
    "minus zero": "-0",
}

PLACES = {
    "alone": "{}",
    "in a list": "[1, {}, 3]",
    "a mapping's value": '{{"a": {{"b": {}}}}}',
    "deep": "[" * 60 + "{}" + "]" * 60,
    "beside a bool": '{{"flag": true, "n": {}}}',
}


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("number", sorted(TOO_LONG))
def test_json_refuses_an_integer_over_the_limit(number: str, place: str) -> None:
    with pytest.raises(DocumentRefused) as refused:
        parse_json(PLACES[place].format(TOO_LONG[number]))
    assert refused.value.limit == "MAX_NUMBER_CHARS"
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("number", sorted(WITHIN))
def test_json_keeps_a_number_within_the_limit(number: str, place: str) -> None:
    text = PLACES[place].format(WITHIN[number])
    assert parse_json(text) == json.loads(text)


@pytest.mark.parametrize("number", sorted(WITHIN))
def test_what_json_keeps_yaml_reads_back(number: str) -> None:
    value = parse_json(WITHIN[number])
    assert yaml.safe_load(yaml.safe_dump({"n": value}))["n"] == value or value != value


# -- the hook -------------------------------------------------------------------------


def make_project(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    settings = {
        "audit": ".toolguard/audit.db",
        "cassette": "cassettes/{session_id}.yaml",
        "capabilities": {"allowed_risks": ["read", "write"], "write_roots": ["."]},
    }
    (root / "toolguard.yaml").write_text(yaml.safe_dump(settings))
    return root


def send(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    tool_input: str,
    number: int,
    extra: str = "",
) -> int:
    body = (
        f'{{"session_id": "s1", "cwd": {json.dumps(str(project))}, '
        f'"hook_event_name": "PreToolUse", "tool_name": "Write", '
        f'"tool_use_id": "toolu_{number}", "tool_input": {tool_input}{extra}}}'
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(body))
    monkeypatch.chdir(project)
    return main(["hook", command, "--config", "toolguard.yaml"])


HOSTILE_INPUTS = {
    "an extra argument": '{{"file_path": "src/a.py", "content": "x", "extra": {}}}',
    "the content": '{{"file_path": "src/a.py", "content": {}}}',
    "nested in a list": '{{"file_path": "src/a.py", "content": "x", "extra": [[{}]]}}',
}


@pytest.mark.parametrize("number", ["limit + 1 digits", "negative, limit digits", "1,500 digits"])
@pytest.mark.parametrize("where", sorted(HOSTILE_INPUTS))
def test_the_hook_blocks_an_event_with_a_long_integer_and_its_cassette_stays_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, where: str, number: str
) -> None:
    project = make_project(tmp_path / "project")
    hostile = HOSTILE_INPUTS[where].format(TOO_LONG[number])
    assert send(project, monkeypatch, "pre-tool-use", hostile, 1) == USAGE_ERROR
    assert "MAX_NUMBER_CHARS" in capsys.readouterr().err
    fine = '{"file_path": "src/b.py", "content": "ok"}'
    assert send(project, monkeypatch, "pre-tool-use", fine, 2) == 0, capsys.readouterr().err
    decision = json.loads(capsys.readouterr().out)["hookSpecificOutput"]["permissionDecision"]
    assert decision == "allow"
    load(project / "cassettes" / "s1.yaml")  # the session's cassette still loads


def test_a_post_tool_use_response_with_a_long_integer_is_blocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    project = make_project(tmp_path / "project")
    fine = '{"file_path": "src/b.py", "content": "ok"}'
    assert send(project, monkeypatch, "pre-tool-use", fine, 1) == 0
    (project / "src" / "b.py").write_text("ok")
    response = f', "tool_response": {{"n": {TOO_LONG["1,500 digits"]}}}'
    assert send(project, monkeypatch, "post-tool-use", fine, 1, response) == USAGE_ERROR
    capsys.readouterr()
    load(project / "cassettes" / "s1.yaml")


# -- cassettes --------------------------------------------------------------------------


def json_case(files: dict[str, Any]) -> str:
    return json.dumps(
        {
            "format_version": 1,
            "kind": "case",
            "session": {"capabilities": {"allowed_risks": ["read", "write"]}},
            "workspace": {"files": {"notes.txt": "hello"}},
            "interactions": [
                {
                    "call": {"tool_name": "read_text", "arguments": {"path": "notes.txt"}},
                    "result": {"ok": True},
                    "variants": [
                        {
                            "name": "v0",
                            "kind": "size",
                            "arguments": {"path": "notes.txt"},
                            "files": files,
                            "result": {"ok": True},
                            "audit": {},
                        }
                    ],
                }
            ],
        }
    )


@pytest.mark.parametrize("number", sorted(TOO_LONG))
def test_a_json_cassette_with_a_long_integer_is_refused(number: str) -> None:
    case = json.loads(json_case({"notes.txt": "x"}))
    case["interactions"][0]["call"]["arguments"]["n"] = 0
    text = json.dumps(case).replace('"n": 0', f'"n": {TOO_LONG[number]}')
    with pytest.raises(CassetteError) as refused:
        loads(text, source="case.json")
    assert "MAX_NUMBER_CHARS" in str(refused.value)


BAD_TIMES = {
    "a float": "10.0",
    "a large float": "1e12",
    "true": "true",
    "false": "false",
    "a string": '"10"',
    "null": "null",
}


@pytest.mark.parametrize("form", ["json", "yaml"])
@pytest.mark.parametrize("times", sorted(BAD_TIMES))
def test_a_recipes_times_must_be_an_integer(tmp_path: Path, times: str, form: str) -> None:
    text = json_case({"notes.txt": {"repeat": "x", "times": 0}}).replace(
        '"times": 0', f'"times": {BAD_TIMES[times]}'
    )
    if form == "yaml":
        text = yaml.safe_dump(json.loads(text))
    with pytest.raises(CassetteError) as refused:
        loads(text, source="case")
    assert "times" in str(refused.value) and "\n" not in str(refused.value)
    path = tmp_path / f"case.{form}"
    path.write_text(text)
    assert main(["cassette", "check", str(path)]) == USAGE_ERROR


@pytest.mark.parametrize("times", [0, 1, 10, 2**20])
def test_an_integer_times_still_loads(times: int) -> None:
    loaded = loads(json_case({"notes.txt": {"repeat": "x", "times": times}}), source="case")
    made = loaded.interactions[0].variants[0].files["notes.txt"]
    assert isinstance(made, GeneratedContent) and len(made.content()) == times
