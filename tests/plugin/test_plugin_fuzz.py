"""``pytest --toolguard-fuzz``: one item per tool of the ``toolguard_registry``
fixture (the ini's, or one a conftest.py defines), failing examples reported
with the call and the command that reproduce them, clear errors for a
registry that gives nothing to fuzz, honest counts, and xdist."""

from __future__ import annotations

import pytest

NO_XDIST = ("-p", "no:xdist")

TOOLS = '''
from pytest_toolguard import Risk, ToolRegistry, tool

@tool(
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"double": {"type": "integer"}},
                   "required": ["double"], "additionalProperties": False},
)
def double(ctx, n):
    """Twice n."""
    return {"double": 2 * n}

@tool(
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"sign": {"type": "string"}},
                   "required": ["sign"], "additionalProperties": False},
)
def sign(ctx, n):
    """Broken: a negative n gets an integer, not the string its schema says."""
    return {"sign": "+" if n >= 0 else -1}

registry = ToolRegistry([double, sign])
only_double = ToolRegistry([double])
empty = ToolRegistry()

@tool(
    input_schema={"type": "object", "properties": {"to": {"type": "string"}},
                  "required": ["to"], "additionalProperties": False},
    risk=Risk.EXTERNAL,
)
def notify(ctx, to):
    """Needs approval; a stub that sends nothing."""
    return {"notified": to}

@tool(
    input_schema={"type": "object", "properties": {"url": {"type": "string"}},
                  "required": ["url"], "additionalProperties": False},
    risk=Risk.EXTERNAL,
    network_host_argument="url",
)
def fetch(ctx, url):
    """Names its host: the fuzz workspace allows none, so no call reaches it."""
    return {"fetched": url}

external = ToolRegistry([notify, fetch])
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mytools=TOOLS)
    pytester.makeini("[pytest]\ntoolguard_registry = mytools:registry\n")
    pytester.syspathinsert()
    return pytester


def test_one_item_per_tool(project: pytest.Pytester) -> None:
    result = project.runpytest("--toolguard-fuzz", "--collect-only", "-q", *NO_XDIST)
    result.stdout.fnmatch_lines(["toolguard-fuzz::double", "toolguard-fuzz::sign"])
    plain = project.runpytest("--collect-only", "-q", *NO_XDIST)
    assert "toolguard-fuzz" not in plain.stdout.str()


def test_a_broken_tool_fails_with_the_call_the_seed_and_the_command_that_reproduce_it(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest(
        "--toolguard-fuzz", "--toolguard-fuzz-examples=20", "--toolguard-fuzz-seed=7", *NO_XDIST
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "fuzz sign: 1 failure(s) (* seed 7)",
            "*[[]output-invalid[]] with valid arguments*",
            '*call:*"arguments": {"n": -1}*"tool_name": "sign"*',
            "*reproduce: pytest_toolguard.fuzz.check_call(spec, *",
            "rerun: pytest --toolguard-fuzz --toolguard-fuzz-seed=7 --toolguard-fuzz-examples=20"
            " -k 'toolguard-fuzz and sign'",
            "toolguard fuzz: 2 tools, * 1 failing examples, seed 7",
        ]
    )


def test_xdist_runs_the_same_items_and_sums_them(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(
        "--toolguard-fuzz", "--toolguard-fuzz-examples=5", "-n", "2"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["toolguard fuzz: 2 tools, * 1 failing examples, seed 0"])


def test_k_selects_fuzz_items_like_any_other(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--toolguard-fuzz", "-k", "double", "--collect-only", "-q", *NO_XDIST
    )
    result.stdout.fnmatch_lines(["toolguard-fuzz::double"])
    assert "toolguard-fuzz::sign" not in result.stdout.str()


def test_k_counts_the_fuzz_items_in_collected_and_selected(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_one():\n    pass\n")
    result = project.runpytest("--toolguard-fuzz", "-k", "double", "--collect-only", *NO_XDIST)

    result.stdout.fnmatch_lines(["collected 3 items / 2 deselected / 1 selected"])


# -- where the registry comes from -------------------------------------------------

CONFTEST_FIXTURE = """
import pytest
import mytools

@pytest.fixture(scope="session")
def toolguard_registry(pytestconfig):
    return mytools.only_double
"""

CONFTEST_FIXTURE_WITH_A_HELPER = """
import pytest
import mytools

@pytest.fixture(scope="session")
def registry_name():
    return "only_double"

@pytest.fixture(scope="session")
def toolguard_registry(registry_name):
    return getattr(mytools, registry_name)
"""

CONFTEST_YIELD_FIXTURE = """
import pytest
import mytools

@pytest.fixture(scope="session")
def toolguard_registry(tmp_path_factory):
    tmp_path_factory.mktemp("tools")
    yield mytools.registry
"""


@pytest.fixture
def fixture_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose registry comes from a conftest.py fixture, and whose
    ini registry is the default (the built-in tools)."""
    pytester.makepyfile(mytools=TOOLS)
    pytester.syspathinsert()
    return pytester


@pytest.mark.parametrize(
    "conftest", [CONFTEST_FIXTURE, CONFTEST_FIXTURE_WITH_A_HELPER], ids=["pytestconfig", "helper"]
)
def test_conftest_fixture_names_exactly_its_tools(
    fixture_project: pytest.Pytester, conftest: str
) -> None:
    fixture_project.makeconftest(conftest)

    result = fixture_project.runpytest("--toolguard-fuzz", "--collect-only", "-q", *NO_XDIST)

    assert [line for line in result.outlines if line.startswith("toolguard-fuzz")] == [
        "toolguard-fuzz::double"
    ]


def test_conftest_fixture_tools_are_fuzzed(fixture_project: pytest.Pytester) -> None:
    fixture_project.makeconftest(CONFTEST_FIXTURE)

    result = fixture_project.runpytest("--toolguard-fuzz", "--toolguard-fuzz-examples=5", *NO_XDIST)

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["toolguard fuzz: 1 tools, *"])


def test_fixture_known_only_at_run_time_is_fuzzed_tool_by_tool_in_one_item(
    fixture_project: pytest.Pytester,
) -> None:
    fixture_project.makeconftest(CONFTEST_YIELD_FIXTURE)

    result = fixture_project.runpytest("--toolguard-fuzz", "--toolguard-fuzz-examples=5", *NO_XDIST)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*toolguard-fuzz::every-tool*",
            "one item for every tool: the toolguard_registry fixture (conftest.py:*) is called "
            "only at run time (*generator*)",
            "fuzz sign: 1 failure(s)*",
            "toolguard fuzz: 2 tools, * 1 failing examples, seed 0",
        ]
    )


def test_conftest_fixture_under_xdist_gives_every_worker_the_same_items(
    fixture_project: pytest.Pytester,
) -> None:
    fixture_project.makeconftest(CONFTEST_FIXTURE.replace("only_double", "registry"))

    result = fixture_project.runpytest_subprocess(
        "--toolguard-fuzz", "--toolguard-fuzz-examples=5", "-n", "2"
    )

    result.assert_outcomes(passed=1, failed=1)


def test_fixture_in_a_subdirectory_conftest_is_warned_about(
    fixture_project: pytest.Pytester,
) -> None:
    fixture_project.mkpydir("tests")
    (fixture_project.path / "tests" / "conftest.py").write_text(CONFTEST_FIXTURE)
    fixture_project.makeini("[pytest]\ntoolguard_registry = mytools:only_double\n")

    result = fixture_project.runpytest("--toolguard-fuzz", "--collect-only", "-q", *NO_XDIST)

    result.stdout.fnmatch_lines(["*tests/conftest.py defines a toolguard_registry fixture*"])


def test_broken_ini_registry_is_an_error_naming_the_value(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntoolguard_registry = nosuch_module:registry\n")

    result = pytester.runpytest("--toolguard-fuzz", *NO_XDIST)

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: ini toolguard_registry: 'nosuch_module:registry': cannot import*"]
    )


def test_ini_registry_without_tools_is_an_error_naming_it(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\ntoolguard_registry = mytools:empty\n")

    result = project.runpytest("--toolguard-fuzz", *NO_XDIST)

    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*nothing to fuzz: the ini toolguard_registry = 'mytools:empty' has no tools*"]
    )


def test_fixture_registry_without_tools_is_an_error_naming_it(
    fixture_project: pytest.Pytester,
) -> None:
    fixture_project.makeconftest(CONFTEST_FIXTURE.replace("only_double", "empty"))

    result = fixture_project.runpytest("--toolguard-fuzz", *NO_XDIST)

    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*nothing to fuzz: the toolguard_registry fixture (conftest.py:*) has no tools*"]
    )


# -- tools that need approval ----------------------------------------------------------


def test_tool_needing_approval_runs_and_one_no_call_reaches_is_skipped(
    project: pytest.Pytester,
) -> None:
    project.makeini("[pytest]\ntoolguard_registry = mytools:external\n")

    result = project.runpytest("--toolguard-fuzz", "--toolguard-fuzz-examples=5", "-rs", *NO_XDIST)

    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "toolguard fuzz: 2 tools, * 1 skipped, 0 failing examples, seed 0",
            "  skipped fetch: the handler never ran: *",
            "SKIPPED * cannot fuzz fetch: the handler never ran: * policy.network_host*",
        ]
    )
