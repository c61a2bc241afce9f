"""What an item found, carried on its own ``TestReport``.

An item's body leaves what it found (``leave``: replay totals, a matrix
cell, fuzz reports, as plain JSON data) in the item's stash; the report of
its call phase carries it (``attach``, as ``report.toolguard``: pytest and
pytest-xdist serialize a report's extra attributes); the process that logs
reports (the only one without xdist, the controller with it) hands it to
the run (``found_on``). One code path with or without xdist, and nothing
waits for a worker's end: a worker that crashes loses only the item it was
running, and that item, when it is a fault cell, is reported as a failed
cell (``crashed_cell``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

ATTRIBUTE = "toolguard"
"""The ``TestReport`` attribute that carries what an item found."""

YAML_SUFFIXES = (".yaml", ".yml")

FOUND: pytest.StashKey[dict[str, Any]] = pytest.StashKey()


def leave(item: pytest.Item, **found: Any) -> None:
    """Keep what ``item`` found for its report: ``replay=`` totals as a
    dict, ``cell=`` a cell as a dict, ``fuzz=`` a list of fuzz reports as
    dicts."""
    item.stash.setdefault(FOUND, {}).update(found)


def attach(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put what ``item`` left on the report of its call phase."""
    if report.when == "call":
        found = item.stash.get(FOUND, None)
        if found:
            setattr(report, ATTRIBUTE, found)


def found_on(report: pytest.TestReport) -> Mapping[str, Any] | None:
    """What the report's item found, if it left anything."""
    found = getattr(report, ATTRIBUTE, None)
    return found if isinstance(found, Mapping) else None


def crashed_cell(nodeid: str, faults: Sequence[str], why: str) -> dict[str, Any] | None:
    """The failed cell of a fault cell whose worker crashed (its node id is
    ``<file>::<n>-<tool>::<fault>``), as ``CellOutcome.as_dict`` gives it;
    None for any other node id."""
    parts = nodeid.split("::")
    if len(parts) != 3 or not parts[0].endswith(YAML_SUFFIXES) or parts[2] not in faults:
        return None
    number, _, tool = parts[1].partition("-")
    if not number.isdigit() or int(number) < 1 or not tool:
        return None
    return {
        "source": parts[0],
        "interaction": int(number),
        "tool": tool,
        "fault": parts[2],
        "status": "fail",
        "problems": [f"the xdist worker running this cell crashed: {why}"],
        "nodeid": nodeid,
    }
