"""``toolguard import``'s report never prints a token the transcript holds.

The report's problem lines quote what they skipped (a duplicate call id, a
result for an id no call has, a call without a tool name, arguments that are
not JSON): a token a model used as a call id was printed on stdout, where CI
logs keep it. Each problem is now redacted with the import's redactor, in
the report on stdout and in the one line of a transcript with no readable
call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_toolguard.cli import USAGE_ERROR, main

WORKSPACE = Path(__file__).parents[1] / "data" / "transcripts" / "workspace"
REGISTRY = "pytest_toolguard.tools:builtin_registry"

TOKENS = {
    "github": "ghp_" + "Rp7Lk2Vb9Nm4Rt8Yw1Zp5Hc3Jd6Fg0Sa2Qe7",
    "slack": "xoxb-" + "2718281828-3141592653589-Jk3LmN0pQr5StU7vWx9YzA1b",
    "stripe": "sk_live_" + "51HqLyjWDarjtT1zdp7dcX9q",
}


def chat(calls: list[tuple[str, str | None, str]], results: list[str]) -> str:
    messages: list[dict[str, object]] = []
    for call_id, name, arguments in calls:
        function: dict[str, object] = {"arguments": arguments}
        if name is not None:
            function["name"] = name
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
    messages += [{"role": "tool", "tool_call_id": key, "content": "ok"} for key in results]
    return json.dumps({"messages": messages})


def responses(calls: list[tuple[str, str | None, str]], results: list[str]) -> str:
    items: list[dict[str, object]] = []
    for call_id, name, arguments in calls:
        item: dict[str, object] = {
            "type": "function_call",
            "call_id": call_id,
            "arguments": arguments,
        }
        if name is not None:
            item["name"] = name
        items.append(item)
    items += [{"type": "function_call_output", "call_id": key, "output": "ok"} for key in results]
    return json.dumps(items)


def anthropic(calls: list[tuple[str, str | None, str]], results: list[str]) -> str:
    messages: list[dict[str, object]] = []
    for call_id, name, arguments in calls:
        block: dict[str, object] = {
            "type": "tool_use",
            "id": call_id,
            "input": json.loads(arguments),
        }
        if name is not None:
            block["name"] = name
        messages.append({"role": "assistant", "content": [block]})
    for key in results:
        block = {"type": "tool_result", "tool_use_id": key, "content": "ok"}
        messages.append({"role": "user", "content": [block]})
    return json.dumps({"messages": messages})


FORMATS: dict[str, Callable[[list[tuple[str, str | None, str]], list[str]], str]] = {
    "openai-chat": chat,
    "openai-responses": responses,
    "anthropic": anthropic,
}
GOOD = '{"path": "README.md"}'


def problems_session(token: str) -> tuple[list[tuple[str, str | None, str]], list[str]]:
    """Calls and results whose problems quote ids holding ``token``."""
    calls = [
        ("call_ok", "read_text", GOOD),
        (f"dup-{token}", "read_text", GOOD),
        (f"dup-{token}", "read_text", GOOD),  # duplicate call id
        (f"noname-{token}", None, GOOD),  # no tool name
    ]
    results = ["call_ok", f"dup-{token}", f"orphan-{token}"]  # a result with no call
    return calls, results


def run_import(tmp_path: Path, format: str, text: str) -> int:
    transcript = tmp_path / "session.json"
    transcript.write_text(text, encoding="utf-8")
    return main(
        [
            "import",
            format,
            str(transcript),
            "--registry",
            REGISTRY,
            "--workspace",
            str(WORKSPACE),
            "-o",
            str(tmp_path / "out.yaml"),
            "--no-progress",
        ]
    )


def assert_no_token(text: str, token: str) -> None:
    for form in (token, token[5:], token[-16:]):
        assert form not in text, form


@pytest.mark.parametrize("format", list(FORMATS))
@pytest.mark.parametrize("token", list(TOKENS.values()), ids=list(TOKENS))
def test_the_import_report_never_prints_a_token_from_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str, token: str
) -> None:
    calls, results = problems_session(token)
    status = run_import(tmp_path, format, FORMATS[format](calls, results))
    out, err = capsys.readouterr()
    assert status == 1, err  # problems found: the report says so
    assert "problem:" in out and "<redacted:" in out
    assert_no_token(out + err, token)
    assert_no_token((tmp_path / "out.yaml").read_text(), token)


@pytest.mark.parametrize("format", list(FORMATS))
@pytest.mark.parametrize("token", list(TOKENS.values()), ids=list(TOKENS))
def test_a_transcript_with_no_readable_call_names_its_problem_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str, token: str
) -> None:
    text = FORMATS[format]([(f"noname-{token}", None, GOOD)], [])
    status = run_import(tmp_path, format, text)
    out, err = capsys.readouterr()
    assert status == USAGE_ERROR
    assert err.startswith("toolguard: ") and err.count("\n") == 1
    assert_no_token(out + err, token)
