"""What the network may do instead of answering: the failures the
``network_error`` and ``http_error`` faults inject into a recorded HTTP
exchange (``HttpPlayback.injected``). Each is an ``Answer``: it gets vcrpy's
request and the recorded response, and raises as the network would or
returns the response to serve."""

from __future__ import annotations

import errno
import http
from collections.abc import Mapping
from typing import Any

from ..replay.http import Answer


def _injected(what: str, request: Any) -> str:
    return f"{what} (injected by pytest-toolguard): {request.method} {request.uri}"


def connection_refused(request: Any, response: dict[str, Any]) -> dict[str, Any]:
    """The server refuses the connection."""
    raise ConnectionRefusedError(errno.ECONNREFUSED, _injected("Connection refused", request))


def connection_reset(request: Any, response: dict[str, Any]) -> dict[str, Any]:
    """The server resets the connection mid-request."""
    raise ConnectionResetError(errno.ECONNRESET, _injected("Connection reset by peer", request))


def timed_out(request: Any, response: dict[str, Any]) -> dict[str, Any]:
    """The server never answers (``socket.timeout``)."""
    raise TimeoutError(_injected("timed out", request))


NETWORK_ERRORS: Mapping[str, Answer] = {
    "connection refused": connection_refused,
    "connection reset": connection_reset,
    "timeout": timed_out,
}
"""The ``network_error`` fault's three failures, in order."""


def http_status(code: int) -> Answer:
    """The server answers ``code`` (with its standard phrase, a
    short text body, and ``Retry-After`` for 429 and 503) to the recorded
    request."""
    phrase = http.HTTPStatus(code).phrase

    def answer(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        body = f"{code} {phrase} (injected by pytest-toolguard)".encode()
        headers = {"Content-Type": ["text/plain"], "Content-Length": [str(len(body))]}
        if code in (429, 503):
            headers["Retry-After"] = ["1"]
        return {
            "status": {"code": code, "message": phrase},
            "headers": headers,
            "body": {"string": body},
        }

    return answer


HTTP_ERRORS = (429, 500, 503)
"""The statuses the ``http_error`` fault serves, in order."""
