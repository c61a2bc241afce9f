"""Mistakes a new user makes get an answer that says what happened and what
to do next: each of these answered with a raw error, a
cut id, two bare hashes or a wrong hint before."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_toolguard import Capabilities, Risk, ToolRegistry, ToolRuntime
from pytest_toolguard.faults import BUILTIN_FAULTS, select_faults
from pytest_toolguard.faults.outcome import CellOutcome, MatrixReport
from pytest_toolguard.faults.report import terminal_grid
from pytest_toolguard.replay import loads, replay
from pytest_toolguard.replay.report import format_report
from pytest_toolguard.tools import builtin_registry

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")


@pytest.mark.parametrize("spec", ["all,timeout", "timeout,all", "all, partial_write"])
def test_all_in_a_fault_list_is_every_fault(spec: str) -> None:
    assert select_faults(spec) == BUILTIN_FAULTS


def test_an_unknown_fault_beside_all_is_still_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault timeot"):
        select_faults("all,timeot")


def test_failed_cell_ids_are_never_cut_so_they_can_be_pasted() -> None:
    nodeid = "cassettes/" + "a_very_long_directory_name/" * 4 + "x.yaml::2-append_todo::timeout"
    cell = CellOutcome("x.yaml", 2, "append_todo", "timeout", "fail", ("late write",), nodeid)
    lines = terminal_grid(MatrixReport.of(["timeout"], [cell]), width=60)
    assert f"  {nodeid}" in lines


ONE_LINE = """\
format_version: 1
kind: case
session:
  capabilities: {allowed_risks: [read, write], write_roots: ["."]}
interactions:
- call: {tool_name: write_file, arguments: {path: a.txt, content: "new value"}}
  result: {ok: true, code: OK}
final_files:
  a.txt: "old value"
"""


def test_a_differing_one_line_file_is_shown_as_a_diff() -> None:
    report = replay(loads(ONE_LINE, source="case.yaml"), builtin_registry())
    text = format_report(report, cassette_path="case.yaml", rerecord="edit it")
    assert "-old value" in text and "+new value" in text


def test_a_missing_workspace_says_to_create_it(tmp_path: Path) -> None:
    missing = tmp_path / "agent-workspace"
    with pytest.raises(FileNotFoundError, match="does not exist: create it first"):
        ToolRuntime(ToolRegistry(), str(missing))


def test_a_workspace_that_is_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        ToolRuntime(ToolRegistry(), str(tmp_path / "file"))


@pytest.mark.parametrize("value", ["reed", "admin", "", 3])
def test_an_unknown_risk_lists_the_valid_ones(value: object) -> None:
    with pytest.raises(ValueError, match="use one of: read, write, external, dangerous"):
        Risk(value)  # type: ignore[arg-type]


def test_a_close_risk_is_suggested_and_case_does_not_matter() -> None:
    with pytest.raises(ValueError, match="did you mean 'read'"):
        Risk("reed")
    assert Risk("WRITE") is Risk.WRITE


@pytest.mark.parametrize(
    ("keyword", "suggestion"),
    [("write_root", "write_roots"), ("allowed_risk", "allowed_risks"), ("max_read", None)],
)
def test_a_misspelt_capabilities_keyword_is_named_with_a_suggestion(
    keyword: str, suggestion: str | None
) -> None:
    with pytest.raises(TypeError) as caught:
        Capabilities(**{keyword: ()})  # type: ignore[arg-type]
    text = str(caught.value)
    assert f"unexpected keyword argument {keyword!r}" in text
    assert "known: allowed_tools, allowed_risks" in text
    if suggestion:
        assert f"did you mean {suggestion!r}" in text


def test_capabilities_still_take_positional_and_keyword_arguments() -> None:
    caps = Capabilities(None, frozenset({Risk.READ}), write_roots=("out/",))
    assert caps.write_roots == ("out",)


UNKNOWN_TOOL = """\
format_version: 1
kind: cassette
name: mine
recorded_by: python scripts/record_agent.py
session: {}
interactions:
- call: {call_id: c1, tool_name: my_own_tool, arguments: {}}
  result: {ok: true, code: OK, retryable: false, state: SUCCEEDED, truncated: false, data: {}}
final_files: {}
"""


def test_a_replay_whose_tools_are_all_missing_names_the_registry_it_used(pytester) -> None:
    pytester.makefile(".yaml", **{"cassettes/mine": UNKNOWN_TOOL})
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay", "cassettes")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "ini toolguard_registry = pytest_toolguard.tools:builtin_registry" in text
    assert "has no tool my_own_tool; its tools: list_files" in text
    assert "to re-record this cassette: python scripts/record_agent.py" in text


@pytest.mark.slow
def test_a_fixture_playback_hint_names_the_script_that_recorded_the_cassette(pytester) -> None:
    pytester.makefile(".yaml", **{"cassettes/mine": UNKNOWN_TOOL})
    pytester.makepyfile(
        test_agent="""
        import pytest
        from pytest_toolguard import ToolCall

        @pytest.mark.toolguard(cassette="mine")
        def test_it(toolguard):
            toolguard.execute(ToolCall(call_id="c1", tool_name="other_tool"))
        """
    )
    result = pytester.runpytest(*NO_XDIST)
    text = result.stdout.str()
    assert "python scripts/record_agent.py" in text
    assert "--toolguard-record-mode=rewrite" not in text
