"""What a replay says to a person: failure reports, commands, the summary.

Every failure report names the cassette file, each difference with where it
happened (``interaction 3 (write_json_file)``, ``files``, ``audit``), the
field, the recorded and the replayed value, a unified diff for text and file
contents, and the exact command that re-records the cassette. Values are
shown whole up to ``VALUE_LIMIT`` characters, then cut with a note.

``ReplayTotals`` counts a run's replays; it travels as a plain dict (on
each replay item's report, to the xdist controller) and adds up.

Nothing here imports pytest.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import ToolguardError
from ..options import RECORD_MODE
from .cassette import Cassette
from .checks import Difference, ReplayReport

VALUE_LIMIT = 400
"""Characters of a recorded or replayed value shown before it is cut."""


class ReplayFailed(ToolguardError, AssertionError):
    """A replay that differed from its cassette; ``str()`` is the report."""


class CallNotInCassette(ToolguardError, AssertionError):
    """A call a test made that its cassette does not hold next; ``str()``
    names the closest recorded call, the fields that differ, and the
    command that re-records the cassette."""


def record_command(nodeid: str, mode: str = "rewrite") -> str:
    """The shell command that records one test's cassette in ``mode``."""
    return f"pytest {RECORD_MODE}={mode} {shlex.quote(nodeid)}"


def how_to_rerecord(cassette: Cassette) -> str:
    """The command that re-records a cassette replayed on its own: its
    ``recorded_by`` when it has one. A case is written by hand, and a
    cassette that names no recorder can only say so."""
    if cassette.recorded_by:
        return cassette.recorded_by
    where = cassette.source or "the file"
    if cassette.kind == "case":
        return f"a case is written by hand: edit {where}"
    return (
        f"{where} names no recorder (recorded_by): re-run the test or script that "
        f"recorded it with {RECORD_MODE}=rewrite"
    )


def format_report(
    report: ReplayReport, *, cassette_path: str, rerecord: str, note: str = ""
) -> str:
    """The failure report of a replay that found differences; ``note``, when
    given, is said right after the first line."""
    kind = report.cassette.kind
    count = len(report.differences)
    lines = [
        f"{kind} {cassette_path}: {count} difference{'s' if count != 1 else ''} "
        f"(out of {report.checks} checks)"
    ]
    if note:
        lines.append(f"  note: {note}")
    lines += format_differences(report.differences)
    lines.append(f"to re-record this {kind}: {rerecord}")
    return "\n".join(lines)


def missing_tools_note(report: ReplayReport, tool_names: Sequence[str], origin: str) -> str:
    """'' unless calls answered TOOL_NOT_FOUND where the recording found the
    tool; then a line naming the registry replay used (``origin``) and its
    tools, since that is nearly always the mistake."""
    missing = sorted(
        {
            str(interaction.call.tool_name)
            for interaction, result in zip(
                report.cassette.interactions, report.results, strict=False
            )
            if result.code.value == "TOOL_NOT_FOUND"
            and interaction.result.code not in (None, "TOOL_NOT_FOUND")
        }
    )
    if not missing:
        return ""
    tools = ", ".join(tool_names) or "none"
    return (
        f"the registry replay used ({origin}) has no tool {', '.join(missing)}; its tools: {tools}"
    )


def format_differences(differences: Iterable[Difference]) -> list[str]:
    """Each difference as indented lines: where and field, the two values,
    then the diff if there is one."""
    lines: list[str] = []
    for difference in differences:
        lines.append(f"  {difference.where}: {difference.field}")
        lines.append(f"    recorded: {show(difference.recorded)}")
        lines.append(f"    replayed: {show(difference.replayed)}")
        if difference.diff:
            lines += ["      " + line for line in difference.diff.rstrip("\n").split("\n")]
    return lines


def format_call_mismatch(
    *,
    cassette_path: str,
    number: int,
    tool_name: str,
    expected_index: int,
    total: int,
    closest: tuple[int, str, Sequence[Difference]] | None,
    rerecord: str,
) -> str:
    """A call a test made that is not the cassette's next one. ``number``
    and ``expected_index`` count from 1; ``closest`` is the recorded call
    that came closest (index, tool, differing fields), if any is left."""
    lines = [f"call {number} ({tool_name}) is not in cassette {cassette_path}"]
    if expected_index > total:
        lines.append(f"  the cassette holds {total} interactions, all replayed already")
    if closest is not None:
        index, tool, differences = closest
        lines.append(f"  closest recorded call: interaction {index} ({tool})")
        if index != expected_index:
            lines.append(f"  (the cassette expected interaction {expected_index} next)")
        for difference in differences:
            lines.append(
                f"    {difference.field}: recorded {show(difference.recorded)}, "
                f"made {show(difference.replayed)}"
            )
    lines.append(f"to re-record this test's cassette: {rerecord}")
    return "\n".join(lines)


def format_missing_cassette(cassette_path: str, nodeid: str) -> str:
    """A test whose cassette does not exist, in record mode ``none``."""
    return (
        f"cassette {cassette_path} does not exist and the record mode is 'none'\n"
        f"to record it: {record_command(nodeid, 'once')}"
    )


def show(value: Any) -> str:
    """A value as one readable line, cut at ``VALUE_LIMIT`` characters."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return f"<{len(value)} bytes>"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > VALUE_LIMIT:
        text = f"{text[:VALUE_LIMIT]}... ({len(text)} characters)"
    return text


@dataclass(frozen=True, slots=True)
class ReplayTotals:
    """What a run replayed. Add two with ``+``; ``as_dict``/``from_dict``
    carry it between processes."""

    cassettes: int = 0
    cases: int = 0
    interactions: int = 0
    checks_passed: int = 0
    checks_failed: int = 0
    unreadable: int = 0

    @classmethod
    def of(cls, report: ReplayReport) -> ReplayTotals:
        failed = len(report.differences)
        return cls(
            cassettes=int(report.cassette.kind == "cassette"),
            cases=int(report.cassette.kind == "case"),
            interactions=len(report.results),
            checks_passed=max(report.checks - failed, 0),
            checks_failed=failed,
        )

    def __add__(self, other: ReplayTotals) -> ReplayTotals:
        return ReplayTotals(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplayTotals:
        """Totals from ``as_dict`` output; unknown keys are ignored, missing
        ones count 0 (a worker of another version)."""
        return cls(**{f.name: int(data.get(f.name, 0)) for f in fields(cls)})

    def summary(self) -> str:
        """``toolguard: 3 cassettes and 14 cases replayed, 41 interactions,
        812 checks passed, 0 failed``."""
        line = (
            f"toolguard: {_count(self.cassettes, 'cassette')} and {_count(self.cases, 'case')} "
            f"replayed, {_count(self.interactions, 'interaction')}, "
            f"{_count(self.checks_passed, 'check')} passed, {self.checks_failed} failed"
        )
        if self.unreadable:
            line += f"; {self.unreadable} unreadable file{'s' if self.unreadable != 1 else ''}"
        return line


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
