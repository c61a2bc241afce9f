"""Every HTTP request a network tool's handler makes, each redirect hop
included, keeps to the session's network hosts while recording, replaying
and in fault cells.

The policy judges the URL argument; a server it allows may answer a
redirect to any host, and HTTP clients follow it with a request of their
own. Each such request passes through vcrpy's stubs, where it is judged
like the argument was (``hosts.parse_host``, ``permits_host``): outside,
it is refused before a byte leaves (PERMISSION_DENIED), and replay lists
it as a difference. Real servers on loopback addresses stand in for the
hosts: 127.0.0.1 and 127.0.0.3 are allowed, 127.0.0.2 is not, and
``localhost`` (another name of 127.0.0.1) is not either. Each server
counts the TCP connections it accepted: a refused hop opens none.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import urllib3
from http_tools import HopServer, hop, hop_servers

from pytest_toolguard import (
    Approver,
    Capabilities,
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, targets
from pytest_toolguard.replay import Cassette, load, record_session, replay
from pytest_toolguard.replay.http import (
    HttpPlayback,
    HttpRecording,
    confinement,
    host_refusal,
    redirect_refusal,
)

pytest.importorskip("vcr")

ALLOWED = ("127.0.0.1", "127.0.0.3")
RISKS = frozenset({Risk.READ, Risk.EXTERNAL})
CAPABILITIES = Capabilities(allowed_risks=RISKS, network_hosts=ALLOWED)
TIMEOUT = 5


# -- the clients, and a tool that fetches with each ---------------------------------


def _urllib(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310 - loopback
        return response.status, response.read()


def _requests(url: str) -> tuple[int, bytes]:
    response = requests.get(url, timeout=TIMEOUT)
    return response.status_code, response.content


def _httpx(url: str) -> tuple[int, bytes]:
    response = httpx.get(url, timeout=TIMEOUT, follow_redirects=True)
    return response.status_code, response.content


def _urllib3(url: str) -> tuple[int, bytes]:
    response = urllib3.PoolManager().request("GET", url, timeout=TIMEOUT)
    return response.status, response.data


CLIENTS: dict[str, Callable[[str], tuple[int, bytes]]] = {
    "urllib": _urllib,
    "requests": _requests,
    "httpx": _httpx,
    "urllib3": _urllib3,
}

SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string"}, "client": {"enum": sorted(CLIENTS)}},
    "required": ["url", "client"],
    "additionalProperties": False,
}


def _fetch(ctx: Any, url: str, client: str) -> dict[str, Any]:
    status, body = CLIENTS[client](url)
    return {"status": status, "body": json.loads(body) if body else None}


def _fetch_quietly(ctx: Any, url: str, client: str) -> dict[str, Any]:
    """A handler that swallows every error (the refusal too)."""
    try:
        return _fetch(ctx, url, client)
    except Exception as exc:  # noqa: BLE001 - what a careless tool does
        return {"status": 0, "error": type(exc).__name__}


def fetch_tool(handler: Callable[..., Any] = _fetch, *, names_host: bool = True) -> ToolSpec:
    return ToolSpec(
        "fetch",
        "GETs a URL with the client named",
        SCHEMA,
        handler,
        risk=Risk.EXTERNAL,
        network_host_argument="url" if names_host else None,
    )


def fetch(url: str, client: str, call_id: str = "1") -> ToolCall:
    return ToolCall(call_id, "fetch", {"url": url, "client": client})


def runtime_over(
    spec: ToolSpec, workspace: Path, capabilities: Capabilities = CAPABILITIES
) -> ToolRuntime:
    workspace.mkdir(exist_ok=True)
    return ToolRuntime(
        ToolRegistry([spec]), str(workspace), capabilities, hooks=[Approver(lambda e: True)]
    )


@dataclass
class Hosts:
    """The machines: ``a`` and ``b`` allowed, ``evil`` not; ``other`` is
    on an allowed address (127.0.0.1), reached by another name or port."""

    a: HopServer
    b: HopServer
    evil: HopServer
    other: HopServer


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    with hop_servers("127.0.0.1", "127.0.0.3", "127.0.0.2", "127.0.0.1") as servers:
        yield Hosts(*servers)


def record_one(
    tmp_path: Path, spec: ToolSpec, url: str, client: str, capabilities: Capabilities = CAPABILITIES
) -> tuple[Any, list[Any]]:
    """One call recorded with ``HttpRecording``: its result and the
    requests refused for their host."""
    runtime = runtime_over(spec, tmp_path / "ws", capabilities)
    recording = HttpRecording.attach(runtime)
    assert recording is not None
    try:
        result = runtime.execute(fetch(url, client))
        refused = recording.refused()
    finally:
        recording.detach()
        runtime.close()
    return result, refused


# -- recording: a hop outside never leaves -----------------------------------------

# (id, the first URL from the servers, the server that must see no connection;
#  or None when every hop is allowed, with the server that serves the end)
OUTSIDE: list[tuple[str, Callable[[Hosts], str], str]] = [
    ("absolute URL to another host", lambda h: hop(h.a, h.evil.url()), "evil"),
    (
        "another name of an allowed address",
        lambda h: hop(h.a, h.other.url(host="localhost")),
        "other",
    ),
    (
        "userinfo naming an allowed host",
        lambda h: hop(h.a, f"http://127.0.0.1@127.0.0.2:{h.evil.port}/final"),
        "evil",
    ),
    (
        "userinfo with the allowed host and port",
        lambda h: hop(h.a, f"http://127.0.0.1:{h.a.port}@127.0.0.2:{h.evil.port}/final"),
        "evil",
    ),
    ("protocol-relative URL", lambda h: hop(h.a, f"//127.0.0.2:{h.evil.port}/final"), "evil"),
    ("https to another host", lambda h: hop(h.a, f"https://127.0.0.2:{h.evil.port}/"), "evil"),
    (
        "decimal IPv4 of another host",
        lambda h: hop(h.a, f"http://2130706434:{h.evil.port}/"),
        "evil",
    ),
    (
        "chain allowed, allowed, outside",
        lambda h: hop(h.a, hop(h.b, h.evil.url(), 307), 301),
        "evil",
    ),
    (
        "chain through another name",
        lambda h: hop(h.a, hop(h.b, h.other.url(host="localhost"), 303), 308),
        "other",
    ),
]


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    ("first", "watched"), [(f, w) for _, f, w in OUTSIDE], ids=[i for i, _, _ in OUTSIDE]
)
def test_a_redirect_hop_outside_the_network_hosts_is_refused_before_it_connects(
    tmp_path: Path, hosts: Hosts, client: str, first: Callable[[Hosts], str], watched: str
) -> None:
    result, refused = record_one(tmp_path, fetch_tool(), first(hosts), client)

    assert getattr(hosts, watched).connections == 0
    assert result.code is ErrorCode.PERMISSION_DENIED, result.message
    assert [r.method for r in refused] == ["GET"]
    assert refused[0].why.startswith("refused: ") and refused[0].why.endswith("; not sent")


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_every_redirect_status_to_another_host_is_refused(
    tmp_path: Path, hosts: Hosts, client: str, status: int
) -> None:
    result, refused = record_one(
        tmp_path, fetch_tool(), hop(hosts.a, hosts.evil.url(), status), client
    )

    assert hosts.evil.connections == 0
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert len(refused) == 1 and "host 127.0.0.2 is not among" in refused[0].why


# (id, the first URL, the server that serves the end)
INSIDE: list[tuple[str, Callable[[Hosts], str], str]] = [
    ("relative Location", lambda h: hop(h.a, "/final"), "a"),
    ("absolute URL to another allowed host", lambda h: hop(h.a, h.b.url()), "b"),
    (
        "another port of an allowed host (the list names hosts, not ports)",
        lambda h: hop(h.a, h.other.url()),
        "other",
    ),
    ("chain allowed, allowed, allowed", lambda h: hop(h.a, hop(h.b, h.a.url(), 307)), "a"),
]


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    ("first", "end"), [(f, e) for _, f, e in INSIDE], ids=[i for i, _, _ in INSIDE]
)
def test_a_redirect_within_the_network_hosts_is_followed_and_recorded(
    tmp_path: Path, hosts: Hosts, client: str, first: Callable[[Hosts], str], end: str
) -> None:
    server = getattr(hosts, end)
    result, refused = record_one(tmp_path, fetch_tool(), first(hosts), client)

    assert result.code is ErrorCode.OK, result.message
    assert result.data["body"]["server"] == server.name
    assert refused == []
    assert hosts.evil.connections == 0


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_redirect_to_ftp_on_another_host_never_connects(
    tmp_path: Path, hosts: Hosts, client: str
) -> None:
    # urllib follows ftp:// through ftplib, which vcrpy does not see: the
    # redirect itself is withheld. The other clients refuse the scheme.
    url = hop(hosts.a, f"ftp://127.0.0.2:{hosts.evil.port}/x")
    result, refused = record_one(tmp_path, fetch_tool(), url, client)

    assert hosts.evil.connections == 0
    assert not result.ok
    if client == "urllib":
        assert result.code is ErrorCode.PERMISSION_DENIED
        assert "redirects to ftp://" in refused[0].why


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_handler_swallowing_the_refusal_still_sends_nothing(
    tmp_path: Path, hosts: Hosts, client: str
) -> None:
    spec = fetch_tool(_fetch_quietly)
    result, refused = record_one(tmp_path, spec, hop(hosts.a, hosts.evil.url()), client)

    assert hosts.evil.connections == 0
    assert result.data == {"status": 0, "error": "HostRefused"}
    assert len(refused) == 1


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_tool_naming_no_host_is_confined_when_the_session_lists_hosts(
    tmp_path: Path, hosts: Hosts, client: str
) -> None:
    spec = fetch_tool(names_host=False)
    result, _ = record_one(tmp_path, spec, hop(hosts.a, hosts.evil.url()), client)

    assert hosts.evil.connections == 0
    assert result.code is ErrorCode.PERMISSION_DENIED


def _fetch_on_a_thread(ctx: Any, url: str, client: str) -> dict[str, Any]:
    """A handler whose request runs on a thread it started (no context
    of the run's: it is told by being the only run)."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome.update(_fetch(ctx, url, client))
        except Exception as exc:  # noqa: BLE001 - reported in the result
            outcome["error"] = type(exc).__name__

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return outcome


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_hop_made_on_a_thread_the_handler_started_is_refused(
    tmp_path: Path, hosts: Hosts, client: str
) -> None:
    spec = fetch_tool(_fetch_on_a_thread)
    result, refused = record_one(tmp_path, spec, hop(hosts.a, hosts.evil.url()), client)

    assert hosts.evil.connections == 0
    assert result.data == {"error": "HostRefused"}
    assert len(refused) == 1


def test_a_tool_naming_no_host_in_a_session_listing_none_is_not_confined(
    tmp_path: Path, hosts: Hosts
) -> None:
    # Where the promise stops: no allow-list was given at all.
    spec = fetch_tool(names_host=False)
    caps = Capabilities(allowed_risks=RISKS)
    result, refused = record_one(tmp_path, spec, hop(hosts.a, hosts.evil.url()), "urllib", caps)

    assert result.code is ErrorCode.OK
    assert hosts.evil.paths == ["/final"]
    assert refused == []


# -- replay: a hop outside is refused and reported --------------------------------


def record_cassette(
    tmp_path: Path, url: str, client: str, capabilities: Capabilities = CAPABILITIES
) -> Cassette:
    path = tmp_path / "c.yaml"
    runtime = runtime_over(fetch_tool(), tmp_path / "ws", capabilities)
    with record_session(runtime, path):
        runtime.execute(fetch(url, client))
    runtime.close()
    return load(path)


def refused_differences(report: Any) -> list[Any]:
    return [
        d
        for d in report.differences
        if d.field == "http request" and "not among the allowed network hosts" in str(d.replayed)
    ]


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_hop_refused_while_recording_is_refused_and_reported_in_replay(
    tmp_path: Path, hosts: Hosts, client: str
) -> None:
    cassette = record_cassette(tmp_path, hop(hosts.a, hosts.evil.url()), client)

    report = replay(cassette, ToolRegistry([fetch_tool()]))

    assert [r.code for r in report.results] == [ErrorCode.PERMISSION_DENIED]
    assert [d.where for d in refused_differences(report)] == ["interaction 1 (fetch)"]
    assert hosts.evil.connections == 0


def confined_again(cassette: Cassette, hosts: tuple[str, ...] = ("127.0.0.1",)) -> Cassette:
    """``cassette`` as if recorded in a session allowing only ``hosts``:
    what a cassette recorded without the hop check, or edited, holds."""
    caps = replace(cassette.session.capabilities, network_hosts=hosts)
    return replace(cassette, session=replace(cassette.session, capabilities=caps))


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    "to",
    [
        lambda h: h.evil.url(),
        lambda h: f"//127.0.0.2:{h.evil.port}/final",
        lambda h: hop(h.b, h.evil.url(), 307),
    ],
    ids=["absolute", "protocol-relative", "chain"],
)
def test_a_recorded_hop_outside_the_network_hosts_is_never_served(
    tmp_path: Path, hosts: Hosts, client: str, to: Callable[[Hosts], str]
) -> None:
    wide = replace(CAPABILITIES, network_hosts=(*ALLOWED, "127.0.0.2"))
    recorded = record_cassette(tmp_path, hop(hosts.a, to(hosts)), client, wide)
    assert recorded.interactions[0].result.code == "OK"  # the hop was recorded
    hostile = confined_again(recorded, ALLOWED)

    report = replay(hostile, ToolRegistry([fetch_tool()]))

    assert [r.code for r in report.results] == [ErrorCode.PERMISSION_DENIED]
    assert len(refused_differences(report)) == 1
    assert not report.ok


