"""What a fault matrix run found: one outcome per cell, and the matrix.

A *cell* is one fault injected into one recorded interaction of one
cassette or case file; it passes, fails, or does not apply (``n/a``: the
fault has nothing to act on in that call, or the cell was skipped). A *row*
is one interaction (file, 1-based index, tool); a *column* is one fault.

``MatrixReport`` holds the cells of a run and answers questions about them
in one deterministic order, whatever order the cells arrived in (xdist
workers finish in any order): rows by file path, then interaction index;
columns in the order of ``faults``. A row with no cell for some fault reads
as ``n/a`` there (that cell was not collected). Two outcomes for the same
cell (a test run twice) count once, as the worse: ``fail`` over ``pass``
over ``n/a``.

``CellOutcome.as_dict``/``from_dict`` carry a cell between processes as
plain JSON data (on each fault cell's report, to the xdist controller).

Nothing here imports pytest; rendering lives in ``faults.report``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, get_args

CellStatus = Literal["pass", "fail", "n/a"]
"""A cell's result. ``n/a``: not applicable, skipped, or not collected."""

STATUSES: tuple[CellStatus, ...] = get_args(CellStatus)
"""Every status, in the order totals are reported."""

_SEVERITY: Mapping[str, int] = {"n/a": 0, "pass": 1, "fail": 2}

NOT_APPLICABLE = "not applicable"
"""How the one problem of a cell whose fault does not apply to its call
begins; ": applies to ..." (the fault's ``applies_to``) follows."""

NOTHING_TO_INJECT = "nothing to inject"
"""How the one problem begins of a cell whose fault found, once the call
ran, no point to act at (``symlink_race`` with no file operation of the
handler's in this process: a server in another process does its own). The
cell is n/a with that reason, never a pass that tested nothing."""

SKIPPED = "skipped in the "
"""How the one problem of a cell that could not run in its world begins
(its status is ``n/a``): ``skipped_in(world)``, then the reason."""


def skipped_in(world: str) -> str:
    """The start of the one problem of a cell that could not run in
    ``world`` (``fake`` or ``directory``); its reason follows."""
    return f"{SKIPPED}{world} world: "


class Row(NamedTuple):
    """One recorded interaction: a row of the matrix."""

    source: str
    interaction: int
    tool: str


