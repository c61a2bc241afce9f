"""The state before a target, saved by the first cell of an interaction and
restored for the next ones: a cache the caller owns (the pytest plugin's
run keeps one for the session; ``run_cell`` without one replays every
time). The first cell of a later interaction starts from the latest state
saved before it (``nearest``) and replays only the interactions between:
a file's cells, run in order, replay each interaction once.

Prefixes are kept per kind of world (``fake``, ``directory``). A
directory world's are spelt with the recorded root (``run`` maps them to
and from each new world's), so they serve the next cell's fresh world.

A saved prefix holds what replaying the interactions before a target left
behind: the workspace (every entry under the root, with its mode), the
session's audit store (rows and idempotency keys) and the plan's progress.
Not kept: the runtime's rollback journal, so a fault that rolls back an
earlier call must run without a cache.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..audit import SQLiteAuditStore
from ..harness.world import WorkspaceEntry
from ..plan import PlanProgress
from ..replay.cassette import Cassette

DEFAULT_SIZE = 8
"""Saved prefixes a cache keeps: pytest runs an interaction's cells one
after another, so a few suffice."""


@dataclass(frozen=True, slots=True)
class SavedPrefix:
    """What replaying the interactions before a target left behind."""

    entries: tuple[WorkspaceEntry, ...]
    """(relative path, st_mode, content or link target), parents first."""
    store: SQLiteAuditStore
    """The session's audit store as it was (copy it before use)."""
    plan: PlanProgress | None
    """The plan's progress as it was (copy it before use)."""


class PrefixCache:
    """The last ``size`` saved prefixes, by (cassette, index, registry,
    secrets) identity. Each entry keeps its key objects alive, so an id is
    never reused while it is here; a dropped entry's store is closed."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[
            tuple[int, int, int, int, str], tuple[tuple[object, ...], SavedPrefix]
        ] = OrderedDict()

    def get(
        self,
        cassette: Cassette,
        index: int,
        registry: object,
        secrets: object,
        world: str = "fake",
    ) -> SavedPrefix | None:
        """The prefix saved for the interaction ``index`` of ``cassette``
        with this registry and these secrets, in this kind of world, or None."""
        found = self._entries.get(_key(cassette, index, registry, secrets, world))
        if found is None or found[0] != (cassette, registry, secrets):
            return None
        return found[1]

    def nearest(
        self,
        cassette: Cassette,
        index: int,
        registry: object,
        secrets: object,
        world: str = "fake",
    ) -> tuple[int, SavedPrefix] | None:
        """The saved prefix of the latest interaction before ``index`` of
        ``cassette`` (with this registry and these secrets) and its index:
        the state to replay on from, so that the first cell of interaction
        ``index`` replays only the interactions after it. None when none."""
        best: tuple[int, SavedPrefix] | None = None
        for (_c, at, _r, _s, kind), (kept, saved) in self._entries.items():
            if (
                kind == world
                and at < index
                and kept[0] is cassette
                and kept[1] is registry
                and kept[2] is secrets
                and (best is None or at > best[0])
            ):
                best = (at, saved)
        return best

    def put(
        self,
        cassette: Cassette,
        index: int,
        registry: object,
        secrets: object,
        saved: SavedPrefix,
        world: str = "fake",
    ) -> None:
        """Keep ``saved``, dropping the oldest entries past ``size``."""
        if self.size <= 0:
            saved.store.close()
            return
        key = _key(cassette, index, registry, secrets, world)
        self._entries[key] = ((cassette, registry, secrets), saved)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            _dropped_key, (_keep, dropped) = self._entries.popitem(last=False)
            dropped.store.close()

    def clear(self) -> None:
        """Drop every entry (closing their stores)."""
        while self._entries:
            _dropped_key, (_keep, dropped) = self._entries.popitem(last=False)
            dropped.store.close()


def _key(
    cassette: Cassette, index: int, registry: object, secrets: object, world: str
) -> tuple[int, int, int, int, str]:
    return (id(cassette), index, id(registry), id(secrets), world)
