"""Approved external calls and their HTTP traffic: recorded with the
cassette, replayed with the server stopped, fault-tested.

The tools (``http_tools``) GET a threaded ``http.server`` on 127.0.0.1
started by the test; an ``Approver`` lets them run while recording.
"""

from __future__ import annotations

import asyncio
import http.client
import inspect
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from http_tools import (
    CAPABILITIES,
    COOKIE_SECRET,
    HEADER_SECRET,
    QUERY_SECRET,
    WeatherServer,
    async_registry,
    registry,
    stale_registry,
    weather_server,
)

from pytest_toolguard import (
    Approver,
    ErrorCode,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, targets
from pytest_toolguard.faults.storage import secret_forms
from pytest_toolguard.hooks import Approval
from pytest_toolguard.replay import dump, dumps, load, loads, record_session, replay
from pytest_toolguard.replay.approvals import approval_hooks
from pytest_toolguard.replay.http import HttpConflict, HttpPlayback, HttpRecording

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")


def fetch(call_id: str, url: str) -> ToolCall:
    return ToolCall(call_id=call_id, tool_name="fetch_weather", arguments={"url": url})


def record(path: Path, workspace: Path, calls: Any) -> None:
    """Record ``calls(server)`` into ``path`` with an approving runtime,
    then stop the server."""
    workspace.mkdir(exist_ok=True)
    runtime = ToolRuntime(
        registry, str(workspace), CAPABILITIES, hooks=[Approver(lambda event: True)]
    )
    with weather_server() as server, record_session(runtime, path, recorded_by="the test"):
        for call in calls(server):
            runtime.execute(call)
    runtime.close()


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Path, WeatherServer]]:
    """A cassette of two approved fetches of one URL, the server stopped."""
    path = tmp_path / "weather.yaml"
    servers: list[WeatherServer] = []

    def calls(server: WeatherServer) -> list[ToolCall]:
        servers.append(server)
        return [fetch("1", server.url("paris")), fetch("2", server.url("paris"))]

    record(path, tmp_path / "workspace", calls)
    yield path, servers[0]


# -- recording --------------------------------------------------------------------


def test_an_approved_call_is_recorded_with_its_approval_and_its_http_exchange(
    recorded: tuple[Path, WeatherServer],
) -> None:
    path, server = recorded
    first = load(path).interactions[0]

    assert first.result.code == "OK"
    assert first.approval == Approval("hook.approver", "approved fetch_weather")
    assert [(e.method, e.status) for e in first.http] == [("GET", 200)]
    assert first.http[0].uri.startswith(server.url("paris").split("api_key=")[0])
    assert b'"temp": 21' in first.http[0].response_body


def test_secrets_in_headers_query_and_cookies_never_reach_the_cassette_bytes(
    recorded: tuple[Path, WeatherServer],
) -> None:
    data = recorded[0].read_bytes()

    for secret in (HEADER_SECRET, QUERY_SECRET, COOKIE_SECRET):
        for form, needle in secret_forms(secret):
            assert needle not in data, f"{secret} ({form}) is in the cassette"
    exchange = load(recorded[0]).interactions[0].http[0]
    assert exchange.request_headers["Authorization"] == ("<redacted:authorization>",)
    assert exchange.response_headers["Set-Cookie"] == ("<redacted:set_cookie>",)
    assert "api_key=<redacted:api_key>" in exchange.uri


def test_a_redacted_response_body_keeps_a_content_length_that_fits(tmp_path: Path) -> None:
    path = tmp_path / "echo.yaml"
    # The server echoes the city; a token there is redacted, so the body shrinks.
    record(path, tmp_path / "ws", lambda s: [fetch("1", s.url("ghp_" + "a" * 36))])
    exchange = load(path).interactions[0].http[0]

    assert b"<redacted:github_token>" in exchange.response_body
    assert exchange.response_headers["Content-Length"] == (str(len(exchange.response_body)),)


def test_recording_writes_no_file_but_the_cassette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    record(tmp_path / "c.yaml", tmp_path / "ws", lambda s: [fetch("1", s.url("paris"))])

    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "ws"]


def test_recording_gives_the_runtime_its_own_registry_back(tmp_path: Path) -> None:
    runtime = ToolRuntime(registry, str(tmp_path), CAPABILITIES)
    with record_session(runtime, tmp_path / "c.yaml"):
        assert runtime.registry is not registry  # network tools wrapped while recording
    assert runtime.registry is registry
    runtime.close()


