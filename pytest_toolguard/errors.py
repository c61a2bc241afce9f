"""The one base class of every exception pytest-toolguard raises.

``except ToolguardError`` catches anything this package raises on purpose
(a refused sandbox path, a cassette that cannot be used, an audit store
that is down, a bad ``module:attribute`` spec, ...) and nothing else. Each
exception also keeps the built-in base it always had (``CassetteError`` is
still a ``ValueError``, ``HttpUnavailable`` an ``ImportError``), so code
that catches those goes on working.

``ToolRuntime.execute`` never raises for anything a call contains: these
exceptions are what the library's other entry points raise, and what a
handler meets through ``ctx.workspace`` (the runtime turns those into
result codes).
"""

from __future__ import annotations


class ToolguardError(Exception):
    """The base of every exception of pytest-toolguard. Carries nothing
    of its own: each subclass documents what it means and what to do."""
