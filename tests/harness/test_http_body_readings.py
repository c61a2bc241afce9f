"""Every reading of an HTTP body or a workspace file runs, whatever the
others found, and wide text is found wherever it stands.

* Two secrets in two readings of one body (a UTF-8 part and a UTF-16 part
  of a multipart body, an ASCII secret beside an EBCDIC one): both go.
* A small UTF-16 or UTF-32 stretch in a mostly-ASCII body or file, at
  either alignment and in either byte order, is read as such.
* The values of every ``Content-Encoding`` header line, whatever the case
  of its name, are one chain, undone in full (stacked gzip, several gzip
  members); what cannot be undone in full is not kept.

Every check searches the stored bytes (and the cassette's, end to end) for
every form of each secret: raw, hex, URL-encoded, and base64 at each
alignment, in UTF-8, UTF-16 LE/BE and UTF-32 LE/BE, inflated or not.
"""

from __future__ import annotations

import base64
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
from pytest_toolguard.replay.redacting import redact_file, wide_readings
from pytest_toolguard.tools import builtin_registry

vcr_request = pytest.importorskip("vcr.request")

GITHUB = "ghp_" + "Wq4eR6tY8uI0oP2aS4dF6gH8jK0lZ2xC4vB6"
SLACK = "xoxb-" + "210987654321-3210987654321-" + "ZyXwVuTsRqPoNmLkJiHgFeDc"
AWS = "AKIA" + "T7NLQ3EGRIWBZXJ5"
SECRETS = (GITHUB, SLACK, AWS)
WIDE = ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")


