"""The fault matrix model (``faults.outcome``) and its reports
(``faults.report``): Markdown for job summaries, JSON, HTML, report files
and the terminal grid."""

from __future__ import annotations

import json
import os
import random
import shlex
from pathlib import Path

import pytest

from pytest_toolguard.faults.outcome import CellOutcome, CellStatus, MatrixReport, Row
from pytest_toolguard.faults.report import (
    FORMAT_VERSION,
    RENDERERS,
    cell_label,
    render_html,
    render_json,
    render_markdown,
    rerun_command,
    terminal_grid,
    write_report,
)

FAULTS = ("timeout", "path_traversal", "partial_write", "response_lost")
FEEDBACK = "cassettes/feedback_analysis.yaml"
DELETE = "cases/delete_outside.yaml"
PARTIAL = "after a partial write, report.json holds 3 of 7 bytes"
STATUS_CYCLE: list[CellStatus] = ["pass", "fail", "n/a"]


def cell(
    source: str,
    interaction: int,
    tool: str,
    fault: str,
    status: CellStatus = "pass",
    *problems: str,
) -> CellOutcome:
    return CellOutcome(
        source=source,
        interaction=interaction,
        tool=tool,
        fault=fault,
        status=status,
        problems=problems,
        nodeid=f"{source}::{interaction}-{tool}::{fault}",
    )


def small_cells() -> list[CellOutcome]:
    """2 files, 3 rows, 4 faults: one failure, one n/a, one cell not collected."""
    cells = []
    for fault in FAULTS:
        cells.append(cell(DELETE, 1, "delete_file", fault))
        cells.append(
            cell(FEEDBACK, 1, "read_file", fault, "n/a" if fault == "partial_write" else "pass")
        )
        if fault == "partial_write":
            cells.append(cell(FEEDBACK, 3, "write_json_file", fault, "fail", PARTIAL, "second"))
        elif fault != "response_lost":  # (3, response_lost) is not collected
            cells.append(cell(FEEDBACK, 3, "write_json_file", fault))
    return cells


def small_report() -> MatrixReport:
    return MatrixReport.of(FAULTS, small_cells())


def markdown_tables(text: str) -> dict[str, list[list[str]]]:
    """Each file's table body: its rows, each a list of cell texts."""
    tables: dict[str, list[list[str]]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("### `"):
            current = line.split("`")[1]
            tables[current] = []
        elif line.startswith("| ") and current and not line.startswith("| interaction"):
            tables[current].append([part.strip() for part in line.strip("|").split(" | ")])
    return tables


# -- the model --------------------------------------------------------------


def test_cell_round_trips_through_json_data() -> None:
    original = cell(FEEDBACK, 3, "write_json_file", "partial_write", "fail", PARTIAL)

    data = json.loads(json.dumps(original.as_dict()))

    assert CellOutcome.from_dict(data) == original


def test_from_dict_ignores_unknown_keys_and_defaults_problems_and_nodeid() -> None:
    data = {"source": FEEDBACK, "interaction": 2, "tool": "t", "fault": "f", "status": "pass"}

    outcome = CellOutcome.from_dict({**data, "added_in_a_later_version": 1})

    assert (outcome.problems, outcome.nodeid) == ((), "")


def test_from_dict_names_a_missing_required_key() -> None:
    with pytest.raises(ValueError, match="'fault'"):
        CellOutcome.from_dict({"source": FEEDBACK, "interaction": 1, "tool": "t", "status": "pass"})


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="skipped"):
        CellOutcome(FEEDBACK, 1, "t", "f", "skipped")  # type: ignore[arg-type]


def test_an_interaction_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="1-based"):
        CellOutcome(FEEDBACK, 0, "t", "f", "pass")


def test_problems_given_as_a_list_are_kept_as_a_tuple() -> None:
    outcome = CellOutcome(FEEDBACK, 1, "t", "f", "fail", ["a", "b"])  # type: ignore[arg-type]

    assert outcome.problems == ("a", "b")
    assert hash(outcome)


