"""Faults in what the network does: the ``network_error`` and ``http_error``
faults, and the failures they inject into a recorded HTTP exchange
(``HttpPlayback.injected``). Each failure is an ``Answer``: it gets vcrpy's
request and the recorded response, and raises as the network would or
returns the response to serve. It answers only requests the playback let
through: one to a host outside the session's network hosts is refused
before any answer, and a redirect an answer serves is judged as a recorded
one would be (``replay.http``: hosts, hop by hop)."""

from __future__ import annotations

import errno
import http
from collections.abc import Mapping
from typing import Any

from ..redaction import Redactor
from ..replay.http import Answer
from .cell import Cell
from .fault import Fault
from .target import Target


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


class _WithRecordedHttp(Fault):
    """A fault of calls that succeeded when recorded and whose handler made
    HTTP requests: what the network does is changed, the tool must notice."""

    applies_to = "successful calls whose handler made recorded HTTP requests"

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and bool(target.interaction.http)

    def _answer(self, cell: Cell, what: str, answer: Answer) -> None:
        """One call with every request of its handler answered by
        ``answer``; the oracle of both faults."""
        assert cell.http is not None  # applies() saw recorded exchanges
        met: list[Any] = []

        def counted(request: Any, response: dict[str, Any]) -> dict[str, Any]:
            met.append(request)
            return answer(request, response)

        before = cell.tree()
        with cell.http.injected(counted):
            result = cell.execute(cell.call())
        cell.check(
            bool(met), f"{what}: the handler made no recorded HTTP request, so it never failed"
        )
        recorded = cell.target.interaction.result.data
        cell.check(
            not (result.ok and Redactor().redact(result.data) == recorded),
            f"{what}: answered {result.code.value} with the recorded data, "
            "as if the request had succeeded",
        )
        cell.check_unchanged(before, f"{what}: the request failed")


class NetworkErrorFault(_WithRecordedHttp):
    name = "network_error"
    injection = (
        "each request the handler makes fails in the HTTP layer: connection refused, "
        "then reset, then timed out (one call each)"
    )
    expected = (
        "not OK with the recorded data (an error, or data saying what failed); "
        "no file changed; the audit row finished"
    )

    def inject(self, cell: Cell) -> None:
        for what, answer in NETWORK_ERRORS.items():
            self._answer(cell, what, answer)


class HttpErrorFault(_WithRecordedHttp):
    name = "http_error"
    injection = (
        f"each recorded request answered {', '.join(map(str, HTTP_ERRORS))} instead "
        "(one call each; Retry-After on 429 and 503)"
    )
    expected = (
        "not OK with the recorded data (an error, or data saying what failed); "
        "no file changed; the audit row finished"
    )

    def inject(self, cell: Cell) -> None:
        for code in HTTP_ERRORS:
            self._answer(cell, f"HTTP {code}", http_status(code))
