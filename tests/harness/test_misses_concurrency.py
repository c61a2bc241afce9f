"""``concurrent_calls`` runs two state-changing calls of a session at once,
the interleaving forced at the handlers' filesystem operations, and judges
the files against every serial order: a read-modify-write without a lock
loses an update and is caught, whatever its shape, in both worlds; a tool
that locks (a thread lock, ``fcntl.flock``), appends only, or allocates
with an exclusive create ends as some serial order and passes.

Catch table (tool: cell, problem):

============================  ======================================================
broken twin                   caught by
============================  ======================================================
count_unlocked                concurrent_calls: ... match no serial order: notes/counts.json
count_compare_then_replace    concurrent_calls: ... match no serial order: notes/counts.json
add_to_index_unlocked         concurrent_calls: ... match no serial order: notes/index.json
post_unlocked (ledger)        concurrent_calls: ... match no serial order: notes/balance.txt
next_id_unlocked              concurrent_calls: ... match no serial order: notes/next_id.txt
count_then_mark               concurrent_calls: ... answered OK, but its changes were lost:
                              notes/counts.json (the held call failed after its stale write)
============================  ======================================================

Correct twins, passing every cell: count_with_thread_lock,
count_with_flock, post_appending; next_id_exclusive
(an exclusive create is the compare) passes ``concurrent_calls``.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pyfakefs.fake_filesystem_unittest import Patcher

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import BUILTIN_FAULTS, run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.harness.file_locks import FakeFlocks
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay.cassette import Cassette, loads

WORLDS = ("fake", "directory")

COUNTS = "notes/counts.json"
INDEX = "notes/index.json"
BALANCE = "notes/balance.txt"
LEDGER = "notes/ledger.txt"
NEXT_ID = "notes/next_id.txt"
FILES = {
    COUNTS: '{"home": 3}',
    INDEX: "[]",
    BALANCE: "100",
    LEDGER: "",
    NEXT_ID: "1",
    "notes/records/.keep": "",
    "notes/marks/.keep": "",
}


def _schema(name: str, kind: str = "string") -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind}},
        "required": [name],
        "additionalProperties": False,
    }


def _host(ctx: ToolContext, relative: str) -> str:
    return os.path.join(ctx.workspace.root, relative)


# -- a counter in a JSON file


def _count(ctx: ToolContext, page: str) -> dict[str, Any]:
    data = json.loads(ctx.workspace.read_text(COUNTS))
    data[page] = data.get(page, 0) + 1
    ctx.workspace.write_text(COUNTS, json.dumps(data, sort_keys=True))
    return {"count": data[page]}


@tool(
    input_schema=_schema("page"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(COUNTS)],
    acts_on_repeat=True,
)
def count_unlocked(ctx: ToolContext, page: str) -> dict[str, Any]:
    """Reads the counts, adds one, writes them back: no lock."""
    return _count(ctx, page)


@tool(
    input_schema=_schema("page"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(COUNTS)],
    acts_on_repeat=True,
)
def count_compare_then_replace(ctx: ToolContext, page: str) -> dict[str, Any]:
    """Writes back only if the counts are still as read: but the compare
    and the replace are two operations, with a gap between them."""
    text = ctx.workspace.read_text(COUNTS)
    data = json.loads(text)
    data[page] = data.get(page, 0) + 1
    if ctx.workspace.read_text(COUNTS) != text:
        raise RuntimeError("the counts changed meanwhile: try again")
    ctx.workspace.write_text(COUNTS, json.dumps(data, sort_keys=True))
    return {"count": data[page]}


@tool(
    input_schema={
        "type": "object",
        "properties": {"page": {"type": "string"}, "by": {"type": "integer"}},
        "required": ["page", "by"],
        "additionalProperties": False,
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write(COUNTS), PathAccess.write("notes/marks")],
    acts_on_repeat=True,
)
def count_then_mark(ctx: ToolContext, page: str, by: int) -> dict[str, Any]:
    """Adds to the count read a moment before, then marks the page, failing
    when it is marked already: the failed call's stale write stays."""
    data = json.loads(ctx.workspace.read_text(COUNTS))
    data[page] = data.get(page, 0) + by
    ctx.workspace.write_text(COUNTS, json.dumps(data, sort_keys=True))
    with open(_host(ctx, f"notes/marks/{page}"), "x", encoding="utf-8") as mark:
        mark.write("marked\n")
    return {"count": data[page]}


_COUNT_LOCK = threading.Lock()


@tool(
    input_schema=_schema("page"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(COUNTS)],
    acts_on_repeat=True,
)
def count_with_thread_lock(ctx: ToolContext, page: str) -> dict[str, Any]:
    """The same under a lock every call of the process takes."""
    with _COUNT_LOCK:
        return _count(ctx, page)


