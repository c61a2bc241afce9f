"""A redirect to a host outside the network hosts must not be followed
(``http_redirect``).

The policy judges the URL a tool is given; the server may answer with a
redirect anywhere, and most clients follow it (urllib and requests by
default). In a cell the hop is refused before it is served (as in
recording: ``tests/adversarial/test_security_redirects.py``), and the
fault reports the handler that made it: outside the harness nothing would
have stopped it.

Catch table (twin: cell, problem):

==================  ==========================================================================
broken twin         caught by
==================  ==========================================================================
urllib_default      http_redirect: HTTP 301 to redirected.invalid: the handler followed the
                    redirect off its network hosts (127.0.0.1): GET http://redirected.invalid/
                    status (and 302, 307, 308)
requests_default    the same (requests follows by default)
manual_location     the same (http.client, Location followed by hand)
httpx_following     the same (httpx, follow_redirects=True; and the async client, in an
                    ``async def`` tool: httpx_async_following)
==================  ==========================================================================
"""

from __future__ import annotations

import http.client
import json
import urllib.request
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
import requests
from http_tools import OPENER

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.hosts import parse_host
from pytest_toolguard.registry import ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import loads

pytest.importorskip("vcr")

URL = "http://127.0.0.1:9/status"
SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string"}},
    "required": ["url"],
    "additionalProperties": False,
}
RECORDED = {"status": 200, "body": {"healthy": True}}


def case(network_hosts: str = '["127.0.0.1"]') -> str:
    return f"""
format_version: 1
kind: case
session:
  capabilities:
    allowed_risks: [read, external]
    network_hosts: {network_hosts}
interactions:
  - call:
      call_id: call-01
      tool_name: fetch_status
      arguments: {{"url": "{URL}"}}
    approval: {{rule: hook.approver}}
    result:
      ok: true
      code: OK
      data: {json.dumps(RECORDED)}
    http:
      - request: {{method: GET, uri: "{URL}"}}
        response:
          status: {{code: 200, message: OK}}
          headers: {{Content-Type: [application/json]}}
          body: '{{"healthy": true}}'
"""


def session() -> requests.Session:
    made = requests.Session()
    made.trust_env = False  # no ~/.netrc: outside the workspace
    return made


