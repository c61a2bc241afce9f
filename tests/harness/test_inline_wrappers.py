"""The inline deadline (``isolation="inline"``) never lands in the harness's
own wrappers of a handler (a ``HandlerProbe``, the HTTP window): they are
toolguard-owned code; it lands in the handler they wrap."""

from __future__ import annotations

import signal
import threading
import urllib.request
from typing import Any

import pytest
from conftest import spy_tool
from http_tools import CAPABILITIES, weather_server

from pytest_toolguard import Approver, ErrorCode, Redactor, Risk, ToolCall, ToolSpec
from pytest_toolguard.harness.probes import HandlerProbe
from pytest_toolguard.runtime import inline

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM is POSIX")

OUTLASTS_THE_DEADLINE = 1.0
"""Seconds the harness's own work takes in these tests: ten times the tools'
deadline, so the deadline passes while it runs."""


def held(ctx: Any, **arguments: Any) -> Any:
    """A handler that waits until its deadline stops it."""
    threading.Event().wait(30)
    return {}


def test_a_deadline_passing_in_a_probes_bookkeeping_lands_in_the_handler(
    toolguard_runtime, registry_of, spy
):
    probe = HandlerProbe(spy_tool(spy, result=held).handler)
    probe.on_start = lambda: threading.Event().wait(OUTLASTS_THE_DEADLINE)
    tool = spy_tool(spy, timeout_seconds=0.1).with_handler(probe)
    runtime = toolguard_runtime(registry_of(tool), isolation="inline")
    runs = probe.start_call()
    result = runtime.execute(ToolCall("c1", "spy", {}))
    assert result.code is ErrorCode.TIMEOUT
    assert (runs.calls, runs.finished) == (1, 1)  # the run that started ended, recorded
    assert isinstance(runs.raised, inline.DeadlinePassed)
    assert spy.calls  # the handler ran: the deadline landed there


FETCH_DEADLINE = 1.0
"""The fetching tool's deadline: room for a loopback request on a loaded
machine (at 0.1 s the request itself sometimes outlasted it, and the
deadline then landed before any exchange was there to keep)."""


class SlowToRedactTheResponse(Redactor):
    """Redacts as usual, but takes its time over the first response body:
    twice the fetching tool's deadline, so the deadline passes meanwhile."""

    slowed = False

    def redact_text(self, text: str) -> str:
        if '"temp"' in text and not self.slowed:
            self.slowed = True
            threading.Event().wait(2 * FETCH_DEADLINE)
        return super().redact_text(text)


def test_a_deadline_passing_while_an_exchange_is_recorded_loses_no_exchange(
    toolguard_runtime, registry_of
):
    pytest.importorskip("vcr")
    from pytest_toolguard.replay.http import HttpRecording

    def fetch_then_hold(ctx: Any, url: str) -> Any:
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
        return held(ctx)

    schema = {"type": "object", "properties": {"url": {"type": "string"}}}
    spec = ToolSpec("fetch", "GETs a URL", schema, fetch_then_hold, risk=Risk.EXTERNAL)
    recording = HttpRecording(SlowToRedactTheResponse())
    runtime = toolguard_runtime(
        recording.registry(registry_of(spec)),
        CAPABILITIES,
        timeouts={"fetch": FETCH_DEADLINE},
        hooks=[Approver(lambda event: True)],
        isolation="inline",
    )
    with weather_server() as server:
        result = runtime.execute(ToolCall("c1", "fetch", {"url": server.url("Oslo")}))
    recording.close()
    assert result.code is ErrorCode.TIMEOUT
    assert len(recording.take("c1")) == 1  # the server answered: the cassette says so


def test_our_packages_are_owned_but_those_holding_tools_code() -> None:
    import pytest_toolguard.bridges.definitions.python  # noqa: F401 - owned() reads loaded modules
    import pytest_toolguard.faults.handler  # noqa: F401
    import pytest_toolguard.replay.http  # noqa: F401
    import pytest_toolguard.tools.files  # noqa: F401

    assert inline.owned("pytest_toolguard.harness.probes")
    assert inline.owned("pytest_toolguard.replay.http")
    assert inline.owned("pytest_toolguard.sandbox")
    assert not inline.owned("pytest_toolguard.tools.files")
    assert not inline.owned("pytest_toolguard.faults.handler")
    assert not inline.owned("pytest_toolguard.bridges.definitions.python")
    assert not inline.owned("http_tools")  # a user's module
