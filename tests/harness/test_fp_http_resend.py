"""A POST, PATCH or DELETE sent again within one call, where the service
may have acted on the first, is reported in every cell that serves HTTP
(``faults.http_sends``, checked by ``run_cell`` after each fault).

A retry loop on a 5xx or on a timeout re-sends a request the service may
already have acted on: a second refund, a second message. It is safe only
when every sending carries the same idempotency key, or when the service
said it did not act (429 Too Many Requests, 503 Service Unavailable; a
refused connection sends nothing).

Catch table (twin: cell, problem):

=============================  ===============================================================
broken twin                    caught by
=============================  ===============================================================
urllib_retries_5xx             http_error: http_error-2: POST ... sent 3 times in one call
                               (recorded 1), without an idempotency header (Idempotency-Key)
http_client_fresh_key_on_5xx   http_error: ... sent 3 times ..., with another
                               Idempotency-Key value each time or not at all
requests_retries_timeout       network_error: network_error-3: POST ... sent 3 times;
                               late_response: ... sent 2 times
urllib_retries_5xx_with_a_     http_error: ... sent 2 times (the retry, with ?attempt=1,
new_query                      matches no recorded exchange: it counts all the same)
requests_adapter_retrying_     http_error: ... sent 3 times (urllib3's Retry, POST allowed,
post                           inside one call of requests)
posts_twice                    every cell whose call runs the handler to its second POST
                               (timeout, duplicate_submission, oversized_output, ...)
=============================  ===============================================================
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from http_tools import OPENER
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import loads

pytest.importorskip("vcr")

URL = "http://127.0.0.1:9/charges"
SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["url", "amount"],
    "additionalProperties": False,
}
ARGUMENTS = {"url": URL, "amount": 40}
RECORDED = {"charged": True, "id": "ch_1"}
CASE = f"""
format_version: 1
kind: case
session:
  capabilities:
    allowed_risks: [read, external]
    network_hosts: ["127.0.0.1"]
interactions:
  - call:
      call_id: call-01
      tool_name: charge
      arguments: {json.dumps(ARGUMENTS)}
    approval: {{rule: hook.approver}}
    result:
      ok: true
      code: OK
      data: {json.dumps(RECORDED)}
    http:
      - request: {{method: POST, uri: "{URL}"}}
        response:
          status: {{code: 201, message: Created}}
          headers: {{Content-Type: [application/json]}}
          body: '{{"id": "ch_1"}}'
