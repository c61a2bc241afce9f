"""The seed article's executor, as the article writes it: baseline (c).

Sections 3, 4 and 8 of ``shared/seeds/003_*.txt``: a ``Draft202012Validator``
built for every call (section 3.2), a path checked with ``Path.resolve()`` +
``relative_to`` and then opened (section 4.2: check-then-open, which a
swapped symlink defeats), the handler called inline (the article never shows
its ``run_with_timeout``, so this one enforces no deadline and pays no thread
handoff), and the audit row written as two commits: the same two plain
``sqlite3`` commits as the floor (b), so the comparison is about everything
else.

Self-contained on purpose: nothing from ``pytest_toolguard``. Not safe, and
not a model to follow; it is here to be measured against.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bare_audit import BareAuditTable, running_row
from jsonschema import Draft202012Validator

PREVIEW_LIMIT = 500

READ_TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 300},
        "max_chars": {"type": "integer", "minimum": 1, "maximum": 20000, "default": 4000},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def validate_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """Section 3.2: a new validator per call, every error as ``path: message``."""
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda item: list(item.path))
    result: list[str] = []
    for error in errors:
        location = ".".join(str(part) for part in error.path) or "$"
        result.append(f"{location}: {error.message}")
    return result


class NaiveWorkspace:
    """Section 4.2: resolve, then check the parent-child relation."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve(strict=True)

    def resolve(self, value: str, must_exist: bool = False) -> Path:
        candidate = (self.root / value).resolve(strict=must_exist)
        try:
            candidate.relative_to(self.root)
        except ValueError as error:
            raise PermissionError(f"path outside workspace: {value}") from error
        return candidate


def make_read_text(workspace: NaiveWorkspace) -> Callable[..., dict[str, Any]]:
    """Section 4.2's read tool."""

    def read_text(path: str, max_chars: int = 4000) -> dict[str, Any]:
        target = workspace.resolve(path, must_exist=True)
        if not target.is_file():
            raise IsADirectoryError(path)
        content = target.read_text(encoding="utf-8")
        return {
            "path": target.relative_to(workspace.root).as_posix(),
            "content": content[:max_chars],
            "truncated": len(content) > max_chars,
            "total_chars": len(content),
        }

    return read_text


@dataclass(frozen=True, slots=True)
class NaiveResult:
    call_id: str
    ok: bool
    code: str
    message: str
    data: Any = None


class NaiveExecutor:
    """Section 8's minimal executor, with one tool: ``read_text``."""

    def __init__(self, workspace_root: Path, audit: BareAuditTable) -> None:
        workspace = NaiveWorkspace(workspace_root)
        self.tools: dict[str, tuple[dict[str, Any], Callable[..., Any]]] = {
            "read_text": (READ_TEXT_SCHEMA, make_read_text(workspace)),
        }
        self.audit = audit

    def execute(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> NaiveResult:
        started = time.perf_counter()
        tool = self.tools.get(tool_name)
        if tool is None:
            return NaiveResult(call_id, False, "TOOL_NOT_FOUND", f"unknown tool: {tool_name}")
        schema, handler = tool
        errors = validate_arguments(schema, arguments)
        if errors:
            return NaiveResult(call_id, False, "INVALID_ARGUMENT", "; ".join(errors))

        arguments_json = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        row_id = self.audit.insert_running(
            running_row(
                call_id,
                tool_name=tool_name,
                arguments_json=arguments_json,
                arguments_hash=hashlib.sha256(arguments_json.encode("utf-8")).hexdigest(),
                started_at=_now(),
            )
        )
        try:
            data = handler(**arguments)
            result = NaiveResult(call_id, True, "OK", "tool completed", data)
        except PermissionError as error:
            result = NaiveResult(call_id, False, "PATH_OUTSIDE_WORKSPACE", str(error))
        except Exception as error:
            result = NaiveResult(call_id, False, "EXECUTION_ERROR", str(error))
        duration_ms = int((time.perf_counter() - started) * 1000)
        self.audit.finish(
            row_id,
            state="SUCCEEDED" if result.ok else "FAILED",
            result_code=result.code,
            result_preview=json.dumps(result.data, ensure_ascii=False)[:PREVIEW_LIMIT],
            error_message="" if result.ok else result.message,
            finished_at=_now(),
            duration_ms=duration_ms,
        )
        return result


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
