"""HTTP exchanges between vcrpy and the cassette: redacted before anything
is kept, and converted both ways.

vcrpy's request is its ``vcr.request.Request`` (``method``, ``uri``,
``headers``, ``body``); its response a dict ``{status: {code, message},
headers: {name: [values]}, body: {string: bytes}}``. The cassette keeps an
``HttpExchange``. Redaction uses the runtime's ``Redactor``: a header whose
name is sensitive (``Authorization``, ``Cookie``, ``Set-Cookie``,
``X-Api-Key``, ...) is replaced whole; other header values and the URL
(query tokens, passwords) by the redactor's patterns; bodies as
``redact_body`` says. It is idempotent, so replay redacts a request the
same way before matching it.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, MutableMapping
from typing import Any

from ..redaction import Redactor, placeholder
from .cassette import HttpExchange
from .redacting import LATIN_1, text_charsets, utf16_readings

UNKEPT_HEADERS = ("date",)
"""Response headers never recorded (lower case): a response's ``Date``
changes on every request, and re-recording an unchanged session must write
the same bytes."""


DROPPED_BODY = placeholder("body_with_secret").encode("ascii")
"""What a body is stored as when it held a secret in a form that could not
be redacted where it stands (compressed in an encoding this module cannot
undo, or text in UTF-16 inside a body read as another charset)."""

MAX_DECODED_BODY = 64 * 1024 * 1024
"""A compressed body that inflates past this is not inflated further: it is
stored as ``DROPPED_BODY`` (a decompression bomb, or too big to check)."""


def redact_request(request: Any, redactor: Redactor) -> Any:
    """A vcrpy request (a copy vcrpy made) redacted in place: the URL,
    header values (whole for a sensitive header name), its body
    (``redact_body``)."""
    request.uri = redactor.redact_text(str(request.uri))
    headers = {
        name: _redact_header(redactor, name, _text(value))
        for name, value in request.headers.items()
    }
    body = _request_body(request)
    if body is not None:
        redacted = redact_body(redactor, body, headers)
        if redacted != body:
            request.body = redacted
            _fit_length(headers, redacted)
        else:
            request.body = body
    request.headers = headers
    return request


def redact_response(response: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A vcrpy response (a copy vcrpy made) redacted in place, without the
    ``UNKEPT_HEADERS``; its Content-Length follows a body that redaction
    shortened."""
    response["headers"] = {
        name: [_redact_header(redactor, name, _text(value)) for value in _values(values)]
        for name, values in response.get("headers", {}).items()
        if name.lower() not in UNKEPT_HEADERS
    }
    body = response.get("body", {}).get("string")
    if isinstance(body, str):
        body = body.encode("utf-8")
    if isinstance(body, bytes):
        headers = {name: values[0] for name, values in response["headers"].items() if values}
        redacted = redact_body(redactor, body, headers)
        response["body"]["string"] = redacted
        if redacted != body:
            for name in list(response["headers"]):
                if name.lower() == "content-encoding" and name not in headers:
                    del response["headers"][name]  # stored decoded
        if len(redacted) != len(body):
            for name in response["headers"]:
                if name.lower() == "content-length":
                    response["headers"][name] = [str(len(redacted))]
    return response


def redact_body(redactor: Redactor, body: bytes, headers: MutableMapping[str, str]) -> bytes:
    """``body`` as a cassette keeps it, given its message's ``headers`` (one
    value per name; a ``Content-Encoding`` is removed from them when the body
    is stored decoded).

    * **Compressed** (``Content-Encoding`` gzip, x-gzip, deflate, identity,
      in any chain): inflated (up to ``MAX_DECODED_BODY``) and checked as
      below. Holding a secret, it is stored inflated and redacted, without
      its ``Content-Encoding``; holding none, as it came. An encoding that
      cannot be undone here (br, zstd, a corrupt stream) is stored as
      ``DROPPED_BODY``: it cannot be checked, so it is never kept.
    * **Text**: read in the ``charset`` of its ``Content-Type`` when that
      decodes it, else by its byte-order mark, else as UTF-8, else as
      latin-1 (which reads any bytes, so the ASCII and latin-1 runs of a
      binary body are checked too); redacted like any text, and written
      back in the same charset, so that what surrounds a secret keeps its
      bytes. A body with no secret is kept byte for byte.
    * **UTF-16 inside another reading** (a part of a multipart body, text
      with no charset given): a body whose UTF-16 readings hold a secret
      the first reading missed is stored as ``DROPPED_BODY``.
    """
    encodings = _content_encodings(headers)
    if encodings:
        decoded = _decompressed(body, encodings)
        if decoded is None:
            return body if not body else DROPPED_BODY
        redacted = _redact_payload(redactor, decoded, headers)
        if redacted == decoded:
            return body
        for name in [name for name in headers if name.lower() == "content-encoding"]:
            del headers[name]
        return redacted
    return _redact_payload(redactor, body, headers)


