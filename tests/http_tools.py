"""External tools that make HTTP requests, and a loopback server for them.

``fetch_weather`` GETs a URL with an Authorization header (following no
redirect), caches the JSON body in the workspace and returns it; a failed
request fails the call.
``stale_registry`` holds its broken twin (same name): it swallows every
error and answers OK with the cached, stale body; ``async_registry`` an
``async def`` version.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from pytest_toolguard import Capabilities, PathAccess, Risk, ToolRegistry, tool

HEADER_SECRET = "tg-header-secret-9f8e7d6c5b4a3928"
AUTHORIZATION = f"Bearer {HEADER_SECRET}"
QUERY_SECRET = "tg-query-secret-0a1b2c3d4e"
COOKIE_SECRET = "tg-cookie-secret-5f6a7b8c"
CACHE = "cache/weather.json"

CAPABILITIES = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE, Risk.EXTERNAL}),
    write_roots=("cache",),
    network_hosts=("127.0.0.1",),
)

SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string", "minLength": 1}},
    "required": ["url"],
    "additionalProperties": False,
}


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed (a 3xx raises ``HTTPError``): a server
    could lead the request to a host the policy never judged."""

    def redirect_request(self, *args: Any) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirects)


def _fetch(ctx: Any, url: str) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Authorization": AUTHORIZATION})
    with OPENER.open(request, timeout=5) as response:
        weather = json.loads(response.read())
        status = response.status
    ctx.workspace.write_text(CACHE, json.dumps(weather, sort_keys=True))
    return {"status": status, "weather": weather}


@tool(
    name="fetch_weather",
    input_schema=SCHEMA,
    risk=Risk.EXTERNAL,
    network_host_argument="url",
    paths=[PathAccess.write(CACHE)],
)
def fetch_weather(ctx: Any, url: str) -> dict[str, Any]:
    """GET the weather at ``url``; cache it."""
    return _fetch(ctx, url)


@tool(
    name="fetch_weather",
    input_schema=SCHEMA,
    risk=Risk.EXTERNAL,
    network_host_argument="url",
    paths=[PathAccess.write(CACHE)],
)
def fetch_weather_stale(ctx: Any, url: str) -> dict[str, Any]:
    """The broken twin: on any error, the cached weather as if fresh."""
    try:
        return _fetch(ctx, url)
    except Exception:
        cached = json.loads(ctx.workspace.read_text(CACHE)) if ctx.workspace.exists(CACHE) else {}
        return {"status": 200, "weather": cached}


@tool(
    name="fetch_weather",
    input_schema=SCHEMA,
    risk=Risk.EXTERNAL,
    network_host_argument="url",
    paths=[PathAccess.write(CACHE)],
)
async def fetch_weather_async(ctx: Any, url: str) -> dict[str, Any]:
    """The same, as an ``async def`` tool (the request on a worker thread)."""
    return await asyncio.to_thread(_fetch, ctx, url)


registry = ToolRegistry([fetch_weather])
stale_registry = ToolRegistry([fetch_weather_stale])
async_registry = ToolRegistry([fetch_weather_async])


class WeatherServer:
    """A threaded HTTP server on 127.0.0.1 (a free port): ``GET
    /weather?city=X`` answers JSON and sets a session cookie. ``paths``
    lists every request it received."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        received = self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                received.append(self.path)
                query = parse_qs(urlsplit(self.path).query)
                body = json.dumps(
                    {
                        "city": query.get("city", ["?"])[0],
                        "temp": 21,
                        "authorized": self.headers.get("Authorization") == AUTHORIZATION,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Set-Cookie", f"session={COOKIE_SECRET}; HttpOnly")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._stopped = False

    def url(self, city: str) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/weather?city={city}&api_key={QUERY_SECRET}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the port (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@contextmanager
def weather_server() -> Iterator[WeatherServer]:
    server = WeatherServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


class HopServer:
    """A threaded HTTP server on ``host`` (a loopback address, a free
    port) standing in for one machine: ``/hop?status=S&to=URL`` answers
    ``S`` with ``Location: URL``; any other path answers 200 with JSON
    naming the server and the path. ``connections`` counts every TCP
    connection it accepted (a client that connected and sent nothing, or
    spoke FTP or TLS, counts too); ``paths`` lists the requests it read."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.paths: list[str] = []
        self.connections = 0
        received = self.paths
        counted = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                received.append(self.path)
                query = parse_qs(urlsplit(self.path).query)
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if self.path.startswith("/hop?"):
                    self.send_response(int(query.get("status", ["302"])[0]))
                    self.send_header("Location", query["to"][0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"server": counted.name, "path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815 - http.server's name
            do_PUT = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                return None

        class Server(ThreadingHTTPServer):
            def verify_request(self, request: Any, client_address: Any) -> bool:
                counted.connections += 1  # (one accept loop: no race)
                return True

        self._server = Server((host, 0), Handler)
        self.port = self._server.server_address[1]
        self.name = f"{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def url(self, path: str = "/final", *, host: str | None = None) -> str:
        """``path`` on this server, reached through ``host`` (another name
        of its address, such as ``localhost``) when given."""
        return f"http://{host or self.host}:{self.port}{path}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def hop(server: HopServer, to: str, status: int = 302) -> str:
    """The URL on ``server`` that redirects to ``to`` with ``status``."""
    return server.url(f"/hop?status={status}&to={quote(to, safe='')}")


@contextmanager
def hop_servers(*hosts: str) -> Iterator[list[HopServer]]:
    """One ``HopServer`` per host, stopped on exit."""
    servers: list[HopServer] = []
    try:
        for host in hosts:
            servers.append(HopServer(host))
        yield servers
    finally:
        for server in servers:
            server.stop()
