"""A failed HTTP exchange must yield a failure, or a result that says what
failed (``http_error``, ``network_error``: ``faults.http_claims``).

A tool that answers its recorded success shape to a 500 or a refused
connection tells the agent a message went out that never did. Judging
only "the data differs from the recorded data" let a tool through that
answers ``{"delivered": true}`` with another id. Each broken twin below
answers its success shape under a failure; each correct twin raises, or
answers data saying what failed.

Catch table (twin, client: cell, problem):

============================  ================================================================
broken twin                   caught by
============================  ================================================================
urllib_swallows_http_error    http_error: answered OK claiming success (delivered: true), as
(urllib)                      if the request had succeeded
http_client_ignores_status    http_error: claiming success (status: 'sent', as recorded)
(http.client)
requests_without_raise        http_error: claiming success (delivered: true), though it says
(requests)                    http_status 500 too
urllib_swallows_os_error      network_error: claiming success (delivered: true)
(urllib)
httpx_says_nothing (httpx)    http_error: with data that does not say what failed
============================  ================================================================
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import requests

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.http_claims import false_success
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import loads

pytest.importorskip("vcr")

URL = "http://127.0.0.1:9/messages"
SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string"}, "text": {"type": "string"}},
    "required": ["url", "text"],
    "additionalProperties": False,
}
ARGUMENTS = {"url": URL, "text": "hello"}
DELIVERED = {"delivered": True, "id": "m1"}
SENT = {"status": "sent", "id": "m1"}


def case(data: Any) -> str:
    return f"""
format_version: 1
kind: case
session:
  capabilities:
    allowed_risks: [read, external]
    network_hosts: ["127.0.0.1"]
interactions:
  - call:
      call_id: call-01
      tool_name: send_message
      arguments: {json.dumps(ARGUMENTS)}
    approval: {{rule: hook.approver}}
    result:
      ok: true
      code: OK
      data: {json.dumps(data)}
    http:
      - request: {{method: POST, uri: "{URL}"}}
        response:
          status: {{code: 201, message: Created}}
          headers: {{Content-Type: [application/json]}}
          body: '{{"id": "m1"}}'
