"""Replaying a cassette or case through the real executor: ``replay()``.

``replay(cassette, registry)`` rebuilds the recorded world (a fake
filesystem holding the recorded workspace, the clock frozen at the
recorded time: ``harness.World``), runs every recorded call through the
recorded session's runtime (``harness.session_runtime``: its plan, its
approvals granted again, its HTTP exchanges served with no network), and
compares what ``checks.ReplayChecks`` compares: each result and audit row,
the files after the last call, the files outside, the handlers still
running, the HTTP requests nothing recorded answered, and what a handler
reached of the real disk (refused: ``World.escapes()``).

It never raises for a difference: every one is collected in the returned
``ReplayReport``. With ``secrets``, the runtime redacts their real values as
it redacts any secret (unless a ``redactor`` of the caller's is given), and
no difference holds one in any form ``KnownSecrets`` knows: a hostile case
cannot make a report print what replay sent for its placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..audit import SQLiteAuditStore
from ..contract import ToolResult
from ..harness.fake_filesystem import FakeWorld
from ..harness.files import read_files
from ..harness.known_secrets import KnownSecrets
from ..harness.probes import probing
from ..harness.session import secrets_redactor, session_runtime, with_secrets
from ..harness.world import World
from ..redaction import Redactor
from ..registry import ToolRegistry
from .cassette import Cassette
from .checks import ReplayChecks, ReplayReport
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
    fake_world: FakeWorld | None = None,
) -> ReplayReport:
    """Replay ``cassette`` through a fresh runtime over ``registry``.

    ``secrets`` maps a placeholder keyword (``authorization`` for
    ``<redacted:authorization>``) to the real value to send; placeholders
    without one are sent as they are. ``volatile`` adds field paths (such as
    ``data.files_searched``) that are not compared in any interaction.
    ``fake_world`` is the ``FakeWorld`` to run in (default: the process's).
    Without a ``redactor``, the runtime's also redacts the ``secrets``.
    """
    redactor = redactor or secrets_redactor(secrets) or Redactor()
    checks = ReplayChecks(
        redactor, tuple(cassette.volatile) + tuple(volatile), registry, KnownSecrets(secrets)
    )
    http = checks.http_playback(cassette, registry)  # imports vcrpy outside the fake world
    with World.of(cassette, fake_world=fake_world) as world:
        outside_before = dict(cassette.workspace.outside_files)
        store = SQLiteAuditStore(":memory:")
        probed, probes = probing(registry)  # threads a handler leaves running
        runtime = session_runtime(cassette, probed, store, redactor=redactor, http=http)
        results: list[ToolResult] = []
        stored: list[Any] = []
        reported = 0
        runtime.add_listener(lambda call, result, data, approval: stored.append(data))
        try:
            for index, interaction in enumerate(cassette.interactions):
                if http:
                    http.current = index
                seen = len(world.escapes())
                result = runtime.execute(with_secrets(interaction.call, secrets))
                results.append(result)
                checks.result(index, interaction, result, stored[-1])
                where = f"interaction {index + 1} ({interaction.call.tool_name})"
                checks.escapes(where, world.escapes()[seen:])
                reported = len(world.escapes())
        finally:
            orphans = runtime.close(join_timeout=ORPHAN_JOIN_SECONDS)
            if http:
                http.close()
        if http:
            checks.http_requests(cassette.interactions, http.unmatched())
        checks.escapes("runtime", world.escapes()[reported:])  # a thread's, late
        for orphan in orphans:
            checks.add("runtime", "handlers", "none still running", orphan)
        left = sorted({name for probe in probes for name in probe.leftover_threads()})
        if left:
            checks.add("runtime", "threads", "none left running by a handler", ", ".join(left))
        rows = tuple(store.rows())
        store.close()
        checks.audit(cassette.interactions, rows)
        checks.files(cassette, _redacted_paths(redactor, world.tree()))
        checks.outside(outside_before, read_files(outside_before))
    return ReplayReport(cassette, tuple(results), tuple(checks.differences), checks.checks, rows)


def _redacted_paths(redactor: Redactor, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` keyed by their paths as a cassette keeps them."""
    return {redact_path(redactor, path): data for path, data in files.items()}
