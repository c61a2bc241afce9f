"""Running one cell: a fault against a target, in a fresh world.

The world is chosen as replay chooses it (``replay.player.chosen_world``:
``world`` forces ``fake`` or ``directory``; ``auto`` asks the registry for
the tools the cassette calls). A directory-world cell runs in a fresh
``harness.DirectoryWorld`` made for it (in ``parent``) and removed after
it: the recorded root is mapped to the world's in the calls' arguments
(``RootMap``), the handler's Python-level file operations are counted
(``directory.Operations``), the state before a target is kept in the
``PrefixCache`` as for the fake world (spelt with the recorded root), and
a fault that cannot act on real files here
is reported ``n/a`` with its reason (``Fault.cannot_run_in``),
never passed.

See ``cell`` for what a cell checks; once it is finished, a cell serving
HTTP also checks that no call sent a POST, PATCH or DELETE again where the
service may have acted (``http_sends``). ``run_cell`` never raises for
what a tool or the executor does.
"""

from __future__ import annotations

import os
import stat
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..harness.directory_world import DirectoryWorld
from ..harness.fake_filesystem import FakeFilesystems
from ..harness.world import FakeWorld, WorkspaceEntry, beside_the_workspace
from ..registry import ToolRegistry
from ..replay.cassette import Cassette
from ..replay.http import HttpPlayback, HttpUnavailable
from ..replay.player import chosen_world
from .cell import Cell
from .directory import Operations
from .fault import Fault
from .http_sends import resent
from .outcome import NOT_APPLICABLE, NOTHING_TO_INJECT, CellOutcome, CellStatus, skipped_in
from .prefixes import PrefixCache
from .resources import ResourceWatch
from .target import Target


def run_cell(
    fault: Fault,
    target: Target,
    registry: ToolRegistry,
    *,
    secrets: Mapping[str, str] | None = None,
    nodeid: str = "",
    prefixes: PrefixCache | None = None,
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
    parent: str | None = None,
) -> CellOutcome:
    """Run ``fault`` against ``target`` in a fresh world; never raises for
    what happens in it. ``prefixes`` keeps the state before each target
    for the next cell of the same interaction, and the first cell of a later
    one replays on from it (``registry`` and ``secrets`` are part of its
    key; the fake world's only); ``fake_filesystems`` is the ``FakeFilesystems`` to run
    in (default: the process's). ``world`` is ``auto``, ``fake`` or
    ``directory`` (``replay.player.chosen_world``; ``ValueError`` for
    another); ``parent`` is where a directory world is made (default: the
    temporary directory)."""
    kind = chosen_world(target.cassette, registry, world)
    skipped = fault.cannot_run_in(kind)
    problems: tuple[str, ...]
    status: CellStatus
    if not fault.applies(target):
        problems, status = (f"{NOT_APPLICABLE}: applies to {fault.applies_to}",), "n/a"
    elif skipped is not None:
        problems, status = (skipped_in(kind) + skipped,), "n/a"
    elif kind == "directory":
        real_paths = fake_filesystems.real_paths if fake_filesystems is not None else None
        problems = tuple(
            _run_in_directory(fault, target, registry, secrets, parent, prefixes, real_paths)
        )
        status = _status(problems)
    else:
        problems = tuple(_run(fault, target, registry, secrets, prefixes, fake_filesystems))
        status = _status(problems)
    return CellOutcome(
        source=target.source,
        interaction=target.index + 1,
        tool=target.call.tool_name,
        fault=fault.name,
        status=status,
        problems=problems,
        nodeid=nodeid,
    )


def _status(problems: tuple[str, ...]) -> CellStatus:
    if problems and all(problem.startswith(NOTHING_TO_INJECT) for problem in problems):
        return "n/a"
    return "fail" if problems else "pass"


def _run(
    fault: Fault,
    target: Target,
    registry: ToolRegistry,
    secrets: Mapping[str, str] | None,
    prefixes: PrefixCache | None,
    fake_filesystems: FakeFilesystems | None,
) -> list[str]:
    cassette, index = target.cassette, target.index
    try:  # before the fake world: it imports vcrpy
        http = HttpPlayback.for_cassette(cassette, registry, repeats=True)
    except HttpUnavailable as exc:
        return [str(exc)]
    with FakeWorld.of(cassette, fake_filesystems=fake_filesystems) as world:
        saved = prefixes.get(cassette, index, registry, secrets) if prefixes is not None else None
        earlier = (
            prefixes.nearest(cassette, index, registry, secrets)
            if saved is None and prefixes is not None
            else None
        )
        start = saved if saved is not None else earlier[1] if earlier is not None else None
        cell = Cell(fault.name, target, registry, world, secrets, http=http, start=start)
        sent: int | None = None
        resources: ResourceWatch | None = None
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
            sent = _sent_from_now(cell)
            world.plant_forbidden()
            world.plant(beside_the_workspace(world.root))
            cell.outside_planted()
            resources = ResourceWatch(cell)
            with resources:
                fault.inject(cell)
        except Exception:  # the fault itself broke: report it, never crash the run
            cell.problems.append("the fault raised: " + _last_lines(traceback.format_exc()))
        cell.finish()
        _check_sends(cell, sent)
        if resources is not None:
            cell.problems.extend(resources.left_open(reported=cell.problems))
        cell.check_outside()
        return cell.problems


