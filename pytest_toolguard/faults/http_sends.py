"""What a call sent over HTTP, judged in every fault cell that serves
recorded exchanges: a POST, PATCH or DELETE sent more often than the call
recorded it.

A service acts on each non-idempotent request it receives; a client that
sends one again (a retry loop on a 5xx, a retry after a timeout) may make
it act twice, unless every sending carried the same idempotency key, by
which the service tells a retry from a new request (in a header,
``Idempotency-Key``, or a field of a JSON body, ``client_token``). So, per
call (its handler runs, by call id), every sending of one method and URL
path that may have reached the service is counted against the call's
recorded exchanges; one no recorded exchange matched (a retry with
another query) counts too: outside the harness it would have been sent.
A sending the service is known not to have acted on is not counted: one
answered 429 or 503 (Too Many Requests, Service Unavailable: refused
before anything was done) or refused a connection (nothing was sent). What each sending was answered
comes from the playback (``replay.http_exchange.ServedRequest``), so the
judgement holds whatever fault changed the answers, and whatever client
made the requests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from urllib.parse import urlsplit

from ..replay.cassette import HttpExchange
from ..replay.http_exchange import ServedRequest

NON_IDEMPOTENT_METHODS = frozenset({"POST", "PATCH", "DELETE"})
"""The methods whose request, sent twice, may act twice: a retry of one is
safe only when the service can tell it is a retry (an idempotency key)."""

IDEMPOTENCY_HEADER = re.compile(r"idempoten|^paypal-request-id$", re.IGNORECASE)
"""Headers that carry an idempotency key: ``Idempotency-Key`` (the IETF
draft, Stripe, Adyen), ``X-Idempotency-Key``, ``Idempotency-Token``,
``PayPal-Request-Id``, ..."""

IDEMPOTENCY_FIELD = re.compile(
    r"idempoten|client_?token|client_?request_?id|^request_?id$|dedup", re.IGNORECASE
)
"""Fields of a JSON body that carry an idempotency key: ``idempotency_key``
(Square), ``ClientToken`` (AWS), ``requestId`` (Google), ..."""

NOT_ACTED_STATUSES = frozenset({429, 503})
"""Answers saying the service refused the request before acting on it:
429 Too Many Requests, 503 Service Unavailable (with ``Retry-After``, an
invitation to send it again later, which a careful client accepts)."""

NOT_SENT_ERRORS = frozenset({"ConnectionRefusedError"})
"""Failures before any byte of the request reached the service."""


def may_have_acted(request: ServedRequest) -> bool:
    """Whether the service may have acted on ``request``: anything but a
    429 or 503 answer or a refused connection (a request no recorded exchange
    answered would have been sent: it may have)."""
    if not request.answered:
        return True
    if request.status is not None:
        return request.status not in NOT_ACTED_STATUSES
    return request.raised not in NOT_SENT_ERRORS


def keys_of(request: ServedRequest) -> tuple[tuple[str, str], ...]:
    """Its idempotency headers (``IDEMPOTENCY_HEADER``) and JSON body
    fields (``IDEMPOTENCY_FIELD``): names and digests of the values."""
    headers = [(name, value) for name, value in request.headers if IDEMPOTENCY_HEADER.search(name)]
    fields = [
        (name, value) for name, value in request.body_fields if IDEMPOTENCY_FIELD.search(name)
    ]
    return tuple(headers + fields)


def resent(served: Sequence[ServedRequest], recorded: Sequence[HttpExchange]) -> list[str]:
    """One line per call and non-idempotent request (method and URL path:
    a query or the host may be spelt otherwise) sent, where the service may
    have acted on it (``may_have_acted``), more often than ``recorded``
    holds it (and more than once), unless every such sending carried the same idempotency key.
    The line names the call, the request, how often, and whether an
    idempotency header was sent."""
    allowed = Counter((e.method.upper(), urlsplit(e.uri).path) for e in recorded)
    groups: dict[tuple[str, str, str], list[ServedRequest]] = {}
    for request in served:
        if request.method in NON_IDEMPOTENT_METHODS and may_have_acted(request):
            path = urlsplit(request.uri).path
            groups.setdefault((request.call_id, request.method, path), []).append(request)
    problems = []
    for (call_id, method, path), sendings in groups.items():
        limit = max(1, allowed[(method, path)])  # a path spelt otherwise in this world
        if len(sendings) <= limit:
            continue
        keyed = {keys_of(request) for request in sendings}
        if len(keyed) == 1 and keys_of(sendings[0]):
            continue  # the same key each time: the service can tell a retry
        names = sorted({name for request in sendings for name, _ in keys_of(request)})
        if names:
            how = f"with another {'/'.join(names)} value each time or not at all"
        else:
            how = "without an idempotency header (Idempotency-Key)"
        where = f"{call_id}: " if call_id else ""
        problems.append(
            f"{where}{method} {sendings[0].uri} sent {len(sendings)} times in one call "
            f"(recorded {limit}), {how}: the service may have acted on each"
        )
    return problems
