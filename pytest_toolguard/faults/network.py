"""Faults in what the network does: the ``network_error``, ``http_error``,
``late_response`` and ``http_redirect`` faults, and the failures they
inject into a recorded HTTP exchange (``HttpPlayback.injected``). Each
failure is an ``Answer``: it gets vcrpy's request and the recorded
response, and raises as the network would or returns the response to
serve. It answers only requests the playback let through: one to a host
outside the session's network hosts is refused before any answer (and
``http_redirect`` reports the handler that made it), and a redirect an
answer serves is judged as a recorded one would be (``replay.http``:
hosts, hop by hop). What an OK result to a failed exchange may say is
``http_claims``'s judgement; a request sent again is the invariant of
every cell (``http_sends``)."""

from __future__ import annotations

import errno
import http
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..capabilities import Capabilities
from ..redaction import Redactor
from ..replay.cassette import HttpExchange
from ..replay.http import Answer, confinement, host_refusal
from .cell import Cell
from .fault import Fault
from .http_claims import false_success
from .http_sends import NON_IDEMPOTENT_METHODS
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
        ``answer``; the oracle of both faults (a request sent again is the
        invariant of every HTTP cell: ``http_sends``)."""
        assert cell.http is not None  # applies() saw recorded exchanges
        served = _answered(cell)
        before = cell.tree()
        with cell.http.injected(answer):
            result = cell.execute(cell.call())
        cell.check(
            _answered(cell) > served,
            f"{what}: the handler made no recorded HTTP request, so it never failed",
        )
        if result.ok:
            recorded = cell.target.interaction.result.data
            why = false_success(Redactor().redact(result.data), result.message, recorded)
            cell.check(
                why is None,
                f"{what}: answered {result.code.value} {why}, as if the request had succeeded",
            )
        cell.check_unchanged(before, f"{what}: the request failed")


def _answered(cell: Cell) -> int:
    """How many requests the cell's playback has answered from a recorded
    exchange (what a fault's answer replaced)."""
    assert cell.http is not None
    return sum(1 for request in cell.http.served() if request.answered)


class NetworkErrorFault(_WithRecordedHttp):
    name = "network_error"
    injection = (
        "each request the handler makes fails in the HTTP layer: connection refused, "
        "then reset, then timed out (one call each)"
    )
    expected = (
        "a failure, or OK with data saying what failed (an error field, a false ok or success "
        "flag, a 4xx or 5xx status), never the recorded data or a claim of success (a true "
        "ok, delivered or sent flag, the recorded status); no file changed; the audit row "
        "finished"
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
        "a failure, or OK with data saying what failed (an error field, a false ok or success "
        "flag, a 4xx or 5xx status), never the recorded data or a claim of success (a true "
        "ok, delivered or sent flag, the recorded status); no file changed; the audit row "
        "finished"
    )

    def inject(self, cell: Cell) -> None:
        for code in HTTP_ERRORS:
            self._answer(cell, f"HTTP {code}", http_status(code))


def answer_lost(nth: int, method: str, path: str) -> Answer:
    """The ``nth`` (0-based) sending of ``method`` to ``path`` reaches the
    service, but its answer comes after the client's timeout: it raises
    ``TimeoutError`` as the socket read would; every other request gets
    its recorded answer."""
    seen = [0]
    lock = threading.Lock()

    def answer(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        if str(request.method).upper() == method and urlsplit(str(request.uri)).path == path:
            with lock:
                count = seen[0]
                seen[0] += 1
            if count == nth:
                raise TimeoutError(_injected("timed out waiting for the answer", request))
        return response

    return answer


MAX_LATE_REQUESTS = 3
"""At most this many of a call's non-idempotent requests get a late answer
(one call each)."""


class LateResponseFault(_WithRecordedHttp):
    name = "late_response"
    applies_to = "successful calls whose handler made a recorded POST, PATCH or DELETE"
    injection = (
        "a recorded POST, PATCH or DELETE reaches the service, but its answer comes after "
        "the client's timeout (TimeoutError reading it); later requests get their recorded "
        f"answers (one call for each such request, at most {MAX_LATE_REQUESTS})"
    )
    expected = (
        "no POST, PATCH or DELETE sent more often than recorded, unless each sending carried "
        "the same idempotency key (Idempotency-Key, X-Idempotency-Key, ...)"
    )

    def applies(self, target: Target) -> bool:
        return super().applies(target) and bool(_unsafe_requests(target.interaction.http))

    def inject(self, cell: Cell) -> None:
        # The oracle is the invariant of every cell serving HTTP
        # (``http_sends.resent``, checked by ``run.run_cell``).
        assert cell.http is not None  # applies() saw recorded exchanges
        recorded = cell.target.interaction.http
        for method, path in _unsafe_requests(recorded)[:MAX_LATE_REQUESTS]:
            with cell.http.injected(answer_lost(0, method, path)):
                cell.execute(cell.call())


def _unsafe_requests(exchanges: Sequence[HttpExchange]) -> list[tuple[str, str]]:
    """The distinct (method, URL path) of the non-idempotent requests."""
    found: list[tuple[str, str]] = []
    for exchange in exchanges:
        key = (exchange.method.upper(), urlsplit(exchange.uri).path)
        if key[0] in NON_IDEMPOTENT_METHODS and key not in found:
            found.append(key)
    return found


# -- a redirect to another host ----------------------------------------------------------

REDIRECT_STATUSES = (301, 302, 307, 308)
"""The statuses the ``http_redirect`` fault serves, in order."""

ELSEWHERE = ("redirected.invalid", "elsewhere.toolguard.invalid", "192.0.2.1")
"""The hosts a redirect leads to: the first one the run's network hosts do
not allow (``.invalid`` names never resolve; 192.0.2.1 is for documentation)."""


def redirect_to(code: int, host: str) -> Answer:
    """The server answers ``code`` with a ``Location`` on ``host`` (the
    request's scheme and path, no query: it may hold a token)."""
    phrase = http.HTTPStatus(code).phrase

    def answer(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        parts = urlsplit(str(request.uri))
        location = urlunsplit((parts.scheme or "http", host, parts.path or "/", "", ""))
        body = f"{code} {phrase}: {location} (injected by pytest-toolguard)".encode()
        return {
            "status": {"code": code, "message": phrase},
            "headers": {
                "Location": [location],
                "Content-Type": ["text/plain"],
                "Content-Length": [str(len(body))],
            },
            "body": {"string": body},
        }

    return answer


def elsewhere(target: Target) -> tuple[Capabilities, str] | None:
    """The network hosts the target's handler runs confined to
    (``replay.http.confinement``) and a host of ``ELSEWHERE`` outside them;
    None when the run is not confined (any host is its to reach) or every
    such host is allowed."""
    if target.spec is None:
        return None
    hosts = confinement(target.spec, target.cassette.session.capabilities)
    if hosts is None:
        return None
    for host in ELSEWHERE:
        if host_refusal(f"http://{host}/", hosts) is not None:
            return hosts, host
    return None


class HttpRedirectFault(_WithRecordedHttp):
    name = "http_redirect"
    applies_to = (
        "successful calls whose handler made recorded HTTP requests, confined to network "
        "hosts (the session lists some, or the tool names its host)"
    )
    injection = (
        f"each recorded request answered {', '.join(map(str, REDIRECT_STATUSES))} instead "
        "(one call each), its Location on a host outside the network hosts "
        "(redirected.invalid)"
    )
    expected = (
        "no request to the other host (a client following the redirect is refused there, "
        "and reported); not OK with the recorded data or a claim of success; no file changed"
    )

    def applies(self, target: Target) -> bool:
        return super().applies(target) and elsewhere(target) is not None

    def inject(self, cell: Cell) -> None:
        assert cell.http is not None  # applies() saw recorded exchanges
        found = elsewhere(cell.target)
        assert found is not None
        hosts, host = found
        allowed = ", ".join(hosts.network_hosts) or "none"
        for code in REDIRECT_STATUSES:
            what = f"HTTP {code} to {host}"
            served, refused = _answered(cell), len(cell.http.refused())
            before = cell.tree()
            with cell.http.injected(redirect_to(code, host)):
                result = cell.execute(cell.call())
            cell.check(
                _answered(cell) > served,
                f"{what}: the handler made no recorded HTTP request, so it was never redirected",
            )
            for request in cell.http.refused()[refused:]:
                cell.check(
                    urlsplit(request.uri).hostname != host,
                    f"{what}: the handler followed the redirect off its network hosts "
                    f"({allowed}): {request.method} {request.uri}",
                )
            if result.ok:
                recorded = cell.target.interaction.result.data
                data = Redactor().redact(result.data)
                why = false_success(data, result.message, recorded, silent_ok=True)
                cell.check(
                    why is None,
                    f"{what}: answered {result.code.value} {why}, as if the request had succeeded",
                )
            cell.check_unchanged(before, f"{what}: the request was not answered")
