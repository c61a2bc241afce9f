"""A recorded POST, PATCH or DELETE whose answer comes after the client's
timeout (``late_response``): a tool that sends it again without an
idempotency key, or with another key each time, is reported; one that
does not retry, or retries with one key, passes. ``network_error``'s
timeout judges the same way."""

from __future__ import annotations

import hashlib
import http.client
import json
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import loads

URL = "http://127.0.0.1:9/refunds"
SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["url", "amount"],
    "additionalProperties": False,
}
ARGUMENTS = {"url": URL, "amount": 40}


def case(method: str) -> str:
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
      tool_name: refund
      arguments: {json.dumps(ARGUMENTS)}
    approval: {{rule: hook.approver}}
    result:
      ok: true
      code: OK
    http:
      - request: {{method: {method}, uri: "{URL}"}}
        response:
          status: {{code: 201, message: Created}}
          headers: {{Content-Type: [application/json]}}
          body: '{{"refund": "re_1", "status": "done"}}'
"""


def send(method: str, url: str, amount: int, headers: dict[str, str]) -> dict[str, Any]:
    body = json.dumps({"amount": amount}).encode()
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=2) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def stable_key(url: str, amount: int) -> str:
    return hashlib.sha256(f"{url}|{amount}".encode()).hexdigest()[:32]


def retrying(method: str, header: str | None, key: Callable[[str, int], str]) -> Any:
    def handler(ctx: Any, url: str, amount: int) -> dict[str, Any]:
        for attempt in range(3):
            headers = {"Content-Type": "application/json"}
            if header is not None:
                headers[header] = key(url, amount)
            try:
                return send(method, url, amount, headers)
            except TimeoutError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    return handler


def once(method: str) -> Any:
    def handler(ctx: Any, url: str, amount: int) -> dict[str, Any]:
        return send(method, url, amount, {"Content-Type": "application/json"})

    return handler


def retrying_http_client(ctx: Any, url: str, amount: int) -> dict[str, Any]:
    """The same bug through http.client, retrying on any OSError."""
    parts = urlsplit(url)
    for _attempt in range(3):
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
        try:
            connection.request("POST", parts.path, json.dumps({"amount": amount}))
            answer: dict[str, Any] = json.loads(connection.getresponse().read())
            return answer
        except OSError:
            continue
        finally:
            connection.close()
    raise OSError("refund failed")


def fresh_key(url: str, amount: int) -> str:
    return uuid.uuid4().hex


def refund(handler: Any) -> ToolSpec:
    made: ToolSpec = tool(
        name="refund", input_schema=SCHEMA, risk=Risk.EXTERNAL, network_host_argument="url"
    )(handler)
    return made


def run(fault: str, handler: Any, method: str = "POST") -> CellOutcome:
    registry = ToolRegistry([refund(handler)])
    cassette = loads(case(method), source=f"<refund {method}>")
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


BROKEN = [
    pytest.param("POST", retrying("POST", None, stable_key), "without an idempotency", id="post"),
    pytest.param(
        "PATCH", retrying("PATCH", None, stable_key), "without an idempotency", id="patch"
    ),
    pytest.param(
        "DELETE", retrying("DELETE", None, stable_key), "without an idempotency", id="delete"
    ),
    pytest.param(
        "POST",
        retrying("POST", "Idempotency-Key", fresh_key),
        "another Idempotency-Key value",
        id="new-key-each-time",
    ),
    pytest.param("POST", retrying_http_client, "without an idempotency", id="http-client"),
]
CORRECT = [
    pytest.param("POST", once("POST"), id="no-retry"),
    pytest.param("POST", retrying("POST", "Idempotency-Key", stable_key), id="one-key"),
    pytest.param("PATCH", retrying("PATCH", "X-Idempotency-Key", stable_key), id="x-key"),
    pytest.param("PUT", retrying("PUT", None, stable_key), id="put-is-idempotent"),
]


@pytest.mark.parametrize(("method", "handler", "how"), BROKEN)
def test_a_request_sent_again_after_a_late_answer_is_reported(
    method: str, handler: Any, how: str
) -> None:
    outcome = run("late_response", handler, method)

    assert outcome.status == "fail", outcome
    assert any(
        f"{method} http://127.0.0.1:9/refunds sent 2 times" in p and how in p
        for p in outcome.problems
    ), outcome.problems


@pytest.mark.parametrize(("method", "handler"), CORRECT)
def test_no_retry_or_a_retry_with_one_key_passes(method: str, handler: Any) -> None:
    outcome = run("late_response", handler, method)

    assert outcome.status == ("n/a" if method == "PUT" else "pass"), outcome.problems


@pytest.mark.parametrize(("method", "handler", "how"), BROKEN[:1])
def test_network_error_timeout_reports_the_retried_post_too(
    method: str, handler: Any, how: str
) -> None:
    outcome = run("network_error", handler, method)

    assert outcome.status == "fail", outcome
    assert any("network_error-3: POST" in p and "sent 3 times" in p for p in outcome.problems)


@pytest.mark.parametrize(("method", "handler"), CORRECT[:2])
def test_correct_tools_pass_the_other_http_faults(method: str, handler: Any) -> None:
    for fault in ("network_error", "http_error"):
        assert run(fault, handler, method).status == "pass", fault
