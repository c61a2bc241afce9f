"""HTTP bodies in any charset, compressed or binary, never reach a cassette
with a secret in them, in any form (raw, UTF-16, base64, hex), and replay
still serves what was stored.

A table of charsets x secrets x request/response goes through the
redaction the recorder runs (``http_exchange``) into an exchange as the
cassette keeps it; a smaller one is recorded end to end against a loopback
server, its cassette's bytes read, then replayed with the server stopped.
"""

from __future__ import annotations

import copy
import gzip
import threading
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import (
    Approver,
    Capabilities,
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    tool,
)
from pytest_toolguard.faults.storage import secret_forms
from pytest_toolguard.redaction import Redactor
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.http_exchange import (
    DROPPED_BODY,
    exchange_of,
    redact_request,
    redact_response,
)
from pytest_toolguard.replay.redacting import FILL

vcr_request = pytest.importorskip("vcr.request")

SECRETS = {
    "github": "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "aws": "AKIAZ7QW3RT5YU9IO2PA",
}


def _prose(secret: str) -> str:
    return f"Ça coûte 5 francs, naïve résumé. Note : {secret} - fin."


def _japanese(secret: str) -> str:
    return f"日本語のテキスト {secret} おわり"


# (name, Content-Type or None, body of a secret)
BODIES: list[tuple[str, str | None, Callable[[str], bytes]]] = [
    (
        "iso-8859-1",
        "text/plain; charset=iso-8859-1",
        lambda s: _prose(s).encode("latin-1", "replace"),
    ),
    ("latin-1 undeclared", "text/plain", lambda s: _prose(s).encode("latin-1", "replace")),
    ("latin-1 no type", None, lambda s: _prose(s).encode("latin-1", "replace")),
    ("utf-8 stray byte", "application/json", lambda s: _prose(s).encode() + b"\xff\xfe"),
    ("cp1252", "text/html; charset=windows-1252", lambda s: _prose(s).encode("cp1252")),
    ("iso-8859-15", 'text/plain; charset="ISO-8859-15"', lambda s: _prose(s).encode("iso-8859-15")),
    ("shift_jis", "text/plain; charset=Shift_JIS", lambda s: _japanese(s).encode("shift_jis")),
    ("utf-16", "text/plain; charset=utf-16", lambda s: _prose(s).encode("utf-16")),
    ("utf-16-be declared", "text/plain; charset=UTF-16BE", lambda s: _prose(s).encode("utf-16-be")),
    ("utf-16-le undeclared", "text/plain", lambda s: _prose(s).encode("utf-16-le")),
    ("utf-16 with a BOM", "application/octet-stream", lambda s: _prose(s).encode("utf-16")),
    ("ascii declared utf-16", "text/plain; charset=utf-16", lambda s: f"key {s} x".encode()),
    (
        "unknown charset",
        "text/plain; charset=x-made-up",
        lambda s: _prose(s).encode("latin-1", "replace"),
    ),
    (
        "png with a text run",
        "image/png",
        lambda s: (
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\x00"
            + f"tEXtComment\x00note {s}".encode()
            + b"\x00\xae\x42\x60\x82"
        ),
    ),
    (
        "multipart, a latin-1 part",
        "multipart/form-data; boundary=XyZ",
        lambda s: (
            b"--XyZ\r\nContent-Disposition: form-data; name=note\r\n"
            b"Content-Type: text/plain; charset=iso-8859-1\r\n\r\n"
            + _prose(s).encode("latin-1", "replace")
            + b"\r\n--XyZ--\r\n"
        ),
    ),
    (
        "multipart, a utf-16 part",
        "multipart/form-data; boundary=XyZ",
        lambda s: (
            b"--XyZ\r\nContent-Type: text/plain; charset=utf-16\r\n\r\n"
            + _prose(s).encode("utf-16")
            + b"\r\n--XyZ--\r\n"
        ),
    ),
]
ENCODINGS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "deflate, gzip": lambda data: gzip.compress(zlib.compress(data)),
}


def given_away(data: bytes, secret: str) -> list[str]:
    """The forms of ``secret`` found in ``data``: raw, hex, URL-encoded,
    base64 (every alignment), UTF-16 either way, compressed with gzip."""
    found = [form for form, needle in secret_forms(secret) if needle in data]
    for charset in ("utf-16-le", "utf-16-be"):
        if secret.encode(charset) in data:
            found.append(charset)
    for window in (zlib.MAX_WBITS | 16, zlib.MAX_WBITS, -zlib.MAX_WBITS):
        try:
            inflated = zlib.decompressobj(window).decompress(data)
        except zlib.error:
            continue
        if inflated and secret.encode() in inflated:
            found.append(f"compressed ({window})")
    return found