def test_rows_are_by_source_then_interaction_whatever_the_input_order() -> None:
    cells = small_cells() + [cell(FEEDBACK, 10, "list_files", "timeout")]
    random.Random(7).shuffle(cells)

    report = MatrixReport.of(FAULTS, cells)

    assert report.rows() == (
        Row(DELETE, 1, "delete_file"),
        Row(FEEDBACK, 1, "read_file"),
        Row(FEEDBACK, 3, "write_json_file"),
        Row(FEEDBACK, 10, "list_files"),  # numerically after 3, not as text
    )
    assert report.sources() == (DELETE, FEEDBACK)
    assert report.rows(DELETE) == (Row(DELETE, 1, "delete_file"),)


def test_the_same_cells_in_any_order_make_the_same_report() -> None:
    cells = small_cells()
    shuffled = cells[:]
    random.Random(3).shuffle(shuffled)

    assert MatrixReport.of(FAULTS, shuffled) == MatrixReport.of(FAULTS, reversed(cells))


def test_cells_are_in_row_then_column_order() -> None:
    report = MatrixReport.of(FAULTS, reversed(small_cells()))

    first_row = [c.fault for c in report.cells if c.source == DELETE]

    assert first_row == list(FAULTS)
    assert report.cells[0].source == DELETE


def test_a_cell_not_collected_is_none_and_reads_as_na() -> None:
    report = small_report()
    row = Row(FEEDBACK, 3, "write_json_file")

    assert report.cell(row, "response_lost") is None
    assert report.status(row, "response_lost") == "n/a"
    assert report.status(row, "partial_write") == "fail"


def test_counts_cover_the_whole_grid_with_missing_cells_as_na() -> None:
    report = small_report()

    assert report.counts() == {"pass": 9, "fail": 1, "n/a": 2}
    assert report.counts(DELETE) == {"pass": 4, "fail": 0, "n/a": 0}


@pytest.mark.parametrize("first", ["fail", "pass"])
def test_a_duplicate_cell_keeps_the_worse_outcome(first: CellStatus) -> None:
    second: CellStatus = "pass" if first == "fail" else "fail"
    cells = [cell(FEEDBACK, 1, "t", "timeout", first), cell(FEEDBACK, 1, "t", "timeout", second)]

    report = MatrixReport.of(["timeout"], cells)

    assert [c.status for c in report.cells] == ["fail"]


def test_a_fault_only_in_the_cells_becomes_a_last_column() -> None:
    report = MatrixReport.of(["timeout"], [cell(FEEDBACK, 1, "t", "my_fault", "fail")])

    assert report.faults == ("timeout", "my_fault")
    assert report.counts() == {"pass": 0, "fail": 1, "n/a": 1}


def test_failures_and_ok() -> None:
    report = small_report()

    assert [c.fault for c in report.failures()] == ["partial_write"]
    assert not report.ok
    assert MatrixReport.of(FAULTS, [c for c in small_cells() if c.status != "fail"]).ok


def test_an_empty_report_is_ok_and_renders() -> None:
    report = MatrixReport.of(FAULTS, [])

    assert report.ok
    assert report.counts() == {"pass": 0, "fail": 0, "n/a": 0}
    assert "0 cells" in render_markdown(report)
    assert json.loads(render_json(report))["cells"] == []
    assert "<table>" not in render_html(report)
    assert len(terminal_grid(report)) == 1


# -- Markdown ---------------------------------------------------------------


def test_markdown_starts_with_a_heading_and_the_totals() -> None:
    lines = render_markdown(small_report()).splitlines()

    assert lines[0].startswith("## ")
    assert "12 cells: 9 pass, 1 fail, 2 n/a" in lines[2]
    assert "3 interactions in 2 files, 4 faults" in lines[2]


def test_markdown_legend_names_each_fault_column() -> None:
    text = render_markdown(small_report())

    legend = next(line for line in text.splitlines() if line.startswith("Faults:"))

    for number, fault in enumerate(FAULTS, 1):
        assert f"**{number}** `{fault}`" in legend