def ftp_cassette(tmp_path: Path, hosts: Hosts) -> Cassette:
    """A cassette whose recorded redirect leads to ftp:// on 127.0.0.2 (a
    relative redirect recorded, then its Location edited)."""
    recorded = record_cassette(tmp_path, hop(hosts.a, "/final"), "urllib")
    first = recorded.interactions[0]
    redirect = first.http[0]
    location = f"ftp://127.0.0.2:{hosts.evil.port}/x"
    edited = replace(
        redirect, response_headers={**redirect.response_headers, "Location": (location,)}
    )
    return replace(recorded, interactions=(replace(first, http=(edited,)),))


def test_a_recorded_redirect_to_ftp_elsewhere_is_withheld_in_replay(
    tmp_path: Path, hosts: Hosts
) -> None:
    report = replay(ftp_cassette(tmp_path, hosts), ToolRegistry([fetch_tool()]))

    assert hosts.evil.connections == 0
    assert [r.code for r in report.results] == [ErrorCode.PERMISSION_DENIED]
    assert [d.where for d in report.differences if "redirects to ftp://" in str(d.replayed)] == [
        "interaction 1 (fetch)"
    ]


# -- fault cells ------------------------------------------------------------------


def test_no_fault_cell_connects_through_a_recorded_redirect_to_ftp(
    tmp_path: Path, hosts: Hosts
) -> None:
    cassette = ftp_cassette(tmp_path, hosts)
    registry = ToolRegistry([fetch_tool()])

    for fault in BUILTIN_FAULTS:
        for target in targets(cassette, registry, "c.yaml"):
            run_cell(fault, target, registry)

    assert hosts.evil.connections == 0


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    "location",
    [
        lambda h: h.evil.url(),
        lambda h: f"ftp://127.0.0.2:{h.evil.port}/x",
        lambda h: f"http://127.0.0.1@127.0.0.2:{h.evil.port}/",
    ],
    ids=["http", "ftp", "userinfo"],
)
def test_a_fault_answering_a_redirect_outside_is_refused(
    tmp_path: Path, hosts: Hosts, client: str, location: Callable[[Hosts], str]
) -> None:
    cassette = record_cassette(tmp_path, hosts.a.url(), client)
    playback = HttpPlayback(cassette.interactions, repeats=True)
    runtime = ToolRuntime(
        playback.registry(ToolRegistry([fetch_tool()])),
        str(tmp_path / "ws"),
        CAPABILITIES,
        hooks=[Approver(lambda e: True)],
    )

    def redirect(request: Any, response: dict[str, Any]) -> dict[str, Any]:
        headers = {"Location": [location(hosts)], "Content-Length": ["0"]}
        return {
            "status": {"code": 302, "message": "Found"},
            "headers": headers,
            "body": {"string": b""},
        }

    playback.current = 0
    with playback.injected(redirect):
        result = runtime.execute(fetch(hosts.a.url(), client))
    runtime.close()
    playback.close()

    assert hosts.evil.connections == 0
    assert not result.ok
    if client == "urllib" or "ftp" not in location(hosts):
        assert result.code is ErrorCode.PERMISSION_DENIED
        assert len(playback.refused()) == 1


