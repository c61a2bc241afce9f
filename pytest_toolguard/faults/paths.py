"""Faults in the paths a call names: a component swapped for a symlink to
outside (``symlink_escape``), and swapped between two of the handler's own
operations (``symlink_race``). The paths are those the arguments name
(declared, or named like a path) and those any other string argument
reached in a clean run (``reached``: a ``name`` joined into a path).
Both also swap the link in during calls with a few other argument sets
(``reached.alternative_arguments``), so that a branch other arguments
take meets the link too. ``path_traversal`` is in ``traversal``."""

from __future__ import annotations

import inspect
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..contract import ErrorCode, ToolResult
from ..harness.accesses import is_ancestor, is_within
from ..harness.world import DECOY_MARKER
from .cell import Cell, CleanRun
from .fault import Fault
from .outcome import NOTHING_TO_INJECT
from .reached import (
    MAX_ALTERNATIVES,
    alternative_arguments,
    beneath,
    could_reach,
    reached_arguments,
    reached_link_points,
)
from .target import Target

MAX_SWAPS = 64
"""At most this many swap points per link point for ``symlink_race``: more
are thinned evenly, the first and the last kept."""

OTHER_SWAPS = 2
"""At most this many per link point with each other argument set
(``reached.alternative_arguments``)."""

_REFUSED = (
    ErrorCode.PATH_OUTSIDE_WORKSPACE,
    ErrorCode.FORBIDDEN_PATH,
    ErrorCode.INVALID_ARGUMENT,
    ErrorCode.PERMISSION_DENIED,
)

_KIND_ERRORS = ("NotADirectoryError", "FileExistsError", "IsADirectoryError")
"""Errors an entry of the wrong kind raises: where the decoy is of another
kind than what a clean run found there, the harness caused them."""