def test_re_recording_an_unchanged_http_session_writes_the_same_bytes(tmp_path: Path) -> None:
    with weather_server() as server:
        calls = [fetch("1", server.url("paris"))]
        texts = []
        for name in ("a", "b"):
            workspace = tmp_path / "ws"
            shutil.rmtree(workspace, ignore_errors=True)
            workspace.mkdir()
            runtime = ToolRuntime(
                registry, str(workspace), CAPABILITIES, hooks=[Approver(lambda e: True)]
            )
            with record_session(runtime, tmp_path / f"{name}.yaml", name="same"):
                runtime.execute(calls[0])
            runtime.close()
            cassette = load(tmp_path / f"{name}.yaml")
            texts.append(dumps(replace(cassette, recorded_at=None)))

    assert texts[0] == texts[1]
    assert "Date" not in load(tmp_path / "a.yaml").interactions[0].http[0].response_headers


def test_a_cassette_with_approvals_and_http_dumps_to_the_same_bytes_again(
    recorded: tuple[Path, WeatherServer],
) -> None:
    text = recorded[0].read_text(encoding="utf-8")

    assert dumps(loads(text)) == text


# -- replay -----------------------------------------------------------------------


def test_an_approved_external_call_replays_with_the_server_stopped(
    recorded: tuple[Path, WeatherServer],
) -> None:
    path, server = recorded
    served = len(server.paths)
    report = replay(load(path), registry)

    assert report.ok, report.differences
    assert [r.code for r in report.results] == [ErrorCode.OK, ErrorCode.OK]
    assert [(row.decision, row.rule) for row in report.audit_rows] == [
        ("allow", "hook.approver"),
        ("allow", "hook.approver"),
    ]
    assert len(server.paths) == served  # nothing reached the (stopped) server


