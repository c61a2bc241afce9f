"""The rollback journal keeps a bounded copy of what a write replaces.

The journal read the whole previous file before every write: a 1-byte
write over a 3 GiB sparse file took peak memory from 34 MiB to 6 GiB, and
the call timed out while a detached thread kept reading. A file over
``keep_at_most`` bytes is now never read; the rollback of such a call is
refused with LIMIT_EXCEEDED, before anything is restored, and says why.
"""

from __future__ import annotations

import os
import tracemalloc
import types
from pathlib import Path
from typing import Any

import pytest
from conftest import EVERY_RISK, spy_tool

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall, Workspace
from pytest_toolguard import sandbox as sandbox_module
from pytest_toolguard.registry import PathAccess
from pytest_toolguard.rollback import ChangeJournal
from pytest_toolguard.sandbox import LimitExceeded, Unkept

LIMIT = 1000
WRITE = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))


class ReadCounter:
    """Wraps the sandbox's ``os``: counts the bytes it reads."""

    def __init__(self) -> None:
        self.total = 0

    def module(self) -> Any:
        counter = self

        def read(fd: int, size: int) -> bytes:
            chunk = os.read(fd, size)
            counter.total += len(chunk)
            return chunk

        proxy = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os)})
        proxy.read = read
        return proxy


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> ReadCounter:
    counter = ReadCounter()
    monkeypatch.setattr(sandbox_module, "os", counter.module())
    return counter


def make_file(path: Path, size: int, *, sparse: bool) -> None:
    if sparse:
        with open(path, "wb") as handle:
            handle.truncate(size)
    else:
        path.write_bytes(b"o" * size)


# (size of the file replaced, sparse?, kept?)
SIZES = [
    (0, False, True),
    (LIMIT - 1, False, True),
    (LIMIT, False, True),
    (LIMIT + 1, False, False),
    (20 * LIMIT, False, False),
    (1 << 30, True, False),
]


@pytest.mark.parametrize(("size", "sparse", "kept"), SIZES, ids=[str(s[0]) for s in SIZES])
def test_a_write_reads_at_most_the_limit_of_the_file_it_replaces(
    toolguard_runtime, workspace_dir: Path, reads: ReadCounter, size: int, sparse: bool, kept: bool
) -> None:
    make_file(workspace_dir / "big.bin", size, sparse=sparse)
    runtime = toolguard_runtime(None, WRITE)
    runtime.journal = ChangeJournal(keep_at_most=LIMIT)
    result = runtime.execute(ToolCall("c1", "write_file", {"path": "big.bin", "content": "x"}))
    assert result.ok
    assert reads.total <= LIMIT + 1
    (change,) = runtime.journal.changes("c1")
    assert isinstance(change.previous, Unkept) is not kept


@pytest.mark.parametrize(("size", "sparse", "kept"), SIZES, ids=[str(s[0]) for s in SIZES])
def test_rollback_restores_a_kept_file_and_refuses_an_unkept_one(
    toolguard_runtime, workspace_dir: Path, size: int, sparse: bool, kept: bool
) -> None:
    make_file(workspace_dir / "big.bin", size, sparse=sparse)
    runtime = toolguard_runtime(None, WRITE)
    runtime.journal = ChangeJournal(keep_at_most=LIMIT)
    runtime.execute(ToolCall("c1", "write_file", {"path": "big.bin", "content": "x"}))
    result = runtime.rollback("c1")
    if kept:
        assert result.ok and (workspace_dir / "big.bin").stat().st_size == size
    else:
        assert result.code is ErrorCode.LIMIT_EXCEEDED
        assert str(LIMIT) in result.message and "nothing was restored" in result.message
        assert (workspace_dir / "big.bin").read_bytes() == b"x"


def test_a_one_byte_write_over_a_sparse_gigabyte_costs_no_memory(
    toolguard_runtime, workspace_dir: Path
) -> None:
    make_file(workspace_dir / "huge.bin", 1 << 30, sparse=True)
    runtime = toolguard_runtime(None, WRITE)  # the default journal limit
    tracemalloc.start()
    try:
        result = runtime.execute(ToolCall("c1", "write_file", {"path": "huge.bin", "content": "x"}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok
    assert peak < 8 * 1024 * 1024
    assert runtime.rollback("c1").code is ErrorCode.LIMIT_EXCEEDED


def test_rollback_of_a_call_with_an_unkept_file_restores_nothing_at_all(
    toolguard_runtime, registry_of, spy, workspace_dir: Path
) -> None:
    def write_both(ctx: Any, **arguments: Any) -> Any:
        ctx.workspace.write_text("small.txt", "changed\n")
        ctx.workspace.write_text("big.bin", "changed\n")
        return {}

    tool = spy_tool(
        spy, "both", risk=Risk.WRITE, result=write_both, paths=(PathAccess.write("small.txt"),)
    )
    (workspace_dir / "small.txt").write_text("small\n")
    make_file(workspace_dir / "big.bin", 5 * LIMIT, sparse=False)
    runtime = toolguard_runtime(
        registry_of(tool), Capabilities(allowed_risks=EVERY_RISK, write_roots=(".",))
    )
    runtime.journal = ChangeJournal(keep_at_most=LIMIT)
    assert runtime.execute(ToolCall("c1", "both", {})).ok
    assert runtime.rollback("c1").code is ErrorCode.LIMIT_EXCEEDED
    assert (workspace_dir / "small.txt").read_text() == "changed\n"
    row = runtime.audit.get("rollback-c1")
    assert row is not None and row.result_code is ErrorCode.LIMIT_EXCEEDED


@pytest.mark.parametrize("size", [LIMIT + 1, 1 << 30], ids=str)
def test_a_delete_of_a_large_file_is_journaled_without_reading_it(
    tmp_path: Path, reads: ReadCounter, size: int
) -> None:
    make_file(tmp_path / "big.bin", size, sparse=True)
    journal = ChangeJournal(keep_at_most=LIMIT)
    with Workspace(tmp_path) as ws:
        view = ws.with_journal(lambda p, b: journal.record("c1", p, b), keep_at_most=LIMIT)
        view.delete("big.bin")
        assert reads.total <= LIMIT + 1
        assert journal.changes("c1")[0].previous == Unkept(size)
        with pytest.raises(LimitExceeded):
            journal.rollback("c1", ws)
    assert journal.changes("c1")  # refused: nothing forgotten either