def test_markdown_has_one_table_per_file_with_one_row_per_interaction() -> None:
    tables = markdown_tables(render_markdown(small_report()))

    assert list(tables) == [DELETE, FEEDBACK]
    assert [row[0] for row in tables[FEEDBACK]] == ["1. `read_file`", "3. `write_json_file`"]
    assert all(len(row) == 1 + len(FAULTS) for rows in tables.values() for row in rows)


def test_markdown_cells_show_each_status_in_column_order() -> None:
    tables = markdown_tables(render_markdown(small_report()))

    assert tables[DELETE][0][1:] == ["✅", "✅", "✅", "✅"]
    assert tables[FEEDBACK][0][1:] == ["✅", "✅", "·", "✅"]
    assert tables[FEEDBACK][1][1:] == ["✅", "✅", "❌", "·"]  # the last not collected


def test_markdown_lists_each_failure_with_its_problems_and_rerun_command() -> None:
    text = render_markdown(small_report())
    failures = text[text.index("### Failures (1)") :]
    failed = cell(FEEDBACK, 3, "write_json_file", "partial_write", "fail")

    assert f"`{failed.nodeid}`" in failures
    assert PARTIAL in failures and "second" in failures
    assert f"`{rerun_command(failed)}`" in failures


def test_markdown_without_failures_has_no_failures_section() -> None:
    report = MatrixReport.of(FAULTS, [c for c in small_cells() if c.status != "fail"])

    assert "Failures" not in render_markdown(report)


def test_markdown_problem_text_cannot_inject_markup() -> None:
    problem = "<img src=x onerror=alert(1)> **loud** [link](http://x) a|b"
    report = MatrixReport.of(["timeout"], [cell(FEEDBACK, 1, "t", "timeout", "fail", problem)])

    text = render_markdown(report)

    assert "<img" not in text
    assert "&lt;img" in text
    assert "\\*\\*loud\\*\\*" in text
    assert "\\[link\\]" in text


def test_markdown_tool_name_with_pipe_and_backtick_keeps_the_table_intact() -> None:
    report = MatrixReport.of(["timeout"], [cell(FEEDBACK, 1, "odd|`tool`", "timeout")])

    rows = markdown_tables(render_markdown(report))[FEEDBACK]

    assert len(rows) == 1
    assert rows[0][-1] == "✅"
    assert "``" in rows[0][0]  # a longer fence around the backticks


def test_markdown_leaves_out_passing_tables_first_to_stay_under_max_bytes() -> None:
    cells = small_cells() + [
        cell(f"cassettes/big_{n}.yaml", i, f"tool_{i}", fault)
        for n in range(3)
        for i in range(1, 60)
        for fault in FAULTS
    ]
    report = MatrixReport.of(FAULTS, cells)
    limit = len(render_markdown(report).encode()) // 2

    text = render_markdown(report, max_bytes=limit)

    assert len(text.encode()) <= limit
    tables = markdown_tables(text)
    assert tables[FEEDBACK]  # the file with a failure keeps its table
    assert any(rows == [] for rows in tables.values())
    assert "Table left out" in text


def test_markdown_lists_at_most_max_failures() -> None:
    cells = [cell(FEEDBACK, i, "t", "timeout", "fail", "broke") for i in range(1, 8)]

    text = render_markdown(MatrixReport.of(["timeout"], cells), max_failures=3)

    assert text.count("  - rerun: ") == 3
    assert "and 4 more failed cells" in text


# -- JSON -------------------------------------------------------------------


def test_json_holds_version_faults_totals_and_cells() -> None:
    data = json.loads(render_json(small_report()))

    assert data["format_version"] == FORMAT_VERSION == 1
    assert data["ok"] is False
    assert data["faults"] == list(FAULTS)
    assert data["totals"] == {
        "cells": 12,
        "pass": 9,
        "fail": 1,
        "n/a": 2,
        "interactions": 3,
        "sources": 2,
    }
    assert len(data["cells"]) == 11  # the one not collected is not listed


def test_json_cells_rebuild_the_report() -> None:
    report = small_report()
    data = json.loads(render_json(report))

    rebuilt = MatrixReport.of(data["faults"], map(CellOutcome.from_dict, data["cells"]))

    assert rebuilt == report


