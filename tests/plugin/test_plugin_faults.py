"""``pytest --toolguard-faults``: the matrix's items and ids, failing cells,
the reports, the registration hook and xdist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_toolguard.faults import BUILTIN_FAULTS, Fault, select_faults

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")

CASE = """\
format_version: 1
kind: case
name: notes
session:
  capabilities: {allowed_risks: [read, write], write_roots: [notes]}
workspace:
  files:
    notes/a.txt: hello
interactions:
- call: {tool_name: read_text, arguments: {path: notes/a.txt}}
  result: {ok: true, code: OK}
- call: {tool_name: write_file, arguments: {path: notes/b.txt, content: "new text here"}}
  result: {ok: true, code: OK}
- call: {tool_name: read_text, arguments: {path: ../outside.txt}}
  result: {ok: false, code: PATH_OUTSIDE_WORKSPACE}
"""

ALWAYS_FAILS = """
from pytest_toolguard.faults import Fault

class AlwaysFails(Fault):
    name = "always_fails"
    applies_to = "write_file calls"
    injection = "none"
    expected = "nothing"

    def applies(self, target):
        return target.call.tool_name == "write_file"

    def inject(self, cell):
        result = cell.execute(cell.call())
        cell.check(False, f"boom after {result.code.value}")

def pytest_toolguard_faults(config):
    return [AlwaysFails]
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".yaml", **{"cases/notes": CASE})
    return pytester


def _ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line]


def test_every_interaction_gets_one_item_per_applicable_fault(project: pytest.Pytester) -> None:
    result = project.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    ids = _ids(result)
    assert ids[0] == "cases/notes.yaml::replay"
    assert "cases/notes.yaml::2-write_file::partial_write" in ids
    assert "cases/notes.yaml::1-read_text::timeout" in ids
    # A read has nothing to tear; a refused call has no handler to time out.
    assert "cases/notes.yaml::1-read_text::partial_write" not in ids
    assert "cases/notes.yaml::3-read_text::timeout" not in ids
    assert "cases/notes.yaml::3-read_text::path_traversal" in ids
    # Catalogue order within an interaction, file order across them.
    names = [fault.name for fault in BUILTIN_FAULTS]
    second = [i.rsplit("::", 1)[1] for i in ids if "::2-write_file::" in i]
    assert second == sorted(second, key=names.index)
    again = project.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    assert _ids(again) == ids


def test_a_list_of_faults_selects_those(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--toolguard-faults=unknown_tool,timeout", "--collect-only", "-q", *NO_XDIST
    )
    faults = {i.rsplit("::", 1)[1] for i in _ids(result) if i.count("::") == 2}
    assert faults == {"unknown_tool", "timeout"}


def test_the_built_in_tools_pass_the_matrix_and_the_report_is_written(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest(
        "--toolguard-faults=all", "--toolguard-report=out/matrix.json", *NO_XDIST
    )
    result.assert_outcomes(passed=len(_collected(project)))
    report = json.loads((project.path / "out" / "matrix.json").read_text())
    statuses = {cell["status"] for cell in report["cells"]}
    assert statuses == {"pass"}
    assert len(report["cells"]) == len(_collected(project)) - 1  # all but replay
    result.stdout.fnmatch_lines(["toolguard fault matrix: * 0 fail*"])


def _collected(project: pytest.Pytester) -> list[str]:
    found = project.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    return _ids(found)


def test_a_failing_cell_names_its_problem_and_how_to_rerun_it(project: pytest.Pytester) -> None:
    project.makeconftest(ALWAYS_FAILS)
    result = project.runpytest(
        "--toolguard-faults=always_fails", "--toolguard-report=matrix.md", *NO_XDIST
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cases/notes.yaml::2-write_file::always_fails: nothing, but:",
            "*- boom after OK",
            "*rerun: pytest --toolguard-replay --toolguard-faults=always_fails "
            "'cases/notes.yaml::2-write_file::always_fails'",
        ]
    )
    markdown = (project.path / "matrix.md").read_text()
    assert "1 fail" in markdown
    assert "boom after OK" in markdown


