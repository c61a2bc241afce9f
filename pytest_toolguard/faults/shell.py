"""A shell reached through an argument: ``shell_injection``.

A tool that builds a shell command from a value (``subprocess.run(f"git
log --grep {query}", shell=True)``, ``os.system``, ``os.popen``) runs
whatever shell syntax the value holds. The fault is a payload like a path
traversal's: each string argument in turn gets shell metacharacters
appended that, if a shell ever parses them, run ``touch MARKER`` (after
``;``, ``|``, ``&&``, a newline, inside ``$(...)`` or backticks, and after
a closing single or double quote). The oracle is what ran, not what was
written: the marker file, a path in the world's own directory beside the
workspace, must not exist after the call, whatever the call answered. A
tool that quotes the value (``shlex.quote``) or passes an argv list passes
a payload through as text, and the marker is never made.

Only tools that run in the directory world, where processes run for real,
get it; a call that started no process once run clean has nothing to
inject into (the cell is n/a with that reason). In the fake world no
process runs: a handler's is refused and reported there
(``harness.escapes``).
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from ..jsondata import strings_of
from ..registry import WorldKind
from .cell import Cell
from .fault import Fault
from .outcome import NOTHING_TO_INJECT
from .target import Target

MAX_ARGUMENTS = 3
"""At most this many string arguments get the payloads, the first ones."""

MARKER_NAME = "toolguard-shell-ran"
"""The marker's name, in the world's directory beside the workspace."""

PAYLOADS: tuple[str, ...] = (
    "; touch {marker}",
    "$(touch {marker})",
    "`touch {marker}`",
    "| touch {marker}",
    "&& touch {marker}",
    "\ntouch {marker}",
    "'; touch {marker}; '",
    '"; touch {marker}; "',
)
"""Shell syntax that runs ``touch`` wherever a shell parses the value."""

_STARTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn"})
"""Operations that start a process (``directory.Operations``' events)."""


class ShellInjectionFault(Fault):
    name = "shell_injection"
    applies_to = "calls with string arguments of tools in the directory world"
    injection = (
        "each string argument (the first 3) with shell metacharacters appended that run "
        "`touch MARKER` when a shell parses them (`;`, `$()`, backticks, `|`, `&&`, a newline, "
        "a closing quote); n/a when a clean run starts no process"
    )
    expected = "the marker never exists: no payload ran, whatever the call answered"

    def applies(self, target: Target) -> bool:
        return (
            target.handler_can_run
            and target.world == "directory"
            and bool(strings_of(target.arguments))
        )

    def cannot_run_in(self, world: WorldKind) -> str | None:
        return (
            "the fake world runs no process (a handler's is refused)" if world == "fake" else None
        )

    def inject(self, cell: Cell) -> None:
        operations = cell.operations
        if operations is None:  # cannot_run_in keeps it from the fake world
            cell.check(False, "shell_injection ran in a world without processes")
            return
        saved = cell.world.save_workspace()
        first = len(operations.events)
        cell.execute(cell.call(), judge_effects=False)
        cell.world.restore_workspace(saved)
        if not _STARTS.intersection(operations.events[first:]):
            cell.problems.append(f"{NOTHING_TO_INJECT}: a clean run started no process")
            return
        marker = posixpath.join(os.path.dirname(cell.root), MARKER_NAME)
        count = min(len(strings_of(cell.target.arguments)), MAX_ARGUMENTS)
        for position in range(count):
            for payload in PAYLOADS:
                text = payload.format(marker=marker)
                arguments = _with_string(cell.target.arguments, position, text)
                result = cell.execute(cell.call(arguments), judge_effects=False)
                ran = os.path.lexists(marker)
                if ran:
                    os.remove(marker)
                cell.world.restore_workspace(saved)
                if not cell.check(
                    not ran,
                    f"{result.call_id}: string argument {position + 1} with {payload!r} "
                    f"appended ran the payload in a shell (answered {result.code.value}): "
                    "quote the value (shlex.quote) or pass an argv list",
                ):
                    return


def _with_string(value: Any, position: int, appended: str) -> Any:
    """``value`` with ``appended`` after its ``position``-th string
    (``strings_of``' order)."""
    seen = [0]

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            seen[0] += 1
            return item + appended if seen[0] - 1 == position else item
        if isinstance(item, dict):
            return {key: walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(value)
