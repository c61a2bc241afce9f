"""A call run again under another environment of its process:
``environment``.

The target's call runs once as the cell finds it, then again with the
time zone, the terminal width, the locale and the working directory each
set to another value (``harness.process_environment``), every time from
the same workspace. What it answered (ok, code, data) and the files it
left must be the same: a handler that formats a local time, wraps text to
the terminal, formats a number or sorts by the locale, or opens a relative
path against the working directory instead of its workspace, answers
otherwise, and the cell names which input changed what. When the runs
with everything varied at once differ, each input is varied alone to say
which; a difference only the inputs together make is reported as theirs.
A call that answers differently when simply run twice (a random id, not
marked volatile) is ``n/a`` saying so: no input is blamed for it.

Not held against a tool: an input it declares
(``ToolSpec.depends_on_environment``), a field of the result or a file the
cassette marks volatile (``volatile: [data.x, files.<path>]``), and its
call id (each run gets its own). The hash seed is ``hash_seed``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ..harness.process_environment import VARIATIONS, Variation
from ..replay.cassette import VOLATILE_FILE_PREFIX
from ..replay.checks import without_volatile
from .cell import Cell
from .fault import AfterSuccess
from .outcome import NOTHING_TO_INJECT

CALL_ID = "<call id>"
"""What a run's own call id is replaced by before runs are compared."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What one run of the call answered and left, comparable across runs."""

    answer: Mapping[str, Any]
    """``ok``, ``code`` and ``data`` (volatile fields removed, the call id
    replaced by ``CALL_ID``)."""
    files: Mapping[str, bytes]


class EnvironmentFault(AfterSuccess):
    name = "environment"
    injection = (
        "the call run again with TZ, COLUMNS/LINES, the locale and the working directory "
        "each set to another value (all at once, then each alone where that differs), "
        "from the same workspace"
    )
    expected = (
        "the same ok, code, data and files as the run in the process's own environment, "
        "but for what the tool declares in depends_on_environment and the cassette's "
        "volatile fields"
    )

    def inject(self, cell: Cell) -> None:
        spec = cell.spec
        declared = set(spec.depends_on_environment) if spec is not None else set()
        varied = [variation for variation in VARIATIONS if variation.name not in declared]
        if not varied:
            cell.check(
                False,
                f"{NOTHING_TO_INJECT}: the tool declares it depends on "
                f"{', '.join(sorted(declared))}",
            )
            return
        saved = cell.world.save_workspace()
        baseline, _ = _observe(cell, saved, ())
        together, set_together = _observe(cell, saved, varied)
        if together == baseline:
            return
        again, _ = _observe(cell, saved, ())
        if again != baseline:  # not the environment's doing: say so, never blame an input
            cell.check(
                False,
                f"{NOTHING_TO_INJECT}: two runs in the process's own environment already "
                f"differ ({'; '.join(differences(baseline, again))}): mark what may differ "
                "volatile in the cassette",
            )
            return
        alone = [(variation, *_observe(cell, saved, (variation,))) for variation in varied]
        named = [(v.name, v.advice, seen, what) for v, seen, what in alone if seen != baseline]
        names = tuple(variation.name for variation in varied)
        every = [(" and ".join(names), "", together, set_together, names)]
        for name, advice, seen, what, declare in [(*n, (n[0],)) for n in named] or every:
            for difference in differences(baseline, seen):
                cell.check(
                    False,
                    f"with another {name} ({what}) {difference}: {advice or 'vary none'}, "
                    f"or declare depends_on_environment={declare!r} if it is meant to (a "
                    "field that may differ: volatile in the cassette)",
                )


def _observe(cell: Cell, saved: Any, varied: Sequence[Variation]) -> tuple[Observed, str]:
    """The call once under ``varied`` (a runtime of its own, no plan: the
    plan may have moved on), then the workspace put back as ``saved``;
    and what the variations set."""
    call = cell.call()
    try:
        with ExitStack() as stack:
            what = ", ".join(stack.enter_context(v.applied(cell.root)) for v in varied)
            result = cell.execute(call, cell.make_runtime(hooks=[]))
        files = cell.tree()
    finally:
        cell.world.restore_workspace(saved)
    interaction = cell.target.interaction
    volatile = tuple(cell.target.cassette.volatile) + tuple(interaction.volatile)
    data = without_volatile(result.data, volatile)
    text = json.dumps(data, sort_keys=True, default=repr).replace(call.call_id, CALL_ID)
    answer = {"ok": result.ok, "code": result.code.value, "data": json.loads(text)}
    files = without_volatile_files(files, volatile, call.call_id)
    return Observed(answer, files), what


def without_volatile_files(
    files: Mapping[str, bytes], volatile: Sequence[str], call_id: str
) -> dict[str, bytes]:
    """``files`` with each one ``volatile`` names (``files.<path>``) emptied
    (compared for being there), and ``call_id`` replaced by ``CALL_ID``."""
    marked = {
        entry[len(VOLATILE_FILE_PREFIX) :]
        for entry in volatile
        if entry.startswith(VOLATILE_FILE_PREFIX)
    }
    spelt = call_id.encode()
    return {
        path: b"" if path in marked else data.replace(spelt, CALL_ID.encode()) if spelt else data
        for path, data in files.items()
    }


def differences(baseline: Observed, seen: Observed) -> list[str]:
    """Short sentences (``the result's data.at differs: ...``) of what
    differs between two runs of what differs, the answer's fields first."""
    found: list[str] = []
    for field in ("code", "ok"):  # a code says more than ok; both differ together
        if baseline.answer[field] != seen.answer[field]:
            found.append(
                f"the result's {field} differs: {baseline.answer[field]!r} -> "
                f"{seen.answer[field]!r}"
            )
            break
    if not found and baseline.answer["data"] != seen.answer["data"]:
        path, before, after = first_difference(baseline.answer["data"], seen.answer["data"])
        found.append(f"the result's {path} differs: {_shown(before)} -> {_shown(after)}")
    changed = sorted(
        path
        for path in set(baseline.files) | set(seen.files)
        if baseline.files.get(path) != seen.files.get(path)
    )
    if changed:
        found.append("the files it left differ: " + ", ".join(changed[:5]))
    return found


def first_difference(before: Any, after: Any, path: str = "data") -> tuple[str, Any, Any]:
    """The first path (``data.items.2.when``) where two JSON values differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in list(before) + [k for k in after if k not in before]:
            if before.get(key, _MISSING) != after.get(key, _MISSING):
                return first_difference(
                    before.get(key, _MISSING), after.get(key, _MISSING), f"{path}.{key}"
                )
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (one, other) in enumerate(zip(before, after, strict=True)):
            if one != other:
                return first_difference(one, other, f"{path}.{index}")
    return path, before, after


_MISSING = "<missing>"


def _shown(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."
