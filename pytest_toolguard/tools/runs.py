"""The seed article's run tools: read the feedback CSV, write the run's
artifacts, list the run's files.

Artifacts land in ``runs/{run_id}/artifacts/``; ``run_id`` comes from the
runtime's ``variables``, never from the model, so a call cannot pick
another run.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from ..capabilities import Risk
from ..context import ToolContext
from ..registry import PathAccess, tool

ARTIFACTS = "runs/{run_id}/artifacts"


def _artifact_name(suffix: str) -> dict[str, Any]:
    # A bare file name: no separators, no leading dot, the right suffix.
    return {
        "type": "string",
        "minLength": len(suffix) + 1,
        "maxLength": 128,
        "pattern": rf"^[A-Za-z0-9_][A-Za-z0-9_. -]*\{suffix}$",
    }


ARTIFACT_OUTPUT = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "artifact_name": {"type": "string"}},
    "required": ["path", "artifact_name"],
    "additionalProperties": False,
}


def _artifact_path(ctx: ToolContext, artifact_name: str) -> str:
    return f"{ARTIFACTS.format(run_id=ctx.variables['run_id'])}/{artifact_name}"


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 300},
            "max_rows": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "columns": {"type": "array", "items": {"type": "string"}},
            "rows": {"type": "array", "items": {"type": "object"}},
            "row_count": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
        },
        "required": ["path", "columns", "rows", "row_count", "truncated"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("{path}")],
    result_limit=64000,
)
def read_csv(ctx: ToolContext, path: str, max_rows: int = 1000) -> dict[str, Any]:
    """Read a UTF-8 CSV file with a header row; rows come back as objects."""
    text = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes, encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = [{key or "": value or "" for key, value in row.items()} for row in reader]
    return {
        "path": ctx.workspace.resolve(path),
        "columns": list(reader.fieldnames or []),
        "rows": rows[:max_rows],
        "row_count": len(rows),
        "truncated": len(rows) > max_rows,
    }


@tool(
    input_schema={
        "type": "object",
        "properties": {"artifact_name": _artifact_name(".json"), "content": {}},
        "required": ["artifact_name", "content"],
        "additionalProperties": False,
    },
    output_schema=ARTIFACT_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write(ARTIFACTS + "/{artifact_name}", content="content")],
)
def write_json_file(ctx: ToolContext, artifact_name: str, content: Any) -> dict[str, Any]:
    """Write a JSON artifact of the current run (UTF-8, indent 2, sorted keys)."""
    target = _artifact_path(ctx, artifact_name)
    text = json.dumps(content, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    ctx.workspace.write_text(target, text)
    return {"path": target, "artifact_name": artifact_name}


@tool(
    input_schema={
        "type": "object",
        "properties": {
            "artifact_name": _artifact_name(".md"),
            "content": {"type": "string"},
        },
        "required": ["artifact_name", "content"],
        "additionalProperties": False,
    },
    output_schema=ARTIFACT_OUTPUT,
    risk=Risk.WRITE,
    paths=[PathAccess.write(ARTIFACTS + "/{artifact_name}", content="content")],
)
def write_markdown_file(ctx: ToolContext, artifact_name: str, content: str) -> dict[str, Any]:
    """Write a Markdown artifact of the current run (UTF-8)."""
    target = _artifact_path(ctx, artifact_name)
    ctx.workspace.write_text(target, content if content.endswith("\n") else content + "\n")
    return {"path": target, "artifact_name": artifact_name}


@tool(
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    output_schema={
        "type": "object",
        "properties": {
            "run_id": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["run_id", "files"],
        "additionalProperties": False,
    },
    paths=[PathAccess.read("runs/{run_id}")],
)
def list_run_files(ctx: ToolContext) -> dict[str, Any]:
    """List every file of the current run."""
    run_id = ctx.variables["run_id"]
    root = f"runs/{run_id}"
    files = ctx.workspace.walk(root) if ctx.workspace.exists(root) else []
    return {"run_id": run_id, "files": files}
