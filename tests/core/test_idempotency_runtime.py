"""Idempotency keys through ``ToolRuntime.execute``, on a real SQLite file.

The semantics (DESIGN.md, Stripe, the IETF Idempotency-Key draft): once a
handler started, its first outcome is what every later call with that key
gets; the same key while it runs is DUPLICATE_CALL; the same key with other
arguments is IDEMPOTENCY_CONFLICT; a call refused before its handler ran
leaves the key free; keys are scoped by session (or ``idempotency_scope``)
and tool. The races at the end submit one call from many threads and from
several processes at once and count the side effects on disk.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import WRITE_ANYWHERE, Spy, spy_tool

from pytest_toolguard import (
    CallState,
    ErrorCode,
    HookDecision,
    PathAccess,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.harness.failing_store import FailingStore

ARGS = {"text": "deploy done"}
ANSWERS_TO_A_TWIN = {ErrorCode.IDEMPOTENT_REPLAY, ErrorCode.DUPLICATE_CALL}


def effect_tool(spy: Spy, name: str = "effect", **options: Any):
    """A side effect visible on disk: each handler run creates
    ``effects/<call_id>``, so the files count the runs."""

    def result(ctx: Any, **arguments: Any) -> Any:
        ctx.workspace.write_text(f"effects/{ctx.call_id}", json.dumps(arguments))
        return {"effect": ctx.call_id, "text": arguments.get("text", "")}

    return spy_tool(spy, name, risk=Risk.WRITE, result=result, **options)


def failing_tool(spy: Spy, name: str = "flaky"):
    def result(ctx: Any, **arguments: Any) -> Any:
        raise ValueError("upstream said no")

    return spy_tool(spy, name, risk=Risk.WRITE, result=result)


def keyed(call_id: str, tool_name: str = "effect", arguments: Any = None, **kw: Any) -> ToolCall:
    kw.setdefault("idempotency_key", "order-42")
    kw.setdefault("session_id", "session-1")
    return ToolCall(
        call_id=call_id,
        tool_name=tool_name,
        arguments=dict(ARGS) if arguments is None else arguments,
        **kw,
    )


def effects(workspace: Path) -> list[str]:
    folder = workspace / "effects"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


class Hook:
    name = "test_hook"

    def __init__(self, decide):
        self.decide = decide

    def pre_tool_use(self, event):
        return self.decide(event)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
def runtime(toolguard_runtime, registry_of, spy):
    return toolguard_runtime(
        registry_of(effect_tool(spy), effect_tool(spy, "other"), failing_tool(spy)),
        WRITE_ANYWHERE,
    )


@pytest.fixture
def failing_runtime(toolguard_runtime, registry_of, spy, tmp_path):
    """The runtime of ``runtime``, its store behind a ``FailingStore``."""
    store = FailingStore(SQLiteAuditStore(tmp_path / "failing-audit.db"))
    runtime = toolguard_runtime(
        registry_of(effect_tool(spy), effect_tool(spy, "other"), failing_tool(spy)),
        WRITE_ANYWHERE,
        audit=store,
    )
    yield runtime, store
    store.close()


def run_in_thread(runtime: ToolRuntime, call: ToolCall) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(runtime.execute(call)))
    thread.start()
    return thread, box


# --- the first outcome is replayed ------------------------------------------------


def test_second_call_with_the_key_replays_the_first_success_without_running(
    runtime, spy, workspace
):
    first = runtime.execute(keyed("c1"))
    second = runtime.execute(keyed("c2"))
    assert (first.ok, first.code) == (True, ErrorCode.OK)
    assert (second.ok, second.code, second.state) == (
        True,
        ErrorCode.IDEMPOTENT_REPLAY,
        CallState.SUCCEEDED,
    )
    assert second.data == first.data
    assert second.call_id == "c2"
    assert spy.count == 1
    assert effects(workspace) == ["c1"]


def test_replay_of_a_failure_answers_the_original_code_and_is_not_retryable(runtime, spy):
    first = runtime.execute(keyed("c1", "flaky"))
    second = runtime.execute(keyed("c2", "flaky"))
    assert (first.ok, first.code) == (False, ErrorCode.EXECUTION_ERROR)
    assert (second.ok, second.code, second.retryable, second.state) == (
        False,
        ErrorCode.EXECUTION_ERROR,
        False,
        CallState.FAILED,
    )
    assert spy.count == 1


def test_replay_of_a_timeout_is_the_timeout_and_the_slow_handler_is_not_started_again(
    toolguard_runtime, registry_of, spy
):
    runtime = toolguard_runtime(registry_of(effect_tool(spy, timeout_seconds=0.05)), WRITE_ANYWHERE)
    spy.block()
    try:
        first = runtime.execute(keyed("c1"))
        second = runtime.execute(keyed("c2"))
    finally:
        spy.release()
    assert first.code is ErrorCode.TIMEOUT
    assert (second.ok, second.code, second.retryable) == (False, ErrorCode.TIMEOUT, False)
    assert spy.count == 1


def test_arguments_in_another_key_order_or_as_json_text_are_the_same_action(runtime, spy):
    arguments = {"text": "deploy done", "path": "a.txt"}
    runtime.execute(keyed("c1", arguments=arguments))
    reordered = runtime.execute(keyed("c2", arguments={"path": "a.txt", "text": "deploy done"}))
    as_text = runtime.execute(keyed("c3", arguments=json.dumps(arguments)))
    assert (reordered.code, as_text.code) == (
        ErrorCode.IDEMPOTENT_REPLAY,
        ErrorCode.IDEMPOTENT_REPLAY,
    )
    assert spy.count == 1


def test_replay_of_a_truncated_output_keeps_the_truncation_flag_and_size(
    toolguard_runtime, registry_of, spy
):
    tool = spy_tool(spy, "big", result=lambda ctx, **a: {"blob": "x" * 500}, result_limit=100)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE)
    first = runtime.execute(keyed("c1", "big"))
    second = runtime.execute(keyed("c2", "big"))
    assert first.truncated and second.truncated
    assert (second.code, second.data, second.total_size) == (
        ErrorCode.IDEMPOTENT_REPLAY,
        first.data,
        first.total_size,
    )


def test_outcome_survives_a_restart_on_the_same_database(tmp_path, registry_of, spy, workspace):
    workspace.mkdir()
    db = tmp_path / "audit.db"
    for call_id in ("c1", "c2"):
        with SQLiteAuditStore(db) as store:
            runtime = ToolRuntime(
                registry_of(effect_tool(spy)), str(workspace), WRITE_ANYWHERE, store
            )
            result = runtime.execute(keyed(call_id))
            runtime.close()
    assert result.code is ErrorCode.IDEMPOTENT_REPLAY
    assert spy.count == 1


def test_key_stays_running_until_the_queued_finish_is_stored_then_replays(failing_runtime, spy):
    runtime, store = failing_runtime
    store.fail("finish")
    with pytest.warns(RuntimeWarning, match="queued for retry"):
        first = runtime.execute(keyed("c1"))
    while_queued = runtime.execute(keyed("c2"))
    store.heal()
    assert runtime.flush_audit() == 0
    after = runtime.execute(keyed("c3"))
    assert first.code is ErrorCode.OK
    assert (while_queued.code, after.code) == (
        ErrorCode.DUPLICATE_CALL,
        ErrorCode.IDEMPOTENT_REPLAY,
    )
    assert spy.count == 1


# --- running, conflict ------------------------------------------------------------


def test_same_key_while_the_first_still_runs_is_a_retryable_duplicate(runtime, spy):
    spy.block()
    thread, box = run_in_thread(runtime, keyed("c1"))
    try:
        assert spy.started.wait(5)
        duplicate = runtime.execute(keyed("c2"))
    finally:
        spy.release()
        thread.join(5)
    assert (duplicate.ok, duplicate.code, duplicate.retryable) == (
        False,
        ErrorCode.DUPLICATE_CALL,
        True,
    )
    assert box[0].code is ErrorCode.OK
    assert spy.count == 1


def test_retry_after_a_duplicate_gets_the_first_outcome(runtime, spy):
    spy.block()
    thread, _ = run_in_thread(runtime, keyed("c1"))
    try:
        assert spy.started.wait(5)
        runtime.execute(keyed("c2"))
    finally:
        spy.release()
        thread.join(5)
    retry = runtime.execute(keyed("c3"))
    assert retry.code is ErrorCode.IDEMPOTENT_REPLAY
    assert spy.count == 1


def test_same_key_with_other_arguments_is_a_conflict_after_the_first_finished(runtime, spy):
    runtime.execute(keyed("c1"))
    conflict = runtime.execute(keyed("c2", arguments={"text": "something else"}))
    assert (conflict.ok, conflict.code, conflict.retryable) == (
        False,
        ErrorCode.IDEMPOTENCY_CONFLICT,
        False,
    )
    assert spy.count == 1


def test_same_key_with_other_arguments_is_a_conflict_even_while_the_first_runs(runtime, spy):
    spy.block()
    thread, _ = run_in_thread(runtime, keyed("c1"))
    try:
        assert spy.started.wait(5)
        conflict = runtime.execute(keyed("c2", arguments={"text": "something else"}))
    finally:
        spy.release()
        thread.join(5)
    assert conflict.code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert spy.count == 1


# --- a refused call frees its key -------------------------------------------------


def test_key_of_a_call_refused_by_its_schema_is_free_for_the_corrected_call(runtime, spy):
    refused = runtime.execute(keyed("c1", arguments={"text": 5}))
    corrected = runtime.execute(keyed("c2", arguments={"text": "5"}))
    assert refused.code is ErrorCode.INVALID_ARGUMENT
    assert (corrected.code, spy.calls) == (ErrorCode.OK, [{"text": "5"}])


def test_key_of_a_call_denied_by_policy_is_free_for_the_corrected_call(
    toolguard_runtime, registry_of, spy, workspace
):
    tool = effect_tool(spy, "save", paths=(PathAccess.write("{path}"),))
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE)
    refused = runtime.execute(keyed("c1", "save", {"path": "../outside.txt"}))
    corrected = runtime.execute(keyed("c2", "save", {"path": "inside.txt"}))
    assert refused.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert corrected.code is ErrorCode.OK
    assert effects(workspace) == ["c2"]


def test_key_of_a_call_a_hook_denied_is_free_once_the_hook_allows(
    toolguard_runtime, registry_of, spy
):
    verdicts = [HookDecision.deny("plan says not yet"), HookDecision.proceed()]
    hook = Hook(lambda event: verdicts.pop(0))
    runtime = toolguard_runtime(registry_of(effect_tool(spy)), WRITE_ANYWHERE, hooks=[hook])
    blocked = runtime.execute(keyed("c1"))
    allowed = runtime.execute(keyed("c2"))
    assert (blocked.code, allowed.code) == (ErrorCode.BLOCKED, ErrorCode.OK)
    assert spy.count == 1


def test_key_of_a_call_waiting_for_approval_is_free_once_approved(
    toolguard_runtime, registry_of, spy
):
    verdicts = [HookDecision.ask("a human must confirm"), HookDecision.allow("confirmed")]
    hook = Hook(lambda event: verdicts.pop(0))
    tool = spy_tool(spy, "send", risk=Risk.EXTERNAL)
    runtime = toolguard_runtime(registry_of(tool), WRITE_ANYWHERE, hooks=[hook])
    asked = runtime.execute(keyed("c1", "send"))
    approved = runtime.execute(keyed("c2", "send"))
    assert (asked.code, approved.code) == (ErrorCode.APPROVAL_REQUIRED, ErrorCode.OK)
    assert spy.count == 1


def test_key_of_a_call_refused_for_audit_unavailable_is_free_once_the_store_is_back(
    failing_runtime, spy
):
    runtime, store = failing_runtime
    store.fail("start")
    down = runtime.execute(keyed("c1"))
    store.heal()
    back = runtime.execute(keyed("c2"))
    assert (down.code, back.code) == (ErrorCode.AUDIT_UNAVAILABLE, ErrorCode.OK)
    assert spy.count == 1


# --- scope ------------------------------------------------------------------------


def test_same_key_in_another_session_runs_independently(runtime, spy, workspace):
    first = runtime.execute(keyed("c1", session_id="session-1"))
    other = runtime.execute(keyed("c2", session_id="session-2"))
    assert (first.code, other.code) == (ErrorCode.OK, ErrorCode.OK)
    assert effects(workspace) == ["c1", "c2"]


def test_same_key_for_another_tool_runs_independently(runtime, spy, workspace):
    first = runtime.execute(keyed("c1", "effect"))
    other = runtime.execute(keyed("c2", "other"))
    assert (first.code, other.code) == (ErrorCode.OK, ErrorCode.OK)
    assert effects(workspace) == ["c1", "c2"]


def test_idempotency_scope_makes_the_key_one_action_across_sessions(
    toolguard_runtime, registry_of, spy
):
    runtime = toolguard_runtime(
        registry_of(effect_tool(spy)), WRITE_ANYWHERE, idempotency_scope="ticket-7"
    )
    runtime.execute(keyed("c1", session_id="session-1"))
    other_session = runtime.execute(keyed("c2", session_id="session-2"))
    assert other_session.code is ErrorCode.IDEMPOTENT_REPLAY
    assert spy.count == 1


def test_keys_stay_scoped_by_session_when_ids_contain_newlines(runtime, spy, workspace):
    first = runtime.execute(keyed("c1", session_id="s1\neffect", idempotency_key="k"))
    other = runtime.execute(keyed("c2", session_id="s1", idempotency_key="effect\nk"))
    assert (first.code, other.code) == (ErrorCode.OK, ErrorCode.OK)
    assert effects(workspace) == ["c1", "c2"]


# --- audit rows -------------------------------------------------------------------


def test_audit_rows_record_claim_replay_and_the_replayed_call(runtime):
    runtime.execute(keyed("c1"))
    runtime.execute(keyed("c2"))
    original, replay = runtime.audit.get("c1"), runtime.audit.get("c2")
    assert (original.idempotency_outcome, original.replay_of, original.state) == (
        "claimed",
        None,
        CallState.SUCCEEDED,
    )
    assert (replay.idempotency_outcome, replay.replay_of, replay.result_code) == (
        "replay",
        "c1",
        ErrorCode.IDEMPOTENT_REPLAY,
    )
    assert original.idempotency_key == replay.idempotency_key == "order-42"


def test_audit_rows_record_duplicate_and_conflict_outcomes(runtime, spy):
    spy.block()
    thread, _ = run_in_thread(runtime, keyed("c1"))
    try:
        assert spy.started.wait(5)
        runtime.execute(keyed("c2"))
        runtime.execute(keyed("c3", arguments={"text": "other"}))
    finally:
        spy.release()
        thread.join(5)
    duplicate, conflict = runtime.audit.get("c2"), runtime.audit.get("c3")
    assert (duplicate.idempotency_outcome, duplicate.result_code, duplicate.state) == (
        "running",
        ErrorCode.DUPLICATE_CALL,
        CallState.DENIED,
    )
    assert (conflict.idempotency_outcome, conflict.result_code) == (
        "conflict",
        ErrorCode.IDEMPOTENCY_CONFLICT,
    )


def test_audit_row_of_a_refused_call_claims_nothing(runtime):
    runtime.execute(keyed("c1", arguments={"text": 5}))
    row = runtime.audit.get("c1")
    assert (row.result_code, row.idempotency_outcome, row.replay_of) == (
        ErrorCode.INVALID_ARGUMENT,
        None,
        None,
    )


# --- races ------------------------------------------------------------------------

THREADS = 16
THREAD_ROUNDS = 8


def _submit_from_threads(runtime: ToolRuntime, calls: list[ToolCall]) -> list[Any]:
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def submit(index: int) -> None:
        barrier.wait(10)
        results[index] = runtime.execute(calls[index])

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_sixteen_threads_with_one_key_cause_exactly_one_side_effect(
    runtime, spy, workspace, capsys
):
    answers: Counter[str] = Counter()
    for round_ in range(THREAD_ROUNDS):
        calls = [keyed(f"r{round_}-t{i}", idempotency_key=f"k{round_}") for i in range(THREADS)]
        results = _submit_from_threads(runtime, calls)
        codes = [result.code for result in results]
        assert codes.count(ErrorCode.OK) == 1, codes
        assert set(codes) - {ErrorCode.OK} <= ANSWERS_TO_A_TWIN, codes
        assert len([name for name in effects(workspace) if name.startswith(f"r{round_}-")]) == 1
        answers.update(code.value for code in codes)
    assert spy.count == THREAD_ROUNDS
    assert runtime.audit.count() == THREADS * THREAD_ROUNDS
    with capsys.disabled():
        print(
            f"\n[idempotency/threads] {THREAD_ROUNDS} rounds x {THREADS} threads, one key each: "
            f"side effects {len(effects(workspace))} (expected {THREAD_ROUNDS}); "
            f"answers {dict(sorted(answers.items()))}"
        )


def test_sixteen_threads_without_a_key_cause_sixteen_side_effects(runtime, spy, workspace):
    """The negative control: the race above is real, and only the key stops it."""
    calls = [keyed(f"t{i}", idempotency_key=None) for i in range(THREADS)]
    results = _submit_from_threads(runtime, calls)
    assert [result.code for result in results] == [ErrorCode.OK] * THREADS
    assert len(effects(workspace)) == THREADS
    assert spy.count == THREADS


PROCESSES = 4
PROCESS_ROUNDS = 25


def _submit_from_a_process(db: str, workspace: str, index: int, barrier: Any, answers: Any) -> None:
    """One of several processes: its own store and runtime on the shared files."""
    spy = Spy()
    store = SQLiteAuditStore(db)
    runtime = ToolRuntime(ToolRegistry([effect_tool(spy)]), workspace, WRITE_ANYWHERE, store)
    try:
        for round_ in range(PROCESS_ROUNDS):
            call = keyed(f"r{round_}-p{index}", idempotency_key=f"k{round_}")
            barrier.wait(30)
            answers.put((round_, index, runtime.execute(call).code.value))
    finally:
        runtime.close()
        store.close()


def test_four_processes_with_one_key_cause_exactly_one_side_effect(tmp_path, workspace, capsys):
    workspace.mkdir()
    db = tmp_path / "shared.db"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(PROCESSES)
    answers = context.Queue()
    processes = [
        context.Process(
            target=_submit_from_a_process, args=(str(db), str(workspace), i, barrier, answers)
        )
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    try:
        received = [answers.get(timeout=60) for _ in range(PROCESSES * PROCESS_ROUNDS)]
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    per_round: dict[int, list[str]] = {}
    for round_, _, code in received:
        per_round.setdefault(round_, []).append(code)
    for round_, codes in sorted(per_round.items()):
        assert codes.count("OK") == 1, (round_, codes)
        assert set(codes) - {"OK"} <= {code.value for code in ANSWERS_TO_A_TWIN}, codes
        assert len([n for n in effects(workspace) if n.startswith(f"r{round_}-")]) == 1
    with SQLiteAuditStore(db) as store:
        rows = store.rows()
    assert len(rows) == PROCESSES * PROCESS_ROUNDS
    assert sum(row.idempotency_outcome == "claimed" for row in rows) == PROCESS_ROUNDS
    tally = Counter(code for _, _, code in received)
    with capsys.disabled():
        print(
            f"\n[idempotency/processes] {PROCESS_ROUNDS} rounds x {PROCESSES} processes on one "
            f"db: side effects {len(effects(workspace))} (expected {PROCESS_ROUNDS}); "
            f"answers {dict(sorted(tally.items()))}"
        )
