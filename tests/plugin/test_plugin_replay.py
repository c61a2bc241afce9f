"""``pytest --toolguard-replay``: cassettes and cases as test items, failure
reports, the registry and secrets, the summary line, and xdist."""

from __future__ import annotations

import re

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.replay import record_session
from pytest_toolguard.replay.registry_loading import SpecError, load_registry, load_secrets
from pytest_toolguard.tools import builtin_registry

# hypothesis's plugin re-imports hypothesis in every in-process run (~1.5 s).
NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")

CAPS = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("runs/r1/artifacts",)
)
CALLS = [
    ("read_csv", {"path": "data/f.csv"}),
    ("read_text", {"path": ".env"}),
    ("write_json_file", {"artifact_name": "a.json", "content": {"b": 1, "a": [1, 2]}}),
    ("list_files", {"recursive": True}),
]

CASE = """\
format_version: 1
kind: case
name: {name}
session:
  capabilities: {{allowed_risks: [read]}}
workspace:
  files:
    notes.txt: hello
interactions:
- call: {{tool_name: read_text, arguments: {{path: .env}}}}
  result: {{ok: false, code: FORBIDDEN_PATH}}
  audit: {{state: DENIED, rule: sandbox.forbidden_path}}
- call: {{tool_name: read_text, arguments: {{path: notes.txt}}}}
  result: {{ok: true, code: OK}}
"""


@pytest.fixture(scope="module")
def cassette_text(tmp_path_factory):
    """A session recorded with the built-in tools, as YAML text."""
    base = tmp_path_factory.mktemp("recorded")
    workspace = base / "ws"
    (workspace / "data").mkdir(parents=True)
    (workspace / "data" / "f.csv").write_text("id,text\n1,hi\n")
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        CAPS,
        SQLiteAuditStore(":memory:"),
        variables={"run_id": "r1"},
    )
    path = base / "session.yaml"
    with record_session(runtime, path, recorded_by="python scripts/record.py session"):
        for index, (name, arguments) in enumerate(CALLS):
            runtime.execute(ToolCall(call_id=f"c{index}", tool_name=name, arguments=arguments))
    runtime.close()
    return path.read_text()


def _write(pytester, relative, text):
    path = pytester.path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _edited(text, old, new):
    assert old in text
    return text.replace(old, new, 1)


def _collected(result):
    return [line for line in result.outlines if "::" in line]


# -- collection -----------------------------------------------------------------


def test_without_the_flag_cassettes_and_cases_are_never_collected(pytester, cassette_text):
    _write(pytester, "cassettes/session.yaml", cassette_text)
    _write(pytester, "cases/env.yaml", CASE.format(name="env"))
    pytester.makepyfile(test_plain="def test_plain(): pass")
    result = pytester.runpytest(*NO_XDIST, "--collect-only", "-q")
    assert _collected(result) == ["test_plain.py::test_plain"]


def test_the_flag_collects_one_item_per_file_in_sorted_order(pytester):
    for relative in ("cassettes/b.yaml", "cassettes/a.yaml", "cassettes/sub/c.yml", "cases/z.yaml"):
        _write(pytester, relative, CASE.format(name="x"))
    _write(pytester, "elsewhere/ignored.yaml", CASE.format(name="x"))
    _write(pytester, "cassettes/notes.txt", "not yaml")
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay", "--collect-only", "-q")
    assert _collected(result) == [
        "cases/z.yaml::replay",
        "cassettes/a.yaml::replay",
        "cassettes/b.yaml::replay",
        "cassettes/sub/c.yml::replay",
    ]


def test_with_testpaths_the_flag_adds_the_cassette_and_case_directories(pytester):
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    _write(pytester, "tests/test_plain.py", "def test_plain(): pass\n")
    _write(pytester, "cases/env.yaml", CASE.format(name="env"))
    without = pytester.runpytest(*NO_XDIST, "--collect-only", "-q")
    assert _collected(without) == ["tests/test_plain.py::test_plain"]
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay", "--collect-only", "-q")
    assert _collected(result) == ["tests/test_plain.py::test_plain", "cases/env.yaml::replay"]


def test_the_directories_come_from_the_ini_file(pytester):
    pytester.makeini(
        "[pytest]\ntoolguard_cassette_dir = tapes/recorded\ntoolguard_case_dir = spec\n"
    )
    _write(pytester, "tapes/recorded/one.yaml", CASE.format(name="one"))
    _write(pytester, "spec/two.yaml", CASE.format(name="two"))
    _write(pytester, "cassettes/default_dir_is_not_used.yaml", CASE.format(name="x"))
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay", "--collect-only", "-q")
    assert _collected(result) == ["spec/two.yaml::replay", "tapes/recorded/one.yaml::replay"]


def test_options_sit_in_a_toolguard_group_in_help(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "toolguard:",
            "*--toolguard-replay*",
            "*--toolguard-record-mode=*",
            "*toolguard_registry*",
        ]
    )