def _request(body: bytes, headers: dict[str, str]) -> Any:
    return vcr_request.Request("POST", "http://127.0.0.1:9/submit", body, headers)


def _stored(
    direction: str, body: bytes, headers: dict[str, str]
) -> tuple[bytes, dict[str, tuple[str, ...]]]:
    """The body and headers a cassette keeps, for a request or a response."""
    redactor = Redactor()
    if direction == "request":
        request = redact_request(copy.deepcopy(_request(body, headers)), redactor)
        exchange = exchange_of(request, {"status": {"code": 204}, "headers": {}, "body": {}})
        return exchange.request_body or b"", dict(exchange.request_headers)
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {name: [value] for name, value in headers.items()},
        "body": {"string": body},
    }
    redacted = redact_response(copy.deepcopy(response), redactor)
    exchange = exchange_of(_request(b"", {}), redacted)
    return exchange.response_body, dict(exchange.response_headers)


@pytest.mark.parametrize("direction", ["request", "response"])
@pytest.mark.parametrize("secret", sorted(SECRETS))
@pytest.mark.parametrize(("kind", "content_type", "make"), BODIES, ids=[b[0] for b in BODIES])
def test_a_body_in_any_charset_is_stored_without_its_secret(
    direction: str, secret: str, kind: str, content_type: str | None, make: Callable[[str], bytes]
) -> None:
    body = make(SECRETS[secret])
    headers = {"Content-Type": content_type} if content_type else {}
    stored, _ = _stored(direction, body, headers)

    assert given_away(stored, SECRETS[secret]) == []
    narrow = stored.replace(b"\x00", b"")
    assert stored == DROPPED_BODY or b"<redacted:" in narrow or FILL.encode() * 16 in narrow


@pytest.mark.parametrize("direction", ["request", "response"])
@pytest.mark.parametrize(("kind", "content_type", "make"), BODIES, ids=[b[0] for b in BODIES])
def test_a_body_without_a_secret_is_stored_byte_for_byte(
    direction: str, kind: str, content_type: str | None, make: Callable[[str], bytes]
) -> None:
    body = make("nothing-secret-here")
    headers = {"Content-Type": content_type} if content_type else {}
    assert _stored(direction, body, headers)[0] == body