# -- the rules, one by one -------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:8080/x", True),
        ("https://127.0.0.3/x", True),
        ("http://127.0.0.2/x", False),
        ("http://localhost/x", False),
        ("http://127.0.0.1@127.0.0.2/x", False),
        ("http://127.0.0.1:80\\@127.0.0.2/x", False),
        ("http://2130706434/", False),
        ("http://127.1/", False),
        ("http:///x", False),
        ("http://::1:8080/x", False),  # vcrpy's unbracketed IPv6: cannot be judged
    ],
)
def test_host_refusal_judges_a_request_url_as_the_policy_judges_an_argument(
    url: str, allowed: bool
) -> None:
    assert (host_refusal(url, CAPABILITIES) is None) is allowed


@pytest.mark.parametrize(
    ("status", "location", "refused"),
    [
        (302, "ftp://127.0.0.2/x", True),
        (301, "FTP://127.0.0.2/x", True),
        (307, "gopher://127.0.0.2/", True),
        (302, "ftp://127.0.0.1/x", False),  # another scheme, an allowed host
        (302, "http://127.0.0.2/x", False),  # judged when (if) it is requested
        (302, "//127.0.0.2/x", False),  # the same: it keeps the request's scheme
        (302, "/x", False),
        (302, "mailto:someone@127.0.0.2", False),  # no host to connect to
        (200, "ftp://127.0.0.2/x", False),  # not a redirect
    ],
)
def test_redirect_refusal_withholds_only_what_no_request_check_would_see(
    status: int, location: str, refused: bool
) -> None:
    response = {"status": {"code": status}, "headers": {"location": [location]}}

    assert (redirect_refusal("http://127.0.0.1/a", response, CAPABILITIES) is not None) is refused


def test_confinement_follows_the_tool_and_the_session() -> None:
    named, unnamed = fetch_tool(), fetch_tool(names_host=False)
    listing, listing_none = CAPABILITIES, Capabilities(allowed_risks=RISKS)

    assert confinement(named, listing) is listing
    assert confinement(unnamed, listing) is listing
    assert confinement(named, listing_none) is listing_none
    assert confinement(unnamed, listing_none) is None
    unknown = confinement(named, None)  # no capabilities known: no host allowed
    assert unknown is not None and unknown.network_hosts == ()
