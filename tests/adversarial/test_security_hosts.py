"""The host allow-list judges a URL the way HTTP clients read it.

``urllib.parse`` takes the host after the last ``@`` and keeps ``\\`` as an
ordinary character; urllib3 (requests), httpx and WHATWG parsers end the
authority at ``\\``. With ``network_hosts=("api.good.com", "*.good.com")``,
``http://127.0.0.1:P\\@api.good.com/`` was allowed and reached 127.0.0.1.
The rule tested here, for a table of URLs: whatever the policy allows, every
client parser either refuses it or connects to an allowed host, the same one
the policy judged.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

import httpx
import pytest
import urllib3.util
from conftest import EVERY_RISK, spy_tool

from pytest_toolguard import Approver, Capabilities, ErrorCode, Risk, ToolCall
from pytest_toolguard.hosts import normalize_host, target_host

ALLOWED = ("api.good.com", "*.good.com", "xn--mnchen-3ya.de", "127.0.0.1", "[::1]")
CAPS = Capabilities(allowed_risks=EVERY_RISK, network_hosts=ALLOWED)

# (url, allowed by the policy?)
URLS: list[tuple[str, bool]] = [
    # the two of the finding
    ("http://127.0.0.1:8080\\@api.good.com/", False),
    ("http://localhost\\.good.com/", False),
    # backslashes anywhere
    ("http://evil.com\\\\api.good.com", False),
    ("http:\\\\api.good.com\\x", False),
    ("http://api.good.com\\@evil.com/", False),
    ("http://api.good.com/\\@evil.com", False),
    ("\\\\evil.com\\api.good.com", False),
    # userinfo: one '@' is read alike, several are not
    ("http://u:p@api.good.com/", True),
    ("http://api.good.com@evil.com/", False),
    ("http://api.good.com:80@evil.com/", False),
    ("http://a@b@api.good.com/", False),
    ("http://evil.com;@api.good.com/", True),
    ("http://evil.com#@api.good.com", False),
    ("http://evil.com?@api.good.com", False),
    ("http://evil.com/@api.good.com", False),
    # whitespace and control characters
    ("http://api.good.com\t.evil.com/", False),
    ("http://api.good.com\n.evil.com/", False),
    (" http://api.good.com/", False),
    ("http://api.good.com/ ", False),
    ("http://evil.com\x00.good.com/", False),
    ("http://api.good.com\x7f/", False),
    ("http://a\u00adpi.good.com/", False),
    ("http://api.good.com\u2028/", False),
    # percent-encoding in the host
    ("http://api%2egood.com/", False),
    ("http://evil.com%00.good.com/", False),
    ("http://evil.com%2f.good.com/", False),
    # schemes without '//'
    ("http:api.good.com", False),
    ("https:evil.com", False),
    ("http:///api.good.com", False),
    # ports
    ("http://api.good.com:443/", True),
    ("api.good.com:8443/v1", True),
    ("http://api.good.com:99999/", False),
    ("http://api.good.com:ab/", False),
    ("http://127.0.0.1:P\\@api.good.com/", False),
    # trailing dots and case
    ("http://API.GOOD.COM/", True),
    ("http://api.good.com./", True),
    ("http://x.good.com./", True),
    ("http://api.good.com../", False),
    ("http://.api.good.com/", False),
    ("http://good.com/", False),
    ("http://api.good.com.evil.com/", False),
    ("http://evilgood.com/", False),
    # IDNA
    ("http://münchen.de/", True),
    ("http://MÜNCHEN.DE/", True),
    ("http://xn--mnchen-3ya.de/", True),
    ("http://ａｐｉ.good.com/", False),
    ("http://faß.good.com/", False),
    ("http://evil.com\u3002good.com/", False),
    ("http://evil\uff0egood.com/", False),
    ("http://x.good.com\uff0f.evil.com/", False),
    ("http://api.good.co\u217f/", False),
    # IPv4 notations
    ("http://127.0.0.1/", True),
    ("http://127.0.0.1./", True),
    ("http://0x7f.1/", False),
    ("http://0x7f000001/", False),
    ("http://2130706433/", False),
    ("http://0177.0.0.1/", False),
    ("http://127.1/", False),
    ("http://127.0.1/", False),
    ("http://127.0.0.01/", False),
    ("http://1.2.3.4.5/", False),
    # IPv6
    ("http://[::1]:8080/", True),
    ("http://[0:0:0:0:0:0:0:1]/", True),
    ("http://[::ffff:127.0.0.1]/", False),
    ("http://[::ffff:7f00:1]/", False),
    ("http://[::1%25eth0]/", False),
    ("http://[api.good.com]/", False),
    ("http://[::1]x/", False),
    ("http://::1/", False),
    # bare hosts
    ("api.good.com", True),
    ("//api.good.com/x", True),
    ("evil.com", False),
]


def policy_host(url: str) -> str | None:
    return target_host(url)


def urllib_host(url: str) -> str | None:
    host = urllib.parse.urlsplit(url).hostname
    return None if host is None else host.encode("idna").decode("ascii")


def urllib3_host(url: str) -> str | None:
    return urllib3.util.parse_url(url).host


def httpx_host(url: str) -> str | None:
    return httpx.URL(url).raw_host.decode("ascii")  # what goes on the wire


CLIENTS: dict[str, Callable[[str], str | None]] = {
    "urllib": urllib_host,
    "urllib3": urllib3_host,
    "httpx": httpx_host,
}


def allowed_by_policy(url: str) -> bool:
    host = policy_host(url)
    return host is not None and CAPS.permits_host(host)


@pytest.mark.parametrize(("url", "expected"), URLS, ids=[repr(url) for url, _ in URLS])
def test_the_policy_allows_exactly_the_urls_it_can_judge(url: str, expected: bool) -> None:
    assert allowed_by_policy(url) is expected


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("url", [url for url, allowed in URLS if allowed], ids=repr)
def test_a_url_the_policy_allows_reaches_the_host_it_judged_in_every_client(
    url: str, client: str
) -> None:
    seen = CLIENTS[client](url if "//" in url else "//" + url)
    assert seen is not None
    assert normalize_host(seen) == policy_host(url)
    assert CAPS.permits_host(seen)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080\\@api.good.com/", "http://localhost\\.good.com/"],
)
def test_backslash_urls_of_the_finding_never_reach_the_handler(
    toolguard_runtime, registry_of, spy, url: str
) -> None:
    fetch = spy_tool(
        spy,
        "fetch",
        risk=Risk.EXTERNAL,
        schema={
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
            "additionalProperties": False,
        },
        network_host_argument="url",
    )
    runtime = toolguard_runtime(
        registry_of(fetch),
        Capabilities(allowed_risks=EVERY_RISK, network_hosts=("api.good.com", "*.good.com")),
        hooks=[Approver(lambda event: True)],
    )
    result = runtime.execute(ToolCall(call_id="c1", tool_name="fetch", arguments={"url": url}))
    assert result.code is ErrorCode.PERMISSION_DENIED
    row = runtime.audit.get("c1")
    assert row is not None and (row.decision, row.rule) == ("deny", "policy.network_host")
    assert spy.count == 0


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("API.Good.COM", "api.good.com"),
        ("api.good.com.", "api.good.com"),
        ("münchen.de", "xn--mnchen-3ya.de"),
        ("[::1]", "::1"),
        ("0:0::1", "::1"),
        ("*.Good.com", "*.good.com"),
    ],
)
def test_allow_list_entries_are_compared_in_the_parsed_form(entry: str, normalized: str) -> None:
    assert Capabilities(network_hosts=(entry,)).network_hosts == (normalized,)
