"""A call run in interpreters of other hash seeds: ``hash_seed``.

A set of strings is iterated in the order the interpreter's hash seed
decides, and a running interpreter's seed cannot change: a handler that
answers a set's order (``list(set(tags))``, ``", ".join({...})``) answers
one order per process, and passes every cell of one process. Here the
target's call runs, from the same workspace, in kept interpreters of the
fixed seeds ``SEEDS`` (``harness.seeded_interpreters``); what each
answered (ok, data) and the files each left must be the same. The seeds
are chosen, never the test process's own, so the verdict is the same on
every run and every xdist worker: a two-string set is iterated in the same
order under four seeds with a chance of one in eight, a three-string one
with one in 216.

Where it applies: the handler's code (or its project's code it names)
builds a set, iterates a constant one or calls ``hash``
(``harness.hash_order``); elsewhere the seed cannot change what it
answers, and no interpreter is started. It is ``n/a``, saying why, for a
handler a fresh interpreter cannot import by its name (defined in a
function, a lambda, a bound method, a script), for a call whose HTTP
exchanges are served in this process only, and when every interpreter
failed to run the call (the import failed, or the handler raised where
the test process's did not).

Not held against a tool: ``depends_on_environment=("PYTHONHASHSEED",)``,
and the cassette's volatile fields.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ..documents import parse_json
from ..harness.hash_order import may_depend_on_hash_order
from ..harness.seeded_interpreters import SeededAnswer, importable, seeded_interpreters
from ..replay.checks import without_volatile
from .cell import Cell
from .environment import Observed, differences, without_volatile_files
from .fault import AfterSuccess
from .outcome import NOTHING_TO_INJECT
from .target import Target

SEEDS = (1, 2, 3, 4)
"""The hash seeds of the interpreters a call runs in."""

DECLARED = "PYTHONHASHSEED"


class HashSeedFault(AfterSuccess):
    name = "hash_seed"
    applies_to = (
        "calls that succeeded when recorded, whose handler's code (or its project's code it "
        "names) builds a set, iterates a constant one or calls hash()"
    )
    injection = (
        f"the call run from the same workspace in fresh interpreters with PYTHONHASHSEED="
        f"{', '.join(map(str, SEEDS))} (started once per test process, kept)"
    )
    expected = (
        "the same ok, data and files under every seed, but for the cassette's volatile fields "
        "(unless the tool declares depends_on_environment=('PYTHONHASHSEED',)); n/a, saying "
        "why, where a fresh interpreter cannot import the handler"
    )

    def applies(self, target: Target) -> bool:
        spec = target.spec
        return (
            spec is not None
            and target.handler_ran
            and DECLARED not in spec.depends_on_environment
            and may_depend_on_hash_order(spec.handler)
        )

    def inject(self, cell: Cell) -> None:
        spec = cell.target.spec
        assert spec is not None  # applies() saw it
        where = importable(spec.handler)
        if isinstance(where, str):
            cell.check(False, f"{NOTHING_TO_INJECT}: a fresh interpreter cannot load it: {where}")
            return
        if cell.target.interaction.http:
            cell.check(
                False,
                f"{NOTHING_TO_INJECT}: its recorded HTTP exchanges are served in the test's "
                "process only",
            )
            return
        call = cell.call()
        module, qualname = where
        request = {
            "module": module,
            "qualname": qualname,
            "root": cell.root,
            "entries": [
                (relative, mode, base64.b64encode(data).decode())
                for relative, mode, data in cell.world.save_workspace()
            ],
            "arguments": _arguments(call.arguments),
            "variables": dict(cell.runtime.variables),
            "call_id": call.call_id,
            "frozen_at": cell.target.cassette.recorded_at,
        }
        answers = seeded_interpreters().run(request, SEEDS, spec.timeout_seconds)
        lost = [answer for answer in answers if answer.lost]
        answers = [answer for answer in answers if not answer.lost]
        if len(answers) < 2:  # a stuck or missing worker says nothing of hash order
            reason = (lost or answers)[0]
            cell.check(
                False,
                f"{NOTHING_TO_INJECT}: fewer than two fresh interpreters answered "
                f"(PYTHONHASHSEED={reason.seed}: {reason.error})",
            )
            return
        failed = [answer for answer in answers if answer.error is not None]
        if len(failed) == len(answers):
            cell.check(
                False,
                f"{NOTHING_TO_INJECT}: in a fresh interpreter (PYTHONHASHSEED={failed[0].seed}) "
                f"the call failed: {failed[0].error}",
            )
            return
        seen = [(answer.seed, _observed(cell, answer)) for answer in answers]
        first_seed, first = seen[0]
        for seed, observed in seen[1:]:
            for difference in differences(first, observed):
                cell.check(
                    False,
                    f"with PYTHONHASHSEED={first_seed} and {seed} {difference}: iterate a "
                    "set in a fixed order (sorted(...)) or keep a list, hash with hashlib "
                    "rather than hash(); or declare "
                    f"depends_on_environment=({DECLARED!r},) if it is meant to (a field that "
                    "may differ: volatile in the cassette)",
                )
            if observed != first:
                return  # one pair says it; the others would say the same


def _observed(cell: Cell, answer: SeededAnswer) -> Observed:
    volatile = tuple(cell.target.cassette.volatile) + tuple(cell.target.interaction.volatile)
    data: Any = without_volatile(answer.output, volatile) if answer.error is None else None
    code = "OK" if answer.error is None else f"raised {answer.error}"
    files = without_volatile_files(answer.files or {}, volatile, "")
    return Observed({"ok": answer.error is None, "code": code, "data": data}, files)


def _arguments(arguments: Any) -> dict[str, Any]:
    """A call's arguments as an object (a JSON text parsed), secrets filled in."""
    if isinstance(arguments, str):
        arguments = parse_json(arguments)
    return dict(arguments) if isinstance(arguments, Mapping) else {}