def every_form(secret: str) -> list[tuple[str, bytes]]:
    """Each byte string that gives ``secret`` away, in each charset."""
    forms: list[tuple[str, bytes]] = []
    for charset in ("utf-8", *WIDE):
        raw = secret.encode(charset)
        forms.append((f"{charset} raw", raw))
        forms.append((f"{charset} hex", raw.hex().encode()))
        for pad in range(3):
            encoded = base64.b64encode(b"\0" * pad + raw + b"\0\0")
            start = -(-pad * 4 // 3) + 1
            forms.append(
                (f"{charset} base64/{pad}", encoded[start : start + len(raw) * 4 // 3 - 4])
            )
    forms += [(f"utf-8 {name}", form) for name, form in secret_forms(secret)]
    return forms


def given_away(data: bytes, secret: str) -> list[str]:
    """The forms of ``secret`` in ``data``, or in ``data`` inflated (gzip,
    zlib or raw deflate, every member)."""
    texts = [data]
    for window in (zlib.MAX_WBITS | 16, zlib.MAX_WBITS, -zlib.MAX_WBITS):
        rest, inflated = data, b""
        while rest:
            inflater = zlib.decompressobj(window)
            try:
                inflated += inflater.decompress(rest)
            except zlib.error:
                break
            rest = inflater.unused_data
        if inflated:
            texts.append(inflated)
    return [name for text in texts for name, form in every_form(secret) if form in text]


def _request(body: bytes, headers: dict[str, str]) -> Any:
    return vcr_request.Request("POST", "http://127.0.0.1:9/submit", body, headers)


def stored_response(body: bytes, headers: dict[str, list[str]]) -> tuple[bytes, dict[str, Any]]:
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": copy.deepcopy(headers),
        "body": {"string": body},
    }
    exchange = exchange_of(_request(b"", {}), redact_response(response, Redactor()))
    return exchange.response_body, dict(exchange.response_headers)


def stored_request(body: bytes, headers: dict[str, str]) -> bytes:
    request = redact_request(copy.deepcopy(_request(body, headers)), Redactor())
    exchange = exchange_of(request, {"status": {"code": 204}, "headers": {}, "body": {}})
    return exchange.request_body or b""


def leaked(data: bytes, *secrets: str) -> dict[str, list[str]]:
    return {secret[:8]: found for secret in secrets if (found := given_away(data, secret))}


def _part(headers: str, payload: bytes) -> bytes:
    return b"--XyZ\r\n" + headers.encode() + b"\r\n\r\n" + payload + b"\r\n"


MULTIPART = "multipart/form-data; boundary=XyZ"

# (name, Content-Type, body of two secrets): each secret is visible in a
# different reading of the body than the other.
TWO_READINGS: list[tuple[str, str | None, Callable[[str, str], bytes]]] = [
    *(
        (
            f"multipart, a utf-8 part and a {charset} part",
            MULTIPART,
            lambda a, b, charset=charset: (
                _part("Content-Type: text/plain", f"aws_key = {a}".encode())
                + _part(
                    f"Content-Type: text/plain; charset={charset}", f"tok {b} end".encode(charset)
                )
                + b"--XyZ--\r\n"
            ),
        )
        for charset in WIDE
    ),
    (
        "multipart, a latin-1 part and a utf-16 part with a BOM",
        MULTIPART,
        lambda a, b: (
            _part("Content-Type: text/plain; charset=iso-8859-1", f"Grüße {a}".encode("latin-1"))
            + _part("Content-Type: text/plain; charset=utf-16", f"clé {b}".encode("utf-16"))
            + b"--XyZ--\r\n"
        ),
    ),
    (
        "declared cp500, an ASCII secret beside",
        "text/plain; charset=cp500",
        lambda a, b: f"tok {a} ".encode("cp500") + f" key {b}\n".encode(),
    ),
    (
        "declared iso-8859-1, a utf-16-be secret beside",
        "text/plain; charset=iso-8859-1",
        lambda a, b: f"Grüße {a} ".encode("latin-1") + f"x {b} y".encode("utf-16-be"),
    ),
    (
        "utf-16 with a BOM, an ASCII tail",
        "text/plain; charset=utf-16",
        lambda a, b: f"note {a} end\n".encode("utf-16") + f"\n{b}\n".encode(),
    ),
    (
        "binary, a latin-1 run and a utf-32-le run",
        "application/octet-stream",
        lambda a, b: (
            b"\x89BIN\x00\x01\xfe\xff"
            + f"k={a};".encode()
            + b"\x00\x07\x81"
            + f" {b} ".encode("utf-32-le")
            + b"\xff\x00"
        ),
    ),
]
PAIRS = [(GITHUB, AWS), (AWS, SLACK), (SLACK, GITHUB)]


@pytest.mark.parametrize(
    ("first", "second"), PAIRS, ids=["github+aws", "aws+slack", "slack+github"]
)
@pytest.mark.parametrize(
    ("kind", "content_type", "make"), TWO_READINGS, ids=[row[0] for row in TWO_READINGS]
)
def test_a_secret_in_each_of_two_readings_is_stored_without_either(
    kind: str, content_type: str | None, make: Callable[[str, str], bytes], first: str, second: str
) -> None:
    body = make(first, second)
    headers = {"Content-Type": content_type} if content_type else {}
    response, _ = stored_response(body, {k: [v] for k, v in headers.items()})
    request = stored_request(body, headers)
    assert leaked(response, first, second) == {}
    assert leaked(request, first, second) == {}
    assert response != DROPPED_BODY and request != DROPPED_BODY  # redacted where it stands


# -- wide text wherever it stands -----------------------------------------------------


def _wide_in_ascii(charset: str, secret: str, padding: int, offset: int) -> bytes:
    return b"A" * padding + b"." * offset + f" token {secret} ".encode(charset) + b"B" * padding


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/octet-stream", MULTIPART]
)
@pytest.mark.parametrize(("padding", "offset"), [(4000, 0), (4000, 1), (50_000, 3), (7, 2)])
@pytest.mark.parametrize("charset", WIDE)
def test_a_small_wide_stretch_in_an_ascii_body_is_read_as_such(
    charset: str, padding: int, offset: int, content_type: str | None
) -> None:
    for secret in SECRETS:
        body = _wide_in_ascii(charset, secret, padding, offset)
        headers = {"Content-Type": content_type} if content_type else {}
        response, _ = stored_response(body, {k: [v] for k, v in headers.items()})
        assert leaked(response, secret) == {}
        assert leaked(stored_request(body, headers), secret) == {}
        assert len(response) == len(body)  # overwritten where it stands


@pytest.mark.parametrize("charset", WIDE)
def test_a_whole_body_in_utf_32_or_utf_16_without_a_bom_or_charset_is_read(charset: str) -> None:
    body = f"Überweisung\nkey: {GITHUB}\nend €\n".encode(charset)
    response, _ = stored_response(body, {})
    assert leaked(response, GITHUB) == {}


@pytest.mark.parametrize("charset", WIDE)
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_a_workspace_file_with_a_small_wide_stretch_keeps_no_secret(
    charset: str, offset: int
) -> None:
    for secret in SECRETS:
        content = (
            b"\xff\xfe\x00binary" + b"\x01" * offset + _wide_in_ascii(charset, secret, 3000, 0)
        )
        stored = redact_file(Redactor(), content)
        assert leaked(stored, secret) == {}
        assert len(stored) == len(content)


def test_wide_readings_find_a_stretch_at_any_alignment_and_not_in_plain_ascii() -> None:
    assert wide_readings(b"plain ascii text, no zero byte at all" * 100) == []
    for charset in WIDE:
        for offset in range(4):
            data = b"x" * offset + "hello world".encode(charset) + b"y" * 9
            start = offset + (2 if charset == "utf-16-be" else 3 if charset == "utf-32-be" else 0)
            spans = [
                span for codec, spans in wide_readings(data) if codec == charset for span in spans
            ]
            assert any(begin <= start and end >= start + 8 for begin, end in spans), (
                charset,
                offset,
            )


def test_a_label_and_its_value_across_a_character_past_latin_1_stay_one_text() -> None:
    body = b"\x00" * 3 + "password:\u2003Zx9!Zx9!Qw7#Rt5$".encode("utf-16-le") + b"A" * 4000
    response, _ = stored_response(body, {})
    assert leaked(response, "Zx9!Zx9!Qw7#Rt5$") == {}


# -- every Content-Encoding line, in full ---------------------------------------------

TOKEN_TEXT = f"note: token {GITHUB} end".encode()


def _gzip_members(data: bytes) -> bytes:
    return gzip.compress(b"hello ") + gzip.compress(data)


# (name, response headers, how the body was encoded)
CHAINS: list[tuple[str, dict[str, list[str]], Callable[[bytes], bytes]]] = [
    ("two lines: identity, gzip", {"Content-Encoding": ["identity", "gzip"]}, gzip.compress),
    ("two lines: gzip, identity", {"Content-Encoding": ["gzip", "identity"]}, gzip.compress),
    (
        "two names differing in case",
        {"Content-Encoding": ["identity"], "content-encoding": ["gzip"]},
        gzip.compress,
    ),
    (
        "stacked: gzip, gzip",
        {"Content-Encoding": ["gzip, gzip"]},
        lambda d: gzip.compress(gzip.compress(d)),
    ),
    (
        "stacked over two lines",
        {"Content-Encoding": ["gzip"], "CONTENT-ENCODING": ["gzip"]},
        lambda d: gzip.compress(gzip.compress(d)),
    ),
    (
        "deflate then gzip on two lines",
        {"content-encoding": ["deflate", "gzip"]},
        lambda d: gzip.compress(zlib.compress(d)),
    ),
    ("mixed case value", {"Content-Encoding": ["GZip"]}, gzip.compress),
    ("x-gzip", {"Content-Encoding": ["X-GZIP"]}, gzip.compress),
    ("raw deflate", {"Content-Encoding": ["Deflate"]}, lambda d: zlib.compress(d)[2:-4]),
    ("several gzip members", {"Content-Encoding": ["gzip"]}, _gzip_members),
]
# Chains that cannot be undone in full here: never kept.
UNREADABLE: list[tuple[str, dict[str, list[str]], Callable[[bytes], bytes]]] = [
    ("gzip then br", {"Content-Encoding": ["gzip", "br"]}, gzip.compress),
    ("identity then zstd", {"Content-Encoding": ["identity"], "content-encoding": ["zstd"]}, bytes),
    ("gzip declared once more than applied", {"Content-Encoding": ["gzip, gzip"]}, gzip.compress),
    (
        "gzip with bytes after its end",
        {"Content-Encoding": ["gzip"]},
        lambda d: gzip.compress(d) + b"trailing",
    ),
    ("a coding with parameters", {"Content-Encoding": ["gzip;q=1"]}, gzip.compress),
]


@pytest.mark.parametrize(("kind", "headers", "encode"), CHAINS, ids=[row[0] for row in CHAINS])
def test_every_content_encoding_line_is_undone_in_order(
    kind: str, headers: dict[str, list[str]], encode: Callable[[bytes], bytes]
) -> None:
    response, kept = stored_response(encode(TOKEN_TEXT), headers)
    assert leaked(response, GITHUB) == {}
    assert b"note: token <redacted:" in response  # stored decoded, and redacted
    assert not [name for name in kept if name.lower() == "content-encoding"]

    request = stored_request(
        encode(TOKEN_TEXT),
        {"Content-Encoding": ", ".join(value for values in headers.values() for value in values)},
    )
    assert leaked(request, GITHUB) == {}


@pytest.mark.parametrize(
    ("kind", "headers", "encode"), UNREADABLE, ids=[row[0] for row in UNREADABLE]
)
def test_a_chain_not_undone_in_full_is_not_kept(
    kind: str, headers: dict[str, list[str]], encode: Callable[[bytes], bytes]
) -> None:
    response, _ = stored_response(encode(TOKEN_TEXT), headers)
    assert response == DROPPED_BODY


def test_a_compressed_body_without_a_secret_keeps_its_chain() -> None:
    body = gzip.compress(gzip.compress(b"nothing to see here"))
    headers = {"Content-Encoding": ["gzip"], "content-encoding": ["gzip"]}
    response, kept = stored_response(body, headers)
    assert response == body
    assert kept == {name: tuple(values) for name, values in headers.items()}


# -- end to end: a cassette's bytes ---------------------------------------------------

# (name, response headers as sent, line by line, body)
SENT: dict[str, tuple[list[tuple[str, str]], bytes]] = {
    "multipart utf-8 and utf-16 parts": (
        [("Content-Type", MULTIPART)],
        TWO_READINGS[0][2](AWS, GITHUB),
    ),
    "utf-32 stretch in ascii": (
        [("Content-Type", "application/octet-stream")],
        _wide_in_ascii("utf-32-be", GITHUB, 3000, 1),
    ),
    "two Content-Encoding lines": (
        [
            ("Content-Type", "text/plain"),
            ("Content-Encoding", "identity"),
            ("Content-Encoding", "gzip"),
        ],
        gzip.compress(TOKEN_TEXT),
    ),
    "gzip, gzip": (
        [("Content-Type", "text/plain"), ("content-encoding", "gzip, GZIP")],
        gzip.compress(gzip.compress(TOKEN_TEXT)),
    ),
}


@contextmanager
def sending(kind: str) -> Iterator[str]:
    headers, body = SENT[kind]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/post"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@tool(
    name="post_parts",
    input_schema={"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    risk=Risk.EXTERNAL,
    network_host_argument="url",
)
def post_parts(ctx: Any, url: str) -> dict[str, Any]:
    """POST a multipart body with a Slack token in a UTF-16 part; answer the status."""
    data = _part("Content-Type: text/plain", b"hello") + _part(
        "Content-Type: text/plain; charset=utf-16-le", f"t {SLACK} e".encode("utf-16-le")
    )
    request = urllib.request.Request(url, data=data, headers={"Content-Type": MULTIPART})
    with urllib.request.urlopen(request, timeout=5) as response:
        response.read()
    return {"status": response.status}


PARTS = ToolRegistry([post_parts])


@pytest.mark.parametrize("kind", sorted(SENT))
def test_a_recorded_cassette_holds_no_secret_of_any_reading(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "parts.yaml"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    capabilities = Capabilities(
        allowed_risks=frozenset({Risk.READ, Risk.EXTERNAL}), network_hosts=("127.0.0.1",)
    )
    runtime = ToolRuntime(PARTS, str(workspace), capabilities, hooks=[Approver(lambda e: True)])
    with sending(kind) as url, record_session(runtime, path):
        result = runtime.execute(
            ToolCall(call_id="1", tool_name="post_parts", arguments={"url": url})
        )
    runtime.close()
    assert result.code == ErrorCode.OK

    assert leaked(path.read_bytes(), *SECRETS) == {}
    exchange = load(path).interactions[0].http[0]
    assert leaked(exchange.response_body, *SECRETS) == {}
    assert leaked(exchange.request_body or b"", *SECRETS) == {}
    report = replay(load(path), PARTS)
    assert report.ok, report.differences


# -- workspace files that are not UTF-8 -----------------------------------------------

FILES: dict[str, Callable[[str], bytes]] = {
    "latin-1": lambda s: f"Grüße token={s}\n".encode("latin-1"),
    "utf-16 with a BOM": lambda s: f"token={s}\n".encode("utf-16"),
    "utf-32-le, no BOM": lambda s: f"token={s}\n".encode("utf-32-le"),
    "ascii with a utf-16-be stretch": lambda s: b"\x80" + _wide_in_ascii("utf-16-be", s, 500, 1),
}


@pytest.mark.parametrize("kind", sorted(FILES))
def test_a_recorded_cassette_holds_no_secret_of_a_file_that_is_not_utf8(
    tmp_path: Path, kind: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for secret in SECRETS:
        (workspace / f"cfg-{secret[:4]}.bin").write_bytes(FILES[kind](secret))
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",)),
    )
    path = tmp_path / "files.yaml"
    with record_session(runtime, path):
        for secret in SECRETS:
            runtime.execute(
                ToolCall(
                    call_id=secret[:4],
                    tool_name="read_text",
                    arguments={"path": f"cfg-{secret[:4]}.bin"},
                )
            )
    runtime.close()
    data = path.read_bytes()
    assert data.count(b"cfg-") >= len(SECRETS)  # the files are in the cassette
    assert leaked(data, *SECRETS) == {}
