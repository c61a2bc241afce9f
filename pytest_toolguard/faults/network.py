"""Faults in what the network does: the ``network_error``, ``http_error``
and ``late_response`` faults, and the failures they inject into a recorded
HTTP exchange (``HttpPlayback.injected``). Each failure is an ``Answer``: it gets vcrpy's
request and the recorded response, and raises as the network would or
returns the response to serve. It answers only requests the playback let
through: one to a host outside the session's network hosts is refused
before any answer, and a redirect an answer serves is judged as a recorded
one would be (``replay.http``: hosts, hop by hop)."""

from __future__ import annotations

import errno
import http
import re
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..redaction import Redactor
from ..replay.cassette import HttpExchange
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

    def _answer(self, cell: Cell, what: str, answer: Answer, *, reached: bool = False) -> None:
        """One call with every request of its handler answered by
        ``answer``; the oracle of both faults. ``reached``: the failure
        comes after the request may have reached the service (a timeout),
        so a non-idempotent request sent again must carry a key."""
        sent = SentRequests()
        before = cell.tree()
        with sent.watching(cell, answer):
            result = cell.execute(cell.call())
        cell.check(
            bool(sent.sent),
            f"{what}: the handler made no recorded HTTP request, so it never failed",
        )
        if reached:
            for problem in sent.repeats(cell.target.interaction.http):
                cell.check(False, f"{what}: {problem}")
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
        "no file changed; the audit row finished; after a timeout, no POST, PATCH or DELETE "
        "sent more often than recorded without one idempotency key"
    )

    def inject(self, cell: Cell) -> None:
        for what, answer in NETWORK_ERRORS.items():
            self._answer(cell, what, answer, reached=answer is timed_out)


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


# -- a request sent again within one call ----------------------------------------------

NON_IDEMPOTENT_METHODS = frozenset({"POST", "PATCH", "DELETE"})
"""The methods whose request, sent twice, may act twice: a retry of one is
safe only when the service can tell it is a retry (an idempotency key)."""

IDEMPOTENCY_HEADER = re.compile(r"idempoten|^paypal-request-id$", re.IGNORECASE)
"""Headers that carry an idempotency key: ``Idempotency-Key`` (the IETF
draft, Stripe, Adyen), ``X-Idempotency-Key``, ``Idempotency-Token``,
``PayPal-Request-Id``, ..."""


@dataclass(frozen=True, slots=True)
class SentRequest:
    """One request a handler sent that the playback answered."""

    method: str
    uri: str
    """Redacted (``Redactor.redact_text``): it is shown in reports."""
    path: str
    keys: tuple[tuple[str, str], ...]
    """Its idempotency headers (``IDEMPOTENCY_HEADER``), name and value."""


class SentRequests:
    """The requests handlers send while ``watching`` is active, in order;
    ``repeats`` judges them against a call's recorded exchanges."""

    def __init__(self) -> None:
        self.sent: list[SentRequest] = []
        self._lock = threading.Lock()

    def answer(self, inner: Answer | None = None) -> Answer:
        """An ``Answer`` that notes each request, then answers as ``inner``
        does (the recorded response when None)."""

        def noted(request: Any, response: dict[str, Any]) -> dict[str, Any]:
            headers = getattr(request, "headers", None) or {}
            keys = tuple(
                (str(name), str(value))
                for name, value in sorted(headers.items())
                if IDEMPOTENCY_HEADER.search(str(name))
            )
            uri = str(request.uri)
            with self._lock:
                self.sent.append(
                    SentRequest(
                        str(request.method).upper(),
                        Redactor().redact_text(uri),
                        urlsplit(uri).path,
                        keys,
                    )
                )
            return response if inner is None else inner(request, response)

        return noted

    def repeats(self, recorded: Sequence[HttpExchange]) -> list[str]:
        """One line per non-idempotent request (``NON_IDEMPOTENT_METHODS``)
        sent more often than the call recorded it, unless every sending
        carried the same idempotency key: a service that acted on the first
        acts again on the others. Requests are told apart by method and URL
        path (a query or the host may be spelt otherwise in the world)."""
        allowed = Counter((e.method.upper(), urlsplit(e.uri).path) for e in recorded)
        groups: dict[tuple[str, str], list[SentRequest]] = {}
        for request in self.sent:
            if request.method in NON_IDEMPOTENT_METHODS:
                groups.setdefault((request.method, request.path), []).append(request)
        problems = []
        for key, sendings in groups.items():
            if len(sendings) <= allowed[key]:
                continue
            first = sendings[0]
            keyed = {request.keys for request in sendings}
            if len(keyed) == 1 and first.keys:
                continue  # the same key each time: the service can tell a retry
            if any(request.keys for request in sendings):
                names = sorted({name for request in sendings for name, _ in request.keys})
                how = f"with another {'/'.join(names)} value each time or not at all"
            else:
                how = "without an idempotency header (Idempotency-Key)"
            problems.append(
                f"{first.method} {first.uri} sent {len(sendings)} times in one call "
                f"(recorded {allowed[key]}), {how}: the service may have acted on each"
            )
        return problems

    @contextmanager
    def watching(self, cell: Cell, inner: Answer | None = None) -> Iterator[None]:
        """Within the block, note every request ``cell``'s playback answers."""
        assert cell.http is not None
        with cell.http.injected(self.answer(inner)):
            yield


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
        assert cell.http is not None  # applies() saw recorded exchanges
        recorded = cell.target.interaction.http
        for method, path in _unsafe_requests(recorded)[:MAX_LATE_REQUESTS]:
            sent = SentRequests()
            with sent.watching(cell, answer_lost(0, method, path)):
                cell.execute(cell.call())
            for problem in sent.repeats(recorded):
                cell.check(False, f"the first answer to a {method} came late: {problem}")


def _unsafe_requests(exchanges: Sequence[HttpExchange]) -> list[tuple[str, str]]:
    """The distinct (method, URL path) of the non-idempotent requests."""
    found: list[tuple[str, str]] = []
    for exchange in exchanges:
        key = (exchange.method.upper(), urlsplit(exchange.uri).path)
        if key[0] in NON_IDEMPOTENT_METHODS and key not in found:
            found.append(key)
    return found
