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

``mapped_exchange`` spells an exchange for a world whose root differs from
the recorded one (``root_map.RootMap``): its URL, header values and
uncompressed UTF-8 bodies, each ``Content-Length`` fitted to its body.

``ServedRequest`` is what playback keeps of a request a handler made
(``served_request``): enough to count and compare sendings (digests of
header values and of a JSON body's fields), never a value itself.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

from ..redaction import Redactor, placeholder
from .cassette import HttpExchange
from .redacting import BOMS, LATIN_1, overwritten, text_charsets, whole_readings, wide_readings

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
        headers = {
            name: ", ".join(values) for name, values in response["headers"].items() if values
        }
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
    value per name, the values of a repeated header joined by commas; every
    ``Content-Encoding`` is removed from them when the body is stored
    decoded).

    * **Compressed**: the values of every ``Content-Encoding`` header, in
      order and in any case, are one chain (gzip, x-gzip, deflate,
      identity), undone last first, up to ``MAX_DECODED_BODY``; a gzip
      stream of several members is read to its end. The result is checked
      as below. Holding a secret, it is stored inflated and redacted,
      without its ``Content-Encoding``; holding none, as it came. A chain
      that cannot be undone in full here (br, zstd, an unknown coding, a
      corrupt or cut stream, bytes after its end) is stored as
      ``DROPPED_BODY``: it cannot be checked, so it is never kept.
    * **Text**: read in the ``charset`` of its ``Content-Type`` when that
      decodes it, else by its byte-order mark, else as UTF-8, else as
      latin-1 (``text_charsets``); redacted like any text, and written back
      in the same charset (and byte order), so that what surrounds a secret
      keeps its bytes. A body with no secret is kept byte for byte.
    * **Every other reading** runs too, whatever the first found: latin-1
      (the ASCII runs of a body declared in another charset), and every
      stretch that reads as UTF-16 or UTF-32 (``wide_readings``: a part of a
      multipart body, text with no charset given). What they find is
      overwritten by ``*`` where it stands. All readings run again until
      none finds anything; a body that does not settle is stored as
      ``DROPPED_BODY``.
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


_PAYLOAD_PASSES = 4


def _redact_payload(redactor: Redactor, body: bytes, headers: Mapping[str, str]) -> bytes:
    """An uncompressed body redacted in every reading, to a fixed point
    (see ``redact_body``)."""
    if not body:
        return body
    content_type = _header(headers, "content-type")
    for _ in range(_PAYLOAD_PASSES):
        redacted = _redacted_once(redactor, body, content_type)
        if redacted is None:
            return DROPPED_BODY
        if redacted == body:
            return body
        body = redacted
    return DROPPED_BODY


def _redacted_once(redactor: Redactor, body: bytes, content_type: str) -> bytes | None:
    """One pass: the reading the body claims, with placeholders, then every
    other reading, overwritten in place; None when a secret cannot be
    redacted where it stands."""
    for charset in text_charsets(body, content_type):
        prefix, codec = _explicit(body, charset)
        try:
            text = body[len(prefix) :].decode(codec)
        except (UnicodeDecodeError, LookupError):
            continue
        redacted = redactor.redact_text(text)
        if redacted != text:
            try:
                body = prefix + redacted.encode(codec)
            except (UnicodeEncodeError, LookupError):
                return None
        break
    # What the reading above saw whole is not read again: the same codec
    # at the same alignment, or latin-1 for ASCII read as UTF-8.
    seen = {codec, LATIN_1} if codec == "utf-8" and body.isascii() else {codec}
    readings = [
        reading
        for reading in whole_readings(body) + wide_readings(body)
        if reading[0] not in seen or any(start % 2 != len(prefix) % 2 for start, _ in reading[1])
    ]
    return overwritten(redactor, body, readings)


def _explicit(body: bytes, charset: str) -> tuple[bytes, str]:
    """The byte-order mark ``body`` starts with and the codec with an
    explicit byte order that reads the rest, for a charset that leaves the
    order to a mark (``utf-16``, ``utf-32``; little-endian without one);
    ``(b"", charset)`` for any other. Written back the same way, a
    big-endian body stays big-endian."""
    if charset not in ("utf-16", "utf-32"):
        return b"", charset
    for bom, _, codec in BOMS:
        if codec.startswith(charset) and body.startswith(bom):
            return bom, codec
    return b"", f"{charset}-le"


def _content_encodings(headers: Mapping[str, str]) -> list[str]:
    """The body's content codings, in the order they were applied: the
    values of every ``Content-Encoding`` header, in order, whatever the
    case of its name."""
    value = ", ".join(
        value for name, value in headers.items() if name.lower() == "content-encoding"
    )
    return [coding.strip().lower() for coding in value.split(",") if coding.strip()]


