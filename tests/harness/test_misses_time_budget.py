"""Time budgets that run out: with the clock frozen, a tool's own budget
never does, and a search that stops on it while claiming it is complete
passes every other cell. ``slow_world`` moves the clock an hour forward
before each of the handler's filesystem operations (and HTTP requests):
the budget runs out part way, and an OK answer of the cut work must say
so.

Catch table (tool: cell, problem):

=========================  =============================================================
broken twin                caught by
=========================  =============================================================
search_claims_complete     slow_world: ... stopped after 6 of the 16 operations ...
                           answered OK with an answer that differs from the full run's
                           only in fewer items and counts
timed_search_claims_complete
                           slow_world: the same (its elapsed time and timestamp change
                           with the clock alone: a control run finds them, they say nothing)
pages_as_the_whole_list    slow_world: ... the handler stopped after 2 of the 5 ...
                           (the pages read before the deadline, returned as every item)
export_at_deadline         slow_world: the clock ran out the handler's time and the call
(appends chunk by chunk)   failed, leaving files neither old nor new ...: out/export.txt
cities_until_deadline      slow_world (HTTP requests count): ... stopped after 1 of the 3
                           operations ... only in fewer items and counts
summary_from_stale_manifest slow_world: ... answered OK with the same answer as the full
                           run (counts lines until the deadline, then answers a manifest's)
=========================  =============================================================

The correct twins pass every cell that applies: a search that says
``complete: false`` when cut, a pager that answers ``next_page``, a scan
that fails with a clear error at its deadline, one that answers
``files_read`` short of ``files_total``, and a search that never
reads the clock (``slow_world`` does not even apply to it).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from http_tools import AUTHORIZATION, CAPABILITIES, SCHEMA, weather_server

from pytest_toolguard import Approver, Risk, ToolCall, ToolRuntime
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.harness.clock import DEFAULT_TIME, frozen_clock, stepping_clock
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import load, record_session

BUDGET_SECONDS = 5.0
DOCS = {f"docs/{name}.txt": f"title {name}\nneedle in {name}\n" for name in "abcde"}
PAGES = {f"pages/{n}.json": json.dumps([f"item-{n}-{i}" for i in range(3)]) for n in range(1, 5)}
MANIFEST = "manifest.json"
FILES = {**DOCS, **PAGES, MANIFEST: json.dumps({"docs": 10})}
SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"folder": {"type": "string"}, "word": {"type": "string"}},
    "required": ["folder", "word"],
    "additionalProperties": False,
}
SEARCH = {"folder": "docs", "word": "needle"}
PAGER_SCHEMA = {
    "type": "object",
    "properties": {"folder": {"type": "string"}},
    "required": ["folder"],
    "additionalProperties": False,
}
PAGER = {"folder": "pages"}


def _search(
    complete_always: bool, name: str, timed: bool = False, stamped: bool = False
) -> ToolSpec:
    @tool(name=name, input_schema=SEARCH_SCHEMA, paths=[PathAccess.read("{folder}")])
    def handler(ctx: ToolContext, folder: str, word: str) -> dict[str, Any]:
        deadline = time.monotonic() + BUDGET_SECONDS
        matches: list[str] = []
        cut = False
        for path in ctx.workspace.walk(folder):
            if time.monotonic() > deadline:
                cut = True
                break
            text = ctx.workspace.read_text(path)
            matches += [f"{path}: {line}" for line in text.splitlines() if word in line]
        answer = {"matches": matches, "count": len(matches), "complete": complete_always or not cut}
        if timed:  # fields that change with the clock alone say nothing of a cut
            answer["elapsed_seconds"] = time.monotonic() - deadline + BUDGET_SECONDS
            answer["searched_at"] = datetime.now(timezone.utc).isoformat()
        if stamped:  # a timestamp in whole seconds: the same in two runs a moment apart
            answer["searched_at"] = int(time.time())
        return answer

    return handler


def _pager(next_page: bool, name: str) -> ToolSpec:
    @tool(name=name, input_schema=PAGER_SCHEMA, paths=[PathAccess.read("{folder}")])
    def handler(ctx: ToolContext, folder: str) -> dict[str, Any]:
        started = time.time()
        items: list[str] = []
        page = 1
        while ctx.workspace.exists(f"{folder}/{page}.json"):
            if time.time() - started > BUDGET_SECONDS:
                if next_page:
                    return {"items": items, "next_page": page}
                break
            items += json.loads(ctx.workspace.read_text(f"{folder}/{page}.json"))
            page += 1
        return {"items": items, "total": len(items)}

    return handler


@tool(input_schema=PAGER_SCHEMA, paths=[PathAccess.read("{folder}")])
def summary_from_stale_manifest(ctx: ToolContext, folder: str) -> dict[str, Any]:
    """Counts lines until its deadline, then answers the count a manifest
    holds, as if it had counted them all."""
    deadline = time.perf_counter() + BUDGET_SECONDS
    lines = 0
    for path in ctx.workspace.walk(folder):
        if time.perf_counter() > deadline:
            return {"lines": json.loads(ctx.workspace.read_text(MANIFEST))[folder]}
        lines += len(ctx.workspace.read_text(path).splitlines())
    return {"lines": lines}


@tool(input_schema=PAGER_SCHEMA, paths=[PathAccess.read("{folder}")])
def scan_failing_at_deadline(ctx: ToolContext, folder: str) -> dict[str, Any]:
    """Fails with a clear error when its budget runs out."""
    deadline = time.monotonic() + BUDGET_SECONDS
    lines = 0
    for path in ctx.workspace.walk(folder):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the scan of {folder} ran out of its {BUDGET_SECONDS} s")
        lines += len(ctx.workspace.read_text(path).splitlines())
    return {"lines": lines}


@tool(input_schema=PAGER_SCHEMA, paths=[PathAccess.read("{folder}")])
def scan_reporting_progress(ctx: ToolContext, folder: str) -> dict[str, Any]:
    """Says how many of its files it read: fewer than all when cut."""
    deadline = time.monotonic() + BUDGET_SECONDS
    files = ctx.workspace.walk(folder)
    lines = read = 0
    for path in files:
        if time.monotonic() > deadline:
            break
        lines += len(ctx.workspace.read_text(path).splitlines())
        read += 1
    return {"lines": lines, "files_read": read, "files_total": len(files)}


@tool(name="search_without_clock", input_schema=SEARCH_SCHEMA, paths=[PathAccess.read("{folder}")])
def search_without_clock(ctx: ToolContext, folder: str, word: str) -> dict[str, Any]:
    matches = [
        f"{path}: {line}"
        for path in ctx.workspace.walk(folder)
        for line in ctx.workspace.read_text(path).splitlines()
        if word in line
    ]
    return {"matches": matches, "count": len(matches)}


BROKEN = (
    (_search(True, "search_claims_complete"), SEARCH, "only in fewer items and counts"),
    (
        _search(True, "timed_search_claims_complete", timed=True),
        SEARCH,
        "only in fewer items and counts",
    ),
    (
        _search(True, "stamped_search_claims_complete", stamped=True),
        SEARCH,
        "only in fewer items and counts",
    ),
    (_pager(False, "pages_as_the_whole_list"), PAGER, "only in fewer items and counts"),
    (summary_from_stale_manifest, {"folder": "docs"}, "with the same answer as the full run"),
)
CORRECT = (
    (_search(False, "search_says_incomplete"), SEARCH),
    (_search(False, "timed_search_says_incomplete", timed=True), SEARCH),
    (_search(False, "stamped_search_says_incomplete", stamped=True), SEARCH),
    (_pager(True, "pager_with_next_page"), PAGER),
    (scan_failing_at_deadline, PAGER),
    (scan_reporting_progress, PAGER),
    (search_without_clock, SEARCH),
)


def _cassette(spec: ToolSpec, arguments: dict[str, Any]) -> Any:
    from pytest_toolguard.replay.cassette import loads

    return loads(
        f"""