def test_json_is_the_same_text_whatever_the_cell_order() -> None:
    shuffled = small_cells()
    random.Random(11).shuffle(shuffled)

    assert render_json(MatrixReport.of(FAULTS, shuffled)) == render_json(small_report())


def test_json_keys_are_sorted_and_indented() -> None:
    text = render_json(small_report())

    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


# -- HTML -------------------------------------------------------------------


def test_html_escapes_problem_text() -> None:
    problem = '<script>alert("x")</script>'
    report = MatrixReport.of(["timeout"], [cell(FEEDBACK, 1, "t", "timeout", "fail", problem)])

    page = render_html(report)

    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def test_html_escapes_file_tool_and_fault_names() -> None:
    report = MatrixReport.of(['f"><b>'], [cell("a<b>.yaml", 1, "<i>tool</i>", 'f"><b>', "pass")])

    page = render_html(report)

    assert "<b>" not in page and "<i>" not in page
    assert "a&lt;b&gt;.yaml" in page and "&lt;i&gt;tool&lt;/i&gt;" in page


def test_html_is_self_contained() -> None:
    page = render_html(small_report())

    assert page.startswith("<!DOCTYPE html>")
    assert "<style>" in page
    for external in ("<script", "<link", "src=", "http://", "https://", "@import"):
        assert external not in page


def test_html_cells_carry_their_status_and_problems() -> None:
    page = render_html(small_report())

    assert page.count('<td class="pass"') == 9
    assert page.count('<td class="na"') == 2
    failed = next(line for line in page.splitlines() if '<td class="fail"' in line)
    assert PARTIAL in failed  # in the cell's title
    assert 'href="#failure-1"' in failed
    assert 'id="failure-1"' in page


# -- report files -----------------------------------------------------------


@pytest.mark.parametrize("name", ["r.md", "r.markdown", "r.json", "r.html", "r.htm", "R.HTML"])
def test_write_report_picks_the_format_by_extension(tmp_path: Path, name: str) -> None:
    report = small_report()

    write_report(report, tmp_path / name)

    render = RENDERERS[Path(name).suffix.lower()]
    assert (tmp_path / name).read_text(encoding="utf-8") == render(report)


def test_write_report_refuses_another_extension_and_names_the_accepted_ones(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError) as refused:
        write_report(small_report(), tmp_path / "report.txt")

    for extension in (".md", ".markdown", ".json", ".html", ".htm"):
        assert extension in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_write_report_creates_missing_directories(tmp_path: Path) -> None:
    target = tmp_path / "reports" / "ci" / "faults.json"

    write_report(small_report(), target)

    assert json.loads(target.read_text(encoding="utf-8"))["format_version"] == 1


def test_write_report_replaces_a_report_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "faults.md"
    target.write_text("old", encoding="utf-8")

    write_report(small_report(), target)

    assert target.read_text(encoding="utf-8").startswith("## ")
    assert [p.name for p in tmp_path.iterdir()] == ["faults.md"]


def test_a_failed_write_keeps_the_old_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "faults.html"
    target.write_text("old", encoding="utf-8")

    def broken_replace(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)

    with pytest.raises(OSError, match="disk full"):
        write_report(small_report(), target)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["faults.html"]


# -- the terminal grid ------------------------------------------------------


def grid_line(lines: list[str], interaction: int, tool: str) -> str:
    return next(line for line in lines if line.split()[:2] == [str(interaction), tool])


def test_terminal_grid_starts_with_the_totals() -> None:
    lines = terminal_grid(small_report())

    assert "12 cells: 9 pass, 1 fail, 2 n/a" in lines[0]


def test_terminal_grid_has_one_character_per_fault_in_column_order() -> None:
    lines = terminal_grid(small_report())

    assert grid_line(lines, 3, "write_json_file").endswith("  ..F-")
    assert grid_line(lines, 1, "read_file").endswith("  ..-.")
    assert grid_line(lines, 1, "delete_file").endswith("  ....")


def test_terminal_grid_groups_rows_under_their_file() -> None:
    lines = terminal_grid(small_report())

    assert lines.index(f"  {DELETE}") < lines.index(f"  {FEEDBACK}")
    assert lines.index(f"  {FEEDBACK}") < lines.index(grid_line(lines, 3, "write_json_file"))