# -- passing and failing replays --------------------------------------------------


def test_a_recorded_cassette_replays_and_passes(pytester, cassette_text):
    _write(pytester, "cassettes/session.yaml", cassette_text)
    _write(pytester, "cases/env.yaml", CASE.format(name="env"))
    pytester.runpytest(*NO_XDIST, "--toolguard-replay").assert_outcomes(passed=2)


def _failure_text(pytester, cassette_text, old, new):
    _write(pytester, "cassettes/session.yaml", _edited(cassette_text, old, new))
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "Traceback" not in text and "pytest_toolguard/" not in text
    return text


def test_a_changed_code_is_reported_with_cassette_interaction_field_values_and_command(
    pytester, cassette_text
):
    text = _failure_text(pytester, cassette_text, "code: FORBIDDEN_PATH", "code: PERMISSION_DENIED")
    assert "cassette cassettes/session.yaml: 1 difference" in text
    assert "interaction 2 (read_text): result.code" in text
    assert 'recorded: "PERMISSION_DENIED"' in text and 'replayed: "FORBIDDEN_PATH"' in text
    assert "to re-record this cassette: python scripts/record.py session" in text


def test_a_changed_file_content_is_reported_with_a_unified_diff(pytester, cassette_text):
    text = _failure_text(pytester, cassette_text, '    "b": 1\n', '    "b": 2\n')
    assert "files: runs/r1/artifacts/a.json" in text
    assert "--- recorded runs/r1/artifacts/a.json" in text
    assert '-  "b": 2' in text and '+  "b": 1' in text


def test_a_changed_audit_state_is_reported(pytester, cassette_text):
    text = _failure_text(
        pytester,
        cassette_text,
        "state: DENIED\n    decision: deny",
        "state: FAILED\n    decision: deny",
    )
    assert "interaction 2 (read_text): audit.state" in text
    assert 'recorded: "FAILED"' in text and 'replayed: "DENIED"' in text


def test_a_cassette_naming_no_recorder_says_so_and_a_case_says_edit_it(pytester, cassette_text):
    text = _edited(cassette_text, "recorded_by: python scripts/record.py session\n", "")
    _write(pytester, "cassettes/session.yaml", _edited(text, "code: FORBIDDEN_PATH", "code: OK"))
    _write(pytester, "cases/env.yaml", CASE.format(name="env").replace("FORBIDDEN_PATH", "OK"))
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "cassettes/session.yaml names no recorder (recorded_by)" in text
    assert "to re-record this case: a case is written by hand: edit " in text


def test_a_bad_file_fails_cleanly_naming_the_file_and_the_field(pytester):
    _write(pytester, "cases/bad.yaml", CASE.format(name="bad").replace("kind: case", "kind: tape"))
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "\ncases/bad.yaml: $.kind: 'tape' is not one of" in text
    assert "Traceback" not in text and "pytest_toolguard/" not in text


# -- where the tools and the secrets come from ---------------------------------------

TOOLS_MODULE = """\
from pytest_toolguard import ToolRegistry, tool

@tool(input_schema={"type": "object", "properties": {"token": {"type": "string"}}})
def check_token(ctx, token=""):
    return {"matched": token == "s3cret"}

registry = ToolRegistry([check_token])

def make_registry():
    return ToolRegistry([check_token])

def secrets():
    return {"token": "s3cret"}

not_a_registry = [check_token]
"""

TOKEN_CASE = """\
format_version: 1
kind: case
session: {}
interactions:
- call: {tool_name: check_token, arguments: {token: "<redacted:token>"}}
  result: {ok: true, data: {matched: %s}}
"""


@pytest.mark.parametrize("attribute", ["registry", "make_registry"])
def test_the_registry_comes_from_the_ini_module_attribute(pytester, attribute):
    pytester.makepyfile(mytools=TOOLS_MODULE)
    pytester.makeini(f"[pytest]\npythonpath = .\ntoolguard_registry = mytools:{attribute}\n")
    _write(pytester, "cases/token.yaml", TOKEN_CASE % "false")
    pytester.runpytest(*NO_XDIST, "--toolguard-replay").assert_outcomes(passed=1)


def test_a_toolguard_registry_fixture_in_conftest_overrides_the_ini(pytester):
    pytester.makepyfile(mytools=TOOLS_MODULE)
    pytester.makeconftest(
        "import pytest, mytools\n\n"
        "@pytest.fixture(scope='session')\n"
        "def toolguard_registry():\n"
        "    return mytools.make_registry()\n"
    )
    _write(pytester, "cases/token.yaml", TOKEN_CASE % "false")
    pytester.runpytest(*NO_XDIST, "--toolguard-replay").assert_outcomes(passed=1)


