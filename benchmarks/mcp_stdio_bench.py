"""Benchmark of ``from_mcp_command``: one stdio call through the guard
(``ToolRuntime.execute`` on the wrapped tool: the pipeline, the audit row,
the hop to the server's event loop thread) against the same call through
the bare SDK client (``stdio_client`` + ``ClientSession.call_tool``, driven
from synchronous code the same way, on an event loop thread), in one run
(alternating blocks), reported, never asserted.

    .venv/bin/python benchmarks/mcp_stdio_bench.py     # about 20 s
    make bench                                         # with the others

Both talk to their own instance of the same server (the test suite's
Python file server, ``tests/mcp_servers/files_server.py``) reading the
same small note.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import warnings
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

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp_servers" / "files_server.py"
ARGUMENTS = {"path": "notes/a.md"}


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("mcp-stdio-bench", _parse(argv), _run, catch=BenchmarkSetupError)


class BareClient:
    """The SDK's own client on an event loop thread of its own."""

    def __init__(self, root: Path) -> None:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        ready: asyncio.Future[Any] = self.loop.create_future()
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER), str(root)])

        async def serve() -> None:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
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


async def _wait(future: asyncio.Future[Any]) -> Any:
    return await future


def _run(options: argparse.Namespace, directory: Path) -> int:
    print(f"stdio MCP benchmark: Python {sys.version.split()[0]}, {machine()}")
    started = time.perf_counter()
    root = directory / "proj"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("hello\n")
    from pytest_toolguard.bridges.mcp import from_mcp_command

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        registry = ToolRegistry(from_mcp_command([sys.executable, str(SERVER), "{workspace}"]))
    capabilities = Capabilities(allowed_risks=frozenset({Risk.READ}))
    runtime = ToolRuntime(registry, str(root), capabilities, SQLiteAuditStore(":memory:"))
    serial = iter(range(10**9))

    def guarded() -> Any:
        result = runtime.execute(ToolCall(f"c{next(serial)}", "read_note", ARGUMENTS))
        if not result.ok:
            raise BenchmarkSetupError(f"the guarded call failed: {result.code} {result.message}")
        return result

    bare = BareClient(root)
    try:
        samples = measure(
            {"guard": guarded, "bare": bare.call},
            warmup=options.warmup,
            blocks=options.blocks,
            per_block=options.per_block,
        )
    finally:
        bare.close()
        runtime.close()
    print(
        f"{options.blocks} alternating blocks of {options.per_block} calls per variant; "
        f"{time.perf_counter() - started:.1f} s"
    )
    print(f"{'variant':<10}{'µs / call':>12}{'p10':>10}{'p90':>10}")
    for name, got in samples.items():
        print(
            f"{name:<10}{got.median_us:>12.1f}"
            f"{got.percentile_us(0.1):>10.1f}{got.percentile_us(0.9):>10.1f}"
        )
    value, low, high = ratio(samples["guard"], samples["bare"])
    print(
        f"stdio call through the guard / the same call through the bare SDK client: "
        f"{value:.2f} (blocks {low:.2f} - {high:.2f})"
    )
    record("mcp_stdio_guard_bare", value, low, high)
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