def test_terminal_grid_names_each_fault_number_once() -> None:
    text = "\n".join(terminal_grid(small_report()))

    for number, fault in enumerate(FAULTS, 1):
        assert text.count(f"{number} {fault}") == 1


def test_terminal_grid_lists_failed_cells_with_their_first_problem() -> None:
    lines = terminal_grid(small_report(), width=200)
    failed = cell(FEEDBACK, 3, "write_json_file", "partial_write", "fail")

    at = lines.index(f"  {failed.nodeid}")

    assert lines[at + 1].strip() == PARTIAL
    assert "second" not in "\n".join(lines)
    assert lines[-1] == f"rerun one: {rerun_command(failed)}"


def test_terminal_grid_rerun_line_is_never_a_cut_command() -> None:
    lines = terminal_grid(small_report(), width=100)

    assert lines[-1] == (
        "rerun one: pytest --toolguard-replay --toolguard-faults=partial_write "
        "'<node id from above>'"
    )


def test_terminal_grid_cuts_long_tool_names() -> None:
    long_tool = "a_tool_with_a_name_far_longer_than_any_terminal_would_like_to_show_in_one_row"
    report = MatrixReport.of(FAULTS, [cell(FEEDBACK, 1, long_tool, "timeout", "pass")])

    lines = terminal_grid(report, width=60)

    row = next(line for line in lines if line.lstrip().startswith("1 a_tool"))
    assert len(row) <= 60
    assert "…" in row and row.endswith(".---")


@pytest.mark.parametrize("width", [40, 60, 80, 100, 160])
@pytest.mark.parametrize("fault_count", [4, 14, 75])
def test_terminal_grid_never_exceeds_the_width(width: int, fault_count: int) -> None:
    faults = [f"fault_number_{n}" for n in range(fault_count)]
    cells = [
        cell(f"cassettes/{'deeply/' * 8}nested.yaml", i, "tool_" * i, fault, status, "why " * 40)
        for i in range(1, 12)
        for fault, status in zip(faults, STATUS_CYCLE * fault_count, strict=False)
    ]

    report = MatrixReport.of(faults, cells)
    lines = terminal_grid(report, width=width)

    # A failed cell's node id is the one thing never cut: it is pasted to rerun it.
    ids = {f"  {cell_label(failed)}" for failed in report.failures()}
    assert max(len(line) for line in lines if line not in ids) <= width


def test_terminal_grid_slices_columns_that_do_not_fit_and_loses_none() -> None:
    faults = [f"f{n}" for n in range(75)]
    cells = [
        cell(FEEDBACK, 1, "t", fault, "fail" if n == 70 else "pass")
        for n, fault in enumerate(faults)
    ]

    lines = terminal_grid(MatrixReport.of(faults, cells), width=40)

    symbols = "".join(line.split()[-1] for line in lines if line.split()[:2] == ["1", "t"])
    assert symbols == "." * 70 + "F" + "." * 4


def test_terminal_grid_lists_at_most_max_failures() -> None:
    cells = [cell(FEEDBACK, i, "t", "timeout", "fail") for i in range(1, 8)]

    lines = terminal_grid(MatrixReport.of(["timeout"], cells), max_failures=2)

    assert sum(line.startswith(f"  {FEEDBACK}::") for line in lines) == 2
    assert "  and 5 more" in lines


# -- the rerun command ------------------------------------------------------


def test_rerun_command_quotes_the_node_id_for_the_shell() -> None:
    odd = CellOutcome(FEEDBACK, 1, "t", "timeout", "fail", nodeid="a b's [x]::1-t::timeout")

    words = shlex.split(rerun_command(odd))

    assert words == ["pytest", "--toolguard-replay", "--toolguard-faults=timeout", odd.nodeid]


def test_rerun_command_without_a_node_id_reruns_the_file_for_that_fault() -> None:
    anonymous = CellOutcome(FEEDBACK, 1, "t", "timeout", "fail")

    assert shlex.split(rerun_command(anonymous))[-2:] == ["--toolguard-faults=timeout", FEEDBACK]