def _redact_payload(redactor: Redactor, body: bytes, headers: Mapping[str, str]) -> bytes:
    """An uncompressed body redacted in the charset it reads in (see ``redact_body``)."""
    if not body:
        return body
    charsets = text_charsets(body, _header(headers, "content-type"))
    for charset in charsets:
        try:
            text = body.decode(charset)
        except (UnicodeDecodeError, LookupError):
            continue
        redacted = redactor.redact_text(text)
        if redacted != text:
            try:
                return redacted.encode(charset)
            except (UnicodeEncodeError, LookupError):
                return DROPPED_BODY
        break
    # Nothing found in the reading the body claims. A wrong claim (ASCII
    # declared as UTF-16, UTF-16 text with no charset) must not hide a
    # secret: the latin-1 reading sees every ASCII run, the UTF-16 ones
    # text with a zero byte in each character.
    if charset not in ("utf-8", LATIN_1):
        text = body.decode(LATIN_1)
        redacted = redactor.redact_text(text)
        if redacted != text:
            return redacted.encode(LATIN_1)
    if _holds_utf16_secret(redactor, body):
        return DROPPED_BODY
    return body


def _holds_utf16_secret(redactor: Redactor, body: bytes) -> bool:
    """Whether ``body`` read as UTF-16 (``utf16_readings``) holds a secret:
    text of a charset that leaves a zero byte in every ASCII character,
    which no other reading sees."""
    for start, end, charset in utf16_readings(body):
        text = body[start:end].decode(charset, "replace")
        if redactor.redact_text(text) != text:
            return True
    return False


def _content_encodings(headers: Mapping[str, str]) -> list[str]:
    """The body's content codings, in the order they were applied."""
    value = _header(headers, "content-encoding")
    return [coding.strip().lower() for coding in value.split(",") if coding.strip()]


def _decompressed(body: bytes, encodings: list[str]) -> bytes | None:
    """``body`` with its ``encodings`` undone, last applied first; None when
    one cannot be (unknown, corrupt, cut short, followed by other bytes, or
    past ``MAX_DECODED_BODY``)."""
    for coding in reversed(encodings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            windows = [zlib.MAX_WBITS | 16]
        elif coding == "deflate":
            windows = [zlib.MAX_WBITS, -zlib.MAX_WBITS]  # zlib-wrapped, or raw as some send
        else:
            return None
        for window in windows:
            inflater = zlib.decompressobj(window)
            try:
                inflated = inflater.decompress(body, MAX_DECODED_BODY + 1)
            except zlib.error:
                continue
            # Cut short, too big, or with bytes after its end: what was not
            # inflated was not checked.
            if len(inflated) > MAX_DECODED_BODY or not inflater.eof or inflater.unused_data:
                return None
            body = inflated
            break
        else:
            return None
    return body


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return ""


def _fit_length(headers: MutableMapping[str, str], body: bytes) -> None:
    for name in headers:
        if name.lower() == "content-length":
            headers[name] = str(len(body))


def _request_body(request: Any) -> bytes | None:
    """A vcrpy request's body as bytes, whatever it was given as (bytes,
    text, a file, an iterable of chunks); None when it has none."""
    body = request.body
    if hasattr(body, "read"):
        body = body.read()
    elif body is not None and not isinstance(body, (bytes, str)):
        body = b"".join(
            chunk if isinstance(chunk, bytes) else str(chunk).encode() for chunk in body
        )
    if isinstance(body, str):
        body = body.encode("utf-8")
    return body if isinstance(body, bytes) else None


def _redact_header(redactor: Redactor, name: str, value: str) -> str:
    keyword = redactor.sensitive_keyword(name)
    return placeholder(keyword) if keyword else redactor.redact_text(value)


def _values(values: Any) -> list[Any]:
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


# -- vcrpy's exchange <-> the cassette's -------------------------------------------------


def exchange_of(request: Any, response: Mapping[str, Any]) -> HttpExchange:
    """A vcrpy request and response as a cassette keeps them."""
    request_body = _request_body(request)
    response_body = response.get("body", {}).get("string") or b""
    if isinstance(response_body, str):
        response_body = response_body.encode("utf-8")
    status = response.get("status", {})
    return HttpExchange(
        method=str(request.method),
        uri=str(request.uri),
        status=int(status.get("code", 0)),
        reason=str(status.get("message", "")),
        request_headers={name: (_text(value),) for name, value in request.headers.items()},
        request_body=request_body or None,
        response_headers={
            name: tuple(_text(value) for value in _values(values))
            for name, values in response.get("headers", {}).items()
        },
        response_body=response_body,
    )


def vcr_exchange(exchange: HttpExchange, request_class: Any) -> tuple[Any, dict[str, Any]]:
    """A cassette's exchange as a new vcrpy request (of ``request_class``,
    ``vcr.request.Request``) and response."""
    request = request_class(
        method=exchange.method,
        uri=exchange.uri,
        body=exchange.request_body,
        headers={name: values[0] for name, values in exchange.request_headers.items() if values},
    )
    response = {
        "status": {"code": exchange.status, "message": exchange.reason},
        "headers": {name: list(values) for name, values in exchange.response_headers.items()},
        "body": {"string": exchange.response_body},
    }
    return request, response
