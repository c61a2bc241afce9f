"""Running one cell: a fault against a target, in a fresh world.

See ``cell`` for what a cell checks; ``run_cell`` never raises for what a
tool or the executor does.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping

from ..harness.fake_filesystem import FakeWorld
from ..harness.world import World, beside_the_workspace
from ..registry import ToolRegistry
from ..replay.http import HttpPlayback, HttpUnavailable
from .cell import Cell
from .fault import Fault
from .outcome import CellOutcome, CellStatus
from .prefixes import PrefixCache
from .target import Target


def run_cell(
    fault: Fault,
    target: Target,
    registry: ToolRegistry,
    *,
    secrets: Mapping[str, str] | None = None,
    nodeid: str = "",
    prefixes: PrefixCache | None = None,
    fake_world: FakeWorld | None = None,
) -> CellOutcome:
    """Run ``fault`` against ``target`` in a fresh world; never raises for
    what happens in it. ``prefixes`` keeps the state before each target
    for the next cell of the same interaction, and the first cell of a later
    one replays on from it (``registry`` and ``secrets`` are part of its
    key); ``fake_world`` is the ``FakeWorld`` to run in (default: the
    process's)."""
    if fault.applies(target):
        problems = tuple(_run(fault, target, registry, secrets, prefixes, fake_world))
        status: CellStatus = "fail" if problems else "pass"
    else:
        problems, status = ("not applicable",), "n/a"
    return CellOutcome(
        source=target.source,
        interaction=target.index + 1,
        tool=target.call.tool_name,
        fault=fault.name,
        status=status,
        problems=problems,
        nodeid=nodeid,
    )


def _run(
    fault: Fault,
    target: Target,
    registry: ToolRegistry,
    secrets: Mapping[str, str] | None,
    prefixes: PrefixCache | None,
    fake_world: FakeWorld | None,
) -> list[str]:
    cassette, index = target.cassette, target.index
    try:  # before the fake world: it imports vcrpy
        http = HttpPlayback.for_cassette(cassette, registry, repeats=True)
    except HttpUnavailable as exc:
        return [str(exc)]
    with World.of(cassette, fake_world=fake_world) as world:
        saved = prefixes.get(cassette, index, registry, secrets) if prefixes is not None else None
        earlier = (
            prefixes.nearest(cassette, index, registry, secrets)
            if saved is None and prefixes is not None
            else None
        )
        start = saved if saved is not None else earlier[1] if earlier is not None else None
        cell = Cell(fault.name, target, registry, world, secrets, http=http, start=start)
        try:
            if saved is not None:
                world.restore_workspace(saved.entries)
            else:
                if earlier is not None:  # replay on from the latest state saved before
                    world.restore_workspace(earlier[1].entries)
                cell.replay_before(earlier[0] if earlier is not None else 0)
                if index and prefixes is not None:
                    prefixes.put(cassette, index, registry, secrets, cell.saved())
            cell.at_target()
            world.plant_forbidden()
            world.plant(beside_the_workspace(world.root))
            cell.outside_planted()
            fault.inject(cell)
        except Exception:  # the fault itself broke: report it, never crash the run
            cell.problems.append("the fault raised: " + _last_lines(traceback.format_exc()))
        cell.finish()
        cell.check_outside()
        return cell.problems


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])
