"""Fuzzing never reaches the network unless asked to: a handler's socket
(loopback included) is refused before anything is sent, the refusal is the
tool's error, and ``network=True`` lets it through, saying so in the report.
A loopback server counts the requests that arrive."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.fuzz import check_call, fuzz_tool
from pytest_toolguard.fuzz.report import Problem
from pytest_toolguard.harness.transports import carries, carrying
from pytest_toolguard.registry import ToolSpec, tool

SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["amount"],
    "additionalProperties": False,
}


class Counter:
    def __init__(self) -> None:
        self.requests = 0
        self.datagrams = 0
        self.lock = threading.Lock()


@pytest.fixture
def server() -> Iterator[tuple[int, Counter]]:
    """A loopback HTTP server counting requests (and a UDP socket counting datagrams)."""
    counter = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            with counter.lock:
                counter.requests += 1
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], counter
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _urllib(port: int) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/refund", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        response.read()


def _http_client(port: int) -> None:
    connection = http.client.HTTPConnection("localhost", port, timeout=5)
    try:
        connection.request("POST", "/refund", body=b"{}")
        connection.getresponse().read()
    finally:
        connection.close()


def _raw_socket(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        sock.recv(100)


def _from_a_thread(port: int) -> None:
    failed: list[BaseException] = []

    def post() -> None:
        try:
            _urllib(port)
        except BaseException as exc:  # noqa: BLE001 - handed to the handler
            failed.append(exc)

    worker = threading.Thread(target=post)
    worker.start()
    worker.join()
    if failed:
        raise failed[0]


def _asyncio(port: int) -> None:
    async def post() -> None:
        reader, writer = await asyncio.open_connection("localhost", port)
        writer.write(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read(100)
        writer.close()
        await writer.wait_closed()

    asyncio.run(post())


CLIENTS: dict[str, Callable[[int], None]] = {
    "asyncio by name": _asyncio,
    "urllib": _urllib,
    "http.client by name": _http_client,
    "raw socket": _raw_socket,
    "a thread it starts": _from_a_thread,
}


def refund_tool(port: int, send: Callable[[int], None], risk: Risk, swallow: bool) -> ToolSpec:
    @tool(name="refund", risk=risk, input_schema=SCHEMA)
    def refund(ctx: Any, amount: int) -> Any:
        """Refunds ``amount`` through a live service."""
        try:
            send(port)
        except OSError:
            if not swallow:
                raise
            return {"refunded": amount, "status": "queued"}
        return {"refunded": amount}

    return refund


@pytest.mark.parametrize("risk", [Risk.EXTERNAL, Risk.DANGEROUS, Risk.READ])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_fuzzed_handler_never_reaches_the_network_by_default(
    server: tuple[int, Counter], client: str, risk: Risk
) -> None:
    port, counter = server
    spec = refund_tool(port, CLIENTS[client], risk, swallow=False)
    failures = check_call(spec, {"amount": 3})
    assert counter.requests == 0
    # The refusal is the tool's error (an ErrorCode answer), not a fuzz problem.
    assert [f.problem for f in failures] == []


def test_a_fuzz_run_sends_nothing_and_its_report_says_what_was_refused(
    server: tuple[int, Counter],
) -> None:
    port, counter = server
    report = fuzz_tool(refund_tool(port, _urllib, Risk.EXTERNAL, swallow=False), examples=5)
    assert counter.requests == 0
    assert report.handler_calls > 0
    assert report.network is False
    assert report.ok, report.format()
    assert any("network refused" in note for note in report.notes)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_answering_ok_after_a_refused_request_is_a_problem(
    server: tuple[int, Counter], client: str
) -> None:
    port, counter = server
    spec = refund_tool(port, CLIENTS[client], Risk.EXTERNAL, swallow=True)
    problems = [f.problem for f in check_call(spec, {"amount": 3})]
    assert counter.requests == 0
    assert problems == [Problem.NETWORK_REFUSED_OK]


@pytest.mark.parametrize("carried", ["another port", "the same port, UDP"])
def test_only_the_connection_that_carries_a_bridged_tool_passes(
    server: tuple[int, Counter], carried: str
) -> None:
    """An endpoint carrying a bridged tool's protocol lets a connection to
    it through; the tool's traffic anywhere else, or a datagram to that
    very port, is still refused."""
    port, counter = server
    spec = refund_tool(port, CLIENTS["urllib"], Risk.EXTERNAL, swallow=True)
    carried_port = port + 1 if carried == "another port" else port
    with carrying("127.0.0.1", carried_port):
        if carried == "the same port, UDP":

            def datagram(_port: int) -> None:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    sock.sendto(b"refund", ("127.0.0.1", _port))

            spec = refund_tool(port, datagram, Risk.EXTERNAL, swallow=True)
        problems = [f.problem for f in check_call(spec, {"amount": 3})]
    assert counter.requests == 0
    assert problems == [Problem.NETWORK_REFUSED_OK]


def test_a_connection_to_a_carrying_endpoint_passes(server: tuple[int, Counter]) -> None:
    port, counter = server
    spec = refund_tool(port, CLIENTS["urllib"], Risk.EXTERNAL, swallow=False)
    with carrying("localhost", port):
        failures = check_call(spec, {"amount": 3})
    assert counter.requests == 1  # sent, not refused
    # (The test server's own request thread may still be ending: not judged here.)
    assert Problem.NETWORK_REFUSED_OK not in {failure.problem for failure in failures}
    assert not carries("127.0.0.1", port)


def test_a_datagram_is_refused(server: tuple[int, Counter]) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    address = receiver.getsockname()

    def send(_port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"refund", address)

    try:
        spec = refund_tool(0, send, Risk.EXTERNAL, swallow=True)
        problems = [f.problem for f in check_call(spec, {"amount": 3})]
        with pytest.raises(BlockingIOError):
            receiver.recv(100)
    finally:
        receiver.close()
    assert problems == [Problem.NETWORK_REFUSED_OK]


@pytest.mark.parametrize("client", ["urllib", "raw socket"])
def test_network_true_reaches_the_network_and_the_report_says_so(
    server: tuple[int, Counter], client: str
) -> None:
    port, counter = server
    spec = refund_tool(port, CLIENTS[client], Risk.EXTERNAL, swallow=False)
    report = fuzz_tool(spec, examples=2, network=True)
    assert counter.requests == report.handler_calls > 0
    assert report.network is True
    assert "network: allowed" in report.format()
    assert type(report).from_dict(report.as_dict()).network is True


def test_the_test_itself_still_reaches_the_loopback_server(server: tuple[int, Counter]) -> None:
    """Only handler runs are refused, and only while a call runs."""
    port, counter = server
    check_call(refund_tool(port, _urllib, Risk.EXTERNAL, swallow=False), {"amount": 1})
    _urllib(port)
    assert counter.requests == 1


PLUGIN_TOOLS = '''
import os
import urllib.request

from pytest_toolguard import ToolRegistry, tool
from pytest_toolguard.capabilities import Risk


@tool(name="refund", risk=Risk.EXTERNAL, input_schema={
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["amount"],
    "additionalProperties": False,
})
def refund(ctx, amount):
    """Refunds through a live service."""
    url = f"http://127.0.0.1:{os.environ['REFUND_PORT']}/refund"
    request = urllib.request.Request(url, data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        response.read()
    return {"refunded": amount}


registry = ToolRegistry([refund])
'''


@pytest.mark.parametrize("allowed", [False, True])
def test_the_pytest_option_is_the_opt_in_and_the_summary_names_it(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    server: tuple[int, Counter],
    allowed: bool,
) -> None:
    port, counter = server
    monkeypatch.setenv("REFUND_PORT", str(port))
    pytester.makepyfile(refund_tools=PLUGIN_TOOLS)
    pytester.makeini("[pytest]\npythonpath = .\ntoolguard_registry = refund_tools:registry\n")
    opt_in = ["--toolguard-fuzz-network"] if allowed else []
    result = pytester.runpytest(
        "--toolguard-fuzz", "--toolguard-fuzz-examples=2", "-p", "no:xdist", *opt_in
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert (counter.requests > 0) is allowed
    summary = [line for line in result.outlines if line.startswith("toolguard fuzz:")]
    assert len(summary) == 1
    assert summary[0].endswith("network allowed") is allowed