def _decompressed(body: bytes, encodings: list[str]) -> bytes | None:
    """``body`` with its ``encodings`` undone, last applied first; None when
    one cannot be (unknown, corrupt, cut short, followed by other bytes, or
    past ``MAX_DECODED_BODY``)."""
    for coding in reversed(encodings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            inflated = _inflated(body, [zlib.MAX_WBITS | 16], members=True)
        elif coding == "deflate":
            # zlib-wrapped, or raw as some servers send
            inflated = _inflated(body, [zlib.MAX_WBITS, -zlib.MAX_WBITS], members=False)
        else:
            return None
        if inflated is None:
            return None
        body = inflated
    return body


def _inflated(body: bytes, windows: list[int], *, members: bool) -> bytes | None:
    """``body`` inflated with the first of ``windows`` that reads it whole;
    with ``members``, a stream of several gzip members is read member after
    member, as HTTP clients do. None when cut short, followed by other
    bytes, corrupt, or past ``MAX_DECODED_BODY``: what was not inflated was
    not checked."""
    for window in windows:
        out: list[bytes] = []
        size = 0
        rest = body
        while True:
            inflater = zlib.decompressobj(window)
            try:
                chunk = inflater.decompress(rest, MAX_DECODED_BODY + 1 - size)
            except zlib.error:
                break
            out.append(chunk)
            size += len(chunk)
            if size > MAX_DECODED_BODY or not inflater.eof:
                return None
            rest = inflater.unused_data
            if not rest:
                return b"".join(out)
            if not members:
                return None
        if out:
            return None  # a member after the first that does not read
    return None


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


def mapped_exchange(exchange: HttpExchange, rewrite: Callable[[Any], Any]) -> HttpExchange:
    """``exchange`` with ``rewrite`` (``RootMap.to_world``) run over its
    URL, its header values and its bodies. A compressed body (a
    ``Content-Encoding`` other than identity) is left as it is, as
    ``rewrite`` leaves bytes that are not UTF-8; a body that changed gets a
    ``Content-Length`` of its new size where the exchange had one."""
    request_headers = _mapped_headers(exchange.request_headers, rewrite)
    response_headers = _mapped_headers(exchange.response_headers, rewrite)
    request_body = exchange.request_body
    if request_body is not None:
        request_body = _mapped_body(request_body, request_headers, rewrite)
    response_body = _mapped_body(exchange.response_body, response_headers, rewrite)
    return replace(
        exchange,
        uri=rewrite(exchange.uri),
        request_headers=request_headers,
        request_body=request_body,
        response_headers=response_headers,
        response_body=response_body,
    )


def _mapped_headers(
    headers: Mapping[str, tuple[str, ...]], rewrite: Callable[[Any], Any]
) -> dict[str, tuple[str, ...]]:
    return {name: tuple(rewrite(value) for value in values) for name, values in headers.items()}


def _mapped_body(
    body: bytes, headers: dict[str, tuple[str, ...]], rewrite: Callable[[Any], Any]
) -> bytes:
    """``body`` rewritten unless compressed; ``headers``' Content-Length fitted."""
    joined = {name: ", ".join(values) for name, values in headers.items()}
    if any(coding != "identity" for coding in _content_encodings(joined)):
        return body
    mapped: bytes = rewrite(body)
    if len(mapped) != len(body):
        for name in headers:
            if name.lower() == "content-length":
                headers[name] = (str(len(mapped)),)
    return mapped


# -- what playback keeps of a request ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """A request a handler made in playback (``HttpPlayback.served``):
    answered from a recorded exchange, or matching none."""

    call_id: str
    """The call whose handler run made it ("" when no run could be told)."""
    method: str
    uri: str
    """Redacted: it is shown in reports."""
    headers: tuple[tuple[str, str], ...]
    """Each request header's name and a digest of its value (SHA-256, hex):
    enough to tell two values apart, never the value itself."""
    body_fields: tuple[tuple[str, str], ...]
    """The top-level fields of a JSON object body, name and digest of the
    value (an idempotency key may travel there: ``client_token``, ...)."""
    status: int | None
    """The status it was answered; None when the answer raised instead."""
    raised: str | None = None
    """The name of the exception the answer raised (``TimeoutError``, ...)."""
    answered: bool = True
    """False: no recorded exchange matched it (it was not answered; outside
    the harness it would have been sent)."""


def served_request(
    request: Any,
    call_id: str,
    uri: str,
    status: int | None,
    raised: str | None,
    *,
    answered: bool = True,
) -> ServedRequest:
    """A vcrpy request as playback keeps it (``uri`` already redacted)."""
    headers = getattr(request, "headers", None) or {}
    return ServedRequest(
        call_id,
        str(request.method).upper(),
        uri,
        tuple((str(name), value_digest(value)) for name, value in sorted(headers.items())),
        json_body_fields(getattr(request, "body", None)),
        status,
        raised,
        answered,
    )


def value_digest(value: Any) -> str:
    """A header value's SHA-256 (hex), whatever vcrpy holds it as."""
    if isinstance(value, list | tuple):
        value = value[0] if value else ""
    data = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
    return hashlib.sha256(data).hexdigest()


def json_body_fields(body: Any) -> tuple[tuple[str, str], ...]:
    """The top-level fields of a JSON object ``body`` (bytes or text): name,
    and ``value_digest`` of the value as JSON (keys sorted); none for any
    other body."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            return ()
    if not isinstance(body, str) or not body.lstrip().startswith("{"):
        return ()
    try:
        parsed = json.loads(body)
    except ValueError:
        return ()
    if not isinstance(parsed, dict):
        return ()
    return tuple(
        (str(name), value_digest(json.dumps(value, sort_keys=True, default=str)))
        for name, value in sorted(parsed.items())
    )