"""


def session() -> requests.Session:
    """A requests session that reads no ``~/.netrc`` and no CA bundle from
    the environment (outside the workspace, where a cell forbids access)."""
    made = requests.Session()
    made.trust_env = False
    return made


def body(text: str) -> bytes:
    return json.dumps({"text": text}).encode()


def _urllib_post(url: str, text: str) -> dict[str, Any]:
    request = urllib.request.Request(url, data=body(text), method="POST")
    with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310 - replayed
        answer: dict[str, Any] = json.loads(response.read())
    return answer


# -- broken twins: the success shape under a failure --------------------------------


def urllib_swallows_http_error(ctx: Any, url: str, text: str) -> dict[str, Any]:
    try:
        return {"delivered": True, "id": _urllib_post(url, text)["id"]}
    except urllib.error.HTTPError:
        return {"delivered": True, "id": None}


def http_client_ignores_status(ctx: Any, url: str, text: str) -> dict[str, Any]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
    try:
        connection.request("POST", parts.path, body(text))
        raw = connection.getresponse().read()
    finally:
        connection.close()
    try:
        sent_id = json.loads(raw).get("id")
    except ValueError:
        sent_id = None
    return {"status": "sent", "id": sent_id}


def requests_without_raise(ctx: Any, url: str, text: str) -> dict[str, Any]:
    response = session().post(url, data=body(text), timeout=2)
    return {"delivered": True, "http_status": response.status_code}


def urllib_swallows_os_error(ctx: Any, url: str, text: str) -> dict[str, Any]:
    try:
        return {"delivered": True, "id": _urllib_post(url, text)["id"]}
    except OSError:  # URLError, HTTPError, a reset: "it will go out later"
        return {"delivered": True, "queued": True}


def httpx_says_nothing(ctx: Any, url: str, text: str) -> dict[str, Any]:
    response = httpx.post(url, content=body(text), timeout=2)
    try:
        return {"id": response.json().get("id")}
    except ValueError:
        return {"id": None}


# -- correct twins: a failure, or data saying what failed ---------------------------


def urllib_raises(ctx: Any, url: str, text: str) -> dict[str, Any]:
    return {"delivered": True, "id": _urllib_post(url, text)["id"]}


def http_client_says_failed(ctx: Any, url: str, text: str) -> dict[str, Any]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
    try:
        connection.request("POST", parts.path, body(text))
        response = connection.getresponse()
        raw = response.read()
    except OSError as exc:
        return {"delivered": False, "error": type(exc).__name__}
    finally:
        connection.close()
    if response.status >= 400:
        return {"delivered": False, "error": f"HTTP {response.status} {response.reason}"}
    return {"delivered": True, "id": json.loads(raw)["id"]}


def requests_raise_for_status(ctx: Any, url: str, text: str) -> dict[str, Any]:
    response = session().post(url, data=body(text), timeout=2)
    response.raise_for_status()
    return {"delivered": True, "id": response.json()["id"]}


def httpx_returns_the_status(ctx: Any, url: str, text: str) -> dict[str, Any]:
    try:
        response = httpx.post(url, content=body(text), timeout=2)
    except httpx.HTTPError as exc:
        return {"status": "failed", "reason": str(exc)}
    if response.is_success:
        return {"status": "sent", "id": response.json()["id"]}
    return {"status": response.status_code, "body": response.text}


def send_message(handler: Any) -> ToolSpec:
    made: ToolSpec = tool(
        name="send_message", input_schema=SCHEMA, risk=Risk.EXTERNAL, network_host_argument="url"
    )(handler)
    return made


def run(fault: str, handler: Any, recorded: Any) -> CellOutcome:
    registry = ToolRegistry([send_message(handler)])
    cassette = loads(case(recorded), source="<send_message>")
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


BROKEN = [
    pytest.param(
        urllib_swallows_http_error, DELIVERED, "http_error", "claiming success (delivered: true)"
    ),
    pytest.param(
        http_client_ignores_status,
        SENT,
        "http_error",
        "claiming success (status: 'sent', as recorded)",
    ),
    pytest.param(
        requests_without_raise, DELIVERED, "http_error", "claiming success (delivered: true)"
    ),
    pytest.param(
        urllib_swallows_os_error, DELIVERED, "network_error", "claiming success (delivered: true)"
    ),
    pytest.param(
        httpx_says_nothing, {"id": "m1"}, "http_error", "data that does not say what failed"
    ),
]
CORRECT = [
    pytest.param(urllib_raises, DELIVERED),
    pytest.param(http_client_says_failed, DELIVERED),
    pytest.param(requests_raise_for_status, DELIVERED),
    pytest.param(httpx_returns_the_status, SENT),
]


@pytest.mark.parametrize(("handler", "recorded", "fault", "why"), BROKEN)
def test_a_tool_claiming_success_on_a_failed_exchange_is_caught(
    handler: Any, recorded: Any, fault: str, why: str
) -> None:
    outcome = run(fault, handler, recorded)

    assert outcome.status == "fail", outcome
    assert any(why in problem for problem in outcome.problems), outcome.problems


@pytest.mark.parametrize(("handler", "recorded"), CORRECT)
@pytest.mark.parametrize("fault", ["http_error", "network_error"])
def test_a_tool_failing_or_saying_what_failed_passes(
    handler: Any, recorded: Any, fault: str
) -> None:
    outcome = run(fault, handler, recorded)

    assert outcome.status == "pass", outcome.problems


@pytest.mark.parametrize(
    ("data", "message", "claims"),
    [
        ({"delivered": False, "error": "HTTP 500"}, "", False),
        ({"status": 503, "body": "Service Unavailable"}, "", False),
        ({"sent": False}, "", False),
        ({"result": {"ok": False}}, "", False),
        ({"stale": True, "weather": {"sunny": True}}, "", False),
        ("could not reach the service", "", False),
        ({"id": None}, "request failed: HTTP 500", False),
        ({"delivered": True, "error": "HTTP 500"}, "", True),  # a flag of success wins
        ({"status": "sent", "id": None}, "", True),  # the recorded status
        ({"error": "HTTP 500", "cache": {"ok": True}}, "", False),  # not the call's flag
        ({"result": {"ok": True}}, "", True),  # says nothing of the failure
        ({"status": "pending", "retry_after": 1}, "", False),
        ({"id": None}, "", True),  # says nothing of the failure
        (None, "", True),
        ({"isDelivered": True, "errorMessage": "HTTP 500"}, "", True),  # camelCase alike
        ({"messageId": None, "errorMessage": "HTTP 500"}, "", False),
        # A status the recorded success had, beside a field naming the
        # failure: a thing's state (a ticket still open), not a claim.
        ({"status": "sent", "stale": True, "error": "HTTP 503"}, "", False),
        # Words that look like failure in fields that carry no message.
        ({"queued": True, "amount": "450 EUR"}, "", True),
        ({"id": None, "link": "https://example.test/password-reset"}, "", True),
        ({"statusCode": 503}, "", False),
    ],
)
def test_false_success_reads_claims_and_words_of_failure(
    data: Any, message: str, claims: bool
) -> None:
    recorded = {"status": "sent", "id": "m1"}

    assert (false_success(data, message, recorded) is not None) is claims
