"""``toolguard import`` never writes a secret into the cassette, whatever the
transcript's format and wherever the secret sits in it.

Each transcript format the command lists gets a session whose calls carry
a secret in the tool's result (text, content blocks, structured data, an
error), in the arguments, in the call id and in the session id. The
command runs for real (``main``), and the raw bytes of the cassette it
wrote are searched for each secret and its distinctive part. Text that is
not valid Unicode (a lone surrogate) in a transcript is one line and exit
2, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_toolguard.cli import FORMATS, USAGE_ERROR, main
from pytest_toolguard.replay import load

WORKSPACE = Path(__file__).parents[1] / "data" / "transcripts" / "workspace"
CLAUDE_REGISTRY = "pytest_toolguard.bridges.definitions.claude_code:claude_code_registry"
BUILTIN_REGISTRY = "pytest_toolguard.tools:builtin_registry"

GITHUB_TOKEN = "ghp_" + "R8kT2vLq9Wm4Xn7Pz1Hc5Jd3Fg6Sb0Ya8Ue2"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Qk3Lm1Nv"
STRIPE_KEY = "sk_live_" + "51HqLyjWDarjtT1zdp7dcX9q"
SLACK_TOKEN = "xoxb-" + "2718281828-3141592653589-Jk3LmN0pQr5StU7vWx9YzA1b"
PEM_BODY = "MIIEowIBAAKCAQEAz9Qf3kWmT0v5Yc2Hn8Lr1Xp4Jb7Ds6Gq0Ke3Vu9Ma5Nt2Ry8Wf"
DB_PASSWORD = "Pl4idOtter-77x"

SECRETS: dict[str, tuple[str, tuple[str, ...]]] = {
    # kind: (the text a tool result holds, what must never be stored)
    "github_token": (f"token: {GITHUB_TOKEN}", (GITHUB_TOKEN, GITHUB_TOKEN[4:])),
    "aws_secret_line": (f"aws_secret_access_key = {AWS_SECRET}", (AWS_SECRET,)),
    "bearer_header": (f"Authorization: Bearer {STRIPE_KEY}", (STRIPE_KEY, STRIPE_KEY[8:])),
    "slack_token": (f"slack {SLACK_TOKEN} ok", (SLACK_TOKEN, SLACK_TOKEN[-24:])),
    "pem_key": (
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        (PEM_BODY,),
    ),
    "url_password": (f"DATABASE_URL=postgres://app:{DB_PASSWORD}@db:5432/x", (DB_PASSWORD,)),
}

ID_SECRET = "ghp_" + "Id7Lk2Vb9Nm4Rt8Yw1Zp5Hc3Jd6Fg0Sa2Qe7"
SESSION_SECRET = "ghp_" + "Se7Lk2Vb9Nm4Rt8Yw1Zp5Hc3Jd6Fg0Sa2Qe7"


# -- one session per format: a read answered with the secret, a write whose
# -- content and failure hold it, a call whose id is a token ---------------------------


def claude_code(secret: str) -> tuple[str, str]:
    cwd = "/home/dev/demo"

    def line(kind: str, content: list[dict[str, object]], **extra: object) -> str:
        return json.dumps(
            {
                "type": kind,
                "sessionId": SESSION_SECRET,
                "cwd": cwd,
                "message": {"role": kind, "content": content},
                **extra,
            }
        )

    read = {"file_path": f"{cwd}/README.md"}
    write = {"file_path": f"{cwd}/notes/x.md", "content": secret}
    lines = [
        line("assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": read}]),
        line(
            "user",
            [{"type": "tool_result", "tool_use_id": "toolu_1", "content": secret}],
            toolUseResult={
                "type": "text",
                "file": {"filePath": read["file_path"], "content": secret},
            },
        ),
        line("assistant", [{"type": "tool_use", "id": "toolu_2", "name": "Write", "input": write}]),
        line(
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [{"type": "text", "text": f"failed: {secret}"}],
                }
            ],
        ),
        line("assistant", [{"type": "tool_use", "id": ID_SECRET, "name": "Read", "input": read}]),
        line("user", [{"type": "tool_result", "tool_use_id": ID_SECRET, "content": secret}]),
    ]
    return "\n".join(lines) + "\n", CLAUDE_REGISTRY


def openai_chat(secret: str) -> tuple[str, str]:
    def call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }

    messages = [
        call("call_1", "read_text", {"path": "README.md"}),
        {"role": "tool", "tool_call_id": "call_1", "content": secret},
        call("call_2", "write_file", {"path": "notes/x.md", "content": secret}),
        {"role": "tool", "tool_call_id": "call_2", "content": json.dumps({"error": secret})},
        call(ID_SECRET, "read_text", {"path": "README.md"}),
        {"role": "tool", "tool_call_id": ID_SECRET, "content": json.dumps({"data": secret})},
    ]
    return json.dumps({"messages": messages}), BUILTIN_REGISTRY


def openai_responses(secret: str) -> tuple[str, str]:
    def call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
        return {
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": json.dumps(arguments),
        }

    def output(call_id: str, text: str) -> dict[str, object]:
        return {"type": "function_call_output", "call_id": call_id, "output": text}

    items = [
        call("call_1", "read_text", {"path": "README.md"}),
        output("call_1", secret),
        call("call_2", "write_file", {"path": "notes/x.md", "content": secret}),
        output("call_2", json.dumps({"ok": False, "message": secret})),
        call(ID_SECRET, "read_text", {"path": "README.md"}),
        output(ID_SECRET, secret),
    ]
    return json.dumps(items), BUILTIN_REGISTRY


def anthropic(secret: str) -> tuple[str, str]:
    def use(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        return {"role": "assistant", "content": [block]}

    def result(call_id: str, text: str, error: bool = False) -> dict[str, object]:
        block = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "is_error": error,
            "content": [{"type": "text", "text": text}],
        }
        return {"role": "user", "content": [block]}

    messages = [
        use("toolu_1", "read_text", {"path": "README.md"}),
        result("toolu_1", secret),
        use("toolu_2", "write_file", {"path": "notes/x.md", "content": secret}),
        result("toolu_2", secret, error=True),
        use(ID_SECRET, "read_text", {"path": "README.md"}),
        result(ID_SECRET, secret),
    ]
    return json.dumps({"messages": messages}), BUILTIN_REGISTRY


def mcp(secret: str) -> tuple[str, str]:
    def request(key: object, name: str, arguments: dict[str, str]) -> dict[str, object]:
        params = {"name": name, "arguments": arguments}
        return {"jsonrpc": "2.0", "id": key, "method": "tools/call", "params": params}

    lines = [
        request(1, "read_text", {"path": "README.md"}),
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {
                "content": [{"type": "text", "text": secret}],
                "structuredContent": {"content": secret},
                "isError": False,
            },
        },
        request(2, "write_file", {"path": "notes/x.md", "content": secret}),
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": secret}},
        request(ID_SECRET, "read_text", {"path": "README.md"}),
        {
            "jsonrpc": "2.0",
            "id": ID_SECRET,
            "result": {"content": [{"type": "text", "text": secret}], "isError": True},
        },
    ]
    return "\n".join(json.dumps(line) for line in lines) + "\n", BUILTIN_REGISTRY


SESSIONS: dict[str, Callable[[str], tuple[str, str]]] = {
    "claude-code": claude_code,
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic": anthropic,
    "mcp": mcp,
}


def imported(tmp_path: Path, format: str, text: str, registry: str) -> tuple[int, Path]:
    transcript = tmp_path / f"session.{format}"
    transcript.write_text(text, encoding="utf-8")
    output = tmp_path / "cassettes" / "imported.yaml"
    status = main(
        [
            "import",
            format,
            str(transcript),
            "--registry",
            registry,
            "--workspace",
            str(WORKSPACE),
            "-o",
            str(output),
            "--no-progress",
        ]
    )
    return status, output


def test_every_listed_format_is_covered() -> None:
    assert set(SESSIONS) == set(FORMATS)


@pytest.mark.parametrize("kind", sorted(SECRETS))
@pytest.mark.parametrize("format", sorted(SESSIONS))
def test_an_imported_cassette_holds_no_secret_of_the_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str, kind: str
) -> None:
    text, forbidden = SECRETS[kind]
    transcript, registry = SESSIONS[format](text)
    assert all(part in transcript or json.dumps(part)[1:-1] in transcript for part in forbidden)
    status, output = imported(tmp_path, format, transcript, registry)
    capsys.readouterr()
    assert status in (0, 1)  # 1: an outcome differs from the transcript's (the error)
    written = output.read_bytes()
    for part in (*forbidden, ID_SECRET, ID_SECRET[4:], SESSION_SECRET, SESSION_SECRET[4:]):
        assert part.encode() not in written, f"{part!r} written by the {format} import"
        assert json.dumps(part)[1:-1].encode() not in written
    cassette = load(output)
    assert len(cassette.interactions) == 3
    kept = [i.transcript_result for i in cassette.interactions]
    assert all(result is not None and "<redacted" in json.dumps(result) for result in kept)


@pytest.mark.parametrize("format", sorted(SESSIONS))
def test_a_call_id_that_is_a_token_is_kept_redacted_and_still_distinct(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str
) -> None:
    transcript, registry = SESSIONS[format]("plain text")
    status, output = imported(tmp_path, format, transcript, registry)
    capsys.readouterr()
    assert status in (0, 1)
    ids = [i.call.call_id for i in load(output).interactions]
    assert len(ids) == 3 and "<redacted:github_token>" in ids[2]


SURROGATE = "\ud800"


@pytest.mark.parametrize("format", sorted(SESSIONS))
@pytest.mark.parametrize("where", ["result", "call id", "arguments"])
def test_text_that_is_not_unicode_in_a_transcript_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str, where: str
) -> None:
    transcript, registry = SESSIONS[format]("plain text")
    # Each format spells its strings as JSON: the surrogate goes in escaped.
    escaped = json.dumps(SURROGATE)[1:-1]
    if where == "result":
        transcript = transcript.replace("plain text", f"plain {escaped} text")
    elif where == "call id":
        transcript = transcript.replace(ID_SECRET, f"id-{escaped}")
    else:
        transcript = transcript.replace("README.md", f"READ{escaped}ME.md")
    assert escaped in transcript
    status, output = imported(tmp_path, format, transcript, registry)
    out, err = capsys.readouterr()
    assert status == USAGE_ERROR
    assert err.startswith("toolguard: ") and err.count("\n") == 1
    assert "Traceback" not in err and not output.exists()
