"""The cell world: the state before a target, saved by the first cell of an
interaction and restored for the next ones, gives every cell the outcome
that replaying the interactions before it gives."""

from __future__ import annotations

from pathlib import Path

from pytest_toolguard.faults import (
    Cell,
    Fault,
    iter_cells,
    run_cell,
    select_faults,
    targets,
)
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.faults.prefixes import PrefixCache
from pytest_toolguard.replay.cassette import load
from pytest_toolguard.tools import builtin_registry

ROOT = Path(__file__).parents[2]
FAULTS = "duplicate_submission,response_lost,schema_drift,plan_violation,unknown_tool"


def _outcomes(prefixes: PrefixCache | None) -> dict[tuple[str, str, str], CellOutcome]:
    registry = builtin_registry()
    outcomes = {}
    for name in ("cassettes/feedback_analysis.yaml", "cases/duplicate_idempotency_key.yaml"):
        cassette = load(ROOT / name, source=name)
        for target, fault in iter_cells(cassette, registry, name, select_faults(FAULTS)):
            outcome = run_cell(fault, target, registry, prefixes=prefixes)
            outcomes[(name, target.label, fault.name)] = outcome
    return outcomes


def test_saved_states_give_the_outcomes_replaying_gives() -> None:
    replayed = _outcomes(None)
    cache = PrefixCache()
    restored = _outcomes(cache)
    cache.clear()
    assert restored == replayed
    # The comparison means something: states were saved and cells passed.
    assert sum(o.status == "pass" for o in replayed.values()) > 20
    assert any(label.startswith(("4-", "5-", "6-")) for _, label, _ in replayed)


def test_a_saved_state_is_used_once_the_first_cell_saved_it() -> None:
    registry = builtin_registry()
    name = "cassettes/feedback_analysis.yaml"
    cassette = load(ROOT / name, source=name)
    target = targets(cassette, registry, name)[4]
    (fault,) = select_faults("unknown_tool")
    cache = PrefixCache()
    assert cache.get(cassette, 4, registry, None) is None
    assert run_cell(fault, target, registry, prefixes=cache).status == "pass"
    saved = cache.get(cassette, 4, registry, None)
    assert saved is not None
    # What the four calls before it wrote is in the saved workspace.
    paths = {path for path, _mode, _data in saved.entries}
    assert "runs/run-001/artifacts/feedback_analysis.json" in paths
    assert saved.plan is not None and saved.plan.current_step is not None
    assert saved.plan.current_step.id == "step_3"
    # Another registry is another key: it replays.
    assert cache.get(cassette, 4, builtin_registry(), None) is None
    cache.clear()


class _Keys(Fault):
    name = "keys_seen"
    applies_to = "any call"
    injection = "none"
    expected = "distinct keys"
    seen: list[str | None] = []

    def inject(self, cell: Cell) -> None:
        _Keys.seen = [cell.call().idempotency_key for _ in range(3)]
        _Keys.seen.append(cell.call(idempotency_key="chosen").idempotency_key)


def test_each_call_of_a_cell_gets_its_own_idempotency_key() -> None:
    """Reusing the recorded key would answer every call after the first from
    the key: the fault would test nothing."""
    registry = builtin_registry()
    name = "cases/duplicate_idempotency_key.yaml"
    cassette = load(ROOT / name, source=name)
    target = targets(cassette, registry, name)[0]
    assert target.call.idempotency_key == "todo-v1"
    assert run_cell(_Keys(), target, registry).status == "pass"
    *made, chosen = _Keys.seen
    assert len(set(made)) == 3
    assert all(key and key.startswith("todo-v1-") for key in made)
    assert chosen == "chosen"


def test_a_restored_workspace_holds_the_saved_entries_with_their_modes() -> None:
    from pytest_toolguard.harness.world import FakeWorld
    from pytest_toolguard.replay.cassette import WorkspaceState

    state = WorkspaceState(
        root="/workspace",
        files={"a.txt": b"a", "deep/er/b.sh": b"#!/bin/sh\n"},
        symlinks={"link": "a.txt"},
        outside_files={"/elsewhere/keep.txt": b"outside"},
    )
    with FakeWorld(state) as world:
        world.fs.chmod("/workspace/deep/er/b.sh", 0o755)
        world.fs.chmod("/workspace/a.txt", 0o400)
        world.fs.chmod("/workspace/deep", 0o711)
        saved = world.save_workspace()
        world.fs.create_file("/workspace/new.txt", contents="later")
        world.fs.remove_object("/workspace/deep/er/b.sh")
        world.restore_workspace(saved)
        assert world.save_workspace() == saved
        assert world.fs.readlink("/workspace/link") == "a.txt"
        assert world.fs.exists("/elsewhere/keep.txt")


def _prefix_state(saved) -> tuple:
    rows = [
        (r.call_id, r.tool_name, r.state, r.decision, r.result_code) for r in saved.store.rows()
    ]
    step = saved.plan.current_step.id if saved.plan and saved.plan.current_step else None
    return saved.entries, rows, step


def test_a_later_interactions_state_replayed_on_from_an_earlier_one_is_the_same() -> None:
    registry = builtin_registry()
    name = "cassettes/feedback_analysis.yaml"
    cassette = load(ROOT / name, source=name)
    found = targets(cassette, registry, name)
    (fault,) = select_faults("unknown_tool")
    scratch = PrefixCache()
    assert run_cell(fault, found[5], registry, prefixes=scratch).status == "pass"
    on_from = PrefixCache()
    assert run_cell(fault, found[2], registry, prefixes=on_from).status == "pass"
    assert on_from.nearest(cassette, 5, registry, None) is not None
    assert run_cell(fault, found[5], registry, prefixes=on_from).status == "pass"
    assert _prefix_state(on_from.get(cassette, 5, registry, None)) == _prefix_state(
        scratch.get(cassette, 5, registry, None)
    )
    scratch.clear()
    on_from.clear()


def test_the_first_cell_of_a_later_interaction_replays_only_the_calls_after_the_saved_state(
    monkeypatch,
) -> None:
    registry = builtin_registry()
    name = "cassettes/feedback_analysis.yaml"
    cassette = load(ROOT / name, source=name)
    found = targets(cassette, registry, name)
    (fault,) = select_faults("unknown_tool")
    cache = PrefixCache()
    run_cell(fault, found[2], registry, prefixes=cache)
    replayed: list[int] = []
    original = Cell.replay_before

    def counting(self: Cell, first: int = 0) -> None:
        replayed.append(self.target.index - first)
        original(self, first)

    monkeypatch.setattr(Cell, "replay_before", counting)
    run_cell(fault, found[5], registry, prefixes=cache)
    assert replayed == [3]
    cache.clear()
