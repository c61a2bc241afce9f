"""The speed targets, one row each, gathered from the benchmarks of one
``make bench`` run and printed with their verdicts.

Each benchmark script calls ``record(key, value, low, high)`` for the rows it
measures (a ratio of variants interleaved in that script's own run, with the
range over its blocks or rounds); the values go to a JSON file
(``$TOOLGUARD_BENCH_SUMMARY``, default ``build/bench-summary.json``) that
``make bench`` empties first. ``python benchmarks/summary.py`` prints the
table; a row no script recorded is printed as ``not run``. Never asserted:
a missed target prints MISS and the exit status stays 0.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "build" / "bench-summary.json"


@dataclass(frozen=True, slots=True)
class Row:
    """One target: ``value <= limit`` (or ``>=`` when ``at_least``); a row
    without a limit is reported only."""

    key: str
    label: str
    limit: float | None
    at_least: bool = False
    unit: str = ""

    @property
    def target(self) -> str:
        if self.limit is None:
            return "reported"
        return f"{'>=' if self.at_least else '<='} {self.limit:g}{self.unit}"

    def verdict(self, value: float) -> str:
        if self.limit is None:
            return ""
        met = value >= self.limit if self.at_least else value <= self.limit
        return "PASS" if met else "MISS"


ROWS = (
    Row("sdk_mcp", "in-process MCP tool: execute / the server's own call_tool", 1.2),
    Row("sdk_openai", "Agents SDK FunctionTool: guarded_function_tool / on_invoke_tool", 1.2),
    Row("sdk_langchain", "LangChain tool: execute / tool.invoke", 1.2),
    Row("sdk_langgraph", "LangChain tool: wrap_tool_call / tool.invoke(tool_call)", 1.2),
    Row(
        "mcp_stdio_guard_bare",
        "MCP server over stdio: call through the guard / the bare SDK client",
        1.2,
    ),
    Row(
        "mcp_http_guard_bare",
        "MCP server over HTTP: call through the guard / the bare SDK client",
        1.2,
    ),
    Row(
        "throughput_shipped_fake",
        "fault-matrix throughput, shipped matrix, fake world (one CPU, serial)",
        200,
        at_least=True,
        unit=" cells/s",
    ),
    Row(
        "throughput_example_fake",
        "fault-matrix throughput, example project, fake world (one CPU, serial)",
        200,
        at_least=True,
        unit=" cells/s",
    ),
    Row(
        "throughput_shipped_directory",
        "fault-matrix throughput, shipped matrix, directory world (one CPU, serial)",
        None,
        unit=" cells/s",
    ),
    Row(
        "throughput_example_directory",
        "fault-matrix throughput, example project, directory world (one CPU, serial)",
        None,
        unit=" cells/s",
    ),
    Row("execute_naive", "execute(read_text) / the seed's naive executor (c)", 1.0),
    Row("execute_floor", "execute(read_text) / two bare commits (b)", 3.0),
    Row("xdist_speedup", "serial / -n 2 on the fault matrix, whole runs", 1.7, at_least=True),
    Row("xdist_cpu", "CPU seconds: -n 2 / serial on the fault matrix", None),
    Row(
        "xdist_worker_startup",
        "-n 2 worker start-up: its process start to its collection finished",
        2.0,
        unit=" s",
    ),
    Row("serial_startup", "serial start-up: process start to collection finished", None, unit=" s"),
    Row("replay_plain", "replay per interaction / plain execute", 2.0),
    Row("setup_empty", "per-cassette set-up / empty pytest test", 3.0),
    Row("cell_empty", "fault cell median / empty pytest test", 5.0),
    Row(
        "directory_fake_replay",
        "directory-world replay per interaction / fake-world replay per interaction",
        2.0,
    ),
    Row("directory_cell_empty", "directory-world cell / empty pytest test", 10.0),
    Row("directory_fake_cell", "directory-world cell / fake-world cell", 2.0),
    Row("redaction_adversarial", "worst adversarial 100 KB / plain 100 KB (redaction)", 5.0),
    Row(
        "load_10k",
        "load of a 10,000-interaction cassette (JSON, as recorded; no cache)",
        0.5,
        unit=" s",
    ),
)

_BY_KEY = {row.key: row for row in ROWS}


def summary_path() -> Path:
    return Path(os.environ.get("TOOLGUARD_BENCH_SUMMARY", DEFAULT_PATH))


def record(key: str, value: float, low: float, high: float, note: str = "") -> None:
    """Keep one row's measurement for the summary (the last one wins)."""
    if key not in _BY_KEY:
        raise KeyError(f"no summary row {key!r}")
    path = summary_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    kept[key] = {"value": value, "low": low, "high": high, "note": note}
    path.write_text(json.dumps(kept, indent=1), encoding="utf-8")


def table(kept: dict[str, dict[str, object]]) -> str:
    """The summary table in Markdown."""
    lines = [
        "| row | value | range | target | verdict |",
        "|---|---|---|---|---|",
    ]
    for row in ROWS:
        got = kept.get(row.key)
        if got is None:
            lines.append(f"| {row.label} | not run | | {row.target} | |")
            continue
        value, low, high = (float(got[name]) for name in ("value", "low", "high"))  # type: ignore[arg-type]
        note = f" ({got['note']})" if got.get("note") else ""
        lines.append(
            f"| {row.label}{note} | {value:.2f}{row.unit} | {low:.2f} - {high:.2f} "
            f"| {row.target} | {row.verdict(value)} |"
        )
    return "\n".join(lines)


def main() -> int:
    path = summary_path()
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    print("Summary of this run (each ratio measured side by side within its benchmark):")
    print(table(kept))
    return 0


if __name__ == "__main__":
    sys.exit(main())
