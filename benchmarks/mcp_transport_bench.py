"""Benchmark of MCP servers started as commands, over both transports: one
call through the guard (``ToolRuntime.execute`` on the tool
``from_mcp_command`` / ``from_mcp_http`` wrapped: the pipeline, the audit
row, the hop to the server's event loop thread) against the same call
through the bare SDK client (``stdio_client`` / ``streamable_http_client``
+ ``ClientSession.call_tool``, driven from synchronous code the same way,
on an event loop thread), all four variants in one run (alternating
blocks), reported, never asserted.

    .venv/bin/python benchmarks/mcp_transport_bench.py     # about 40 s
    make bench                                             # with the others

Per transport, the guard and the bare client each talk to their own
instance of the same server program (the test suite's
``tests/mcp_servers/files_server.py`` over stdio,
``tests/mcp_servers/http_server.py`` over HTTP on 127.0.0.1) reading the
same small note with the same tool.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from summary import record
from timing import in_temp_dir, machine, measure, ratio
from variants import BenchmarkSetupError

from pytest_toolguard import (
    Capabilities,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)

SERVERS = Path(__file__).resolve().parent.parent / "tests" / "mcp_servers"
STDIO_SERVER = SERVERS / "files_server.py"
HTTP_SERVER = SERVERS / "http_server.py"
ARGUMENTS = {"path": "notes/a.md"}
ROWS = {
    "stdio": (
        "mcp_stdio_guard_bare",
        "stdio call through the guard / the same call through the bare SDK client",
    ),
    "http": (
        "mcp_http_guard_bare",
        "HTTP call through the guard / the same call through the bare SDK client",
    ),
}


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("mcp-transport-bench", _parse(argv), _run, catch=BenchmarkSetupError)


class BareClient:
    """The SDK's own client on an event loop thread of its own; ``streams``
    opens the transport's (read, write, ...) streams."""

    def __init__(self, streams: Callable[[], Any]) -> None:
        from mcp.client.session import ClientSession

        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        ready: asyncio.Future[Any] = self.loop.create_future()

        async def serve() -> None:
            async with streams() as opened, ClientSession(opened[0], opened[1]) as session:
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()

        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(serve(),))
        self._thread.start()
        self.session = asyncio.run_coroutine_threadsafe(_wait(ready), self.loop).result(60)

    def call(self) -> Any:
        answer = asyncio.run_coroutine_threadsafe(
            self.session.call_tool("read_note", ARGUMENTS), self.loop
        ).result()
        if answer.is_error:
            raise BenchmarkSetupError(f"the bare client's call failed: {answer.content}")
        return answer

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


class CpuTally:
    """The CPU time this process (all its threads) spent during a variant's
    calls: a loaded machine stretches the wall times, much less these."""

    def __init__(self) -> None:
        self.ns = 0
        self.calls = 0

    def of(self, call: Callable[[], Any]) -> Callable[[], Any]:
        def counted() -> Any:
            started = time.process_time_ns()
            try:
                return call()
            finally:
                self.ns += time.process_time_ns() - started
                self.calls += 1

        return counted

    @property
    def per_call_us(self) -> float:
        return self.ns / max(1, self.calls) / 1000


async def _wait(future: asyncio.Future[Any]) -> Any:
    return await future


def bare_stdio(root: Path) -> BareClient:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(STDIO_SERVER), str(root)])
    return BareClient(lambda: stdio_client(params))


@contextlib.contextmanager
def http_server(root: Path) -> Any:
    """The HTTP server run for the bare client, on a free port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(HTTP_SERVER), str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise BenchmarkSetupError("the HTTP server for the bare client did not start")
            with socket.socket() as attempt:
                if attempt.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def bare_http(url: str) -> BareClient:
    from mcp.client import streamable_http

    opener = getattr(streamable_http, "streamable_http_client", None)
    if opener is None:  # mcp 1.x before streamable_http_client
        opener = getattr(streamable_http, "streamablehttp_client")  # noqa: B009
    return BareClient(lambda: opener(url))


def _guarded(runtime: ToolRuntime) -> Callable[[], Any]:
    serial = iter(range(10**9))

    def call() -> Any:
        result = runtime.execute(ToolCall(f"c{next(serial)}", "read_note", ARGUMENTS))
        if not result.ok:
            raise BenchmarkSetupError(f"the guarded call failed: {result.code} {result.message}")
        return result

    return call


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(f"MCP transport benchmark: Python {sys.version.split()[0]}, {machine()}")
    started = time.perf_counter()
    root = directory / "proj"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("hello\n")
    from pytest_toolguard.bridges.guards.mcp_server import from_mcp_command, from_mcp_http

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stdio_specs = from_mcp_command(
            [sys.executable, str(STDIO_SERVER), "{workspace}"], tools=["read_note"]
        )
        http_specs = from_mcp_http(
            [sys.executable, str(HTTP_SERVER), "{workspace}", "--port", "{port}"],
            tools=["read_note"],
        )
    capabilities = Capabilities(allowed_risks=frozenset({Risk.READ}))
    runtimes = {
        transport: ToolRuntime(
            ToolRegistry(specs), str(root), capabilities, SQLiteAuditStore(":memory:")
        )
        for transport, specs in (("stdio", stdio_specs), ("http", http_specs))
    }
    with contextlib.ExitStack() as stack:
        for runtime in runtimes.values():
            stack.callback(runtime.close)
        url = stack.enter_context(http_server(root))
        bare = {"stdio": bare_stdio(root), "http": bare_http(url)}
        for client in bare.values():
            stack.callback(client.close)
        calls: dict[str, Callable[[], Any]] = {}
        cpu: dict[str, CpuTally] = {}
        for transport in ("stdio", "http"):
            variants = {"guard": _guarded(runtimes[transport]), "bare": bare[transport].call}
            for kind, call in variants.items():
                name = f"{transport} {kind}"
                cpu[name] = CpuTally()
                calls[name] = cpu[name].of(call)
        samples = measure(
            calls, warmup=options.warmup, blocks=options.blocks, per_block=options.per_block
        )
    print(
        f"{options.blocks} alternating blocks of {options.per_block} calls per variant; "
        f"{time.perf_counter() - started:.1f} s"
    )
    print(f"{'variant':<14}{'µs / call':>12}{'p10':>10}{'p90':>10}{'CPU µs / call':>16}")
    for name, got in samples.items():
        print(
            f"{name:<14}{got.median_us:>12.1f}"
            f"{got.percentile_us(0.1):>10.1f}{got.percentile_us(0.9):>10.1f}"
            f"{cpu[name].per_call_us:>16.1f}"
        )
    print("(CPU: this process's, every thread, mean per call; the servers' own not counted)")
    for transport, (key, label) in ROWS.items():
        value, low, high = ratio(samples[f"{transport} guard"], samples[f"{transport} bare"])
        print(f"{label}: {value:.2f} (blocks {low:.2f} - {high:.2f})")
        record(key, value, low, high)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--per-block", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where the temporary directory is made")
    parser.add_argument("--keep", action="store_true", help="keep the temporary files")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