def _http_client_get(url: str) -> tuple[int, str | None, bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
    try:
        connection.request("GET", parts.path or "/")
        response = connection.getresponse()
        return response.status, response.getheader("Location"), response.read()
    finally:
        connection.close()


# -- broken twins: follow the redirect wherever it leads -----------------------------


def urllib_default(ctx: Any, url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - replayed
        return {"status": response.status, "body": json.loads(response.read())}


def requests_default(ctx: Any, url: str) -> dict[str, Any]:
    response = session().get(url, timeout=2)
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


def manual_location(ctx: Any, url: str) -> dict[str, Any]:
    status, location, raw = _http_client_get(url)
    for _hop in range(5):
        if not (300 <= status < 400 and location):
            break
        url = urljoin(url, location)
        status, location, raw = _http_client_get(url)
    if status >= 400:
        raise RuntimeError(f"HTTP {status}")
    return {"status": status, "body": json.loads(raw)}


def httpx_following(ctx: Any, url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=2, follow_redirects=True, trust_env=False)
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


async def httpx_async_following(ctx: Any, url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(follow_redirects=True, trust_env=False) as client:
        response = await client.get(url, timeout=2)
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


# -- correct twins: never leave the hosts ---------------------------------------------


def urllib_no_redirects(ctx: Any, url: str) -> dict[str, Any]:
    with OPENER.open(url, timeout=2) as response:  # a 3xx raises HTTPError
        return {"status": response.status, "body": json.loads(response.read())}


def requests_not_following(ctx: Any, url: str) -> dict[str, Any]:
    response = session().get(url, timeout=2, allow_redirects=False)
    if response.status_code != 200:
        return {"status": response.status_code, "body": None}
    return {"status": 200, "body": response.json()}


def manual_location_within_hosts(ctx: Any, url: str) -> dict[str, Any]:
    status, location, raw = _http_client_get(url)
    for _hop in range(5):
        if not (300 <= status < 400 and location):
            break
        url = urljoin(url, location)
        host = parse_host(url)
        if host is None or not ctx.capabilities.permits_host(host):
            raise PermissionError(f"redirected to {host}, outside the network hosts")
        status, location, raw = _http_client_get(url)
    if status >= 400:
        raise RuntimeError(f"HTTP {status}")
    return {"status": status, "body": json.loads(raw)}


async def httpx_async_not_following(ctx: Any, url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(url, timeout=2)
    response.raise_for_status()  # a 3xx raises too
    return {"status": response.status_code, "body": response.json()}


def fetch_status(handler: Any) -> ToolSpec:
    made: ToolSpec = tool(
        name="fetch_status", input_schema=SCHEMA, risk=Risk.EXTERNAL, network_host_argument="url"
    )(handler)
    return made


def run(handler: Any, fault: str = "http_redirect", text: str | None = None) -> CellOutcome:
    registry = ToolRegistry([fetch_status(handler)])
    cassette = loads(text or case(), source="<fetch_status>")
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)


BROKEN = [
    pytest.param(urllib_default, id="urllib-default"),
    pytest.param(requests_default, id="requests-default"),
    pytest.param(manual_location, id="manual-location"),
    pytest.param(httpx_following, id="httpx-follow"),
    pytest.param(httpx_async_following, id="httpx-async-follow"),
]
CORRECT = [
    pytest.param(urllib_no_redirects, id="urllib-no-redirects"),
    pytest.param(requests_not_following, id="requests-not-following"),
    pytest.param(manual_location_within_hosts, id="manual-within-hosts"),
    pytest.param(httpx_async_not_following, id="httpx-async-not-following"),
]


@pytest.mark.parametrize("handler", BROKEN)
def test_a_tool_following_a_redirect_off_its_hosts_is_caught(handler: Any) -> None:
    outcome = run(handler)

    assert outcome.status == "fail", outcome
    followed = [p for p in outcome.problems if "followed the redirect off its network hosts" in p]
    assert [p.split(":")[0] for p in followed] == [
        f"HTTP {code} to redirected.invalid" for code in (301, 302, 307, 308)
    ], outcome.problems
    assert all("GET http://redirected.invalid/status" in p for p in followed)


@pytest.mark.parametrize("handler", CORRECT)
@pytest.mark.parametrize("fault", ["http_redirect", "http_error", "network_error"])
def test_a_tool_keeping_to_its_hosts_passes(handler: Any, fault: str) -> None:
    outcome = run(handler, fault)

    assert outcome.status == "pass", outcome.problems


def test_a_tool_not_following_but_claiming_the_recorded_success_is_caught() -> None:
    def swallows(ctx: Any, url: str) -> dict[str, Any]:
        try:
            return urllib_no_redirects(ctx, url)
        except OSError:
            return {"status": 200, "body": {}}

    outcome = run(swallows)

    assert outcome.status == "fail"
    assert any("claiming success (status: 200, as recorded)" in p for p in outcome.problems)


def test_an_unconfined_run_has_nothing_to_judge() -> None:
    # No host listed and none named: every host is the tool's to reach.
    def unnamed(handler: Any) -> ToolSpec:
        made: ToolSpec = tool(name="fetch_status", input_schema=SCHEMA, risk=Risk.EXTERNAL)(handler)
        return made

    registry = ToolRegistry([unnamed(urllib_default)])
    cassette = loads(case("[]"), source="<fetch_status>")
    (chosen,) = select_faults("http_redirect")

    outcome = run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry)

    assert outcome.status == "n/a"


def test_the_redirect_leads_to_a_host_the_session_does_not_allow() -> None:
    # A session allowing every .invalid name is sent to a documentation address.
    outcome = run(urllib_default, text=case('["127.0.0.1", "*.invalid"]'))

    assert any("GET http://192.0.2.1/status" in p for p in outcome.problems), outcome.problems


def test_a_redirect_followed_in_the_directory_world_is_caught(tmp_path: Any) -> None:
    registry = ToolRegistry([fetch_status(urllib_default)])
    cassette = loads(case(), source="<fetch_status>")
    (chosen,) = select_faults("http_redirect")
    target = targets(cassette, registry, cassette.source)[0]

    outcome = run_cell(chosen, target, registry, world="directory", parent=str(tmp_path))

    assert sum("followed the redirect" in p for p in outcome.problems) == 4, outcome
