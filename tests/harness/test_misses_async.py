"""Async tools on a running event loop: through the thread bridge a
coroutine that blocks stalls nobody and one never awaited is a warning
nobody reads. ``async_loop`` makes the call through ``aexecute`` inside
``asyncio.run`` and judges what the coroutine did on the loop's thread,
never how long anything took.

Catch table (tool: cell, problem):

============================  ============================================================
broken twin                   caught by
============================  ============================================================
sleeps_on_the_loop            async_loop: the handler blocked its event loop:
                              time.sleep on the loop's thread
reads_big_file_on_the_loop    async_loop: ... a synchronous operation on logs/big.log
                              (131072 bytes) on the loop's thread
runs_a_process_on_the_loop    async_loop (directory world): ... subprocess.Popen [...]
fetches_on_the_loop (urllib)  async_loop: ... urllib.Request ('http://127.0.0.1:...
fetches_on_the_loop           async_loop: ... a blocking HTTP request (GET http://127.0.0.1...
(requests)                    (a recorded exchange served to a sync client on the loop)
write_never_awaited           async_loop: coroutine '...' was never awaited during the
                              call; ... drafts/a.md, which it declared it writes
                              ('content' as content), was left as it was
write_never_awaited_in_a     async_loop: the same (dropped in a reference cycle: the
_cycle                        cell collects the young generations' garbage)
write_task_never_awaited      async_loop: the handler answered while tasks it started were
                              still pending ...; ... was left as it was
============================  ============================================================

The correct twins (the same work through ``asyncio.to_thread``,
``asyncio.create_subprocess_exec``, an awaited write) pass every cell that
applies; a sync tool gets no ``async_loop`` cell.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from http_tools import AUTHORIZATION, CAPABILITIES, SCHEMA, weather_server

from pytest_toolguard import Approver, ToolCall, ToolRuntime
from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import loads
from pytest_toolguard.tools import read_text, write_file

BIG = "logs/big.log"
FILES = {"drafts/a.md": "old draft\n", BIG: "x" * (128 * 1024), "logs/small.log": "ok\n"}
WRITE = {"path": "drafts/a.md", "content": "new draft\n"}
READ = {"path": BIG}


def _writer(name: str, how: str) -> ToolSpec:
    async def write_later(ctx: ToolContext, path: str, content: str, delay: float) -> None:
        await asyncio.sleep(delay)
        ctx.workspace.write_text(path, content)

    @tool(
        name=name,
        input_schema=write_file.input_schema,
        risk=Risk.WRITE,
        paths=[PathAccess.write("{path}", content="content")],
    )
    async def handler(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
        if how == "never_awaited":
            write_later(ctx, path, content, 0)  # the coroutine is made, never run
        elif how == "never_awaited_in_a_cycle":  # freed by a garbage collection only
            pending: list[Any] = [write_later(ctx, path, content, 0)]
            pending.append(pending)
        elif how == "task_never_awaited":  # flushed "later": the loop ends first
            asyncio.get_running_loop().create_task(write_later(ctx, path, content, 60))
        else:
            await asyncio.to_thread(ctx.workspace.write_text, path, content)
        return {"path": path, "bytes_written": len(content.encode())}

    return handler


def _reader(name: str, how: str) -> ToolSpec:
    @tool(name=name, input_schema=read_text.input_schema, paths=[PathAccess.read("{path}")])
    async def handler(ctx: ToolContext, path: str) -> dict[str, Any]:
        if how == "sleep":
            time.sleep(0.001)
            text = ctx.workspace.read_text("logs/small.log")
        elif how == "sync_read":
            text = ctx.workspace.read_text(path)
        elif how == "process":
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            text = ""
        elif how == "async_process":
            process = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
            await process.wait()
            text = ""
        else:
            await asyncio.sleep(0)
            text = await asyncio.to_thread(ctx.workspace.read_text, path)
        return {"chars": len(text)}

    return handler


BROKEN = (
    (_reader("sleeps_on_the_loop", "sleep"), READ, "time.sleep on the loop's thread"),
    (
        _reader("reads_big_file_on_the_loop", "sync_read"),
        READ,
        f"a synchronous operation on {BIG} (131072 bytes)",
    ),
    (_writer("write_never_awaited", "never_awaited"), WRITE, "was never awaited during the call"),
    (_writer("write_never_awaited", "never_awaited"), WRITE, "drafts/a.md, which it declared"),
    (
        _writer("write_never_awaited_in_a_cycle", "never_awaited_in_a_cycle"),
        WRITE,
        "was never awaited during the call",
    ),
    (
        _writer("write_task_never_awaited", "task_never_awaited"),
        WRITE,
        "tasks it started were still pending",
    ),
    (
        _writer("write_task_never_awaited", "task_never_awaited"),
        WRITE,
        "was left as it was",
    ),
)
CORRECT = (
    (_reader("reads_off_the_loop", "to_thread"), READ),
    (_writer("writes_awaited", "awaited"), WRITE),
)


def _cassette(spec: ToolSpec, arguments: dict[str, Any]) -> Any:
    return loads(
        f"""
