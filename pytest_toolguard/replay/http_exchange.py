"""HTTP exchanges between vcrpy and the cassette: redacted before anything
is kept, and converted both ways.

vcrpy's request is its ``vcr.request.Request`` (``method``, ``uri``,
``headers``, ``body``); its response a dict ``{status: {code, message},
headers: {name: [values]}, body: {string: bytes}}``. The cassette keeps an
``HttpExchange``. Redaction uses the runtime's ``Redactor``: a header whose
name is sensitive (``Authorization``, ``Cookie``, ``Set-Cookie``,
``X-Api-Key``, ...) is replaced whole; other header values, the URL (query
tokens, passwords) and text bodies by the redactor's patterns; binary bodies
are left as they are (decode compressed ones first). It is idempotent, so
replay redacts a request the same way before matching it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..redaction import Redactor, placeholder
from .cassette import HttpExchange

UNKEPT_HEADERS = ("date",)
"""Response headers never recorded (lower case): a response's ``Date``
changes on every request, and re-recording an unchanged session must write
the same bytes."""


def redact_request(request: Any, redactor: Redactor) -> Any:
    """A vcrpy request (a copy vcrpy made) redacted in place: the URL,
    header values (whole for a sensitive header name), a text body."""
    request.uri = redactor.redact_text(str(request.uri))
    request.headers = {
        name: _redact_header(redactor, name, _text(value))
        for name, value in request.headers.items()
    }
    body = _request_body(request)
    if body is not None:
        request.body = _redact_body(redactor, body)
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
        redacted = _redact_body(redactor, body)
        response["body"]["string"] = redacted
        if len(redacted) != len(body):
            for name in response["headers"]:
                if name.lower() == "content-length":
                    response["headers"][name] = [str(len(redacted))]
    return response


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


def _redact_body(redactor: Redactor, body: bytes) -> bytes:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return body  # binary: patterns cannot be read in it
    return redactor.redact_text(text).encode("utf-8")


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