def test_a_fresh_process_replays_http_inside_the_fake_filesystem(
    recorded: tuple[Path, WeatherServer],
) -> None:
    # vcrpy and the stubs it patches with are imported before the fake
    # filesystem starts; inside it they could not be.
    script = (
        "import sys; from http_tools import registry\n"
        "from pytest_toolguard.replay import load, replay\n"
        "report = replay(load(sys.argv[1]), registry)\n"
        "print(report.ok, [r.code.value for r in report.results], report.differences)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(recorded[0])],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )

    assert done.stdout.strip() == "True ['OK', 'OK'] ()", done.stderr


def test_an_async_external_tool_records_and_replays_its_http(tmp_path: Path) -> None:
    path = tmp_path / "async.yaml"
    (tmp_path / "ws").mkdir()
    runtime = ToolRuntime(
        async_registry, str(tmp_path / "ws"), CAPABILITIES, hooks=[Approver(lambda e: True)]
    )
    with weather_server() as server, record_session(runtime, path):
        first = runtime.execute(fetch("1", server.url("paris")))
        second = asyncio.run(runtime.aexecute(fetch("2", server.url("rome"))))
    runtime.close()
    cassette = load(path)

    assert (first.code, second.code) == (ErrorCode.OK, ErrorCode.OK)
    assert [len(i.http) for i in cassette.interactions] == [1, 1]
    assert replay(cassette, async_registry).ok


def test_replay_leaves_http_client_unpatched(recorded: tuple[Path, WeatherServer]) -> None:
    original = http.client.HTTPConnection
    replay(load(recorded[0]), registry)

    assert http.client.HTTPConnection is original


def test_a_request_with_no_recorded_exchange_is_a_difference_naming_method_and_url(
    recorded: tuple[Path, WeatherServer],
) -> None:
    cassette = load(recorded[0])
    first = cassette.interactions[0]
    url = first.call.arguments["url"].replace("city=paris", "city=rome")
    extra = replace(first, call=replace(first.call, call_id="3", arguments={"url": url}))
    edited = replace(cassette, interactions=(*cassette.interactions, extra))

    report = replay(edited, registry)

    requests = [d for d in report.differences if d.field == "http request"]
    assert [d.where for d in requests] == ["interaction 3 (fetch_weather)"]
    assert requests[0].replayed.startswith(f"GET {url}")


def test_a_request_the_handler_swallows_is_still_named(
    recorded: tuple[Path, WeatherServer],
) -> None:
    cassette = load(recorded[0])
    first = cassette.interactions[0]
    edited = replace(cassette, interactions=(replace(first, http=()),))

    report = replay(edited, stale_registry)  # answers OK from nothing

    assert [d.where for d in report.differences if d.field == "http request"] == [
        "interaction 1 (fetch_weather)"
    ]


def test_a_call_without_a_recorded_approval_still_needs_one(
    recorded: tuple[Path, WeatherServer], tmp_path: Path
) -> None:
    cassette = load(recorded[0])
    runtime = ToolRuntime(registry, str(tmp_path), CAPABILITIES, hooks=approval_hooks(cassette))
    recorded_url = cassette.interactions[0].call.arguments["url"]

    other = runtime.execute(fetch("x", recorded_url.replace("paris", "oslo")))

    assert other.code is ErrorCode.APPROVAL_REQUIRED
    assert runtime.audit.get("x").rule == "policy.approval"
    runtime.close()


# -- the runtime ------------------------------------------------------------------


def test_listeners_get_the_approval_that_let_the_call_through(tmp_path: Path) -> None:
    runtime = ToolRuntime(
        registry,
        str(tmp_path),
        CAPABILITIES,
        hooks=[Approver(lambda e: "deny" not in e.call.call_id)],
    )
    seen: list[Approval | None] = []
    runtime.add_listener(lambda call, result, data, approval: seen.append(approval))

    runtime.execute(fetch("deny-1", "http://127.0.0.1:9/x"))  # refused by the approver
    runtime.execute(fetch("2", "http://127.0.0.1:9/x"))  # approved (port 9 then refuses)
    runtime.execute(ToolCall(call_id="3", tool_name="nope"))

    assert seen == [None, Approval("hook.approver", "approved fetch_weather"), None]
    runtime.close()


def test_an_idempotent_retry_of_an_approved_call_keeps_its_approval(tmp_path: Path) -> None:
    path = tmp_path / "retry.yaml"

    def calls(server: WeatherServer) -> list[ToolCall]:
        call = replace(fetch("1", server.url("paris")), idempotency_key="k")
        return [call, replace(call, call_id="2")]

    record(path, tmp_path / "ws", calls)
    cassette = load(path)

    assert cassette.interactions[1].result.code == "IDEMPOTENT_REPLAY"
    assert cassette.interactions[1].approval is not None
    assert replay(cassette, registry).ok


def test_an_async_handler_stays_async_once_wrapped() -> None:
    async def handler(ctx: Any, url: str) -> Any:
        return {"url": url}

    spec = registry.get("fetch_weather")
    assert spec is not None
    session = HttpPlayback(())
    wrapped = session.wrap(spec.with_handler(handler)).handler

    assert inspect.iscoroutinefunction(wrapped)
    context = type("Ctx", (), {"call_id": "1"})()
    assert asyncio.run(wrapped(context, url="u")) == {"url": "u"}
    session.close()


def test_two_sessions_cannot_patch_the_process_at_once(tmp_path: Path) -> None:
    first, second = HttpRecording(), HttpPlayback(())
    spec = registry.get("fetch_weather")
    assert spec is not None
    inner = second.wrap(spec)

    def outer_handler(ctx: Any, url: str) -> Any:
        return inner.handler(ctx, url=url)

    outer = first.wrap(spec.with_handler(outer_handler))
    with pytest.raises(HttpConflict):
        outer.handler(type("Ctx", (), {"call_id": "1"})(), url="http://127.0.0.1:9/")
    first.close()
    second.close()


# -- faults -----------------------------------------------------------------------


def test_the_http_faults_apply_to_calls_with_recorded_http_only(
    recorded: tuple[Path, WeatherServer],
) -> None:
    cassette = load(recorded[0])
    without = replace(
        cassette, interactions=tuple(replace(i, http=()) for i in cassette.interactions)
    )
    faults = [f for f in BUILTIN_FAULTS if f.name in ("network_error", "http_error")]

    assert all(f.applies(t) for f in faults for t in targets(cassette, registry, "c"))
    assert not any(f.applies(t) for f in faults for t in targets(without, registry, "c"))


@pytest.mark.parametrize("fault", ["network_error", "http_error"])
def test_http_faults_catch_a_tool_answering_stale_data(
    recorded: tuple[Path, WeatherServer], fault: str
) -> None:
    second = targets(load(recorded[0]), stale_registry, "weather.yaml")[1]
    chosen = next(f for f in BUILTIN_FAULTS if f.name == fault)

    outcome = run_cell(chosen, second, stale_registry)

    assert outcome.status == "fail"
    assert any("with the recorded data" in problem for problem in outcome.problems)


@pytest.mark.parametrize("tools", [registry, async_registry], ids=["sync", "async"])
@pytest.mark.parametrize("fault", [f.name for f in BUILTIN_FAULTS])
def test_the_correct_tool_passes_every_fault_on_an_http_cassette(
    recorded: tuple[Path, WeatherServer], fault: str, tools: ToolRegistry
) -> None:
    chosen = next(f for f in BUILTIN_FAULTS if f.name == fault)
    for target in targets(load(recorded[0]), tools, "weather.yaml"):
        outcome = run_cell(chosen, target, tools)
        assert outcome.status in ("pass", "n/a"), (target.label, outcome.problems)


# -- the plugin -------------------------------------------------------------------

INI = "[pytest]\ntoolguard_registry = http_tools:{registry}\n"


@pytest.fixture
def project(pytester: pytest.Pytester, recorded: tuple[Path, WeatherServer]) -> pytest.Pytester:
    pytester.makeini(INI.format(registry="registry"))
    target = pytester.path / "cassettes" / "weather.yaml"
    target.parent.mkdir()
    target.write_bytes(recorded[0].read_bytes())
    return pytester


def test_the_replay_item_passes_with_the_server_stopped(project: pytest.Pytester) -> None:
    result = project.runpytest("--toolguard-replay", *NO_XDIST)

    result.assert_outcomes(passed=1)


def test_an_edited_cassette_fails_the_item_naming_the_request_without_a_traceback(
    project: pytest.Pytester,
) -> None:
    path = project.path / "cassettes" / "weather.yaml"
    cassette = load(path)
    first = cassette.interactions[1]
    url = first.call.arguments["url"].replace("/weather?", "/forecast?")
    dump(
        replace(
            cassette,
            interactions=(
                cassette.interactions[0],
                replace(first, call=replace(first.call, arguments={"url": url})),
            ),
        ),
        path,
    )

    result = project.runpytest("--toolguard-replay", *NO_XDIST)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*interaction 2 (fetch_weather): http request*", f"*GET {url}*"])
    assert "Traceback" not in result.stdout.str()


def test_the_fault_matrix_over_an_http_cassette_has_no_failing_cell(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest("--toolguard-faults=all", "-q", *NO_XDIST)

    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes["passed"] > 20
    result.stdout.fnmatch_lines(["*cells: * pass, 0 fail*", "*2 fetch_weather*"])


def test_the_http_faults_fail_the_stale_twin_in_the_matrix(project: pytest.Pytester) -> None:
    project.makeini(INI.format(registry="stale_registry"))

    result = project.runpytest("--toolguard-faults=network_error,http_error", *NO_XDIST)

    # Only the replay passes: with no cache yet, the first fetch still claims status 200.
    result.assert_outcomes(passed=1, failed=4)
    result.stdout.fnmatch_lines(
        ["*2-fetch_weather::network_error*", "*2-fetch_weather::http_error*"]
    )


FIXTURE_TEST = """
import os
import pytest
from http_tools import CAPABILITIES
from pytest_toolguard import Approver, ToolCall

@pytest.mark.toolguard(capabilities=CAPABILITIES, hooks=[Approver(lambda event: True)])
def test_weather(toolguard):
    url = os.environ["WEATHER_URL"]
    result = toolguard.execute(
        ToolCall(call_id="1", tool_name="fetch_weather", arguments={"url": url})
    )
    assert result.ok, result.message
    assert result.data["weather"]["temp"] == 21
"""


def test_fixture_playback_grants_the_recorded_approval_with_the_server_stopped(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini(INI.format(registry="registry"))
    pytester.makepyfile(test_weather=FIXTURE_TEST)
    with weather_server() as server:
        monkeypatch.setenv("WEATHER_URL", server.url("paris"))
        pytester.runpytest("--toolguard-record-mode=once", *NO_XDIST).assert_outcomes(passed=1)
    cassette = load(pytester.path / "cassettes" / "test_weather" / "test_weather.yaml")
    assert cassette.interactions[0].approval is not None
    assert cassette.interactions[0].http

    result = pytester.runpytest(*NO_XDIST)  # record mode none: playback

    result.assert_outcomes(passed=1)
    assert len(server.paths) == 1  # only the recording reached it


def test_the_marker_refuses_hooks_that_are_not_hooks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.toolguard(hooks=["approver"])
        def test_marked():
            pass
        """
    )

    result = pytester.runpytest(*NO_XDIST)

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*hooks= must be a list of PreToolUse/PostToolUse hooks*"])