def test_secrets_fill_placeholders_from_the_ini(pytester):
    pytester.makepyfile(mytools=TOOLS_MODULE)
    pytester.makeini(
        "[pytest]\npythonpath = .\ntoolguard_registry = mytools:registry\n"
        "toolguard_secrets = mytools:secrets\n"
    )
    _write(pytester, "cases/token.yaml", TOKEN_CASE % "true")
    pytester.runpytest(*NO_XDIST, "--toolguard-replay").assert_outcomes(passed=1)


BAD_TOOLS_MODULE = """\
def exploding():
    raise RuntimeError("no credentials in this environment")

number = 3
"""


@pytest.mark.parametrize(
    "spec, message",
    [
        ("mytools", "is not of the form 'package.module:attribute'"),
        ("no_such_module:registry", "cannot import 'no_such_module'"),
        ("mytools:missing", "mytools has no attribute 'missing'"),
        ("mytools:not_a_registry", "is a list, not a ToolRegistry"),
        ("badtools:number", "is a int, not a ToolRegistry"),
        ("raising_on_import:registry", "cannot import 'raising_on_import': RuntimeError"),
        ("badtools:exploding", "calling it raised RuntimeError"),
    ],
)
@pytest.mark.parametrize("option", ["--toolguard-replay", "--toolguard-faults=timeout"])
def test_a_bad_ini_registry_is_one_usage_error_line_not_an_error_per_item(
    pytester, spec, message, option
):
    pytester.makepyfile(
        mytools=TOOLS_MODULE,
        badtools=BAD_TOOLS_MODULE,
        raising_on_import="raise RuntimeError('import-time failure\\nsecond line')\n",
    )
    pytester.makeini(f"[pytest]\npythonpath = .\ntoolguard_registry = {spec}\n")
    _write(pytester, "cases/token.yaml", TOKEN_CASE % "false")
    _write(pytester, "cases/other.yaml", TOKEN_CASE % "false")
    result = pytester.runpytest(*NO_XDIST, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, errors
    assert errors[0].startswith("ERROR: ini toolguard_registry: ")
    assert message in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not any(" error" in line for line in result.outlines)


def test_a_bad_ini_registry_does_not_stop_a_run_that_does_not_use_it(pytester):
    pytester.makeini("[pytest]\ntoolguard_registry = no_such_module:registry\n")
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest(*NO_XDIST).assert_outcomes(passed=1)


def test_load_registry_and_secrets_refuse_the_wrong_type(monkeypatch, tmp_path):
    (tmp_path / "specs_mod.py").write_text("registry = 3\nsecrets = {'a': 1}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SpecError, match="is a int, not a ToolRegistry"):
        load_registry("specs_mod:registry")
    with pytest.raises(SpecError, match="mapping of str to str"):
        load_secrets("specs_mod:secrets")
    assert load_registry("pytest_toolguard.tools:builtin_registry").get("read_text") is not None


# -- the summary line, and xdist ---------------------------------------------------

SUMMARY = re.compile(
    r"toolguard: (\d+) cassettes? and (\d+) cases? replayed, (\d+) interactions?, "
    r"(\d+) checks? passed, (\d+) failed"
)


def _summary(result):
    [line] = [line for line in result.outlines if SUMMARY.search(line)]
    return tuple(int(n) for n in SUMMARY.search(line).groups())


def _two_cassettes_and_two_cases(pytester, cassette_text):
    _write(pytester, "cassettes/one.yaml", cassette_text)
    _write(pytester, "cassettes/two.yaml", _edited(cassette_text, "code: OK", "code: TIMEOUT"))
    _write(pytester, "cases/a.yaml", CASE.format(name="a"))
    _write(pytester, "cases/b.yaml", CASE.format(name="b"))


def test_the_summary_counts_cassettes_cases_interactions_and_checks(pytester, cassette_text):
    _two_cassettes_and_two_cases(pytester, cassette_text)
    result = pytester.runpytest(*NO_XDIST, "--toolguard-replay")
    result.assert_outcomes(passed=3, failed=1)
    cassettes, cases, interactions, passed, failed = _summary(result)
    assert (cassettes, cases, interactions, failed) == (2, 2, 2 * len(CALLS) + 2 * 2, 1)
    assert passed > 50


def test_no_summary_without_the_flag(pytester):
    pytester.makepyfile(test_plain="def test_plain(): pass")
    result = pytester.runpytest(*NO_XDIST)
    assert not [line for line in result.outlines if line.startswith("toolguard:")]


def test_under_xdist_the_same_items_pass_and_the_controller_prints_the_totals(
    pytester, cassette_text
):
    _two_cassettes_and_two_cases(pytester, cassette_text)
    serial = pytester.runpytest(*NO_XDIST, "--toolguard-replay", "-rA")
    parallel = pytester.runpytest(
        "-p", "no:hypothesispytest", "--toolguard-replay", "-n", "2", "-rA"
    )
    parallel.assert_outcomes(passed=3, failed=1)

    def outcomes(result):
        return sorted(line for line in result.outlines if line.startswith(("PASSED", "FAILED")))

    assert outcomes(parallel) == outcomes(serial)
    assert _summary(parallel) == _summary(serial)
