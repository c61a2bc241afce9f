"""Replaying a cassette or case through the real executor: ``replay()``.

``replay(cassette, registry)`` rebuilds the recorded world (a fake
filesystem holding the recorded workspace, the clock frozen at the
recorded time: ``harness.world.FakeWorld``), runs every recorded call through the
recorded session's runtime (``harness.session_runtime``: its plan, its
approvals granted again, its HTTP exchanges served with no network), and
compares what ``checks.ReplayChecks`` compares: each result and audit row,
the files after the last call, the files outside, the handlers still
running, the HTTP requests nothing recorded answered, and what a handler
reached of the real disk (refused: ``FakeWorld.escapes()``).

A cassette that calls a tool declaring ``world="directory"`` (or any
cassette, with ``world="directory"``) is replayed in a
``harness.DirectoryWorld`` instead: a fresh real directory holding the
recorded workspace, where C libraries and subprocesses see the same files
as the handler. The recorded root is mapped to the world's in the calls'
arguments, and back in what is compared (``root_map.RootMap``); "the files
outside" are then every entry of the world's own tree outside the
workspace (its decoys and the cassette's outside files), which must be
neither created, changed nor removed. A cassette's ``volatile`` may name
``files.<path>``: that file is checked for being there, not for its bytes.

It never raises for a difference: every one is collected in the returned
``ReplayReport``. With ``secrets``, the runtime redacts their real values as
it redacts any secret (unless a ``redactor`` of the caller's is given), and
no difference holds one in any form ``KnownSecrets`` knows: a hostile case
cannot make a report print what replay sent for its placeholders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..audit import AuditRecord, SQLiteAuditStore
from ..contract import ToolResult
from ..harness.branching import row_as_recorded, walked_world
from ..harness.directory_world import DirectoryWorld, mapped_files
from ..harness.escapes import Escape
from ..harness.fake_filesystem import FakeFilesystems
from ..harness.files import read_files
from ..harness.known_secrets import KnownSecrets
from ..harness.probes import OutsideSnapshot, outside_changes, probing
from ..harness.session import secrets_redactor, session_runtime, with_secrets
from ..harness.world import FakeWorld
from ..redaction import Redactor
from ..registry import ToolRegistry, WorldKind
from .cassette import VOLATILE_FILE_PREFIX, Cassette
from .checks import ReplayChecks, ReplayReport
from .http import HttpPlayback
from .recorded_spelling import RecordedSpelling
from .redacting import redact_path

ORPHAN_JOIN_SECONDS = 5.0
"""How long replay waits for a handler that overran its deadline."""


def replay(
    cassette: Cassette,
    registry: ToolRegistry,
    *,
    redactor: Redactor | None = None,
    secrets: Mapping[str, str] | None = None,
    volatile: Sequence[str] = (),
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
) -> ReplayReport:
    """Replay ``cassette`` through a fresh runtime over ``registry``.

    ``secrets`` maps a placeholder keyword (``authorization`` for
    ``<redacted:authorization>``) to the real value to send; placeholders
    without one are sent as they are. ``volatile`` adds field paths (such as
    ``data.files_searched``) that are not compared in any interaction.
    ``fake_filesystems`` is the ``FakeFilesystems`` to run in (default: the process's).
    ``world`` is ``auto``, ``fake`` or ``directory`` (see ``chosen_world``).
    Without a ``redactor``, the runtime's also redacts the ``secrets``.
    ``ValueError`` for an unknown ``world``.
    """
    redactor = redactor or secrets_redactor(secrets) or Redactor()
    checks = ReplayChecks(
        redactor, tuple(cassette.volatile) + tuple(volatile), registry, KnownSecrets(secrets)
    )
    http = checks.http_playback(cassette, registry)  # imports vcrpy outside the fake world
    if chosen_world(cassette, registry, world) == "directory":
        real_paths = fake_filesystems.real_paths if fake_filesystems is not None else None
        results, rows = _replay_in_directory(
            cassette, registry, checks, http, redactor, secrets, real_paths
        )
        return ReplayReport(cassette, results, tuple(checks.differences), checks.checks, rows)
    with FakeWorld.of(cassette, fake_filesystems=fake_filesystems) as fake:
        outside_before = dict(cassette.workspace.outside_files)
        results, rows = _play(
            cassette, cassette, registry, checks, http, redactor, secrets, escapes=fake.escapes
        )
        checks.files(*_without_volatile_files(cassette, _redacted_paths(redactor, fake.tree())))
        checks.outside(outside_before, read_files(outside_before))
    return ReplayReport(cassette, results, tuple(checks.differences), checks.checks, rows)


def chosen_world(cassette: Cassette, registry: ToolRegistry, world: str = "auto") -> WorldKind:
    """The world ``cassette`` replays in: ``world`` when it is ``fake`` or
    ``directory``; for ``auto``, the directory world when a tool its calls
    name runs in it (``ToolRegistry.world_for``). ``ValueError`` for any
    other ``world``."""
    return walked_world(cassette, registry, world)


def _replay_in_directory(
    cassette: Cassette,
    registry: ToolRegistry,
    checks: ReplayChecks,
    http: HttpPlayback | None,
    redactor: Redactor,
    secrets: Mapping[str, str] | None,
    real_paths: Sequence[str] | None = None,
) -> tuple[tuple[ToolResult, ...], tuple[AuditRecord, ...]]:
    """``replay``'s run in a ``DirectoryWorld``: the calls see the world's
    root where the recording named its own (``RootMap``), and what they
    return, the rows and the files are compared spelt as recorded. Outside
    the workspace, every entry of the world's own tree (decoys, the
    cassette's outside files) must be as it was before the first call:
    created, changed or removed ones are differences, and so is each write
    into the real read-only data (``real_paths``; ``DirectoryWorld.escapes``).
    Returns the results and the audit rows."""
    with DirectoryWorld.of(cassette, real_paths=real_paths) as place:
        mapping = place.root_map
        if http:
            http.map_root(mapping)  # exchanges spelt for the world's root
        for path in place.unplaced_outside:
            checks.add(
                "outside the workspace",
                path,
                "planted",
                "not planted: a directory world plants only beside the recorded root",
            )
        outside_before = place.outside()
        in_world = replace(
            cassette,
            workspace=replace(cassette.workspace, root=place.root),
            interactions=tuple(
                replace(
                    item, call=replace(item.call, arguments=mapping.to_world(item.call.arguments))
                )
                for item in cassette.interactions
            ),
        )
        spelling = RecordedSpelling(mapping, registry)  # cut as recorded, not in the world
        with place.watching():
            results, rows = _play(
                cassette,
                in_world,
                spelling.registry,
                checks,
                http,
                redactor,
                secrets,
                spelling,
                escapes=place.escapes,
            )
        files = _redacted_paths(redactor, mapped_files(mapping, place.tree()))
        checks.files(*_without_volatile_files(cassette, files))
        outside_differences(checks, place, outside_before)
    return results, rows


def outside_differences(
    checks: ReplayChecks, place: DirectoryWorld, outside_before: OutsideSnapshot
) -> None:
    """A difference for every entry of ``place``'s tree outside the
    workspace created, changed or removed since ``outside_before``, its path
    spelt as the recording would have spelt it."""
    outside_after = place.outside()
    changes = outside_changes(outside_before, outside_after)
    for path in (*changes.created, *changes.modified, *changes.removed):
        before, after = outside_before.get(path), outside_after.get(path)
        checks.add(
            "outside the workspace",
            place.recorded_path(path),
            "absent" if before is None else "unchanged",
            "removed" if after is None else _described(checks, after),
        )
    checks.checks += len(outside_before) + len(changes.created)
    changed = {place.recorded_path(path) for path in changes.paths}
    for path, events in place.accessed_outside().items():  # reads too: the kernel saw them
        if path not in changed:
            checks.add("outside the workspace", path, "not accessed", ", ".join(events))


def _play(
    cassette: Cassette,
    in_world: Cassette,
    registry: ToolRegistry,
    checks: ReplayChecks,
    http: HttpPlayback | None,
    redactor: Redactor,
    secrets: Mapping[str, str] | None,
    spelling: RecordedSpelling | None = None,
    escapes: Callable[[], Sequence[Escape]] | None = None,
) -> tuple[tuple[ToolResult, ...], tuple[AuditRecord, ...]]:
    """Every call of ``in_world`` (``cassette`` as the world spells it)
    through a fresh runtime, each result and the audit rows compared with
    ``cassette``'s (after ``spelling`` spelt them as recorded); the handlers
    and threads still running are differences too, and so is each reach of
    the real disk ``escapes`` lists (the fake world's refusals), named by
    the interaction it happened in."""
    store = SQLiteAuditStore(":memory:")
    probed, probes = probing(registry)  # threads a handler leaves running
    runtime = session_runtime(in_world, probed, store, redactor=redactor, http=http)
    results: list[ToolResult] = []
    stored: list[Any] = []
    runtime.add_listener(lambda call, result, data, approval: stored.append(data))
    reported = 0
    try:
        for index, interaction in enumerate(cassette.interactions):
            if http:
                http.current = index
            result = runtime.execute(with_secrets(in_world.interactions[index].call, secrets))
            if escapes is not None:
                seen = escapes()
                where = f"interaction {index + 1} ({interaction.call.tool_name})"
                checks.escapes(where, seen[reported:])
                reported = len(seen)
            data = stored[-1]
            if spelling is not None:
                result, data = spelling.result(interaction.call.tool_name, result, data)
            results.append(result)
            checks.result(index, interaction, result, data)
    finally:
        orphans = runtime.close(join_timeout=ORPHAN_JOIN_SECONDS)
        if http:
            http.close()
    if http:
        checks.http_requests(cassette.interactions, http.unmatched())
    if escapes is not None:
        checks.escapes("runtime", escapes()[reported:])  # a thread's, late
    for orphan in orphans:
        checks.add("runtime", "handlers", "none still running", orphan)
    left = sorted({name for probe in probes for name in probe.leftover_threads()})
    if left:
        checks.add("runtime", "threads", "none left running by a handler", ", ".join(left))
    rows = tuple(store.rows())
    store.close()
    if spelling is not None:
        rows = tuple(row_as_recorded(spelling.mapping, row) for row in rows)
    checks.audit(cassette.interactions, rows)
    return tuple(results), rows


def _without_volatile_files(
    cassette: Cassette, files: Mapping[str, bytes]
) -> tuple[Cassette, dict[str, bytes]]:
    """``cassette`` and ``files`` without the files its ``volatile`` names
    (``files.<path>``: a file whose bytes differ on every run, such as git's
    index, which holds inode numbers) when both hold them: such a file is
    still checked for being there, never for its bytes."""
    volatile = {
        entry[len(VOLATILE_FILE_PREFIX) :]
        for entry in cassette.volatile
        if entry.startswith(VOLATILE_FILE_PREFIX)
    }
    dropped = {
        path for path in volatile if path in files and cassette.final_files.get(path) is not None
    }
    if not dropped:
        return cassette, dict(files)
    final = {path: state for path, state in cassette.final_files.items() if path not in dropped}
    kept = {path: data for path, data in files.items() if path not in dropped}
    return replace(cassette, final_files=final), kept


def _described(checks: ReplayChecks, entry: tuple[Any, ...]) -> str:
    """An entry of an outside snapshot as a difference shows it."""
    if entry[0] == "file":
        return str(checks.describe(entry[-1]))
    return str(entry[0])


def _redacted_paths(redactor: Redactor, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` keyed by their paths as a cassette keeps them."""
    return {redact_path(redactor, path): data for path, data in files.items()}