format_version: 1
kind: case
description: one call of {spec.name}
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [drafts]
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


def _cell(spec: ToolSpec, arguments: dict[str, Any], world: str, parent: Path) -> CellOutcome:
    cassette = _cassette(spec, arguments)
    registry = ToolRegistry([spec])
    (fault,) = select_faults("async_loop")
    target = targets(cassette, registry, cassette.source, world)[0]
    return run_cell(fault, target, registry, world=world, parent=str(parent))


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(
    ("spec", "arguments", "problem"),
    BROKEN,
    ids=[f"{s.name}-{i}" for i, (s, _, _) in enumerate(BROKEN)],
)
def test_an_async_tool_that_stalls_or_loses_its_work_is_caught(
    spec: ToolSpec, arguments: dict[str, Any], problem: str, world: str, tmp_path: Path
) -> None:
    outcome = _cell(spec, arguments, world, tmp_path)

    assert outcome.status == "fail", outcome
    assert any(problem in line for line in outcome.problems), outcome.problems


def test_a_process_run_on_the_loop_is_caught(tmp_path: Path) -> None:
    outcome = _cell(_reader("runs_a_process_on_the_loop", "process"), READ, "directory", tmp_path)

    assert outcome.status == "fail", outcome
    assert any("subprocess.Popen" in line for line in outcome.problems), outcome.problems


def test_a_process_started_through_asyncio_passes(tmp_path: Path) -> None:
    spec = _reader("starts_a_process_through_asyncio", "async_process")
    outcome = _cell(spec, READ, "directory", tmp_path)

    assert outcome.status == "pass", outcome.problems


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_a_coroutine_left_by_code_before_the_call_is_never_blamed_on_it(tmp_path: Path) -> None:
    async def forgotten() -> None:
        pass

    spec, arguments = CORRECT[0]
    gc.disable()  # the garbage stays until the cell collects
    try:
        cycle: list[Any] = [forgotten()]
        cycle.append(cycle)
        del cycle
        outcome = _cell(spec, arguments, "fake", tmp_path)
    finally:
        gc.enable()
    assert outcome.status == "pass", outcome.problems


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[spec.name for spec, _ in CORRECT])
def test_an_async_tool_that_awaits_its_work_off_the_loop_passes_every_cell(
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


def test_async_loop_applies_only_to_async_tools() -> None:
    (fault,) = select_faults("async_loop")
    registry = ToolRegistry([read_text])
    sync_target = targets(_cassette(read_text, READ), registry, "<a>")[0]

    assert not fault.applies(sync_target)


def _fetcher(how: str) -> ToolSpec:
    @tool(
        name="fetch_weather",
        input_schema=SCHEMA,
        risk=Risk.EXTERNAL,
        network_host_argument="url",
        paths=[],
    )
    async def handler(ctx: ToolContext, url: str) -> dict[str, Any]:
        headers = {"Authorization": AUTHORIZATION}
        if how == "urllib":  # a blocking client called in async def
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as response:
                return {"weather": json.loads(response.read())}
        if how == "requests":
            return {"weather": requests.get(url, headers=headers, timeout=5).json()}
        async with httpx.AsyncClient() as client:
            answer = await client.get(url, headers=headers, timeout=5)
        return {"weather": answer.json()}

    return handler


def _http_cell(spec: ToolSpec, tmp_path: Path) -> CellOutcome:
    registry = ToolRegistry([spec])
    (tmp_path / "ws").mkdir()
    runtime = ToolRuntime(
        registry, str(tmp_path / "ws"), CAPABILITIES, hooks=[Approver(lambda event: True)]
    )
    path = tmp_path / "weather.yaml"
    with weather_server() as server, record_session(runtime, path):
        arguments = {"url": server.url("oslo")}
        runtime.execute(ToolCall(call_id="1", tool_name=spec.name, arguments=arguments))
    runtime.close()
    (fault,) = select_faults("async_loop")
    target = targets(load(path), registry, "weather.yaml")[0]
    return run_cell(fault, target, registry)


@pytest.mark.parametrize(
    ("how", "problem"),
    [("urllib", "urllib.Request"), ("requests", "a blocking HTTP request (GET http://127.0.0.1")],
)
def test_a_blocking_http_client_on_the_loop_is_caught(
    how: str, problem: str, tmp_path: Path
) -> None:
    outcome = _http_cell(_fetcher(how), tmp_path)

    assert outcome.status == "fail", outcome
    assert any(problem in line for line in outcome.problems), outcome.problems


def test_an_async_http_client_on_the_loop_passes(tmp_path: Path) -> None:
    outcome = _http_cell(_fetcher("httpx"), tmp_path)

    assert outcome.status == "pass", outcome.problems