@pytest.mark.parametrize(
    ("kind", "content_type", "make"),
    [
        b
        for b in BODIES
        if b[0] in ("iso-8859-1", "cp1252", "shift_jis", "utf-16", "png with a text run")
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_what_surrounds_a_secret_keeps_its_charset(
    kind: str, content_type: str | None, make: Callable[[str], bytes]
) -> None:
    secret = SECRETS["github"]
    body = make(secret)
    stored, _ = _stored("response", body, {"Content-Type": content_type or ""})
    before, after = body.split(secret.encode(body_charset(kind)), 1)
    assert stored.startswith(before)
    assert stored.endswith(after)


def body_charset(kind: str) -> str:
    return {"shift_jis": "shift_jis", "utf-16": "utf-16-le"}.get(kind, "latin-1")


@pytest.mark.parametrize("direction", ["request", "response"])
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("charset", ["utf-8", "iso-8859-1"])
def test_a_compressed_body_with_a_secret_is_stored_decoded_and_redacted(
    direction: str, encoding: str, charset: str
) -> None:
    secret = SECRETS["slack"]
    plain = _prose(secret).encode(charset, "replace")
    headers = {"Content-Type": f"text/plain; charset={charset}", "Content-Encoding": encoding}
    stored, kept = _stored(direction, ENCODINGS[encoding](plain), headers)

    assert given_away(stored, secret) == []
    assert stored == plain.replace(secret.encode(), b"<redacted:slack_token>")
    assert not any(name.lower() == "content-encoding" for name in kept)


@pytest.mark.parametrize("direction", ["request", "response"])
def test_a_compressed_body_without_a_secret_is_kept_compressed(direction: str) -> None:
    compressed = gzip.compress(b"just the weather, 21 degrees")
    headers = {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
    stored, kept = _stored(direction, compressed, headers)
    assert stored == compressed
    assert kept["Content-Encoding"] == ("gzip",)


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("br", b"\x1b\x1f\x00\xf8" + SECRETS["github"].encode()),
        ("zstd", b"(\xb5/\xfd" + SECRETS["github"].encode()),
        ("gzip", b"not gzip at all " + SECRETS["github"].encode()),
        ("gzip", gzip.compress(SECRETS["github"].encode())[:-12]),
    ],
    ids=["br", "zstd", "corrupt gzip", "truncated gzip"],
)
@pytest.mark.parametrize("direction", ["request", "response"])
def test_a_body_compressed_beyond_reading_is_dropped(
    direction: str, encoding: str, body: bytes
) -> None:
    stored, _ = _stored(direction, body, {"Content-Encoding": encoding})
    assert stored == DROPPED_BODY


def test_a_decompression_bomb_is_dropped_not_inflated() -> None:
    bomb = gzip.compress(b"\0" * (80 * 1024 * 1024))
    stored, _ = _stored("response", bomb, {"Content-Encoding": "gzip"})
    assert stored == DROPPED_BODY


def test_a_redacted_latin_1_response_keeps_a_content_length_that_fits() -> None:
    body = _prose(SECRETS["github"]).encode("latin-1", "replace")
    headers = {"Content-Type": "text/plain; charset=iso-8859-1", "Content-Length": str(len(body))}
    stored, kept = _stored("response", body, headers)
    assert kept["Content-Length"] == (str(len(stored)),)


# -- end to end: recorded, written, replayed -----------------------------------------

E2E = {
    "iso-8859-1": ("text/plain; charset=iso-8859-1", None),
    "utf-8 stray byte": ("application/json", None),
    "gzip": ("text/plain; charset=utf-8", "gzip"),
    "png with a text run": ("image/png", None),
    "utf-16": ("text/plain; charset=utf-16", None),
}


def _e2e_body(kind: str, secret: str) -> bytes:
    if kind == "gzip":
        return _prose(secret).encode()
    if kind == "utf-8 stray byte":
        return _prose(secret).encode() + b"\xff"
    make = dict((b[0], b[2]) for b in BODIES)[kind]
    return make(secret)


@contextmanager
def body_server(kind: str, secret: str) -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server answering every request with ``kind``'s body, and
    keeping the bodies it was sent."""
    content_type, encoding = E2E[kind]
    payload = _e2e_body(kind, secret)
    sent = gzip.compress(payload) if encoding == "gzip" else payload
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(sent)))
            self.end_headers()
            self.wfile.write(sent)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/post", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


POSTED = "Grüße, {secret} - à bientôt"


@tool(
    name="post_note",
    input_schema={
        "type": "object",
        "properties": {"url": {"type": "string"}},
        "required": ["url"],
    },
    risk=Risk.EXTERNAL,
    network_host_argument="url",
)
def post_note(ctx: Any, url: str) -> dict[str, Any]:
    """POST a latin-1 note; answer the status (the body came back, whatever it holds)."""
    secret = SECRETS["slack"]
    data = POSTED.format(secret=secret).encode("latin-1")
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "text/plain; charset=iso-8859-1"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        body = response.read()
    return {"status": response.status, "read": bool(body)}


NOTES = ToolRegistry([post_note])
CAPABILITIES = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.EXTERNAL}), network_hosts=("127.0.0.1",)
)


@pytest.mark.parametrize("kind", sorted(E2E))
def test_a_recorded_cassette_holds_no_body_secret_and_still_replays(
    tmp_path: Path, kind: str
) -> None:
    secret = SECRETS["github"]
    path = tmp_path / "notes.yaml"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = ToolRuntime(NOTES, str(workspace), CAPABILITIES, hooks=[Approver(lambda e: True)])
    with body_server(kind, secret) as (url, received), record_session(runtime, path):
        result = runtime.execute(
            ToolCall(call_id="1", tool_name="post_note", arguments={"url": url})
        )
    runtime.close()
    assert result.code == ErrorCode.OK
    assert SECRETS["slack"].encode() in received[0]  # the server got the real body

    data = path.read_bytes()
    for leaked in (secret, SECRETS["slack"]):
        assert given_away(data, leaked) == []
    exchange = load(path).interactions[0].http[0]
    for leaked in (secret, SECRETS["slack"]):
        assert given_away(exchange.response_body, leaked) == []
        assert given_away(exchange.request_body or b"", leaked) == []

    report = replay(load(path), NOTES)
    assert report.ok, report.differences