def _run_in_directory(
    fault: Fault,
    target: Target,
    registry: ToolRegistry,
    secrets: Mapping[str, str] | None,
    parent: str | None,
    prefixes: PrefixCache | None,
    real_paths: Sequence[str] | None = None,
) -> list[str]:
    """``_run`` in a fresh ``DirectoryWorld``: the cassette as the world
    spells it (its root, the calls' arguments mapped), the Python-level
    operations counted. A prefix is saved spelt with the recorded root
    (``_entries_spelt``) and restored spelt with the new world's."""
    cassette, index = target.cassette, target.index
    try:
        http = HttpPlayback.for_cassette(cassette, registry, repeats=True)
    except HttpUnavailable as exc:
        return [str(exc)]
    kind = "directory"
    saved = prefixes.get(cassette, index, registry, secrets, kind) if prefixes else None
    earlier = (
        prefixes.nearest(cassette, index, registry, secrets, kind)
        if saved is None and prefixes is not None
        else None
    )
    start = saved if saved is not None else earlier[1] if earlier is not None else None
    with DirectoryWorld.of(cassette, parent=parent, real_paths=real_paths) as place:
        here = replace(target, cassette=_as_the_world_spells_it(cassette, place))
        cell = Cell(fault.name, here, registry, place, secrets, http=http, start=start)
        sent: int | None = None
        for path in place.unplaced_outside:
            cell.problems.append(
                f"outside file {path} not planted: a directory world plants only beside "
                "the recorded root"
            )
        resources: ResourceWatch | None = None
        with Operations() as operations:
            cell.files.operations = operations
            try:
                if start is not None:
                    place.restore_workspace(_entries_spelt(place, start.entries, recorded=False))
                if saved is None:
                    cell.replay_before(earlier[0] if earlier is not None else 0)
                    if index and prefixes is not None:
                        done = cell.saved()
                        entries = _entries_spelt(place, done.entries, recorded=True)
                        prefixes.put(
                            cassette, index, registry, secrets, replace(done, entries=entries), kind
                        )
                cell.at_target()
                sent = _sent_from_now(cell)
                operations.forget_looks()  # the runs before the target's are not judged
                place.plant_forbidden()
                place.plant(beside_the_workspace(place.root))  # /etc/passwd is refused
                cell.outside_planted()
                with cell.files.quiet():  # its look at /proc/self/fd is no handler's
                    resources = ResourceWatch(cell)
                with resources:
                    fault.inject(cell)
            except Exception:
                cell.problems.append("the fault raised: " + _last_lines(traceback.format_exc()))
            cell.finish()
            _check_sends(cell, sent)
            if resources is not None:
                with cell.files.quiet():
                    cell.problems.extend(resources.left_open(reported=cell.problems))
        cell.check_outside()
        return cell.problems


def _sent_from_now(cell: Cell) -> int:
    """Where the target's calls start in the playback's log of requests."""
    return len(cell.http.served()) if cell.http is not None else 0


def _check_sends(cell: Cell, since: int | None) -> None:
    """The invariant of every cell that serves HTTP: no call of the fault's
    sent a POST, PATCH or DELETE again where the service may have acted
    (``http_sends.resent``). Checked once the cell is finished, so that a
    handler that overran its deadline is counted whole. ``since``: where
    the target's calls started (None: the cell never got there)."""
    if cell.http is not None and since is not None:
        served = cell.http.served()[since:]
        cell.problems.extend(resent(served, cell.target.interaction.http))


def _entries_spelt(
    place: DirectoryWorld, entries: tuple[WorkspaceEntry, ...], *, recorded: bool
) -> tuple[WorkspaceEntry, ...]:
    """Saved workspace entries with this world's root spelt as recorded
    (``recorded``) or the other way: in text files (a binary one as it is,
    as the world rebuilds them) and absolute link targets."""
    mapping = place.root_map
    spelt: list[WorkspaceEntry] = []
    for relative, mode, data in entries:
        if stat.S_ISLNK(mode) and data.startswith(b"/"):
            target = os.fsdecode(data)
            moved = place.recorded_path(target) if recorded else place.world_path(target)
            data = os.fsencode(moved or target)
        elif stat.S_ISREG(mode) and _is_text(data):
            data = mapping.to_recorded(data) if recorded else mapping.to_world(data)
        spelt.append((relative, mode, data))
    return tuple(spelt)


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _as_the_world_spells_it(cassette: Cassette, place: DirectoryWorld) -> Cassette:
    """``cassette`` with the world's root, and every call's arguments
    naming it where they named the recorded one."""
    mapping = place.root_map
    return replace(
        cassette,
        workspace=replace(cassette.workspace, root=place.root),
        interactions=tuple(
            replace(item, call=replace(item.call, arguments=mapping.to_world(item.call.arguments)))
            for item in cassette.interactions
        ),
    )


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])
