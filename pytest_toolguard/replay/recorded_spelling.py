"""Results replayed in a world whose root is spelt another way, compared as
the recording's runtime would have made them.

The runtime cuts a result over its tool's ``result_limit`` characters of
JSON (``runtime.results.truncate``). In a directory world the root has
another length than the recorded one, so a result naming it near the
limit would be cut at another place, or cut in one world and not in the
other. ``RecordedSpelling`` replays with every tool's limit lifted
(``registry``), spells each whole result as recorded (``root_map.RootMap``)
and only then cuts it at the tool's own limit: the cut falls where the
recording's fell, and ``truncated`` says what it said.

Where it stops: the handler's own output is what is cut; a handler that
sizes its output by its root's length, or a fault cell's run (which keeps
the world's spelling), is not covered.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

from ..contract import ToolResult
from ..registry import ToolRegistry
from ..runtime.results import truncate
from .root_map import RootMap

UNCUT = sys.maxsize
"""The result limit of the lifted copy: nothing is cut in the world."""


class RecordedSpelling:
    """``mapping`` (world -> recorded) over the results of ``registry``'s
    tools; ``registry`` here is the copy to replay with (limits lifted when
    the two roots differ, ``registry`` itself otherwise)."""

    def __init__(self, mapping: RootMap, registry: ToolRegistry) -> None:
        self.mapping = mapping
        self._limits = {spec.name: spec.result_limit for spec in registry}
        if mapping.identity:
            self.registry = registry
        else:
            self.registry = ToolRegistry(
                [replace(spec, result_limit=UNCUT) for spec in registry], world=registry.world
            )

    def result(self, tool_name: Any, result: ToolResult, stored: Any) -> tuple[ToolResult, Any]:
        """``result`` and its ``stored`` data (``ToolRuntime.add_listener``'s)
        spelt as recorded, then cut at the tool's own limit as its runtime
        cuts them."""
        mapping = self.mapping
        limit = self._limits.get(tool_name) if isinstance(tool_name, str) else None
        data, stored = mapping.to_recorded(result.data), mapping.to_recorded(stored)
        message = mapping.to_recorded(result.message)
        if limit is None or mapping.identity or not result.ok or result.truncated:
            return replace(result, message=message, data=data), stored
        shown, total = _cut(data, limit)
        stored, _ = _cut(stored, limit)
        if total is not None:
            message = f"ok; output truncated to {limit} of {total} characters"
        cut = replace(
            result,
            message=message,
            data=shown,
            truncated=total is not None,
            total_size=total,
        )
        return cut, stored


def _cut(data: Any, limit: int) -> tuple[Any, int | None]:
    """``truncate``'s answer for ``data``, from its JSON as the runtime writes it."""
    return truncate(data, json.dumps(data, ensure_ascii=False, sort_keys=True), limit)
