"""Loopback endpoints that carry a bridged tool's own protocol.

A tool bridged from an MCP server started for its world (``from_mcp_http``)
is reached over a socket on 127.0.0.1: that connection is how the call gets
to the tool, not traffic the tool sends. While ``carrying(host, port)``
runs, code that refuses a handler run the network (``fuzz.network``) lets
a connection to that endpoint through. What the server itself reaches is
its own process's, and not seen here.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_ENDPOINTS: Counter[tuple[str, int]] = Counter()


@contextmanager
def carrying(host: str, port: int) -> Iterator[None]:
    """``host:port`` carries a bridged tool's protocol until the block ends
    (blocks may nest and overlap)."""
    # A name is resolved, then its addresses connected to.
    hosts = (host, "127.0.0.1", "::1") if host == "localhost" else (host,)
    endpoints = [(name, int(port)) for name in hosts]
    with _LOCK:
        _ENDPOINTS.update(endpoints)
    try:
        yield
    finally:
        with _LOCK:
            _ENDPOINTS.subtract(endpoints)
            for endpoint in endpoints:
                if _ENDPOINTS[endpoint] <= 0:
                    del _ENDPOINTS[endpoint]


def carries(host: object, port: object) -> bool:
    """Whether ``host:port`` carries a bridged tool's protocol now."""
    if not _ENDPOINTS or not isinstance(host, str) or not isinstance(port, int):
        return False
    return (host, port) in _ENDPOINTS
