"""The seed article's feedback-analysis run, plus the calls a model gets
wrong, through the real executor. ``python -m pytest_toolguard.demo``.

It builds a throw-away workspace, runs a three-step plan (read the CSV, write
the analysis JSON, write the Markdown report) with refused calls in between,
and prints every result and every audit row.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .audit import SQLiteAuditStore
from .capabilities import Capabilities, Risk
from .contract import ToolCall, ToolResult
from .plan import Artifact, PlanProgress, PlanStep
from .runtime import ToolRuntime
from .tools import builtin_registry

__toolguard_owned__ = False  # tools' code: an inline deadline may interrupt it (runtime/inline.py)

RUN_ID = "run-001"
FEEDBACK_CSV = """id,channel,rating,text
1,app,2,The export button crashes the app
2,email,5,Love the new dashboard
3,app,1,Login fails after the update
4,web,3,Search is slow on large projects
5,email,4,Docs helped me set up in minutes
6,web,1,Export to CSV loses accents
"""
ANALYSIS_SCHEMA = {
    "type": "object",
    "properties": {
        "items": {"type": "array"},
        "failed_batches": {"type": "array"},
        "categories": {"type": "object"},
    },
    "required": ["items", "failed_batches"],
}


def _plan() -> PlanProgress:
    artifacts = f"runs/{RUN_ID}/artifacts"
    return PlanProgress(
        [
            PlanStep("step_1", frozenset({"read_csv"}), description="read the feedback"),
            PlanStep(
                "step_2",
                frozenset({"write_json_file"}),
                artifacts=(Artifact(f"{artifacts}/feedback_analysis.json", ANALYSIS_SCHEMA),),
            ),
            PlanStep(
                "step_3",
                # The model may resubmit the analysis while writing the report.
                frozenset({"write_markdown_file", "write_json_file"}),
                required_tools=("write_markdown_file",),
                artifacts=(Artifact(f"{artifacts}/report.md"),),
            ),
        ]
    )


def _analysis(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def category(text: str) -> str:
        lowered = text.lower()
        if any(word in lowered for word in ("crash", "fails", "loses", "slow")):
            return "bug"
        return "praise"

    items = [
        {
            "id": row["id"],
            "channel": row["channel"],
            "category": category(row["text"]),
            "evidence": row["text"],
        }
        for row in rows
    ]
    return {
        "items": items,
        "failed_batches": [],
        "categories": dict(sorted(Counter(item["category"] for item in items).items())),
    }


def run_demo(out: Any = sys.stdout) -> list[ToolResult]:
    """Run the scenario; print results and audit rows to ``out``; return the results."""
    with tempfile.TemporaryDirectory(prefix="toolguard-demo-") as tmp:
        workspace = Path(tmp) / "workspace"
        (workspace / "data").mkdir(parents=True)
        (workspace / "data" / "feedback.csv").write_text(FEEDBACK_CSV, encoding="utf-8")
        (workspace / ".env").write_text("API_KEY=do-not-read\n", encoding="utf-8")
        (Path(tmp) / "outside.txt").write_text("outside the workspace\n", encoding="utf-8")

        capabilities = Capabilities(
            allowed_tools=frozenset(
                {"read_csv", "read_text", "write_file", "write_json_file", "write_markdown_file"}
            ),
            allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
            read_roots=("data", f"runs/{RUN_ID}"),
            write_roots=(f"runs/{RUN_ID}/artifacts",),
            max_write_bytes=20_000,
        )
        plan = _plan()
        audit = SQLiteAuditStore(Path(tmp) / "audit.db")
        runtime = ToolRuntime(
            builtin_registry(),
            str(workspace),
            capabilities,
            audit,
            hooks=[plan],
            variables={"run_id": RUN_ID},
        )
        results: list[ToolResult] = []
        number = 0

        def call(tool_name: str, arguments: Any, note: str, key: str | None = None) -> ToolResult:
            nonlocal number
            number += 1
            result = runtime.execute(
                ToolCall(
                    call_id=f"call-{number:02d}",
                    tool_name=tool_name,
                    arguments=arguments,
                    actor="demo-agent",
                    session_id="demo-session",
                    idempotency_key=key,
                )
            )
            results.append(result)
            print(f"{number:>2}  {tool_name:<20} {result.code.value:<24} {note}", file=out)
            if not result.ok:
                print(f"    -> {result.message[:110]}", file=out)
            return result

        print("pytest-toolguard demo: the feedback-analysis run of the seed article\n", file=out)
        print(" #  tool                 code                     what the model did", file=out)
        call(
            "write_markdown_file",
            {"artifact_name": "report.md", "content": "# early"},
            "skips the plan",
        )
        call("read_text", {"path": ".env"}, "reads the secrets file")
        call("read_text", {"path": "../outside.txt"}, "climbs out of the workspace")
        call("read_csv", '{"path": "data/feedback.csv"', "sends broken JSON")
        csv_result = call("read_csv", {"path": "data/feedback.csv"}, "step_1: reads the feedback")
        rows = csv_result.data["rows"] if csv_result.ok else []
        call("write_json_file", {"artifact_name": "feedback_analysis.json"}, "forgets content")
        call("write_jsn_file", {"artifact_name": "x.json", "content": {}}, "misspells the tool")
        call(
            "write_file",
            {"path": "runs/run-002/notes.md", "content": "x"},
            "writes into another run",
        )
        call(
            "write_json_file",
            {"artifact_name": "big.json", "content": "x" * 30_000},
            "writes too much",
        )
        analysis = _analysis(rows)
        arguments = {"artifact_name": "feedback_analysis.json", "content": analysis}
        call("write_json_file", arguments, "step_2: writes the analysis", key="analysis-v1")
        call("write_json_file", arguments, "submits it again (same key)", key="analysis-v1")
        report = "# Feedback report\n\n" + "\n".join(
            f"- {name}: {count}" for name, count in analysis["categories"].items()
        )
        call(
            "write_markdown_file",
            {"artifact_name": "report.md", "content": report},
            "step_3: writes the report",
        )
        call("read_csv", {"path": "data/feedback.csv"}, "calls after the plan is done")

        stop = plan.stop_validation(runtime.workspace)
        print(
            f"\nstop validation: {'ok' if stop.ok else 'FAILED ' + '; '.join(stop.problems)}",
            file=out,
        )
        print(f"files written: {', '.join(runtime.workspace.walk(f'runs/{RUN_ID}'))}", file=out)

        print("\naudit log (one row per call):", file=out)
        header = (
            f"{'call':<8} {'tool':<20} {'decision':<8} {'rule':<28} {'state':<10} {'code':<22} idem"
        )
        print(header, file=out)
        print("-" * len(header), file=out)
        for row in audit.rows():
            print(
                f"{row.call_id:<8} {row.tool_name:<20} {row.decision:<8} {row.rule:<28} "
                f"{row.state.value:<10} {(row.result_code.value if row.result_code else '-'):<22} "
                f"{row.idempotency_outcome or '-'}",
                file=out,
            )
        codes = Counter(result.code.value for result in results)
        print(
            f"\n{len(results)} calls, {audit.count()} audit rows: "
            f"{json.dumps(dict(sorted(codes.items())))}",
            file=out,
        )
        runtime.close()
        audit.close()
        return results


if __name__ == "__main__":
    run_demo()
