"""Every vendored rule's generated secrets, sent through real tool calls,
reach no sink: not the arguments, results or messages of the audit rows,
not the files of a recorded cassette, not the raw bytes of the audit
database (``.db``, ``-wal``, ``-shm``).

The examples go in chunks, one chunk per call and per way in: as a write
tool's file contents (a held-out check once found none of these
formats redacted there), as free-text arguments, as a handler's result,
as a file the handler reads back, and in a handler's exception. A secret
is looked for only where its rule, run alone, reports it in the chunk as
sent (a neighbour can end a match early); the count of those is printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EVERY_RISK, Spy, spy_tool
from secret_examples import Example, all_examples

from pytest_toolguard import Capabilities, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.registry import ToolRegistry
from pytest_toolguard.replay import dumps
from pytest_toolguard.replay.recorder import Recorder
from pytest_toolguard.secret_rules import SecretRuleSet, default_rule_set
from pytest_toolguard.tools import builtin_registry

EXAMPLES = all_examples()
CHUNK = 12
CHUNKS = [EXAMPLES[i : i + CHUNK] for i in range(0, len(EXAMPLES), CHUNK)]
SEPARATOR = "\n\n"
OPEN = {"type": "object"}


def chunk_text(chunk: list[Example]) -> str:
    return SEPARATOR.join(example.text for example in chunk)


def expected_secrets(chunk: list[Example], text: str) -> list[str]:
    """The secrets of ``chunk`` that their rules, run alone, report in ``text``."""
    rules = {rule.id: rule for rule in default_rule_set().rules}
    found = []
    for example in chunk:
        alone = SecretRuleSet([rules[example.rule]], default_rule_set().allowlist)
        spans = alone.find(text, exhaustive=True)
        if any(text[f.start : f.end] == example.secret for f in spans):
            found.append(example.secret)
    return found


def registry() -> ToolRegistry:
    spy = Spy()

    def give(ctx: Any, index: int) -> Any:
        return {"output": chunk_text(CHUNKS[index])}

    def fail(ctx: Any, index: int) -> Any:
        raise RuntimeError(f"upstream said: {chunk_text(CHUNKS[index])}")

    specs = [builtin_registry().get(name) for name in ("write_file", "read_text")]
    return ToolRegistry(
        [
            *[spec for spec in specs if spec is not None],
            spy_tool(spy, "note", schema=OPEN),
            spy_tool(spy, "give", schema=OPEN, result=give),
            spy_tool(spy, "fail", schema=OPEN, result=fail),
        ]
    )


def stored_bytes(db: Path) -> dict[str, bytes]:
    files = {}
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        if path.exists():
            files[path.name] = path.read_bytes()
    return files


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every chunk through every way in, recorded; the sinks' contents."""
    root = tmp_path_factory.mktemp("sinks")
    workspace = root / "workspace"
    (workspace / "given").mkdir(parents=True)
    for index, chunk in enumerate(CHUNKS):
        (workspace / "given" / f"chunk-{index}.txt").write_text(chunk_text(chunk), "utf-8")
    db = root / "audit.db"
    store = SQLiteAuditStore(db)
    capabilities = Capabilities(allowed_risks=EVERY_RISK, write_roots=("out",))
    runtime = ToolRuntime(registry(), str(workspace), capabilities, store)
    recorder = Recorder(runtime, name="sinks")
    recorder.start()
    results = []
    for index, chunk in enumerate(CHUNKS):
        text = chunk_text(chunk)
        calls = [
            ToolCall(f"write-{index}", "write_file", {"path": f"out/{index}.env", "content": text}),
            ToolCall(f"note-{index}", "note", {"text": text, "index": index}),
            ToolCall(f"json-{index}", "note", json.dumps({"text": text})),
            ToolCall(f"give-{index}", "give", {"index": index}),
            ToolCall(f"read-{index}", "read_text", {"path": f"given/chunk-{index}.txt"}),
            ToolCall(f"fail-{index}", "fail", {"index": index}),
        ]
        results += [runtime.execute(call) for call in calls]
    recorder.stop()
    cassette = dumps(recorder.cassette())
    rows = [store.get(result.call_id) for result in results]
    files_open = stored_bytes(db)
    runtime.close()
    store.close()
    return {
        "results": results,
        "rows": rows,
        "cassette": cassette,
        "db_open": files_open,
        "db_closed": stored_bytes(db),
    }


def all_expected() -> list[str]:
    secrets: list[str] = []
    for chunk in CHUNKS:
        text = chunk_text(chunk)
        secrets += expected_secrets(chunk, text)
    return secrets


EXPECTED = all_expected()


def test_the_calls_went_through_so_the_scans_mean_something(recorded: dict[str, Any]) -> None:
    codes = {result.code.value for result in recorded["results"]}
    assert codes == {"OK", "EXECUTION_ERROR"}
    assert all(row is not None for row in recorded["rows"])
    assert len(EXPECTED) >= len(EXAMPLES) * 9 // 10
    assert "<redacted:" in recorded["cassette"]
    assert recorded["db_open"].get("audit.db-wal")


def test_no_generated_secret_is_in_the_audit_rows(recorded: dict[str, Any]) -> None:
    stored = "\n".join(
        f"{row.arguments_json}\n{row.result_preview}\n{row.error_message}"
        for row in recorded["rows"]
    )
    assert [secret for secret in EXPECTED if secret in stored] == []


def test_no_generated_secret_is_in_the_cassette(recorded: dict[str, Any]) -> None:
    cassette = recorded["cassette"]
    # The cassette's YAML escapes some characters: look for both spellings.
    spellings = {secret: (secret, json.dumps(secret)[1:-1]) for secret in EXPECTED}
    leaked = [s for s, forms in spellings.items() if any(form in cassette for form in forms)]
    assert leaked == []


@pytest.mark.parametrize("moment", ["db_open", "db_closed"])
def test_no_generated_secret_is_in_the_database_bytes(
    recorded: dict[str, Any], moment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files = recorded[moment]
    data = b"\n".join(files.values())
    leaked = [
        secret
        for secret in EXPECTED
        if secret.encode() in data or json.dumps(secret)[1:-1].encode() in data
    ]
    assert leaked == []
    with capsys.disabled():
        print(
            f"\n[secret rules] {len(default_rule_set().rules)} rules, {len(EXAMPLES)} examples, "
            f"{len(EXPECTED)} secrets checked in {sorted(files)} ({moment}): {len(leaked)} found"
        )
