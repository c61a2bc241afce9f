"""Benchmark of the guard around the tools users already have: the same
trivial tool body called through our guard and through the SDK's own call,
side by side in one run (alternating blocks), reported, never asserted.

    .venv/bin/python benchmarks/sdk_guard_bench.py           # about 20 s
    .venv/bin/python benchmarks/sdk_guard_bench.py --quick   # a check that it runs, 3 s
    make bench                                               # with the others

The body is ``echo(text: str) -> str: return text``, registered with each
SDK as its users would:

* an in-process MCP server (the SDK's ``MCPServer``, ``readOnlyHint``):
  ``ToolRuntime.execute`` of ``from_mcp_server``'s tool against the
  server's own ``call_tool``; and ``aexecute`` on the same loop (printed,
  not a summary row);
* an OpenAI Agents SDK ``FunctionTool`` (``@function_tool``): the
  ``on_invoke_tool`` of ``guarded_function_tool`` over ``from_openai`` of
  it (what a ``Runner`` calls once the tool is guarded) against the tool's
  own ``on_invoke_tool``; and ``ToolRuntime.execute`` of ``from_openai``'s
  tool, from synchronous code, against the same bare call;
* a LangChain tool (``@tool``): ``ToolRuntime.execute`` of
  ``from_langchain``'s tool against ``tool.invoke(arguments)``; and
  LangGraph's ``wrap_tool_call`` (``toolguard_wrap_tool_call``) around
  ``tool.invoke(tool_call)`` against that call alone.

A coroutine (the MCP server's ``call_tool``, a ``FunctionTool``'s
``on_invoke_tool``) is driven from this thread with ``run_until_complete``
on one event loop kept for the run: the cheapest way synchronous code has
to run it. Every runtime has an in-memory audit store and the default
thread isolation; every call has a fresh call id (and, for the Agents SDK,
a fresh ``ToolContext`` on both sides, as a ``Runner`` makes one per call).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from summary import record
from timing import in_temp_dir, machine, measure, package_version, ratio
from variants import BenchmarkSetupError

from pytest_toolguard import (
    Capabilities,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)

ARGUMENTS = {"text": "hello"}
ARGUMENTS_JSON = '{"text": "hello"}'
LIMIT = 1.2


def echo(text: str) -> str:
    """Give the text back."""
    return text


@dataclass(frozen=True, slots=True)
class Pair:
    """One row: ``guard / bare`` (variant keys); ``summary`` is its key in
    ``summary.py``, if any."""

    label: str
    guard: str
    bare: str
    summary: str | None = None


PAIRS = (
    Pair("MCP in-process: execute / server.call_tool", "mcp guard", "mcp bare", "sdk_mcp"),
    Pair("MCP in-process: aexecute / server.call_tool", "mcp aexecute", "mcp bare"),
    Pair(
        "Agents SDK: guarded_function_tool / on_invoke_tool",
        "agents guard",
        "agents bare",
        "sdk_openai",
    ),
    Pair("Agents SDK: execute(from_openai) / on_invoke_tool", "agents execute", "agents bare"),
    Pair("LangChain: execute / tool.invoke", "langchain guard", "langchain bare", "sdk_langchain"),
    Pair(
        "LangGraph: wrap_tool_call / tool.invoke(tool_call)",
        "langgraph guard",
        "langgraph bare",
        "sdk_langgraph",
    ),
)


def main(argv: list[str] | None = None) -> int:
    return in_temp_dir("sdk-guard-bench", _parse(argv), _run, catch=BenchmarkSetupError)


class Calls:
    """The variants' calls, each checked once before timing; ``close``
    closes the runtimes and the loop."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.runtimes: list[ToolRuntime] = []
        self.calls: dict[str, Callable[[], Any]] = {}
        self._serial = iter(range(10**9))
        self._mcp(root)
        self._agents(root)
        self._langchain(root)

    def _runtime(self, specs: list[Any], root: Path) -> ToolRuntime:
        capabilities = Capabilities(allowed_risks=frozenset({Risk.READ}))
        runtime = ToolRuntime(
            ToolRegistry(specs), str(root), capabilities, SQLiteAuditStore(":memory:")
        )
        self.runtimes.append(runtime)
        return runtime

    def _execute(self, runtime: ToolRuntime) -> Callable[[], Any]:
        def call() -> Any:
            result = runtime.execute(ToolCall(f"c{next(self._serial)}", "echo", ARGUMENTS))
            if not result.ok:
                raise BenchmarkSetupError(f"a guarded call failed: {result.code} {result.message}")
            return result

        return call

    def _mcp(self, root: Path) -> None:
        from mcp.server.mcpserver import MCPServer
        from mcp.types import ToolAnnotations

        from pytest_toolguard.bridges.guards.mcp_server import (
            from_mcp_server,
            restoring_process_state,
        )

        with restoring_process_state():
            server = MCPServer("bench")
        server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))(echo)
        runtime = self._runtime(from_mcp_server(server), root)
        self.calls["mcp guard"] = self._execute(runtime)

        def aexecute() -> Any:
            call = ToolCall(f"c{next(self._serial)}", "echo", ARGUMENTS)
            result = self.loop.run_until_complete(runtime.aexecute(call))
            if not result.ok:
                raise BenchmarkSetupError(f"aexecute failed: {result.code} {result.message}")
            return result

        self.calls["mcp aexecute"] = aexecute
        self.calls["mcp bare"] = lambda: self.loop.run_until_complete(
            server.call_tool("echo", ARGUMENTS)
        )

    def _agents(self, root: Path) -> None:
        from agents import function_tool
        from agents.tool_context import ToolContext

        from pytest_toolguard.bridges import from_openai
        from pytest_toolguard.bridges.guards.openai_agents import guarded_function_tool

        bare = function_tool(echo)
        runtime = self._runtime(from_openai(bare), root)
        guarded = guarded_function_tool(runtime, "echo")

        def context() -> Any:
            return ToolContext(
                context=None,
                tool_name="echo",
                tool_call_id=f"t{next(self._serial)}",
                tool_arguments=ARGUMENTS_JSON,
            )

        def invoking(tool: Any) -> Callable[[], Any]:
            def call() -> Any:
                output = self.loop.run_until_complete(
                    tool.on_invoke_tool(context(), ARGUMENTS_JSON)
                )
                if output != ARGUMENTS["text"]:
                    raise BenchmarkSetupError(f"{tool.name} answered {output!r}")
                return output

            return call

        self.calls["agents guard"] = invoking(guarded)
        self.calls["agents execute"] = self._execute(runtime)
        self.calls["agents bare"] = invoking(bare)

    def _langchain(self, root: Path) -> None:
        from langchain_core.tools import tool

        from pytest_toolguard.bridges import from_langchain
        from pytest_toolguard.bridges.guards.langgraph import toolguard_wrap_tool_call

        bare = tool(echo)
        runtime = self._runtime(from_langchain(bare), root)
        wrap = toolguard_wrap_tool_call(runtime)

        def tool_call() -> dict[str, Any]:
            serial = f"l{next(self._serial)}"
            return {"id": serial, "name": "echo", "args": ARGUMENTS, "type": "tool_call"}

        def handler(request: Any) -> Any:
            return bare.invoke(request.tool_call)

        def wrapped() -> Any:
            message = wrap(types.SimpleNamespace(tool_call=tool_call()), handler)
            if getattr(message, "status", "") != "success":
                raise BenchmarkSetupError(f"wrap_tool_call answered {message!r}")
            return message

        self.calls["langchain guard"] = self._execute(runtime)
        self.calls["langchain bare"] = lambda: bare.invoke(ARGUMENTS)
        self.calls["langgraph guard"] = wrapped
        self.calls["langgraph bare"] = lambda: handler(types.SimpleNamespace(tool_call=tool_call()))

    def check(self) -> None:
        for name, call in self.calls.items():
            try:
                call()
            except BenchmarkSetupError:
                raise
            except Exception as exc:
                raise BenchmarkSetupError(f"{name}: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        for runtime in self.runtimes:
            runtime.close()
        self.loop.close()


def _run(options: argparse.Namespace, directory: Path) -> int:
    versions = ", ".join(
        f"{name} {package_version(name)}" for name in ("mcp", "openai-agents", "langchain-core")
    )
    print(f"SDK guard benchmark: Python {sys.version.split()[0]}, {versions}; {machine()}")
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = Calls(directory)
    try:
        calls.check()
        samples = measure(
            calls.calls, warmup=options.warmup, blocks=options.blocks, per_block=options.per_block
        )
    finally:
        calls.close()
    print(
        f"{options.blocks} alternating blocks of {options.per_block} calls per variant, after "
        f"{options.warmup} warm-up calls; {time.perf_counter() - started:.1f} s"
    )
    print(f"{'variant':<18}{'median µs':>11}{'p10':>9}{'p90':>9}")
    for name, got in samples.items():
        print(
            f"{name:<18}{got.median_us:>11.1f}"
            f"{got.percentile_us(0.1):>9.1f}{got.percentile_us(0.9):>9.1f}"
        )
    print()
    print(f"{'guard / bare (median of the per-block ratios)':<54}{'value':>7}{'range':>15}  target")
    for pair in PAIRS:
        value, low, high = ratio(samples[pair.guard], samples[pair.bare])
        verdict = "PASS" if value <= LIMIT else "MISS"
        print(f"{pair.label:<54}{value:>7.2f}{low:>8.2f} - {high:<5.2f}  <= {LIMIT:g} {verdict}")
        if pair.summary is not None:
            record(pair.summary, value, low, high)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=200, help="warm-up calls per variant")
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks (default 10)")
    parser.add_argument("--per-block", type=int, default=200, help="calls per variant per block")
    parser.add_argument(
        "--quick", action="store_true", help="3 blocks of 30 calls: a check that it runs"
    )
    parser.add_argument("--dir", default=None, help="where the temporary directory is made")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    options = parser.parse_args(argv)
    if options.quick:
        options.warmup, options.blocks, options.per_block = 20, 3, 30
    return options


if __name__ == "__main__":
    sys.exit(main())
