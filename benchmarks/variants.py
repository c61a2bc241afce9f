"""What the benchmark times: one zero-argument callable per variant, each
making one ``read_text`` call of the same 1 KB file.

Every builder checks once that its variant really does the work (the file's
content comes back) before it is timed: a variant that fails fast would
look fast.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bare_audit import BareAuditTable, running_row
from naive_executor import NaiveExecutor

from pytest_toolguard import (
    AuditRecord,
    CallState,
    Capabilities,
    ErrorCode,
    SQLiteAuditStore,
    ToolCall,
    ToolContext,
    ToolRuntime,
    Workspace,
)
from pytest_toolguard.audit import Outcome
from pytest_toolguard.tools import builtin_registry, read_text

SAMPLE_FILE = "notes.txt"
SAMPLE_BYTES = 1024
ARGUMENTS = {"path": SAMPLE_FILE}
ARGUMENTS_JSON = json.dumps(ARGUMENTS, sort_keys=True)
ARGUMENTS_HASH = hashlib.sha256(ARGUMENTS_JSON.encode("utf-8")).hexdigest()
TIMESTAMP = "2026-01-05T09:30:00.000+00:00"


def running_record(call_id: str) -> AuditRecord:
    """The RUNNING row of one ``read_text`` call, as the runtime starts it."""
    return AuditRecord(
        call_id=call_id,
        session_id="default",
        actor="agent",
        tool_name="read_text",
        risk="read",
        arguments_json=ARGUMENTS_JSON,
        arguments_hash=ARGUMENTS_HASH,
        decision="allow",
        rule="policy.allow",
        reason="every rule passed",
        state=CallState.RUNNING,
        result_preview="",
        error_message="",
        started_at=TIMESTAMP,
    )


PREVIEW_LIMIT = 500


class BenchmarkSetupError(RuntimeError):
    """A variant does not do what it should; its timings would mean nothing."""


@dataclass(frozen=True, slots=True)
class Variant:
    key: str
    """Short name used in ratios: main, a, b, c, s, t."""
    label: str
    call: Callable[[], object]
    close: Callable[[], object]


def sample_text(size: int = SAMPLE_BYTES) -> str:
    """Plain notes of exactly ``size`` ASCII bytes, with the colons and digits
    of real notes (so redaction takes its usual path) and no secrets."""
    lines = (
        f"- 2026-01-{day:02d}: reviewed the feedback export, {day * 7} rows, next step: report\n"
        for day in itertools.cycle(range(1, 29))
    )
    text = ""
    for line in lines:
        if len(text) + len(line) > size:
            return text + "x" * (size - len(text) - 1) + "\n"
        text += line
    raise AssertionError("unreachable")


def make_workspace(directory: Path) -> tuple[Path, str]:
    """A workspace directory holding the sample file; (its path, the content)."""
    root = directory / "workspace"
    root.mkdir()
    content = sample_text()
    (root / SAMPLE_FILE).write_text(content, encoding="utf-8")
    return root, content


def sample_preview(content: str) -> str:
    """A preview as long as the one the runtime stores for this call."""
    output = {"content": content, "path": SAMPLE_FILE, "total_chars": len(content)}
    return json.dumps(output, ensure_ascii=False, sort_keys=True)[:PREVIEW_LIMIT]


def runtime_execute(
    root: Path, database: Path, content: str, isolation: Literal["inline", "thread"] = "inline"
) -> Variant:
    """main: the whole pipeline, audit on disk, inline isolation (the
    faster opt-in mode), a fresh call id. (t): the same in thread mode,
    the default, whose deadline hands each call to a worker thread."""
    store = SQLiteAuditStore(database)
    runtime = ToolRuntime(builtin_registry(), root, audit=store, isolation=isolation)
    key = "main" if isolation == "inline" else "t"
    ids = itertools.count()

    def call() -> object:
        return runtime.execute(
            ToolCall(call_id=f"{key}-{next(ids)}", tool_name="read_text", arguments=ARGUMENTS)
        )

    result = runtime.execute(ToolCall(call_id="check", tool_name="read_text", arguments=ARGUMENTS))
    if not (result.ok and result.data["content"] == content):
        raise BenchmarkSetupError(f"{key}: read_text answered {result.code}: {result.message}")
    settings = store.settings()
    if (settings.journal_mode, settings.synchronous) != ("wal", "NORMAL"):
        raise BenchmarkSetupError(f"{key}: the audit store runs with {settings}")

    def close() -> None:
        runtime.close()
        store.close()

    label = "ToolRuntime.execute(read_text)"
    return Variant(key, label if key == "main" else f"{label}, thread mode", call, close)


def handler_direct(root: Path, content: str) -> Variant:
    """(a): the work itself, the read_text handler called directly."""
    workspace = Workspace(root)
    ctx = ToolContext(
        call_id="direct",
        session_id="default",
        actor="agent",
        workspace=workspace,
        capabilities=Capabilities(),
        variables={},
    )

    def call() -> object:
        return read_text.handler(ctx, path=SAMPLE_FILE)

    if read_text.handler(ctx, path=SAMPLE_FILE)["content"] != content:
        raise BenchmarkSetupError("(a): the handler did not return the file's content")
    return Variant("a", "read_text handler, called directly", call, workspace.close)


def bare_commits(database: Path, content: str) -> Variant:
    """(b): the floor, two plain sqlite3 commits of an audit-shaped row."""
    table = BareAuditTable(database)
    if table.settings() != ("wal", 1):
        raise BenchmarkSetupError(f"(b): the bare table runs with {table.settings()}")
    preview = sample_preview(content)
    ids = itertools.count()

    def call() -> object:
        row_id = table.insert_running(
            running_row(
                f"bare-{next(ids)}",
                tool_name="read_text",
                arguments_json=ARGUMENTS_JSON,
                arguments_hash=ARGUMENTS_HASH,
                started_at=TIMESTAMP,
            )
        )
        table.finish(
            row_id,
            state="SUCCEEDED",
            result_code="OK",
            result_preview=preview,
            error_message="",
            finished_at=TIMESTAMP,
            duration_ms=0,
        )
        return row_id

    return Variant("b", "floor: 2 bare SQLite commits (INSERT, UPDATE)", call, table.close)


def naive_executor(root: Path, database: Path, content: str) -> Variant:
    """(c): the seed article's executor, with the floor's two commits."""
    table = BareAuditTable(database)
    executor = NaiveExecutor(root, table)
    ids = itertools.count()

    def call() -> object:
        return executor.execute(f"naive-{next(ids)}", "read_text", ARGUMENTS)

    result = executor.execute("check", "read_text", ARGUMENTS)
    if not (result.ok and result.data["content"] == content):
        raise BenchmarkSetupError(f"(c): read_text answered {result.code}: {result.message}")
    return Variant("c", "naive executor (seed sections 3, 4, 8)", call, table.close)


def store_only(database: Path, content: str) -> Variant:
    """(s): SQLiteAuditStore.start + finish of the same row, no executor."""
    store = SQLiteAuditStore(database)
    preview = sample_preview(content)
    ids = itertools.count()

    def call() -> object:
        record = running_record(f"store-{next(ids)}")
        audit_id, _ = store.start(record)
        assert audit_id is not None
        store.finish(
            audit_id,
            Outcome(
                state=CallState.SUCCEEDED,
                result_code=ErrorCode.OK,
                result_preview=preview,
                error_message="",
                finished_at=TIMESTAMP,
                duration_ms=0,
            ),
        )
        return audit_id

    return Variant("s", "SQLiteAuditStore.start + finish only", call, store.close)


def build_all(directory: Path) -> list[Variant]:
    """Every variant, each with its own database file under ``directory``."""
    root, content = make_workspace(directory)
    return [
        runtime_execute(root, directory / "main-audit.db", content),
        handler_direct(root, content),
        bare_commits(directory / "bare.db", content),
        naive_executor(root, directory / "naive.db", content),
        store_only(directory / "store.db", content),
        runtime_execute(root, directory / "thread-audit.db", content, isolation="thread"),
    ]
