"""What a fault matrix says to a person: Markdown, JSON, HTML and terminal.

Every rendering shows the same matrix: one table per cassette or case file,
a row per recorded interaction (``3. write_json_file``), a column per fault
in catalogue order, numbered from 1 with a legend naming each number. Then
the failed cells, each with its node id, its problems and the command that
reruns it::

    pytest --toolguard-replay --toolguard-faults=partial_write '<nodeid>'

- ``render_markdown``: for a GitHub Actions job summary, which GitHub caps
  at 1 MiB. It stays under ``max_bytes``: failures are listed up to a limit
  and their problems cut; if the tables still do not fit, tables of files
  without failures are left out first, each replaced by one line of counts.
- ``render_json``: stable (sorted keys, indent 2, same report, same bytes);
  ``format_version`` 1. ``totals`` count the whole grid, a cell not
  collected as ``n/a``; ``cells`` lists the outcomes collected.
- ``render_html``: one self-contained page (inline CSS, no script, nothing
  fetched); each cell's problems are in its ``title``; all text is escaped.
- ``write_report``: one of the above, by the file's extension, atomically.
- ``terminal_grid``: lines for pytest's terminal summary, none wider than
  ``width`` characters (tool names, paths and problems are cut with ``…``).

A status hides a regression in a cell that already failed, so every
rendering names the failed cells' problems by a digest
(``problems_digest``): the matrix's, and (Markdown, HTML) each cell's.

Nothing here imports pytest.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..file_writes import SHARED_MODE, write_atomically
from ..options import FAULTS, REPLAY
from .outcome import STATUSES, CellOutcome, CellStatus, MatrixReport, Row

FORMAT_VERSION = 1
"""The ``format_version`` of ``render_json`` output."""


TITLE = "toolguard fault matrix"

MARKDOWN_LIMIT = 1_000_000
"""Bytes ``render_markdown`` aims to stay under: GitHub takes 1 MiB of job
summary per step; the rest is left for anything else the step writes."""

FAILURE_LIMIT = 100
"""Failed cells listed by ``render_markdown``; the rest are counted."""

PROBLEM_LIMIT = 300
"""Characters of one problem shown in Markdown and the terminal."""

PROBLEMS_PER_FAILURE = 5
"""Problems listed per failed cell in Markdown; the rest are counted."""

TERMINAL_FAILURE_LIMIT = 20
"""Failed cells listed by ``terminal_grid``; the rest are counted."""

MARKDOWN_SYMBOLS: Mapping[CellStatus, str] = MappingProxyType(
    {"pass": "✅", "fail": "❌", "n/a": "·"}
)
TERMINAL_SYMBOLS: Mapping[CellStatus, str] = MappingProxyType(
    {"pass": ".", "fail": "F", "n/a": "-"}
)
HTML_SYMBOLS: Mapping[CellStatus, str] = MappingProxyType({"pass": "✓", "fail": "✗", "n/a": "·"})
_MEANING: Mapping[CellStatus, str] = MappingProxyType(
    {"pass": "pass", "fail": "fail", "n/a": "n/a (not applicable, skipped or not collected)"}
)


def rerun_command(cell: CellOutcome) -> str:
    """The shell command that reruns one cell: its node id, or when that is
    unknown, every cell of its file for the same fault. The target is always
    quoted (node ids hold ``::`` and may hold brackets or spaces)."""
    target = shlex.quote(cell.nodeid or cell.source)
    if not target.startswith("'"):
        target = f"'{target}'"
    return f"pytest {REPLAY} {FAULTS}={shlex.quote(cell.fault)} {target}"


_WORLD_PATH = re.compile(r"[^\s'\"]*toolguard-world-[^/\s'\"]+")
"""A directory world's own path: new for every cell, so not part of a digest."""


