"""The network, refused to a fuzzed handler.

A fuzzer makes hundreds of calls with made-up arguments: an external tool
that reached its service would send them all (refunds, messages, deletes).
So while ``refusing_network(log)`` runs, a handler run (``harness.escapes``:
the handler's frames, and the threads it starts) that connects a socket of
the internet families (IPv4, IPv6: loopback too, since a local service is a
service), sends a datagram, or resolves a host name gets ``NetworkRefused``
(a ``ConnectionRefusedError``: ``requests``, ``urllib3``, ``httpx`` and
``http.client`` see a connection that failed) before anything leaves the
process, and the refusal is kept in ``log``.

This is a Python audit hook on the ``socket.*`` events, not vcrpy: every
client built on Python's ``socket`` raises them, whether or not vcrpy
patched it, and the hook refuses only a handler run's requests where
vcrpy's patch would refuse the whole process's (the test's own, too).

Not refused: a connection to an endpoint that carries a bridged tool's own
protocol (``harness.transports``: an MCP server the world started on the
loopback); Unix-domain sockets; code outside a handler run (the test,
the harness); a thread of a pool made before the handler ran; C code that
opens sockets itself (no audit event); a handler still running after its
call was answered. ``sys.addaudithook`` cannot be undone: the hook is added
once per process and does nothing while no block runs.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ToolguardError
from ..harness.escapes import in_handler_run
from ..harness.transports import carries

INTERNET = (socket.AF_INET, socket.AF_INET6)


class NetworkRefused(ToolguardError, ConnectionRefusedError):
    """A fuzzed handler tried to reach the network; nothing was sent."""


class NetworkLog:
    """What handler runs tried to reach while a block ran (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reaches: list[str] = []

    def add(self, reach: str) -> None:
        with self._lock:
            self._reaches.append(reach)

    def reaches(self) -> tuple[str, ...]:
        """Each refused attempt (``connect 127.0.0.1:8080``), in order."""
        with self._lock:
            return tuple(self._reaches)


_LOGS: list[NetworkLog] = []
_LOCK = threading.Lock()
_HOOKED = False


def _address(value: Any) -> str:
    if isinstance(value, tuple) and len(value) >= 2:
        return f"{value[0]}:{value[1]}"
    return str(value)


def _reach(event: str, args: tuple[Any, ...]) -> str | None:
    """What ``event`` would reach, or None when it is not a network reach."""
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        sock = args[0]
        if getattr(sock, "family", None) not in INTERNET:
            return None
        if event == "socket.connect" and _transport(args[1]):
            return None
        if event == "socket.sendmsg":
            return f"sendmsg {_address(args[1]) if len(args) > 1 else '?'}"
        return f"{event.partition('.')[2]} {_address(args[1])}"
    if event == "socket.getaddrinfo":
        if len(args) > 1 and _transport((args[0], args[1])):
            return None
        return f"resolve {args[0]}"
    if event in ("socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"):
        return f"resolve {args[0]}"
    return None


def _transport(address: Any) -> bool:
    return isinstance(address, tuple) and len(address) >= 2 and carries(address[0], address[1])


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _LOGS or not event.startswith("socket."):  # the fast path
        return
    try:
        reach = _reach(event, args)
    except Exception:  # noqa: BLE001 - arguments of an unexpected shape
        reach = f"{event} ?"
    if reach is None or not in_handler_run():
        return
    logs = _LOGS
    if logs:
        logs[-1].add(reach)
    raise NetworkRefused(
        f"{reach} refused: fuzzing never reaches the network unless network=True is given"
    )


@contextmanager
def refusing_network(log: NetworkLog) -> Iterator[NetworkLog]:
    """Refuse handler runs the network until the block ends, keeping each
    attempt in ``log``. Blocks nest: the innermost one's log gets them."""
    global _HOOKED
    with _LOCK:
        if not _HOOKED:
            sys.addaudithook(_audit)
            _HOOKED = True
        _LOGS.append(log)
    try:
        yield log
    finally:
        with _LOCK:
            _LOGS.remove(log)
