"""``record_session`` keeps a call's ids as its audit row keeps them, and
writes a cassette whatever text a call holds.

A model chooses its call ids, and a program its session id, actor and
idempotency key: a token put there is as secret as one in the arguments.
The cassette keeps each id as the row does (``runtime.storable_id``:
redacted, a lone surrogate escaped, cut), so no token reaches it, and replay
still finds every row under the id the cassette holds. A lone surrogate in
any string (an undecodable file name, a model's broken escape) is written
escaped, as the audit row writes it, never a crash."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.redaction import Redactor
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.tools import builtin_registry

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))

TOKENS = {
    "github": "ghp_Zq8Lw3Rt6Yx1Nc4Vb7Mk2Jh5Gf9Ds0Ap3Qe6",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "aws": "AKIAZ7Q3M4N5P6R7S8T9",
    "gitlab": "glpat-Zq8Lw3Rt6Yx1Nc4Vb7Mk",
}
ID_FIELDS = ("call_id", "session_id", "actor", "idempotency_key", "tool_name")
SURROGATES = {"high": "\ud800", "low": "\udfff", "undecodable byte": "\udcff"}


def record(tmp_path: Path, calls: list[ToolCall], *, plant: bytes | None = None) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    if plant is not None:
        (workspace / "d").mkdir()
        with open(os.path.join(os.fsencode(workspace / "d"), plant), "wb") as handle:
            handle.write(b"undecodable name\n")
    runtime = ToolRuntime(builtin_registry(), str(workspace), CAPS, SQLiteAuditStore())
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        for call in calls:
            runtime.execute(call)
    runtime.close()
    return path


def read_call(**fields: Any) -> ToolCall:
    body: dict[str, Any] = {
        "call_id": "c1",
        "tool_name": "read_text",
        "arguments": {"path": "a.txt"},
        "session_id": "s1",
        "actor": "agent",
    }
    body.update(fields)
    return ToolCall(**body)


def forms(secret: str) -> list[bytes]:
    """The secret as bytes, and the parts a cut could leave of it."""
    raw = secret.encode()
    return [raw, raw[:16], raw[-16:]]


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize("token", list(TOKENS.values()), ids=list(TOKENS))
def test_a_token_in_an_id_never_reaches_the_cassette(
    tmp_path: Path, field: str, token: str
) -> None:
    assert Redactor().redact_text(f"id-{token}") != f"id-{token}"  # a token the rules know
    value = f"id-{token}"
    calls = [
        read_call(**{field: value}),
        read_call(call_id="c2", **{field: value} if field != "call_id" else {}),
    ]
    path = record(tmp_path, calls)
    data = path.read_bytes()
    for form in forms(token):
        assert form not in data, (field, form)
    cassette = load(path)
    assert all(token not in repr(i.call) for i in cassette.interactions)
    assert token not in cassette.session.session_id and token not in cassette.session.actor


@pytest.mark.parametrize("field", ID_FIELDS)
def test_a_cassette_with_a_redacted_id_replays_without_difference(
    tmp_path: Path, field: str
) -> None:
    value = f"id-{TOKENS['github']}"
    path = record(tmp_path, [read_call(**{field: value}), read_call(call_id="c2")])
    report = replay(load(path), builtin_registry())
    assert report.differences == ()


def test_a_long_id_is_kept_cut_as_the_row_keeps_it(tmp_path: Path) -> None:
    # The runtime refuses the call (an id over MAX_ID_LENGTH) and its row
    # keeps the id cut: so does the cassette, which then replays a call the
    # runtime accepts (a difference replay reports; no secret is kept whole).
    long_id = f"call-{TOKENS['github']}-" + "x" * 600
    path = record(tmp_path, [read_call(call_id=long_id)])
    cassette = load(path)
    kept = cassette.interactions[0].call.call_id
    assert kept == f"call-<redacted:github_token>-{'x' * 600}"[:256]
    assert TOKENS["github"].encode()[:16] not in path.read_bytes()


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize("surrogate", list(SURROGATES.values()), ids=list(SURROGATES))
def test_a_lone_surrogate_in_an_id_is_written_escaped_and_replays(
    tmp_path: Path, field: str, surrogate: str
) -> None:
    value = f"id{surrogate}x"
    path = record(tmp_path, [read_call(**{field: value})])
    data = path.read_bytes()
    data.decode("utf-8")  # a UTF-8 file: no surrogate in it
    cassette = load(path)
    escaped = value.encode("utf-8", "backslashreplace").decode()
    held = cassette.session.session_id if field == "session_id" else None
    call = cassette.interactions[0].call
    assert escaped in (getattr(call, field), held)
    assert replay(cassette, builtin_registry()).differences == ()


SURROGATE_PLACES = {
    "argument value": lambda s: read_call(call_id="c9", arguments={"path": f"a{s}.txt"}),
    "argument key": lambda s: read_call(call_id="c9", arguments={"path": "a.txt", f"k{s}": 1}),
    "written content": lambda s: ToolCall(
        "c9", "write_file", {"path": "b.txt", "content": f"x{s}y"}
    ),
}


@pytest.mark.parametrize("place", list(SURROGATE_PLACES), ids=list(SURROGATE_PLACES))
@pytest.mark.parametrize("surrogate", list(SURROGATES.values()), ids=list(SURROGATES))
def test_a_lone_surrogate_in_the_arguments_is_written_escaped_and_loads(
    tmp_path: Path, place: str, surrogate: str
) -> None:
    call = SURROGATE_PLACES[place](surrogate)
    path = record(tmp_path, [read_call(), call])
    path.read_bytes().decode("utf-8")
    cassette = load(path)
    kept = cassette.interactions[1]
    assert kept.result.code == "INVALID_REQUEST"  # the runtime refused it
    assert "\\u" in repr(kept.call.arguments)  # the surrogate, spelt out


@pytest.mark.parametrize("name", [b"r\xff.txt", b"\xc3(.txt", b"\xed\xa0\x80.txt"])
def test_an_undecodable_file_name_is_written_escaped_and_loads(tmp_path: Path, name: bytes) -> None:
    calls = [
        ToolCall("c1", "list_files", {"path": "d"}),
        ToolCall("c2", "read_text", {"path": "a.txt"}),
    ]
    path = record(tmp_path, calls, plant=name)
    path.read_bytes().decode("utf-8")
    cassette = load(path)
    escaped = "d/" + os.fsdecode(name).encode("utf-8", "backslashreplace").decode()
    assert escaped in cassette.workspace.files
    assert escaped in cassette.final_files
    # Replay rebuilds the file under the escaped name, not the original
    # bytes: where this promise stops (the cassette is written and loads).