@tool(
    input_schema=_schema("page"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(COUNTS)],
    acts_on_repeat=True,
)
def count_with_flock(ctx: ToolContext, page: str) -> dict[str, Any]:
    """The same under an exclusive ``flock`` of the workspace's directory
    (closing it lets go)."""
    directory = os.open(ctx.workspace.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        return _count(ctx, page)
    finally:
        os.close(directory)


# -- an index list appended to


@tool(
    input_schema=_schema("title"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(INDEX)],
    acts_on_repeat=True,
)
def add_to_index_unlocked(ctx: ToolContext, title: str) -> dict[str, Any]:
    """Appends a title to a JSON list: read, append, write, no lock."""
    entries = json.loads(ctx.workspace.read_text(INDEX))
    entries.append(title)
    ctx.workspace.write_text(INDEX, json.dumps(entries))
    return {"entries": len(entries)}


# -- a ledger's balance


@tool(
    input_schema=_schema("amount", "integer"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(BALANCE), PathAccess.write(LEDGER)],
    acts_on_repeat=True,
)
def post_unlocked(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Adds to the balance read a moment before (plain ``open``), then
    logs the posting."""
    with open(_host(ctx, BALANCE), encoding="utf-8") as handle:
        balance = int(handle.read())
    with open(_host(ctx, BALANCE), "w", encoding="utf-8") as handle:
        handle.write(str(balance + amount))
    with open(_host(ctx, LEDGER), "a", encoding="utf-8") as handle:
        handle.write(f"{amount}\n")
    return {"balance": balance + amount}


@tool(
    input_schema=_schema("amount", "integer"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(LEDGER)],
    acts_on_repeat=True,
)
def post_appending(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Append-only: one ``O_APPEND`` write of a line per posting, the
    balance is their sum. (Opened through directory descriptors, links
    refused, and not once the call was cancelled: the other cells' demands.)"""
    top = os.open(ctx.workspace.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        notes = os.open("notes", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        try:
            if ctx.cancelled.is_set():
                raise TimeoutError("cancelled before the posting")
            flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
            fd = os.open("ledger.txt", flags, dir_fd=notes)
            try:
                os.write(fd, f"{amount}\n".encode())
            finally:
                os.close(fd)
        finally:
            os.close(notes)
    finally:
        os.close(top)
    return {"posted": amount}


# -- a "next id" allocator


@tool(
    input_schema=_schema("body"),
    risk=Risk.WRITE,
    paths=[PathAccess.write(NEXT_ID), PathAccess.write("notes/records")],
    acts_on_repeat=True,
)
def next_id_unlocked(ctx: ToolContext, body: str) -> dict[str, Any]:
    """Takes the next id from a file, writes the record, stores id + 1."""
    number = int(ctx.workspace.read_text(NEXT_ID))
    ctx.workspace.write_text(f"notes/records/{number}.txt", body)
    ctx.workspace.write_text(NEXT_ID, str(number + 1))
    return {"id": number}


@tool(
    input_schema=_schema("body"),
    risk=Risk.WRITE,
    paths=[PathAccess.write("notes/records")],
    acts_on_repeat=True,
)
def next_id_exclusive(ctx: ToolContext, body: str) -> dict[str, Any]:
    """The first free id, taken by creating its record exclusively (the
    create is the compare: a taken id fails it, and the next is tried)."""
    records = _host(ctx, "notes/records")
    number = 1 + sum(name.endswith(".txt") for name in os.listdir(records))
    while True:
        try:
            with open(_host(ctx, f"notes/records/{number}.txt"), "x", encoding="utf-8") as f:
                f.write(body)
            return {"id": number}
        except FileExistsError:
            number += 1


def session(spec: ToolSpec, arguments: Sequence[Mapping[str, Any]]) -> Cassette:
    """A case of ``spec`` called once per ``arguments``, each recorded as a
    success, in a session that may write under ``notes/``."""
    calls = "".join(
        f"""
  - call:
      call_id: call-{number:02d}
      tool_name: {spec.name}
      arguments: {json.dumps(dict(given))}
    result:
      ok: true
      code: OK
"""
        for number, given in enumerate(arguments, 1)
    )
    text = f"""
format_version: 1
kind: case
description: {spec.name} called {len(arguments)} times
session:
  capabilities:
    allowed_risks: [read, write]
    write_roots: [notes]
workspace:
  files: {json.dumps(FILES)}
interactions:{calls}
"""
    return loads(text, source=f"<{spec.name}>")


def run(
    spec: ToolSpec,
    arguments: Sequence[Mapping[str, Any]],
    world: str,
    fault: str = "concurrent_calls",
) -> CellOutcome:
    """``fault`` against the first call of the session."""
    registry = ToolRegistry([spec])
    cassette = session(spec, arguments)
    (chosen,) = select_faults(fault)
    return run_cell(chosen, targets(cassette, registry, cassette.source)[0], registry, world=world)


def reported(outcome: CellOutcome, *fragments: str) -> bool:
    return any(all(fragment in problem for fragment in fragments) for problem in outcome.problems)


NO_SERIAL_ORDER = "match no serial order"
LOST = "answered OK, but its changes were lost"
BROKEN = [
    (count_unlocked, [{"page": "home"}, {"page": "about"}], COUNTS, NO_SERIAL_ORDER),
    (count_compare_then_replace, [{"page": "home"}, {"page": "about"}], COUNTS, NO_SERIAL_ORDER),
    (add_to_index_unlocked, [{"title": "a"}, {"title": "b"}], INDEX, NO_SERIAL_ORDER),
    (post_unlocked, [{"amount": 5}, {"amount": 7}], BALANCE, NO_SERIAL_ORDER),
    (next_id_unlocked, [{"body": "first"}, {"body": "second"}], NEXT_ID, NO_SERIAL_ORDER),
    (count_then_mark, [{"page": "home", "by": 1}, {"page": "home", "by": 2}], COUNTS, LOST),
]
CORRECT = [
    (count_with_thread_lock, [{"page": "home"}, {"page": "about"}]),
    (count_with_flock, [{"page": "home"}, {"page": "about"}]),
    (post_appending, [{"amount": 5}, {"amount": 7}]),
]


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(
    ("spec", "arguments", "lost", "problem"), BROKEN, ids=lambda v: getattr(v, "name", "")
)
def test_read_modify_write_without_a_lock_is_caught(
    spec: ToolSpec, arguments: list[dict[str, Any]], lost: str, problem: str, world: str
) -> None:
    outcome = run(spec, arguments, world)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "1-" + spec.name, problem, lost), outcome.problems


@pytest.mark.slow
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=lambda v: getattr(v, "name", ""))
def test_correct_twin_passes_every_cell(
    spec: ToolSpec, arguments: list[dict[str, Any]], world: str
) -> None:
    registry = ToolRegistry([spec])
    cassette = session(spec, arguments)
    for target in targets(cassette, registry, cassette.source):
        for fault in BUILTIN_FAULTS:
            outcome = run_cell(fault, target, registry, world=world)
            assert outcome.status in ("pass", "n/a"), outcome


@pytest.mark.parametrize("world", WORLDS)
def test_a_lost_update_between_two_different_calls_names_both(world: str) -> None:
    # Alone, the call races with itself; with the session's other call
    # (another page of the same counts) too.
    outcome = run(count_unlocked, [{"page": "home"}, {"page": "about"}], world)

    assert reported(outcome, "1-count_unlocked at once with 2-count_unlocked"), outcome.problems
    assert reported(outcome, "1-count_unlocked at once with itself"), outcome.problems


@pytest.mark.parametrize("world", WORLDS)
def test_an_allocator_whose_exclusive_create_is_the_compare_passes(world: str) -> None:
    # Its plain open(..., "x") is judged by the path and disk cells, not here.
    outcome = run(next_id_exclusive, [{"body": "first"}, {"body": "second"}], world)

    assert outcome.status == "pass", outcome.problems


def test_a_read_only_call_gets_no_cell() -> None:
    @tool(input_schema=_schema("page"), paths=[PathAccess.read(COUNTS)])
    def show_counts(ctx: ToolContext, page: str) -> dict[str, Any]:
        return dict(json.loads(ctx.workspace.read_text(COUNTS)))

    outcome = run(show_counts, [{"page": "home"}], "fake")

    assert outcome.status == "n/a", outcome


def test_fake_flock_excludes_another_open_file_until_unlocked_or_closed() -> None:
    waiting = threading.Event()
    with Patcher() as patcher, FakeFlocks(patcher.fs, lambda _ident: waiting.set()):
        os.makedirs("/w")
        first, second = open("/w/lock", "a"), open("/w/lock", "a")  # noqa: SIM115
        fcntl.flock(first, fcntl.LOCK_EX)
        with pytest.raises(BlockingIOError):
            fcntl.flock(second, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(first, fcntl.LOCK_UN)
        fcntl.flock(second, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(first, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared with shared

        waiter = threading.Thread(target=fcntl.flock, args=(first, fcntl.LOCK_EX))
        waiter.start()
        assert waiting.wait(5), "the waiting thread never said it was blocked"
        second.close()  # a close lets go, as the kernel's
        waiter.join(5)
        assert not waiter.is_alive()
        first.close()