def test_the_hook_adds_faults_that_all_includes(project: pytest.Pytester) -> None:
    project.makeconftest(ALWAYS_FAILS)
    result = project.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    ids = _ids(result)
    assert ids.index("cases/notes.yaml::2-write_file::always_fails") > ids.index(
        "cases/notes.yaml::2-write_file::secret_in_payload"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--toolguard-faults=no_such_fault"], "unknown fault no_such_fault; known: all, "),
        (["--toolguard-report=x.md"], "--toolguard-report needs --toolguard-faults"),
        (["--toolguard-faults=timeout", "--toolguard-report=m.txt"], "use one of .md, "),
    ],
)
def test_bad_options_are_usage_errors(
    project: pytest.Pytester, options: list[str], message: str
) -> None:
    result = project.runpytest(*options, *NO_XDIST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_xdist_runs_the_same_cells_and_merges_them(project: pytest.Pytester) -> None:
    project.makeconftest(ALWAYS_FAILS)
    serial = _ids(
        project.runpytest(
            "--toolguard-faults=always_fails,unknown_tool,timeout",
            "--collect-only",
            "-q",
            *NO_XDIST,
        )
    )
    result = project.runpytest_subprocess(
        "--toolguard-faults=always_fails,unknown_tool,timeout",
        "-n",
        "2",
        "--toolguard-report=m.json",
    )
    result.assert_outcomes(passed=len(serial) - 1, failed=1)
    cells = json.loads((project.path / "m.json").read_text())["cells"]
    assert sorted(cell["nodeid"] for cell in cells) == sorted(
        i for i in serial if i.count("::") == 2
    )


KILLS_ITS_WORKER = """
import os
from pytest_toolguard.faults import Fault

class KillsItsWorker(Fault):
    name = "kills_its_worker"
    applies_to = "the last interaction"
    injection = "the process running the cell dies (os._exit)"
    expected = "nothing: the cell never ends"

    def applies(self, target):
        return target.index == len(target.cassette.interactions) - 1

    def inject(self, cell):
        os._exit(3)

def pytest_toolguard_faults(config):
    return [KillsItsWorker]
"""


def test_a_worker_killed_mid_matrix_loses_no_other_cell(project: pytest.Pytester) -> None:
    # One worker runs every cell in order; the cell that kills it is the
    # file's last: the cells it ran before are in the report (they would be
    # lost with the worker's end-of-session output), the killed one fails.
    project.makeconftest(KILLS_ITS_WORKER)
    faults = "--toolguard-faults=kills_its_worker,unknown_tool,schema_drift,path_traversal"
    planned = _ids(project.runpytest(faults, "--collect-only", "-q", *NO_XDIST))
    killer = "cases/notes.yaml::3-read_text::kills_its_worker"
    assert killer in planned and planned.index(killer) > 3
    result = project.runpytest_subprocess(faults, "-n", "1", "--toolguard-report=m.json")
    result.assert_outcomes(passed=len(planned) - 1, failed=1)
    cells = json.loads((project.path / "m.json").read_text())["cells"]
    by_id = {cell["nodeid"]: cell for cell in cells}
    assert sorted(by_id) == sorted(i for i in planned if i.count("::") == 2)
    assert by_id[killer]["status"] == "fail"
    assert "worker running this cell crashed" in by_id[killer]["problems"][0]
    assert all(cell["status"] == "pass" for nodeid, cell in by_id.items() if nodeid != killer)
    assert "toolguard: 0 cassettes and 1 case replayed" in result.stdout.str()


def test_a_worker_killed_under_loadgroup_loses_no_other_cell_and_ends(
    project: pytest.Pytester,
) -> None:
    # pytest-xdist 3.8's loadgroup scheduler queued the killed worker's
    # finished units again and the run hung (plugin/scheduling.py); the
    # timeout only turns a hang into a failure.
    project.makeconftest(KILLS_ITS_WORKER)
    faults = "--toolguard-faults=kills_its_worker,unknown_tool,schema_drift,path_traversal"
    planned = _ids(project.runpytest(faults, "--collect-only", "-q", *NO_XDIST))
    killer = "cases/notes.yaml::3-read_text::kills_its_worker"
    result = project.runpytest_subprocess(
        faults, "-n", "1", "--dist", "loadgroup", "--toolguard-report=m.json", timeout=300
    )
    result.assert_outcomes(passed=len(planned) - 1, failed=1)
    cells = json.loads((project.path / "m.json").read_text())["cells"]
    assert [cell["nodeid"] for cell in cells if cell["status"] == "fail"] == [killer]


def test_loadgroup_runs_the_items_of_one_file_on_one_worker(project: pytest.Pytester) -> None:
    project.makefile(".yaml", **{"cases/other": CASE.replace("name: notes", "name: other")})
    result = project.runpytest_subprocess(
        "--toolguard-faults=unknown_tool,schema_drift", "-n", "2", "--dist", "loadgroup", "-v"
    )
    workers: dict[str, set[str]] = {}
    for line in result.outlines:
        if line.startswith("[gw") and "PASSED cases/" in line:
            worker = line.split("]", 1)[0]
            workers.setdefault(line.split("PASSED ", 1)[1].split("::", 1)[0], set()).add(worker)
    assert sorted(workers) == ["cases/notes.yaml", "cases/other.yaml"]
    assert all(len(ran_on) == 1 for ran_on in workers.values())


def test_select_faults_keeps_catalogue_order_and_refuses_unknown_names() -> None:
    assert [f.name for f in select_faults("timeout,unknown_tool")] == ["timeout", "unknown_tool"]
    assert [f.name for f in select_faults("unknown_tool,timeout")] == ["timeout", "unknown_tool"]
    assert select_faults("all") == BUILTIN_FAULTS
    with pytest.raises(ValueError, match="unknown fault nope"):
        select_faults("timeout,nope")
    assert all(isinstance(fault, Fault) for fault in BUILTIN_FAULTS)


def test_the_docs_example_fault_runs(project: pytest.Pytester) -> None:
    page = (Path(__file__).parents[2] / "docs" / "faults.md").read_text()
    start = page.index("# conftest.py\nfrom pytest_toolguard import ErrorCode")
    project.makeconftest(page[start : page.index("```", start)])
    result = project.runpytest("--toolguard-faults=oversized_arguments", "-v", *NO_XDIST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2-write_file::oversized_arguments PASSED*"])


def test_a_tool_missing_from_the_ini_registry_is_warned_about(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".yaml",
        **{
            "cases/custom": CASE.replace("tool_name: read_text", "tool_name: my_reader").replace(
                "name: notes", "name: custom"
            )
        },
    )
    result = pytester.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    result.stdout.fnmatch_lines(
        ["*cases/custom.yaml: the ini toolguard_registry = * has no tool my_reader*"]
    )


CONFTEST_REGISTRY = """
import pytest
from pytest_toolguard import PathAccess, ToolRegistry, tool
from pytest_toolguard.tools import builtin_registry

@tool(
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    paths=[PathAccess.read("{path}")],
)
def my_reader(ctx, path):
    return {"text": ctx.workspace.read_text(path)}

@pytest.fixture(scope="session")
def toolguard_registry():
    return ToolRegistry([my_reader, builtin_registry().get("write_file")])
"""


def test_fault_cells_are_collected_for_the_tools_of_a_conftest_registry_fixture(
    pytester: pytest.Pytester,
) -> None:
    """Collection asks the fixture the cells will get, not the ini."""
    pytester.makeconftest(CONFTEST_REGISTRY)
    pytester.makefile(
        ".yaml",
        **{
            "cases/custom": CASE.replace("tool_name: read_text", "tool_name: my_reader").replace(
                "name: notes", "name: custom"
            )
        },
    )
    collected = pytester.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    ids = collected.stdout.str()
    assert "has no tool" not in ids
    assert "cases/custom.yaml::1-my_reader::timeout" in ids
    assert "cases/custom.yaml::1-my_reader::path_traversal" in ids
    result = pytester.runpytest("--toolguard-faults=all", *NO_XDIST)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] > 5


RECORDS_GROUPS = """
import json

def pytest_collection_modifyitems(config, items):
    groups = {
        item.nodeid: [mark.args[0] for mark in item.iter_markers("xdist_group")]
        for item in items
    }
    with open("groups.json", "w") as out:
        json.dump(groups, out)
"""


def test_fault_cells_are_grouped_by_their_file_for_xdist(project: pytest.Pytester) -> None:
    project.makeconftest(RECORDS_GROUPS)
    project.runpytest("--toolguard-faults=unknown_tool,schema_drift", "--collect-only", "-q")
    groups = json.loads((project.path / "groups.json").read_text())
    cells = {nodeid: marks for nodeid, marks in groups.items() if nodeid.count("::") == 2}
    assert cells and all(marks == ["cases/notes.yaml"] for marks in cells.values())
    assert groups["cases/notes.yaml::replay"] == []


COUNTS_LOADS = """
import pytest_toolguard.replay.cassette as cassette_module

LOADS = []
real_load = cassette_module.load

def counted(*args, **kwargs):
    LOADS.append(args[0])
    return real_load(*args, **kwargs)

cassette_module.load = counted

def pytest_sessionfinish(session):
    with open("loads.txt", "w") as out:
        out.write(str(len(LOADS)))
"""


def test_a_cassette_is_loaded_once_for_its_collection_and_its_items(
    project: pytest.Pytester,
) -> None:
    project.makeconftest(COUNTS_LOADS)
    result = project.runpytest("--toolguard-faults=unknown_tool,schema_drift", *NO_XDIST)
    assert result.ret == pytest.ExitCode.OK
    assert (project.path / "loads.txt").read_text() == "1"


RECORDS_FIXTURES = """
import json

def pytest_collection_modifyitems(config, items):
    fixtures = {item.nodeid: list(item.fixturenames) for item in items}
    with open("fixtures.json", "w") as out:
        json.dump(fixtures, out)
"""

AUTOUSE_HERE = """
import pytest

@pytest.fixture(autouse=True)
def only_in_this_directory():
    yield
"""


def test_each_fault_cell_gets_the_fixtures_of_its_own_directory(
    project: pytest.Pytester,
) -> None:
    """The cells of one file share their fixture closure; a file elsewhere
    gets its own, with the fixtures its directory's conftest.py adds."""
    project.makeconftest(RECORDS_FIXTURES)
    project.makefile(".yaml", **{"cases/inner/other": CASE.replace("name: notes", "name: other")})
    (project.path / "cases" / "inner" / "conftest.py").write_text(AUTOUSE_HERE)
    project.runpytest("--toolguard-faults=all", "--collect-only", "-q", *NO_XDIST)
    fixtures = json.loads((project.path / "fixtures.json").read_text())
    inner = {k: v for k, v in fixtures.items() if k.startswith("cases/inner/other.yaml::")}
    outer = {k: v for k, v in fixtures.items() if k.startswith("cases/notes.yaml::")}
    assert sum(nodeid.count("::") == 2 for nodeid in inner) > 5
    assert all("only_in_this_directory" in names for names in inner.values())
    assert not any("only_in_this_directory" in names for names in outer.values())
    assert all("toolguard_registry" in names for names in fixtures.values())