format_version: 1
kind: case
description: one call of {spec.name}
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [out]
workspace:
  files: {json.dumps(FILES)}
interactions:
  - call:
      call_id: call-01
      tool_name: {spec.name}
      arguments: {json.dumps(arguments)}
    result: {{ok: true, code: OK}}
""",
        source=f"<{spec.name}>",
    )


def _cell(
    fault_name: str, spec: ToolSpec, arguments: dict[str, Any], world: str, parent: Path
) -> CellOutcome:
    cassette = _cassette(spec, arguments)
    registry = ToolRegistry([spec])
    (fault,) = select_faults(fault_name)
    target = targets(cassette, registry, cassette.source, world)[0]
    return run_cell(fault, target, registry, world=world, parent=str(parent))


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(
    ("spec", "arguments", "problem"), BROKEN, ids=[spec.name for spec, _, _ in BROKEN]
)
def test_an_answer_cut_by_the_clock_that_claims_the_whole_is_caught(
    spec: ToolSpec, arguments: dict[str, Any], problem: str, world: str, tmp_path: Path
) -> None:
    outcome = _cell("slow_world", spec, arguments, world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any(problem in line for line in outcome.problems), outcome.problems
    assert any("the handler stopped after" in line for line in outcome.problems)


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[spec.name for spec, _ in CORRECT])
def test_a_tool_that_says_it_was_cut_passes_every_cell(
    spec: ToolSpec, arguments: dict[str, Any], world: str, tmp_path: Path
) -> None:
    cassette = _cassette(spec, arguments)
    registry = ToolRegistry([spec])
    target = targets(cassette, registry, cassette.source, world)[0]
    for fault in BUILTIN_FAULTS:
        if not fault.applies(target):
            continue
        outcome = run_cell(fault, target, registry, world=world, parent=str(tmp_path))
        assert outcome.status in ("pass", "n/a"), (fault.name, outcome.problems)


def test_slow_world_applies_only_to_code_that_can_read_a_clock() -> None:
    registry = ToolRegistry([search_without_clock, scan_failing_at_deadline])
    clockless = targets(_cassette(search_without_clock, SEARCH), registry, "<a>")[0]
    clocked = targets(_cassette(scan_failing_at_deadline, PAGER), registry, "<b>")[0]
    (fault,) = select_faults("slow_world")

    assert not fault.applies(clockless)
    assert fault.applies(clocked)


def _exporter(name: str, whole_or_nothing: bool) -> ToolSpec:
    @tool(
        name=name,
        input_schema=PAGER_SCHEMA,
        risk=Risk.WRITE,
        paths=[PathAccess.read("{folder}"), PathAccess.write("out/export.txt")],
    )
    def handler(ctx: ToolContext, folder: str) -> dict[str, Any]:
        """Appends each file to an export, one open each, within a budget."""
        deadline = time.monotonic() + BUDGET_SECONDS
        target = os.path.join(ctx.workspace.root, "out", "export.txt")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        chunks = [ctx.workspace.read_text(path) for path in ctx.workspace.walk(folder)]
        if whole_or_nothing:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the export of {folder} ran out of its {BUDGET_SECONDS} s")
            ctx.workspace.write_text("out/export.txt", "".join(chunks))
            return {"exported": len(chunks)}
        for chunk in chunks:
            with open(target, "a", encoding="utf-8") as handle:
                handle.write(chunk)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the export of {folder} ran out of its {BUDGET_SECONDS} s")
        return {"exported": len(chunks)}

    return handler


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(("whole_or_nothing", "status"), [(False, "fail"), (True, "pass")])
def test_a_call_the_clock_cut_that_failed_leaves_no_torn_file(
    whole_or_nothing: bool, status: str, world: str, tmp_path: Path
) -> None:
    spec = _exporter("export_at_deadline", whole_or_nothing)

    outcome = _cell("slow_world", spec, {"folder": "docs"}, world, tmp_path)

    assert outcome.status == status, outcome.problems
    if status == "fail":
        assert any("neither old nor new" in line for line in outcome.problems)


CITIES = ("paris", "rome", "oslo")


def _cities(name: str, says_partial: bool) -> ToolSpec:
    @tool(name=name, input_schema=SCHEMA, risk=Risk.EXTERNAL, network_host_argument="url", paths=[])
    def handler(ctx: ToolContext, url: str) -> dict[str, Any]:
        """The weather of every city, one request each, within a budget."""
        deadline = time.monotonic() + BUDGET_SECONDS
        weather: dict[str, Any] = {}
        for city in CITIES:
            if time.monotonic() > deadline:
                break
            request = urllib.request.Request(
                url.replace("city=paris", f"city={city}"), headers={"Authorization": AUTHORIZATION}
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                weather[city] = json.loads(response.read())
        answer: dict[str, Any] = {"weather": weather, "cities": len(weather)}
        if says_partial and len(weather) < len(CITIES):
            answer["missing"] = [city for city in CITIES if city not in weather]
        return answer

    return handler


@pytest.mark.parametrize(("says_partial", "status"), [(False, "fail"), (True, "pass")])
def test_requests_move_the_clock_too(says_partial: bool, status: str, tmp_path: Path) -> None:
    spec = _cities("cities_until_deadline", says_partial)
    registry = ToolRegistry([spec])
    (tmp_path / "ws").mkdir()
    runtime = ToolRuntime(
        registry, str(tmp_path / "ws"), CAPABILITIES, hooks=[Approver(lambda event: True)]
    )
    path = tmp_path / "cities.yaml"
    with weather_server() as server, record_session(runtime, path):
        arguments = {"url": server.url("paris")}
        runtime.execute(ToolCall(call_id="1", tool_name=spec.name, arguments=arguments))
    runtime.close()
    (fault,) = select_faults("slow_world")
    target = targets(load(path), registry, "cities.yaml")[0]

    outcome = run_cell(fault, target, registry)

    assert outcome.status == status, outcome.problems
    if status == "fail":
        assert any("stopped after 1 of the 3" in line for line in outcome.problems)


@pytest.mark.parametrize("backend", ["freezegun", "time-machine"])
def test_the_stepping_clock_moves_every_clock_of_every_thread_only_when_told(backend: str) -> None:
    seen: list[tuple[float, float, datetime]] = []

    def look() -> None:
        seen.append((time.monotonic(), time.time(), datetime.now(timezone.utc)))

    def on_a_thread() -> None:
        thread = threading.Thread(target=look)
        thread.start()
        thread.join()

    with frozen_clock(DEFAULT_TIME, backend):  # type: ignore[arg-type]
        with stepping_clock(None) as advance:
            on_a_thread()
            on_a_thread()
            advance(90)
            on_a_thread()
        look()
    (m0, w0, d0), (m1, w1, _), (m2, w2, d2), (_, w3, d3) = seen

    assert d0 == datetime.fromisoformat(DEFAULT_TIME)
    assert (m1 - m0, w1 - w0) == (0, 0)
    assert (m2 - m0, w2 - w0, (d2 - d0).total_seconds()) == (90, 90, 90)
    assert (w3, d3) == (w0, d0)  # the frozen clock again once it ends