@dataclass(frozen=True, slots=True)
class CellOutcome:
    """The result of injecting ``fault`` into one interaction.

    ``source`` is the file's posix path relative to the rootdir;
    ``interaction`` counts from 1; ``problems`` say why the cell failed (or
    why it does not apply), one line each; ``nodeid`` is the pytest node id
    that reruns it, empty when unknown.

    Raises ``ValueError`` for an unknown status or an interaction below 1.
    """

    source: str
    interaction: int
    tool: str
    fault: str
    status: CellStatus
    problems: tuple[str, ...] = ()
    nodeid: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"cell {self.source} interaction {self.interaction} ({self.tool}), "
                f"fault {self.fault}: status {self.status!r} is not one of {', '.join(STATUSES)}"
            )
        if self.interaction < 1:
            raise ValueError(
                f"cell {self.source}, fault {self.fault}: interaction {self.interaction} "
                "is not a 1-based index"
            )
        if not isinstance(self.problems, tuple):
            # A list from a caller or from JSON would make the cell unhashable.
            object.__setattr__(self, "problems", tuple(self.problems))

    @property
    def row(self) -> Row:
        """The interaction this cell belongs to."""
        return Row(self.source, self.interaction, self.tool)

    def as_dict(self) -> dict[str, Any]:
        """The cell as JSON-able data; ``from_dict`` reads it back."""
        return {
            "source": self.source,
            "interaction": self.interaction,
            "tool": self.tool,
            "fault": self.fault,
            "status": self.status,
            "problems": list(self.problems),
            "nodeid": self.nodeid,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellOutcome:
        """A cell from ``as_dict`` output. Unknown keys are ignored (a worker
        of a newer version); ``problems`` and ``nodeid`` may be missing.
        Raises ``ValueError`` naming the first required key that is missing,
        or for a value ``CellOutcome`` refuses."""
        for key in ("source", "interaction", "tool", "fault", "status"):
            if key not in data:
                raise ValueError(f"a fault matrix cell needs {key!r}; got keys {sorted(data)}")
        return cls(
            source=str(data["source"]),
            interaction=int(data["interaction"]),
            tool=str(data["tool"]),
            fault=str(data["fault"]),
            status=data["status"],
            problems=tuple(str(problem) for problem in data.get("problems", ())),
            nodeid=str(data.get("nodeid", "")),
        )


@dataclass(frozen=True, slots=True)
class MatrixReport:
    """The cells of one run, in deterministic order.

    ``faults`` is the column order (the catalogue's). A fault that appears
    only in ``cells`` is appended after them, sorted by name, so no result is
    ever left out of a rendering. After construction ``cells`` is sorted
    (rows, then columns) and holds one outcome per cell: of duplicates the
    worse is kept (``fail`` over ``pass`` over ``n/a``).
    """

    faults: tuple[str, ...]
    cells: tuple[CellOutcome, ...]
    _rows: tuple[Row, ...] = field(init=False, repr=False, compare=False)
    _rows_by_source: dict[str, tuple[Row, ...]] = field(init=False, repr=False, compare=False)
    _by_position: dict[tuple[Row, str], CellOutcome] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        faults = tuple(dict.fromkeys(self.faults))
        extra = sorted({cell.fault for cell in self.cells} - set(faults))
        faults += tuple(extra)
        column = {fault: index for index, fault in enumerate(faults)}

        by_position: dict[tuple[Row, str], CellOutcome] = {}
        # Sorting every field first makes the survivor of equally severe
        # duplicates independent of input order.
        for cell in sorted(self.cells, key=lambda cell: _cell_key(cell, column)):
            position = (cell.row, cell.fault)
            kept = by_position.get(position)
            if kept is None or _SEVERITY[cell.status] > _SEVERITY[kept.status]:
                by_position[position] = cell
        cells = tuple(sorted(by_position.values(), key=lambda cell: _cell_key(cell, column)))

        object.__setattr__(self, "faults", faults)
        object.__setattr__(self, "cells", cells)
        rows = tuple(dict.fromkeys(cell.row for cell in cells))
        rows_by_source: dict[str, list[Row]] = {}
        for row in rows:
            rows_by_source.setdefault(row.source, []).append(row)
        object.__setattr__(self, "_rows", rows)
        object.__setattr__(
            self, "_rows_by_source", {source: tuple(rs) for source, rs in rows_by_source.items()}
        )
        object.__setattr__(self, "_by_position", by_position)

    @classmethod
    def of(cls, faults: Iterable[str], cells: Iterable[CellOutcome]) -> MatrixReport:
        """A report from any iterables (a generator of cells, a list of faults)."""
        return cls(faults=tuple(faults), cells=tuple(cells))

    def sources(self) -> tuple[str, ...]:
        """The files with at least one cell, sorted."""
        return tuple(self._rows_by_source)

    def rows(self, source: str | None = None) -> tuple[Row, ...]:
        """The rows (all, or one file's): by file path, then interaction."""
        if source is None:
            return self._rows
        return self._rows_by_source.get(source, ())

    def cell(self, row: Row | tuple[str, int, str], fault: str) -> CellOutcome | None:
        """The outcome of ``fault`` on ``row``; ``None`` when that cell was not
        collected (which reads as ``n/a``)."""
        return self._by_position.get((Row(*row), fault))

    def status(self, row: Row | tuple[str, int, str], fault: str) -> CellStatus:
        """The status of ``fault`` on ``row``, ``n/a`` when not collected."""
        found = self.cell(row, fault)
        return "n/a" if found is None else found.status

    def counts(self, source: str | None = None) -> dict[CellStatus, int]:
        """How many cells of the grid (rows x faults, of all files or one)
        have each status, every status present. A cell not collected counts
        as ``n/a``, so the counts add up to rows x faults."""
        counts: dict[CellStatus, int] = dict.fromkeys(STATUSES, 0)
        for row in self.rows(source):
            for fault in self.faults:
                counts[self.status(row, fault)] += 1
        return counts

    def skipped(self) -> dict[tuple[str, str], int]:
        """(fault, why) -> how many cells could not run in their world for
        that reason, in column order; ``why`` reads "in the <world> world:
        <reason>"."""
        found: dict[tuple[str, str], int] = {}
        for cell in self.cells:
            if cell.status == "n/a" and cell.problems and cell.problems[0].startswith(SKIPPED):
                key = (cell.fault, cell.problems[0][len("skipped ") :])
                found[key] = found.get(key, 0) + 1
        order = {fault: index for index, fault in enumerate(self.faults)}
        return dict(sorted(found.items(), key=lambda item: (order[item[0][0]], item[0][1])))

    def failures(self) -> tuple[CellOutcome, ...]:
        """The failed cells, in row then column order."""
        return tuple(cell for cell in self.cells if cell.status == "fail")

    @property
    def ok(self) -> bool:
        """True when no cell failed (an empty report is ok)."""
        return not any(cell.status == "fail" for cell in self.cells)


def _cell_key(
    cell: CellOutcome, column: Mapping[str, int]
) -> tuple[str, int, str, int, str, str, tuple[str, ...], str]:
    return (
        cell.source,
        cell.interaction,
        cell.tool,
        column[cell.fault],
        cell.fault,
        cell.status,
        cell.problems,
        cell.nodeid,
    )