"""
TRIES = 3


def body(amount: int) -> bytes:
    return json.dumps({"amount": amount}).encode()


def stable_key(url: str, amount: int) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{url}#{amount}").hex


def _urllib_post(url: str, amount: int, headers: dict[str, str]) -> dict[str, Any]:
    """POST with urllib, following no redirect (``http_redirect`` judges that)."""
    request = urllib.request.Request(url, data=body(amount), method="POST", headers=headers)
    with OPENER.open(request, timeout=2) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return {"charged": True, "id": answer["id"]}


def _retrying_on(codes: range | tuple[int, ...], headers: Any) -> Any:
    """urllib, up to ``TRIES`` sendings while the answer is one of
    ``codes``; ``headers(url, amount)`` for each sending."""

    def handler(ctx: Any, url: str, amount: int) -> dict[str, Any]:
        for attempt in range(TRIES):
            try:
                return _urllib_post(url, amount, headers(url, amount))
            except urllib.error.HTTPError as exc:
                if exc.code not in codes or attempt == TRIES - 1:
                    raise
        raise AssertionError("unreachable")

    return handler


# -- broken twins ---------------------------------------------------------------------

urllib_retries_5xx = _retrying_on(range(500, 600), lambda url, amount: {})


def http_client_fresh_key_on_5xx(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    parts = urlsplit(url)
    for _attempt in range(TRIES):
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
        try:
            headers = {"Idempotency-Key": uuid.uuid4().hex}
            connection.request("POST", parts.path, body(amount), headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        if response.status < 500:
            break
    if response.status >= 400:
        raise RuntimeError(f"charge failed: HTTP {response.status}")
    return {"charged": True, "id": json.loads(raw)["id"]}


def requests_retries_timeout(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    session = requests.Session()
    session.trust_env = False  # no ~/.netrc: outside the workspace
    for attempt in range(TRIES):
        try:
            response = session.post(url, data=body(amount), timeout=2)
            break
        except (requests.Timeout, requests.ConnectionError):
            if attempt == TRIES - 1:
                raise
    response.raise_for_status()
    return {"charged": True, "id": response.json()["id"]}


def urllib_retries_5xx_with_a_new_query(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    for attempt in range(TRIES):
        try:
            return _urllib_post(f"{url}?attempt={attempt}" if attempt else url, amount, {})
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == TRIES - 1:
                raise
    raise AssertionError("unreachable")


def requests_adapter_retrying_post(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    # urllib3 retries inside one call of requests; POST is allowed to.
    retry = Retry(total=2, status_forcelist=[500], allowed_methods=None, backoff_factor=0)
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", HTTPAdapter(max_retries=retry))
    response = session.post(url, data=body(amount), timeout=2)
    response.raise_for_status()
    return {"charged": True, "id": response.json()["id"]}


def posts_twice(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    _urllib_post(url, amount, {})
    return _urllib_post(url, amount, {})


# -- correct twins --------------------------------------------------------------------

retries_5xx_with_one_key = _retrying_on(
    range(500, 600), lambda url, amount: {"Idempotency-Key": stable_key(url, amount)}
)
retries_429_only = _retrying_on((429,), lambda url, amount: {})
retries_when_asked_later = _retrying_on((429, 503), lambda url, amount: {})
"""Honours Retry-After: a 503 says the service did not handle the request."""


def retries_5xx_with_a_body_token(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    payload = json.dumps({"amount": amount, "client_token": stable_key(url, amount)}).encode()
    for attempt in range(TRIES):
        request = urllib.request.Request(url, data=payload, method="POST")
        try:
            with OPENER.open(request, timeout=2) as response:
                return {"charged": True, "id": json.loads(response.read())["id"]}
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == TRIES - 1:
                raise
    raise AssertionError("unreachable")


def retries_a_refused_connection_only(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    for attempt in range(TRIES):
        try:
            return _urllib_post(url, amount, {})
        except urllib.error.URLError as exc:
            refused = isinstance(exc.reason, ConnectionRefusedError)
            if not refused or attempt == TRIES - 1:
                raise
    raise AssertionError("unreachable")


def charge(handler: Any) -> ToolSpec:
    made: ToolSpec = tool(
        name="charge", input_schema=SCHEMA, risk=Risk.EXTERNAL, network_host_argument="url"
    )(handler)
    return made


def run(fault: str, handler: Any) -> CellOutcome:
    registry = ToolRegistry([charge(handler)])
    cassette = loads(CASE, source="<charge>")
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


BROKEN = [
    pytest.param(
        urllib_retries_5xx,
        "http_error",
        "http_error-2: POST http://127.0.0.1:9/charges sent 3 times in one call (recorded 1), "
        "without an idempotency header",
        id="urllib-5xx",
    ),
    pytest.param(
        http_client_fresh_key_on_5xx,
        "http_error",
        "sent 3 times in one call (recorded 1), with another Idempotency-Key value each time",
        id="http-client-fresh-key",
    ),
    pytest.param(
        requests_retries_timeout,
        "network_error",
        "network_error-3: POST http://127.0.0.1:9/charges sent 3 times",
        id="requests-timeout",
    ),
    pytest.param(
        urllib_retries_5xx_with_a_new_query,
        "http_error",
        "http_error-2: POST http://127.0.0.1:9/charges sent 2 times",  # the retry: no exchange
        id="urllib-5xx-new-query",
    ),
    pytest.param(
        requests_adapter_retrying_post,
        "http_error",
        "http_error-2: POST http://127.0.0.1:9/charges sent 3 times",
        id="urllib3-retry",
    ),
    pytest.param(
        requests_retries_timeout,
        "late_response",
        "sent 2 times in one call (recorded 1), without an idempotency header",
        id="requests-late-answer",
    ),
]
CORRECT = [
    pytest.param(retries_5xx_with_one_key, id="one-key"),
    pytest.param(retries_429_only, id="429-only"),
    pytest.param(retries_when_asked_later, id="429-and-503"),
    pytest.param(retries_a_refused_connection_only, id="refused-only"),
    pytest.param(retries_5xx_with_a_body_token, id="body-token"),
]
HTTP_FAULTS = ("http_error", "network_error", "late_response", "http_redirect")


@pytest.mark.parametrize(("handler", "fault", "problem"), BROKEN)
def test_a_request_sent_again_where_the_service_may_have_acted_is_reported(
    handler: Any, fault: str, problem: str
) -> None:
    outcome = run(fault, handler)

    assert outcome.status == "fail", outcome
    assert any(problem in line for line in outcome.problems), outcome.problems


@pytest.mark.parametrize("handler", CORRECT)
@pytest.mark.parametrize("fault", HTTP_FAULTS)
def test_a_retry_with_one_key_or_after_no_action_passes(handler: Any, fault: str) -> None:
    outcome = run(fault, handler)

    assert outcome.status == "pass", outcome.problems


def test_the_count_is_judged_in_every_cell_that_runs_the_handler() -> None:
    # Not one fault's oracle: a tool that always posts twice is reported by
    # faults that inject nothing into HTTP.
    reported = {
        fault.name
        for fault in BUILTIN_FAULTS
        if any(
            "POST http://127.0.0.1:9/charges sent 2 times" in p
            for p in run(fault.name, posts_twice).problems
        )
    }

    # (the HTTP faults fail its first POST: it never gets to the second)
    assert {"timeout", "duplicate_submission", "oversized_output", "response_lost"} <= reported


def test_the_count_is_judged_in_the_directory_world_too(tmp_path: Any) -> None:
    registry = ToolRegistry([charge(urllib_retries_5xx)])
    cassette = loads(CASE, source="<charge>")
    (chosen,) = select_faults("http_error")
    target = targets(cassette, registry, cassette.source)[0]

    outcome = run_cell(chosen, target, registry, world="directory", parent=str(tmp_path))

    assert any("http_error-2: POST" in p and "sent 3 times" in p for p in outcome.problems), outcome