def problems_digest(cells: CellOutcome | tuple[CellOutcome, ...]) -> str:
    """12 hex digits naming the problems of the failed ``cells`` (one, or
    ``report.failures()``) and where each is: any change, another digest.
    A directory world's own path (new each run) reads as a placeholder."""
    failed = (cells,) if isinstance(cells, CellOutcome) else cells
    named = sorted(
        (*cell.row, cell.fault, [_WORLD_PATH.sub("<world>", line) for line in cell.problems])
        for cell in failed
        if cell.status == "fail"
    )
    text = json.dumps(named, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def cell_label(cell: CellOutcome) -> str:
    """The cell's node id, or where it is when the node id is unknown."""
    if cell.nodeid:
        return cell.nodeid
    return f"{cell.source} interaction {cell.interaction} ({cell.tool}), fault {cell.fault}"


def totals_line(report: MatrixReport) -> str:
    """``812 cells: 790 pass, 0 fail, 22 n/a``: the whole grid, a cell not
    collected counted as ``n/a``."""
    counts = report.counts()
    cells = sum(counts.values())
    statuses = ", ".join(f"{counts[status]} {status}" for status in STATUSES)
    return f"{_count(cells, 'cell')}: {statuses}"


def shape_line(report: MatrixReport) -> str:
    """``58 interactions in 4 files, 14 faults``."""
    return (
        f"{_count(len(report.rows()), 'interaction')} in "
        f"{_count(len(report.sources()), 'file')}, {_count(len(report.faults), 'fault')}"
    )


# -- Markdown ---------------------------------------------------------------


def render_markdown(
    report: MatrixReport,
    *,
    max_bytes: int = MARKDOWN_LIMIT,
    max_failures: int = FAILURE_LIMIT,
) -> str:
    """The matrix as GitHub-flavoured Markdown, for a job summary.

    A heading, the totals, the legends, one table per file, then the failed
    cells with the command that reruns each. Stays under ``max_bytes``
    (UTF-8) by listing at most ``max_failures`` failures and leaving out
    tables, files without failures first; each table left out becomes one
    line of counts. Only a report whose heading and failures alone exceed
    ``max_bytes`` can come out larger."""
    head = [f"## {TITLE}", "", f"**{totals_line(report)}** ({shape_line(report)})", ""]
    if report.faults:
        head.append(
            "Faults: "
            + ", ".join(
                f"**{number}** {_md_code(fault)}" for number, fault in _numbered(report.faults)
            )
        )
        head.append("")
        head.append(
            "Cells: "
            + ", ".join(f"{MARKDOWN_SYMBOLS[status]} {_MEANING[status]}" for status in STATUSES)
        )
        head.append("")
    head_text = "\n".join(head) + "\n"
    failures_text = _markdown_failures(report, max_failures) + _markdown_skipped(report)

    sources = report.sources()
    tables = {source: _markdown_table(report, source) for source in sources}
    notes = {source: _markdown_left_out(report, source, max_bytes) for source in sources}
    chosen = _fit_tables(report, tables, notes, max_bytes - _size(head_text + failures_text))
    body = "".join(chosen[source] for source in sources)
    return head_text + body + failures_text


def _markdown_table(report: MatrixReport, source: str) -> str:
    lines = [f"### {_md_code(source)} — {_counts_text(report.counts(source))}", ""]
    lines.append(
        "| interaction | " + " | ".join(str(n) for n, _ in _numbered(report.faults)) + " |"
    )
    lines.append("|:--|" + ":-:|" * len(report.faults))
    for row in report.rows(source):
        symbols = (MARKDOWN_SYMBOLS[report.status(row, fault)] for fault in report.faults)
        label = f"{row.interaction}. {_md_code(row.tool, in_table=True)}"
        lines.append(f"| {label} | " + " | ".join(symbols) + " |")
    return "\n".join(lines) + "\n\n"


def _markdown_left_out(report: MatrixReport, source: str, max_bytes: int) -> str:
    return (
        f"### {_md_code(source)} — {_counts_text(report.counts(source))}\n\n"
        f"Table left out to keep this summary under {max_bytes} bytes; the HTML and JSON "
        "reports hold it.\n\n"
    )


def _fit_tables(
    report: MatrixReport, tables: Mapping[str, str], notes: Mapping[str, str], budget: int
) -> dict[str, str]:
    """Each file's table, or its note where the tables do not all fit in
    ``budget`` bytes; tables of files with failures get room first."""
    chosen = dict(notes)
    remaining = budget - sum(_size(note) for note in notes.values())
    failing = {cell.source for cell in report.failures()}
    by_priority = sorted(tables, key=lambda source: (source not in failing, source))
    for source in by_priority:
        extra = _size(tables[source]) - _size(notes[source])
        if extra <= remaining:
            chosen[source] = tables[source]
            remaining -= extra
    return chosen


def _markdown_skipped(report: MatrixReport) -> str:
    """Each fault that could not run in its world, with the reason."""
    skipped = report.skipped()
    if not skipped:
        return ""
    lines = [f"### Skipped ({sum(skipped.values())} cells)", ""]
    for (fault, reason), count in skipped.items():
        lines.append(f"- {_md_code(fault)} ({count}) {_md_text(_cut(reason, PROBLEM_LIMIT))}")
    return "\n".join(lines) + "\n"


def _markdown_failures(report: MatrixReport, max_failures: int) -> str:
    failures = report.failures()
    if not failures:
        return ""
    lines = [
        f"### Failures ({len(failures)})",
        "",
        f"Problems digest: {_md_code(problems_digest(failures))} (any change in them changes it)",
        "",
    ]
    for cell in failures[:max_failures]:
        lines.append(f"- {_md_code(cell_label(cell))} (problems {_md_code(problems_digest(cell))})")
        for problem in cell.problems[:PROBLEMS_PER_FAILURE]:
            lines.append(f"  - {_md_text(_cut(_one_line(problem), PROBLEM_LIMIT))}")
        if len(cell.problems) > PROBLEMS_PER_FAILURE:
            lines.append(f"  - and {len(cell.problems) - PROBLEMS_PER_FAILURE} more problems")
        lines.append(f"  - rerun: {_md_code(rerun_command(cell))}")
    if len(failures) > max_failures:
        lines.append(f"- and {len(failures) - max_failures} more failed cells")
    return "\n".join(lines) + "\n"


def _md_code(text: str, *, in_table: bool = False) -> str:
    """``text`` as an inline code span: taken literally, whatever it holds
    (a line break becomes a space, as Markdown would make it anyway)."""
    text = text.replace("\r", " ").replace("\n", " ")
    longest = 0
    run = 0
    for character in text:
        run = run + 1 if character == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    span = f"{fence}{padding}{text}{padding}{fence}"
    # GitHub splits table cells at "|" even inside code spans.
    return span.replace("|", "\\|") if in_table else span


_MARKDOWN_SPECIAL = str.maketrans(
    {
        **{character: "\\" + character for character in "\\`*_[]#|~"},
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
    }
)


def _md_text(text: str) -> str:
    """``text`` as literal Markdown: no emphasis, links or HTML from it."""
    return text.translate(_MARKDOWN_SPECIAL)


# -- JSON -------------------------------------------------------------------


def render_json(report: MatrixReport) -> str:
    """The matrix as JSON: ``format_version``, ``ok``, ``faults`` (column
    order), ``totals`` (the grid: ``cells``, one count per status,
    ``interactions``, ``sources``), ``cells`` (the outcomes collected, in
    row then column order, as ``CellOutcome.as_dict``) and
    ``problems_digest`` (of every failed cell's problems). Same report,
    same text."""
    counts = report.counts()
    totals: dict[str, int] = {"cells": sum(counts.values())}
    totals.update((str(status), count) for status, count in counts.items())
    totals["interactions"] = len(report.rows())
    totals["sources"] = len(report.sources())
    body: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "ok": report.ok,
        "faults": list(report.faults),
        "totals": totals,
        "cells": [cell.as_dict() for cell in report.cells],
        "problems_digest": problems_digest(report.failures()),
    }
    return json.dumps(body, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


# -- HTML -------------------------------------------------------------------

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1f2328; }
code { font: 13px ui-monospace, monospace; }
table { border-collapse: collapse; margin: .5em 0 2em; }
th, td { border: 1px solid #d0d7de; padding: 2px 7px; text-align: center; }
thead th { font-weight: normal; vertical-align: bottom; }
th.fault { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }
th.interaction { text-align: right; }
td.tool { text-align: left; font-family: ui-monospace, monospace; }
td.pass, .legend .pass { background: #dafbe1; color: #1a7f37; }
td.fail, .legend .fail { background: #ffebe9; color: #cf222e; font-weight: bold; }
td.fail a { color: inherit; text-decoration: none; }
td.na, .legend .na { background: #f6f8fa; color: #8c959f; }
.legend span { padding: 0 6px; margin-right: 8px; }
.failures li { margin-bottom: .6em; }
.failures ul { margin: .2em 0; }
"""

_HTML_CLASS: Mapping[CellStatus, str] = MappingProxyType(
    {"pass": "pass", "fail": "fail", "n/a": "na"}
)


def render_html(report: MatrixReport) -> str:
    """The matrix as one self-contained HTML page: inline CSS, no script,
    nothing fetched. Each cell is coloured by status and carries its
    problems in ``title``; a failed cell links to its entry under Failures.
    Every piece of text from the report is HTML-escaped."""
    failures = report.failures()
    anchors = {(cell.row, cell.fault): f"failure-{n}" for n, cell in enumerate(failures, 1)}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        f"<title>{_h(TITLE)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{_h(TITLE)}</h1>",
        f"<p><strong>{_h(totals_line(report))}</strong> ({_h(shape_line(report))})</p>",
        '<p class="legend">'
        + "".join(
            f'<span class="{_HTML_CLASS[status]}">{HTML_SYMBOLS[status]} {_h(_MEANING[status])}'
            "</span>"
            for status in STATUSES
        )
        + "</p>",
    ]
    for source in report.sources():
        parts.append(_html_table(report, source, anchors))
    if failures:
        parts.append(f"<h2>Failures ({len(failures)})</h2>")
        parts.append(f"<p>Problems digest: <code>{_h(problems_digest(failures))}</code></p>")
        parts.append('<ol class="failures">')
        for cell in failures:
            problems = "".join(f"<li>{_h(problem)}</li>" for problem in cell.problems)
            parts.append(
                f'<li id="{anchors[(cell.row, cell.fault)]}"><code>{_h(cell_label(cell))}</code>'
                f" (problems <code>{_h(problems_digest(cell))}</code>)"
                + (f"<ul>{problems}</ul>" if problems else "")
                + f"rerun: <code>{_h(rerun_command(cell))}</code></li>"
            )
        parts.append("</ol>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def _html_table(report: MatrixReport, source: str, anchors: Mapping[tuple[Row, str], str]) -> str:
    header = "".join(
        f'<th class="fault" scope="col" title="{_h(fault)}">{_h(fault)}</th>'
        for fault in report.faults
    )
    lines = [
        f"<h2><code>{_h(source)}</code></h2>",
        f"<p>{_h(_counts_text(report.counts(source)))}</p>",
        "<table>",
        f'<thead><tr><th scope="col">#</th><th scope="col">tool</th>{header}</tr></thead>',
        "<tbody>",
    ]
    for row in report.rows(source):
        cells = []
        for fault in report.faults:
            cell = report.cell(row, fault)
            status: CellStatus = "n/a" if cell is None else cell.status
            symbol = HTML_SYMBOLS[status]
            anchor = anchors.get((row, fault))
            if anchor is not None:
                symbol = f'<a href="#{anchor}">{symbol}</a>'
            title = _h_attribute(_cell_title(row, fault, cell))
            cells.append(f'<td class="{_HTML_CLASS[status]}" title="{title}">{symbol}</td>')
        lines.append(
            f'<tr><th class="interaction" scope="row">{row.interaction}</th>'
            f'<td class="tool">{_h(row.tool)}</td>{"".join(cells)}</tr>'
        )
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)


def _cell_title(row: Row, fault: str, cell: CellOutcome | None) -> str:
    where = f"{fault} at interaction {row.interaction} ({row.tool})"
    if cell is None:
        return f"{where}: n/a (not collected)"
    return "\n".join([f"{where}: {cell.status}", *cell.problems])


def _h(text: str) -> str:
    return html.escape(text, quote=True)


def _h_attribute(text: str) -> str:
    # A character reference keeps each table row on one line of the source.
    return _h(text).replace("\n", "&#10;")


# -- writing ----------------------------------------------------------------

RENDERERS: Mapping[str, Callable[[MatrixReport], str]] = MappingProxyType(
    {
        ".md": render_markdown,
        ".markdown": render_markdown,
        ".json": render_json,
        ".html": render_html,
        ".htm": render_html,
    }
)
"""The report format for each file extension ``write_report`` accepts."""


def write_report(report: MatrixReport, path: str | os.PathLike[str]) -> None:
    """Write the matrix to ``path`` in the format its extension names (see
    ``RENDERERS``; case does not matter), creating missing directories.
    Atomic: a temporary file beside it, then a rename, so a reader never
    sees half a report; a link at ``path`` is replaced, never written
    through (``file_writes.write_atomically``). Raises ``ValueError`` for any other extension,
    before touching the file system."""
    target = Path(path)
    render = RENDERERS.get(target.suffix.lower())
    if render is None:
        raise ValueError(
            f"cannot write a fault matrix report to {str(target)!r}: the file name must end "
            f"in one of {', '.join(RENDERERS)}"
        )
    # Readable by others, as the umask allows: a report is for CI to publish
    # and holds only what a fault run printed, its values redacted.
    write_atomically(target, render(report), new_mode=SHARED_MODE)


# -- terminal ---------------------------------------------------------------


def terminal_grid(
    report: MatrixReport, width: int = 100, *, max_failures: int = TERMINAL_FAILURE_LIMIT
) -> list[str]:
    """Lines for pytest's terminal summary, none longer than ``width``
    except a failed cell's node id, which is never cut (it is pasted to
    rerun the cell).

    The totals; a legend of the cell characters and of the fault numbers;
    a ruler of fault numbers over the columns; per file its path, then one
    line per interaction (number, tool, one character per fault in column
    order: ``.`` pass, ``F`` fail, ``-`` n/a); then up to ``max_failures``
    failed cells (node id and first problem) and the command that reruns
    one. When the faults outnumber what fits beside the tool names, the
    grid is repeated for each slice of columns that does fit."""
    width = max(width, 20)
    lines = [_fit(f"{TITLE}: {totals_line(report)} ({shape_line(report)})", width)]
    if not report.faults or not report.rows():
        return lines
    legend = "  ".join(f"{TERMINAL_SYMBOLS[status]} {status}" for status in STATUSES)
    lines.append(_fit(f"  cells: {legend}", width))
    lines += _wrap(
        [f"{number} {fault}" for number, fault in _numbered(report.faults)], "  faults: ", width
    )
    lines += _terminal_columns(report, width)
    for (fault, reason), count in report.skipped().items():
        lines.append(_fit(f"skipped {fault} ({count}) {reason}", width))

    failures = report.failures()
    if failures:
        lines.append(
            _fit(f"failed cells ({len(failures)}, problems {problems_digest(failures)}):", width)
        )
        for cell in failures[:max_failures]:
            lines.append(f"  {cell_label(cell)}")  # whole: it is pasted to rerun the cell
            if cell.problems:
                lines.append(_fit(f"    {_one_line(cell.problems[0])}", width))
        if len(failures) > max_failures:
            lines.append(f"  and {len(failures) - max_failures} more")
        lines.append(_rerun_one(failures, width))
    return lines


def _rerun_one(failures: tuple[CellOutcome, ...], width: int) -> str:
    """How to rerun a failed cell, in ``width``: a whole command, never one
    cut in the middle while a shorter form fits. The shortest command is the
    likeliest to fit; failing that, a template that points at the node ids
    listed above."""
    example = min(failures, key=lambda cell: (len(rerun_command(cell)), cell_label(cell)))
    fault = shlex.quote(example.fault)
    candidates = [
        rerun_command(example),
        f"pytest {REPLAY} {FAULTS}={fault} '<node id from above>'",
        f"pytest {REPLAY} {FAULTS}=<fault> '<node id>'",
    ]
    for command in candidates:
        if len(f"rerun one: {command}") <= width:
            return f"rerun one: {command}"
    return _fit(f"rerun one: {candidates[-1]}", width)


def _terminal_columns(report: MatrixReport, width: int) -> list[str]:
    """The ruler and grid lines, in as many column slices as ``width`` needs."""
    rows = report.rows()
    number_width = len(str(max(row.interaction for row in rows)))
    longest_tool = max(len(row.tool) for row in rows)
    indent = 4 + number_width + 1  # "    12 "
    gap = 2
    columns = len(report.faults)
    # Tool names give way to columns down to a few characters; past that,
    # the columns are sliced instead.
    tool_width = max(min(longest_tool, width - indent - gap - columns), min(longest_tool, 8))
    tool_width = max(1, min(tool_width, width - indent - gap - 1))
    per_slice = max(1, width - indent - tool_width - gap)

    lines: list[str] = []
    for start in range(0, columns, per_slice):
        numbers = range(start + 1, min(start + per_slice, columns) + 1)
        digits = len(str(numbers[-1]))
        prefix = " " * (indent + tool_width + gap)
        for place in range(digits):
            ruler = "".join(str(n).rjust(digits)[place] for n in numbers)
            lines.append(prefix + ruler)
        for source in report.sources():
            lines.append(_fit(f"  {source}", width))
            for row in report.rows(source):
                symbols = "".join(
                    TERMINAL_SYMBOLS[report.status(row, report.faults[n - 1])] for n in numbers
                )
                tool = _fit(row.tool, tool_width).ljust(tool_width)
                lines.append(f"    {row.interaction:>{number_width}} {tool}{' ' * gap}{symbols}")
    return lines


def _wrap(entries: list[str], first: str, width: int) -> list[str]:
    """``entries`` joined by two spaces, in lines of at most ``width``; the
    first line starts with ``first``, the rest are indented as deep."""
    indent = " " * len(first)
    lines: list[str] = []
    line, empty = first, True
    for entry in entries:
        if not empty and len(line) + 2 + len(entry) > width:
            lines.append(line)
            line, empty = indent, True
        line += entry if empty else f"  {entry}"
        empty = False
    lines.append(line)
    return [_fit(line, width) for line in lines]


# -- shared -----------------------------------------------------------------


def _numbered(faults: tuple[str, ...]) -> list[tuple[int, str]]:
    return list(enumerate(faults, 1))


def _counts_text(counts: Mapping[CellStatus, int]) -> str:
    return ", ".join(f"{counts[status]} {status}" for status in STATUSES)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