class SymlinkEscapeFault(Fault):
    name = "symlink_escape"
    applies_to = (
        "successful calls with a path argument inside the workspace (declared, named "
        "like one, or a string a clean run joined into a path)"
    )
    injection = (
        "the path's first component replaced by a symlink to a decoy outside (a directory "
        "where a clean run had or made one): before the call, and again swapped in after "
        "the policy check, as the handler starts, also with up to "
        f"{MAX_ALTERNATIVES} other argument sets (booleans flipped, integers moved, "
        "amplified variants)"
    )
    expected = (
        "refused (PATH_OUTSIDE_WORKSPACE or a refused open); nothing outside read, "
        "looked at (stat, exists, listdir) or changed"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and (bool(_link_points(target)) or could_reach(target))

    def inject(self, cell: Cell) -> None:
        clean = _clean_run(cell)
        points = _all_link_points(cell, clean)
        if not points:
            cell.problems.append(f"{NOTHING_TO_INJECT}: {_NO_PATH}")
            return
        others = _other_runs(cell)
        free = cell.make_runtime(hooks=[])  # a plan allows the recorded arguments only
        decoys = {first: _plant_mirror(cell, first, clean) for first in points}
        cell.outside_planted()  # once, before any call: an escape must not be absorbed
        for first, decoy in decoys.items():
            with _Swapped(cell, first, decoy):
                result = cell.execute(cell.call())
            _refused(
                cell, clean, first, result, f"{first} was a symlink to outside before the call"
            )

            original = cell.replace_handler(_swapping_first(cell, first, decoy))
            result = cell.execute(cell.call())
            _refused(
                cell, clean, first, result, f"{first} became a symlink to outside during the call"
            )
            # A branch only other arguments take meets the link too (after
            # the policy check: a declared path is refused before it).
            for arguments, other in others:
                result = cell.execute(cell.call(arguments), free)
                changed = _changes(cell, arguments)
                _refused(
                    cell,
                    other,
                    first,
                    result,
                    f"{first} became a symlink to outside during {changed}",
                )
            cell.restore_handler(original)


_NO_PATH = (
    "no argument names a path beneath the workspace (declared, named like one, "
    "or a string a clean run joined into one)"
)


def _all_link_points(cell: Cell, clean: CleanRun) -> tuple[str, ...]:
    """The link points the arguments name, then those the other string
    arguments reached in ``clean`` (``reached``)."""
    points = _link_points(cell.target)
    if could_reach(cell.target):
        reached = reached_link_points(cell, reached_arguments(cell, clean))
        points += tuple(point for point in reached if point not in points)
    return points


def _other_runs(cell: Cell) -> list[tuple[dict[str, Any], CleanRun]]:
    """The other argument sets (``reached.alternative_arguments``) each
    with its clean run, those that succeed with nothing injected only:
    a failure under the link must be told from one without it."""
    runs = []
    for arguments in alternative_arguments(cell.target):
        other = cell.clean_run(arguments)
        cell.check_outside()
        if other.result.ok:
            runs.append((arguments, other))
    return runs


def _changes(cell: Cell, arguments: dict[str, Any]) -> str:
    """A call with other arguments, as a report says it (what changed)."""
    recorded = cell.target.arguments or {}
    changed = [
        f"{name}={value!r}"[:60]
        for name, value in arguments.items()
        if recorded.get(name, _ABSENT) != value
    ]
    return "a call with " + (", ".join(changed) or "the same arguments")


_ABSENT = object()


def _clean_run(cell: Cell) -> CleanRun:
    """A clean run, before any decoy of these faults is planted: what it
    changed outside is a problem now (the planting re-takes the picture)."""
    clean = cell.clean_run()
    cell.check_outside()
    return clean


def _refused(cell: Cell, clean: CleanRun, first: str, result: ToolResult, when: str) -> None:
    """The call under a swapped link read nothing outside (when it
    succeeded) or was refused. A failure counts as a refusal only where
    the harness did not cause it: the call succeeds with nothing injected,
    and its error is not one of an entry of the wrong kind where the decoy
    is of another kind than what the clean run found."""
    if result.ok:
        # A listing or search may succeed by skipping the link; it must
        # not have gone through it (the decoy marker check sees that).
        cell.check(
            DECOY_MARKER not in json.dumps(result.data, default=str),
            f"{when}: the call read through it",
        )
        return
    if result.code in _REFUSED:
        return
    if result.code is not ErrorCode.EXECUTION_ERROR:
        cell.check(False, f"{when}: expected a refusal, got {result.code.value}")
    elif not clean.result.ok:
        cell.check(
            False,
            f"{when}: inconclusive, the call fails with nothing injected too "
            f"({clean.result.code.value}): its failure here is no refusal",
        )
    elif _is_dir_decoy(cell, first) != _was_dir(cell, clean, first) and any(
        error in result.message for error in _KIND_ERRORS
    ):
        cell.check(
            False,
            f"{when}: inconclusive, the call failed on the decoy's kind "
            f"({result.message[:160]}), not on the link",
        )


class SymlinkRaceFault(Fault):
    name = "symlink_race"
    applies_to = (
        "successful calls with a path argument inside the workspace (declared, named "
        "like one, or a string a clean run joined into a path)"
    )
    injection = (
        "the path's first component swapped for a symlink to a decoy outside (a directory "
        "where a clean run had or made one) between two of the handler's filesystem "
        "operations, whichever API made them (open, stat, exists, realpath, lstat, "
        "readlink, listdir, ...): before each operation of a clean run that names a path "
        f"at, beneath or above it (at most {MAX_SWAPS}, thinned evenly); then with up to "
        f"{MAX_ALTERNATIVES} other argument sets (booleans flipped, integers moved, "
        f"amplified variants; at most {OTHER_SWAPS} swaps each)"
    )
    expected = (
        "refused or done inside: nothing outside read, opened or changed (a handler's own "
        "check-then-use race)"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and (bool(_link_points(target)) or could_reach(target))

    def inject(self, cell: Cell) -> None:
        clean = _clean_run(cell)
        link_points = _all_link_points(cell, clean)
        if not link_points:
            cell.problems.append(f"{NOTHING_TO_INJECT}: {_NO_PATH}")
            return
        others = _other_runs(cell)
        decoys = {first: _plant_mirror(cell, first, clean) for first in link_points}
        cell.outside_planted()
        saved = cell.world.save_workspace()
        runtime = cell.make_runtime(hooks=[])  # the plan has moved on by now
        points = {first: swap_points(cell, clean, first) for first in decoys}
        if cell.directory and not any(points.values()):
            cell.problems.append(
                f"{NOTHING_TO_INJECT}: the handler made no file operation in this process "
                "for a swap to land between (a server in another process makes its own)"
            )
        runs: list[tuple[dict[str, Any] | None, CleanRun]] = [(None, clean), *others]
        for arguments, run in runs:
            during = "" if arguments is None else f" during {_changes(cell, arguments)}"
            for first, decoy in decoys.items():
                limit = MAX_SWAPS if arguments is None else OTHER_SWAPS
                for k in swap_points(cell, run, first, limit):
                    cell.world.restore_workspace(saved)
                    swap = _Swapped(cell, first, decoy)
                    try:
                        with _swap_at(cell, k, swap):
                            # The swap changes the tree: not the call's doing.
                            call = cell.call(arguments)
                            result = cell.execute(call, runtime, judge_effects=False)
                    finally:
                        if os.path.islink(swap.path) or swap.moved:
                            swap.__exit__()
                    where = f"before operation {k}" if cell.directory else f"after operation {k}"
                    when = f"{first} became a symlink to outside {where}{during}"
                    _refused(cell, run, first, result, when)
        cell.world.restore_workspace(saved)


def swap_points(cell: Cell, clean: CleanRun, first: str, limit: int = MAX_SWAPS) -> list[int]:
    """The k at which ``symlink_race`` swaps ``first`` in: before the k-th
    operation in the directory world, after it in the fake world. Every
    gap before an operation of the clean run that names a path at,
    beneath or above the link point (or a relative one: a ``dir_fd``'s,
    unknown), whichever API made it; at most ``limit``, thinned evenly.
    Without the clean run's paths, every operation."""
    link = posixpath.join(cell.root, first)
    if len(clean.paths) != clean.accesses:
        touching = list(range(1, clean.accesses + 1))
    else:
        touching = [
            index
            for index, paths in enumerate(clean.paths, 1)
            if not paths or any(_touches(path, link) for path in paths)
        ]
    if not cell.directory:  # after the operation before it
        touching = [index - 1 for index in touching if index > 1]
    if len(touching) <= limit:
        return touching
    if limit <= 1:
        return touching[:limit]
    last = len(touching) - 1
    picked = {touching[round(step * last / (limit - 1))] for step in range(limit)}
    return sorted(picked)


def _touches(path: str, link: str) -> bool:
    if not path.startswith("/"):
        return True
    path = posixpath.normpath(path)
    return is_within(path, link) or is_ancestor(path, link)


@contextmanager
def _swap_at(cell: Cell, k: int, swap: _Swapped) -> Iterator[None]:
    """Within the block, ``swap`` happens at the handler's k-th filesystem
    operation: after the k-th path it resolves in the fake world
    (``AccessLog.after_access``); before its k-th Python-level operation in
    the directory world (``Operations.before``, which counts a ``stat`` or
    ``realpath`` too)."""
    log: Any = cell.operations if cell.directory else cell.files.access_log
    at = log.count + k

    def swap_at(index: int, *_where: str) -> None:
        if index == at:
            swap.__enter__()

    if cell.directory:
        log.before = swap_at
    else:
        log.after_access = swap_at
    try:
        yield
    finally:
        if cell.directory:
            log.before = None
        else:
            log.after_access = None


def _swapping_first(
    cell: Cell, first: str, decoy: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A handler wrapper that swaps the link in as the handler starts
    (after the policy check) and back when it ends."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(handler):
            # Held across the await: a coroutine's body runs after the call returns it.
            async def swapping_async(ctx: Any, **arguments: Any) -> Any:
                with _Swapped(cell, first, decoy):
                    return await handler(ctx, **arguments)

            return swapping_async

        def swapping(ctx: Any, **arguments: Any) -> Any:
            with _Swapped(cell, first, decoy):
                return handler(ctx, **arguments)

        return swapping

    return wrap


def _link_points(target: Target) -> tuple[str, ...]:
    """The first components of the call's workspace paths (after filling
    the tool's path templates), where a symlink can be put. An absolute
    path counts by its part beneath the workspace's root (the root the
    cell's world spells: the recorded one in the fake world, the world's
    own in the directory world); one naming anything else does not."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None:
        return ()
    paths: list[str] = []
    for access in spec.paths:
        try:
            paths += access.expand(arguments, target.cassette.session.variables)
        except (KeyError, ValueError):
            continue
    declared = {name for access in spec.paths for name in access.fields}
    paths += [arguments[name] for name in target.path_arguments if name not in declared]
    root = posixpath.normpath(target.cassette.workspace.root)
    points: list[str] = []
    for path in paths:
        normal = posixpath.normpath(path)
        if normal.startswith("/"):
            normal = beneath(root, normal) or "."
        if normal.startswith("..") or normal == ".":
            continue
        first = normal.split("/")[0]
        if first not in points:
            points.append(first)
    return tuple(points)


def _was_dir(cell: Cell, clean: CleanRun, first: str) -> bool:
    """Whether ``first`` is a directory now or in what the clean run left."""
    return first in clean.directories or cell.files.is_dir(posixpath.join(cell.root, first))


def _is_dir_decoy(cell: Cell, first: str) -> bool:
    return cell.files.is_dir(posixpath.join(cell.outside_dir, "mirror", first))


def _plant_mirror(cell: Cell, first: str, clean: CleanRun) -> str:
    """A decoy copy of ``first`` outside the workspace, of the kind a clean
    run found or made there (a directory the recording left out, empty, is
    still one): every file beneath it now or after the clean run with
    decoy content, plus a file whose name is the marker."""
    decoy = posixpath.join(cell.outside_dir, "mirror", first)
    if _was_dir(cell, clean, first):
        for relative in sorted(set(cell.tree()) | set(clean.tree)):
            if relative.startswith(first + "/"):
                path = posixpath.join(cell.outside_dir, "mirror", relative)
                cell.files.write_file(path, f"{DECOY_MARKER} {relative}\n")
        cell.files.write_file(posixpath.join(decoy, DECOY_MARKER + ".txt"), DECOY_MARKER)
    else:
        cell.files.write_file(decoy, f"{DECOY_MARKER} {first}\n")
    return decoy


class _Swapped:
    """Within the block, ``root/first`` is a symlink to ``decoy``; the real
    entry waits beside it and comes back afterwards."""

    def __init__(self, cell: Cell, first: str, decoy: str) -> None:
        self.path = posixpath.join(cell.root, first)
        self.aside = posixpath.join(cell.root, f"{first}.toolguard-aside")
        self.decoy = decoy
        self.cell = cell
        self.moved = False

    def __enter__(self) -> None:
        with self.cell.files.quiet():  # the harness's doing, not the handler's
            if os.path.lexists(self.path):
                os.rename(self.path, self.aside)
                self.moved = True
            os.symlink(self.decoy, self.path)

    def __exit__(self, *exc: object) -> None:
        with self.cell.files.quiet():
            if os.path.islink(self.path):
                os.unlink(self.path)
            elif os.path.lexists(self.path):  # the tool replaced the link: keep the evidence
                return
            if self.moved:
                os.rename(self.aside, self.path)
