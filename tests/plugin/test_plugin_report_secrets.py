"""No report prints a real secret of ``toolguard_secrets``.

Replay sends the real value in place of a placeholder, so a hostile case
(in a pull request, say) can make a tool put it in a file, a result, an
error, a file name or a URL, and expect something else: the failure then
shows what replay got. Every such report, whatever its format (terminal,
``-rA``, junit XML, the fault matrix's Markdown/JSON/HTML, the fuzz
report) and whatever made it (``--toolguard-replay``, the ``toolguard``
fixture's playback, a test's own assertion), must show the placeholder
instead, in every form the value takes on the way (JSON-escaped,
URL-encoded, cut into lines by a diff).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote_plus

import pytest

# Loaded here, so pytester's in-process runs share one copy of the
# cassette loader (a run that imported it first would leave a half one).
import pytest_toolguard.faults
import pytest_toolguard.fuzz
import pytest_toolguard.replay  # noqa: F401

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")

SECRET = "Sup3r-S3cret-Value-9f2c"
QUOTED = 'quo"te\\back-S3cret-77'
MULTILINE = "first-line-of-a-S3cret\nsecond-line-of-a-S3cret"
SECRETS = {"api_key": SECRET, "quoted_key": QUOTED, "pem_key": MULTILINE}

TOOLS = f"""\
from urllib.parse import quote_plus

from pytest_toolguard import Risk, ToolRegistry, tool

SECRETS = {SECRETS!r}


@tool(input_schema={{"type": "object"}}, risk=Risk.WRITE)
def save(ctx, path, content):
    ctx.workspace.write_text(path, content)
    return {{"written": content}}


@tool(input_schema={{"type": "object"}}, risk=Risk.READ)
def echo(ctx, text):
    return {{"text": text, "url": "https://api.example/?q=" + quote_plus(text)}}


@tool(input_schema={{"type": "object"}}, risk=Risk.READ)
def fail(ctx, text):
    raise ValueError("the service said no to " + text)


registry = ToolRegistry([save, echo, fail])
secrets = SECRETS
"""

HEAD = """\
format_version: 1
kind: case
session:
  capabilities: {allowed_risks: [read, write], write_roots: ["."]}
"""

# Each case expects something else than what replay gets with the real secret.
CASES = {
    "file-content": """
interactions:
  - call: {tool_name: save, arguments: {path: out.txt, content: "note <redacted:api_key>"}}
    result: {ok: true, code: OK}
final_files:
  out.txt: "other"
""",
    "result-data": """
interactions:
  - call: {tool_name: save, arguments: {path: o.txt, content: "<redacted:api_key>"}}
    result: {ok: true, code: OK, data: {written: other}}
""",
    "error-message": """
interactions:
  - call: {tool_name: fail, arguments: {text: "<redacted:api_key>"}}
    result: {ok: true, code: OK}
""",
    "message-contains": """
interactions:
  - call: {tool_name: fail, arguments: {text: "<redacted:api_key>"}}
    result: {ok: false, code: EXECUTION_ERROR, message_contains: "nothing like it"}
""",
    "file-name": """
interactions:
  - call: {tool_name: save, arguments: {path: "<redacted:api_key>.txt", content: "x"}}
    result: {ok: true, code: OK}
final_files_exact: true
final_files: {}
""",
    "multi-line-secret-in-a-file": """
interactions:
  - call: {tool_name: save, arguments: {path: key.pem, content: "<redacted:pem_key>"}}
    result: {ok: true, code: OK}
final_files:
  key.pem: "a\\nb\\n"
""",
    "json-escaped-secret": """
interactions:
  - call: {tool_name: echo, arguments: {text: "<redacted:quoted_key>"}}
    result: {ok: true, code: OK, data: {text: other, url: other}}
""",
    "url-encoded-secret": """
interactions:
  - call: {tool_name: echo, arguments: {text: "<redacted:api_key> and more"}}
    result: {ok: true, code: OK, data: {text: other, url: other}}
""",
}


def forms(value: str) -> set[str]:
    """How a report could spell ``value``: as it is, JSON-escaped, URL-encoded,
    and each line of a multi-line one."""
    found = {value, json.dumps(value)[1:-1], quote_plus(value)}
    found.update(line for line in value.splitlines() if len(line) >= 8)
    return found


def leaked(result: pytest.RunResult, *files: Path) -> list[str]:
    """Each form of each secret found in the run's output or in ``files``."""
    texts = [result.stdout.str(), result.stderr.str()]
    texts += [path.read_text(encoding="utf-8") for path in files]
    return sorted(
        {
            form
            for value in SECRETS.values()
            for form in forms(value)
            for text in texts
            if form in text
        }
    )


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mytools=TOOLS)
    pytester.makeini(
        "[pytest]\npythonpath = .\ntoolguard_registry = mytools:registry\n"
        "toolguard_secrets = mytools:secrets\n"
    )
    return pytester


