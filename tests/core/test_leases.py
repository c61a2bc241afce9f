"""Leases on RUNNING rows: ``recover`` is safe while other processes work.

Four processes share one audit store (each backend in turn) and one
workspace; each is inside its handler, its row RUNNING. One of them is
killed mid-write (its ``os.rename`` is replaced by ``SIGKILL`` to itself,
so it dies between creating its temporary file and renaming it). Then
``ToolRuntime.recover`` runs in the test's process: it must take over the
killed call only, remove that call's temporary file only, and leave the
three live calls running, which then finish normally.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from audit_backends import open_store
from conftest import WRITE_ANYWHERE, Spy, spy_tool

from pytest_toolguard import (
    CallState,
    ErrorCode,
    Risk,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
    ToolSpec,
)
from pytest_toolguard.audit.lease import LeaseOwner, current_owner, owner_is_dead
from pytest_toolguard.sandbox import TEMP_PREFIX

WAIT = 60.0  # seconds: the bound on every wait for a child
WORKERS = 4
VICTIM = 2
SCHEMA = {"type": "object", "properties": {"worker": {"type": "integer"}}}


def _worker(spec: tuple[str, str], workspace: str, index: int, events: Any, release: Any) -> None:
    """One process: a call whose handler reports, waits for ``release``,
    then writes ``out/<index>.txt``. The victim writes at once and is killed
    by its own rename."""

    def handler(ctx: Any, worker: int) -> Any:
        events.put(("running", index, os.getpid()))
        if index == VICTIM:
            # Queue.put hands the message to a feeder thread: flush it before
            # this process kills itself, or the parent may never see it.
            events.close()
            events.join_thread()
            os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[assignment]
        else:
            release.wait(WAIT)
        ctx.workspace.write_text(f"out/{index}.txt", f"worker {index}")
        return {"worker": worker}

    tool = ToolSpec(
        name="work",
        description="writes out/<worker>.txt",
        input_schema=SCHEMA,
        handler=handler,
        risk=Risk.WRITE,
    )
    store = open_store(spec)
    runtime = ToolRuntime(ToolRegistry([tool]), workspace, WRITE_ANYWHERE, store)
    result = runtime.execute(
        ToolCall(f"call-{index}", "work", {"worker": index}, idempotency_key=f"job-{index}")
    )
    events.put(("done", index, result.code.value))
    runtime.close()
    store.close()


def _temporaries(root: Path) -> list[str]:
    return sorted(
        str(path.relative_to(root)) for path in root.rglob("*") if path.name.startswith(TEMP_PREFIX)
    )


@pytest.mark.slow
def test_recover_with_four_processes_takes_over_only_the_killed_one(
    audit_backend: Any, tmp_path: Path, spy: Spy
) -> None:
    import multiprocessing

    workspace = tmp_path / "workspace"
    (workspace / "out").mkdir(parents=True)
    audit_backend.open().close()  # the schema exists before the processes start
    context = multiprocessing.get_context("spawn")
    events, release = context.Queue(), context.Event()
    processes = [
        context.Process(
            target=_worker, args=(audit_backend.spec, str(workspace), i, events, release)
        )
        for i in range(WORKERS)
    ]
    for process in processes:
        process.start()
    try:
        started = {events.get(timeout=WAIT)[1] for _ in range(WORKERS)}
        assert started == set(range(WORKERS))
        processes[VICTIM].join(WAIT)
        assert processes[VICTIM].exitcode == -signal.SIGKILL
        [left] = _temporaries(workspace)  # the victim's write, killed before its rename

        store = audit_backend.open()
        retry_tool = spy_tool(spy, "work", risk=Risk.WRITE, schema=SCHEMA)
        runtime = ToolRuntime(ToolRegistry([retry_tool]), str(workspace), WRITE_ANYWHERE, store)
        recovery = runtime.recover()
        states = {row.call_id: row.state for row in store.rows()}

        release.set()
        finished = {}
        for _ in range(WORKERS - 1):
            _, index, code = events.get(timeout=WAIT)
            finished[index] = code
        for process in processes:
            process.join(WAIT)
    finally:
        release.set()
        for process in processes:
            if process.is_alive():
                process.kill()
    assert [row.call_id for row in recovery.interrupted] == [f"call-{VICTIM}"]
    assert recovery.removed_temporaries == (left,)
    assert states == {
        f"call-{i}": CallState.INTERRUPTED if i == VICTIM else CallState.RUNNING
        for i in range(WORKERS)
    }
    assert finished == {i: "OK" for i in range(WORKERS) if i != VICTIM}
    final = {row.call_id: row.state for row in store.rows()}
    assert final == {
        f"call-{i}": CallState.INTERRUPTED if i == VICTIM else CallState.SUCCEEDED
        for i in range(WORKERS)
    }
    assert sorted(os.listdir(workspace / "out")) == [
        f"{i}.txt" for i in range(WORKERS) if i != VICTIM
    ]
    retry = runtime.execute(
        ToolCall("retry", "work", {"worker": VICTIM}, idempotency_key=f"job-{VICTIM}")
    )
    assert (retry.code, retry.state) == (ErrorCode.EXECUTION_ERROR, CallState.FAILED)
    assert "interrupted" in retry.message
    assert spy.count == 0
    runtime.close()


def test_a_dead_owner_on_another_host_keeps_its_lease_until_it_expires(
    audit_backend: Any, tmp_path: Path
) -> None:
    """Another host's pids mean nothing here: only the lease's expiry counts.
    Seen from the row's own host, the dead owner's lease has ended."""
    from test_audit_store import T1, make_record

    writer = audit_backend.open(host="host-a")
    writer.start(make_record("elsewhere"), claim_key="k", lease_seconds=3600)
    row = writer.get("elsewhere")
    owner = LeaseOwner.parse(row.lease_owner)
    assert owner is not None and owner.host.startswith("host-a")
    # The same owner with a pid that runs nothing: a process of host-a that died.
    dead = LeaseOwner(owner.host, _unused_pid(), owner.started)
    _set_owner(audit_backend, "elsewhere", str(dead))

    assert audit_backend.open(host="host-b").recover(T1) == 0
    assert audit_backend.open(host="host-a").recover(T1) == 1


def _unused_pid() -> int:
    pid = 2**22 - 1  # above the default pid_max: never a live process
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _set_owner(audit_backend: Any, call_id: str, owner: str) -> None:
    """Rewrite a row's lease owner from outside the store (a test seam)."""
    if audit_backend.name == "sqlite":
        import sqlite3

        raw = sqlite3.connect(audit_backend.path, isolation_level=None)
        try:
            raw.execute(
                "UPDATE tool_call_audit SET lease_owner = ? WHERE call_id = ?", (owner, call_id)
            )
        finally:
            raw.close()
    else:
        import psycopg

        with psycopg.connect(audit_backend.url, autocommit=True) as conn:
            conn.execute(
                "UPDATE tool_call_audit SET lease_owner = %s WHERE call_id = %s", (owner, call_id)
            )


def test_the_owner_first_asked_for_under_a_fake_filesystem_is_still_this_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replay starts calls under pyfakefs, which hides /proc: the owner's
    host scope and start time were read before it, so a later recover, on
    the real disk, still recognises this host's dead processes."""
    from pyfakefs.fake_filesystem_unittest import Patcher

    from pytest_toolguard.audit import lease

    real = current_owner("replay-host")
    monkeypatch.setattr(lease, "_cached", {})  # as if never asked before
    with Patcher():
        faked = current_owner("replay-host")
        assert not owner_is_dead(real, faked)  # a live pid stays alive, /proc or not
    assert faked == real
    assert "#" in faked.host  # the scope that lets this host judge its own dead