def _case(project: pytest.Pytester, name: str) -> None:
    path = project.path / "cases" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(HEAD + CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failing_replay_never_prints_a_real_secret(project, name):
    _case(project, name)
    result = project.runpytest(
        *NO_XDIST, "--toolguard-replay", "-rA", "-vv", "--junitxml=out/junit.xml"
    )
    result.assert_outcomes(failed=1)
    assert leaked(result, project.path / "out" / "junit.xml") == []
    assert "<redacted:" in result.stdout.str()  # the difference is still shown


@pytest.mark.parametrize("report", ["matrix.md", "matrix.json", "matrix.html"])
def test_the_fault_matrix_reports_never_hold_a_real_secret(project, report):
    for name in ("file-content", "error-message", "json-escaped-secret"):
        _case(project, name)
    result = project.runpytest(
        *NO_XDIST,
        "--toolguard-faults=handler_exception,duplicate_submission,secret_in_payload",
        f"--toolguard-report=out/{report}",
        "--junitxml=out/junit.xml",
    )
    assert (project.path / "out" / report).is_file()
    assert leaked(result, project.path / "out" / report, project.path / "out" / "junit.xml") == []


PLAYBACK_TEST = """\
import pytest
from pytest_toolguard import Capabilities, Risk, ToolCall
from mytools import SECRETS

pytestmark = pytest.mark.toolguard(
    capabilities=Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
)


def test_session(toolguard, record_property):
    record_property("api_key", SECRETS["api_key"])
    result = toolguard.execute(
        ToolCall(call_id="c1", tool_name="save",
                 arguments={"path": "out.txt", "content": "note " + SECRETS["api_key"]})
    )
    %s
"""

PLAYBACK_BODIES = {
    # the recorded session, then played back: a test's own failing assertion
    "assertion": 'assert result.data == {"written": "something else"}',
    # a call the cassette does not hold: the test's arguments are shown
    "call-not-in-cassette": (
        'toolguard.execute(ToolCall(call_id="c2", tool_name="echo",'
        ' arguments={"text": SECRETS["api_key"]}))'
    ),
}


@pytest.mark.parametrize("body", sorted(PLAYBACK_BODIES))
def test_fixture_playback_never_prints_a_real_secret(project, body):
    project.makepyfile(test_it=PLAYBACK_TEST % "assert result.ok")
    project.runpytest(*NO_XDIST, "--toolguard-record-mode=rewrite").assert_outcomes(passed=1)
    cassette = project.path / "cassettes" / "test_it" / "test_session.yaml"
    assert SECRET not in cassette.read_text()  # recorded as its placeholder
    project.makepyfile(test_it=PLAYBACK_TEST % PLAYBACK_BODIES[body])
    result = project.runpytest(
        *NO_XDIST, "--toolguard-record-mode=none", "-rA", "--junitxml=out/junit.xml"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert leaked(result, project.path / "out" / "junit.xml") == []


def test_fixture_playback_reports_a_file_holding_the_secret_by_placeholder(project):
    project.makepyfile(test_it=PLAYBACK_TEST % "assert result.ok")
    project.runpytest(*NO_XDIST, "--toolguard-record-mode=rewrite").assert_outcomes(passed=1)
    cassette = project.path / "cassettes" / "test_it" / "test_session.yaml"
    # A hostile edit: the recorded file content and data are something else.
    text = cassette.read_text()
    assert "note <redacted:api_key>" in text
    text = re.sub(r"(written|out\.txt): note <redacted:api_key>", r"\1: other", text)
    cassette.write_text(text)
    project.makepyfile(test_it=PLAYBACK_TEST % "pass")
    result = project.runpytest(*NO_XDIST, "--toolguard-record-mode=none", "-rA")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert leaked(result) == []
    assert "<redacted:api_key>" in result.stdout.str()


FUZZ_TOOLS = """\
from pytest_toolguard import Risk, ToolRegistry, tool

SECRET = %r


@tool(input_schema={"type": "object", "properties": {"n": {"type": "integer"}}}, risk=Risk.READ)
def leaky(ctx, n=0):
    # A tool that breaks and says so with a credential it holds.
    raise SystemExit("cannot connect with " + SECRET)


registry = ToolRegistry([leaky])
secrets = {"api_key": SECRET}
"""


def test_the_fuzz_report_never_prints_a_real_secret(pytester):
    pytester.makepyfile(fuzztools=FUZZ_TOOLS % SECRET)
    pytester.makeini(
        "[pytest]\npythonpath = .\ntoolguard_registry = fuzztools:registry\n"
        "toolguard_secrets = fuzztools:secrets\n"
    )
    result = pytester.runpytest(
        *NO_XDIST,
        "--toolguard-fuzz",
        "--toolguard-fuzz-examples=5",
        "-rA",
        "--junitxml=out/junit.xml",
    )
    result.assert_outcomes(failed=1)
    assert leaked(result, pytester.path / "out" / "junit.xml") == []
