"""The ``toolguard`` fixture: record modes, atomic and stable cassettes,
call-by-call playback, the marker, and cassette names."""

from __future__ import annotations

import pytest

from pytest_toolguard.replay import load
from pytest_toolguard.replay.naming import MAX_NAME_LENGTH, cassette_name, safe_name

# hypothesis's plugin re-imports hypothesis in every in-process run (~1.5 s).
QUIET = ("-p", "no:hypothesispytest")
NO_XDIST = ("-p", "no:xdist", *QUIET)

AGENT = """
import pytest
from pathlib import Path
from pytest_toolguard import ToolCall

CAPS = {{"allowed_risks": ["read", "write"], "write_roots": ["out"]}}

def call(runtime, number, tool, **arguments):
    return runtime.execute(ToolCall(call_id=f"c{{number}}", tool_name=tool, arguments=arguments))

@pytest.mark.toolguard(capabilities=CAPS{marker})
def test_session(toolguard):
    Path(toolguard.workspace.root, "notes.txt").write_text("hello\\n")
    assert call(toolguard, 1, "read_text", path="notes.txt").ok
    assert call(toolguard, 2, "write_file", path="out/a.txt", content={content!r}).ok
    {third}
    {last}
"""
THIRD = 'assert call(toolguard, 3, "read_text", path=".env").code.value == "FORBIDDEN_PATH"'
CASSETTE = "cassettes/test_agent/test_session.yaml"
NODEID = "test_agent.py::test_session"


def _agent(pytester, content="x\n", third=THIRD, last="pass", marker=""):
    pytester.makepyfile(
        test_agent=AGENT.format(content=content, third=third, last=last, marker=marker)
    )


def _run(pytester, *args):
    return pytester.runpytest(*NO_XDIST, *args)


def _recorded(pytester, **agent):
    _agent(pytester, **agent)
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(passed=1)
    return pytester.path / CASSETTE


def _leftovers(pytester):
    return sorted(p.name for p in (pytester.path / "cassettes").rglob("*") if p.suffix == ".tmp")


# -- record modes ---------------------------------------------------------------


def test_a_missing_cassette_in_mode_none_is_an_error_printing_the_record_command(pytester):
    _agent(pytester)
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert f"cassette {CASSETTE} does not exist and the record mode is 'none'" in text
    assert f"to record it: pytest --toolguard-record-mode=once {NODEID}" in text
    assert not (pytester.path / "cassettes").exists()


def test_once_records_a_missing_cassette_then_replays_it(pytester):
    path = _recorded(pytester)
    cassette = load(path)
    assert [i.call.tool_name for i in cassette.interactions] == [
        "read_text",
        "write_file",
        "read_text",
    ]
    assert cassette.recorded_by == f"pytest --toolguard-record-mode=rewrite {NODEID}"
    assert cassette.workspace.root == "/workspace"
    assert cassette.workspace.files == {"notes.txt": b"hello\n"}  # written before the first call
    _run(pytester).assert_outcomes(passed=1)


def test_rewriting_an_unchanged_session_keeps_the_file_byte_for_byte(pytester):
    path = _recorded(pytester)
    text = path.read_text()
    old = next(line for line in text.splitlines() if line.startswith("recorded_at:"))
    path.write_text(text.replace(old, "recorded_at: '2001-02-03T04:05:06+00:00'"))
    before = path.read_bytes()
    _run(pytester, "--toolguard-record-mode=rewrite").assert_outcomes(passed=1)
    assert path.read_bytes() == before


def test_rewrite_replaces_a_changed_session(pytester):
    path = _recorded(pytester)
    _agent(pytester, content="new\n")
    _run(pytester, "--toolguard-record-mode=rewrite").assert_outcomes(passed=1)
    assert load(path).final_files["out/a.txt"].content == b"new\n"
    assert _leftovers(pytester) == []


def test_rewrite_keeps_the_old_cassette_when_the_test_fails(pytester):
    path = _recorded(pytester)
    before = path.read_bytes()
    _agent(pytester, content="new\n", last="assert False")
    _run(pytester, "--toolguard-record-mode=rewrite").assert_outcomes(failed=1)
    assert path.read_bytes() == before
    assert _leftovers(pytester) == []


def test_once_writes_nothing_when_the_test_fails(pytester):
    _agent(pytester, last="assert False")
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(failed=1)
    assert not (pytester.path / CASSETTE).exists()


# -- playback ---------------------------------------------------------------------


def test_a_call_not_in_the_cassette_names_the_closest_recorded_call_and_the_command(pytester):
    _recorded(pytester)
    _agent(pytester, content="changed\n")
    result = _run(pytester)
    result.assert_outcomes(failed=1)  # no second report at teardown
    text = result.stdout.str()
    assert f"call 2 (write_file) is not in cassette {CASSETTE}" in text
    assert "closest recorded call: interaction 2 (write_file)" in text
    assert 'arguments.content: recorded "x\\n", made "changed\\n"' in text
    assert (
        f"to re-record this test's cassette: pytest --toolguard-record-mode=rewrite {NODEID}"
        in text
    )
    assert "tape.py" not in text  # the traceback stops at the test's line


def test_interactions_never_replayed_fail_the_test(pytester):
    _recorded(pytester)
    _agent(pytester, third="pass")
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    text = result.stdout.str()
    assert "interaction 3 (read_text): never replayed" in text
    assert f"to re-record this cassette: pytest --toolguard-record-mode=rewrite {NODEID}" in text


def test_a_changed_recorded_result_fails_the_test_with_a_report(pytester):
    path = _recorded(pytester)
    path.write_text(path.read_text().replace("code: FORBIDDEN_PATH", "code: PERMISSION_DENIED"))
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    text = result.stdout.str()
    assert "interaction 3 (read_text): result.code" in text
    assert 'recorded: "PERMISSION_DENIED"' in text and 'replayed: "FORBIDDEN_PATH"' in text


def test_a_test_failing_early_reports_its_own_failure_only(pytester):
    _recorded(pytester)
    _agent(pytester, third="assert False, 'stopped early'")
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    assert "never replayed" not in result.stdout.str()


def test_a_mismatch_the_test_swallows_still_fails_it(pytester):
    _recorded(pytester)
    swallow = (
        "import pytest; from pytest_toolguard.replay.report import CallNotInCassette\n"
        "    with pytest.raises(CallNotInCassette): call(toolguard, 9, 'list_files')"
    )
    _agent(pytester, last=swallow)
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    assert "call 4 (list_files): not in the cassette" in result.stdout.str()


def test_volatile_fields_from_the_marker_are_not_compared(pytester):
    path = _recorded(pytester)
    path.write_text(path.read_text().replace("total_chars: 6", "total_chars: 99"))
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    assert "interaction 1 (read_text): result.data" in result.stdout.str()
    _agent(pytester, marker=", volatile=['data.total_chars']")
    _run(pytester).assert_outcomes(passed=1)


def test_a_bad_cassette_fails_the_test_naming_the_file_and_the_field(pytester):
    path = _recorded(pytester)
    path.write_text(path.read_text().replace("kind: cassette", "kind: tape"))
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert f"\n{CASSETTE}: $.kind: 'tape' is not one of" in text
    assert f"to re-record it: pytest --toolguard-record-mode=rewrite {NODEID}" in text
    assert "Traceback" not in text


def test_playback_runs_in_the_recorded_world(pytester):
    """Fake filesystem at the recorded root, clock frozen at the recorded time."""
    path = _recorded(pytester)
    recorded_at = load(path).recorded_at
    _agent(
        pytester,
        last="import datetime; "
        "assert toolguard.workspace.root == '/workspace'; "
        f"assert datetime.datetime.now(datetime.timezone.utc).isoformat() == {recorded_at!r}",
    )
    _run(pytester).assert_outcomes(passed=1)


SET_UP = """
import pytest
from pathlib import Path
from pytest_toolguard import ToolCall

@pytest.mark.toolguard(capabilities={{"allowed_risks": ["read", "write"], "write_roots": ["src"]}})
def test_edit(toolguard):
    root = Path(toolguard.workspace.root)
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text({content!r})
    (root / "src" / "pkg").mkdir()
    (root / "src" / "link.py").symlink_to("a.py")
    for number, (tool, arguments) in enumerate([
        ("read_text", {{"path": "src/link.py"}}),
        ("write_file", {{"path": "src/b.py", "content": "y = 2\\n"}}),
        ("list_files", {{"path": "src", "recursive": True}}),
    ]):
        call = ToolCall(call_id=str(number), tool_name=tool, arguments=arguments)
        result = toolguard.execute(call)
        assert result.ok, result.message
"""


@pytest.mark.parametrize("mode", ["none", "once", "rewrite"])
def test_a_recorded_test_with_set_up_code_passes_unchanged_in_every_record_mode(pytester, mode):
    """The test owns its set-up: playback starts from an empty workspace, so
    ``mkdir()`` does not meet the recorded directory."""
    pytester.makepyfile(test_setup=SET_UP.format(content="x = 1\n"))
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(passed=1)
    _run(pytester, f"--toolguard-record-mode={mode}").assert_outcomes(passed=1)
    _run(pytester, f"--toolguard-record-mode={mode}").assert_outcomes(passed=1)


def test_a_set_up_that_differs_from_the_recorded_start_fails_naming_the_file(pytester):
    pytester.makepyfile(test_setup=SET_UP.format(content="x = 1\n"))
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(passed=1)
    pytester.makepyfile(test_setup=SET_UP.format(content="x = 100\n"))
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    text = result.stdout.str()
    assert "workspace before the first call: src/a.py" in text
    assert "Traceback" not in text


def test_a_standalone_replay_of_a_fixture_cassette_starts_from_the_recorded_state(pytester):
    pytester.makepyfile(test_setup=SET_UP.format(content="x = 1\n"))
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(passed=1)
    result = _run(pytester, "--toolguard-replay", "cassettes")
    result.assert_outcomes(passed=1)


def test_secrets_never_reach_the_cassette_and_the_real_ones_still_match(pytester):
    secrets = [
        "Bearer abcdefghijklmnopqrstuvwxyz123456",
        "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "hunter2hunter2",
    ]
    content = (
        f"Authorization: {secrets[0]}\ntoken {secrets[1]}\n"
        f"db https://admin:{secrets[2]}@db.example.com/x\n"
    )
    path = _recorded(pytester, content=content)
    raw = path.read_bytes()
    assert not [secret for secret in secrets if secret.encode() in raw]
    assert b"<redacted:" in raw
    _run(pytester).assert_outcomes(passed=1)


# -- the marker and the record mode's sources -----------------------------------------

PRECEDENCE = """
import pytest

@pytest.mark.toolguard(record_mode="none")
def test_marked(toolguard):
    pass

def test_unmarked(toolguard):
    pass
"""


def test_the_record_mode_comes_from_the_option_then_the_marker_then_the_ini(pytester):
    pytester.makeini("[pytest]\ntoolguard_record_mode = once\n")
    pytester.makepyfile(test_modes=PRECEDENCE)
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)  # ini records unmarked; marker says none
    assert "test_modes.py::test_marked - Failed: cassette" in result.stdout.str()
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(passed=2)
    assert (pytester.path / "cassettes/test_modes/test_marked.yaml").is_file()


def test_the_marker_names_the_cassette(pytester):
    pytester.makepyfile(
        test_named="""
        import pytest

        @pytest.mark.toolguard(cassette="shared/custom")
        def test_named(toolguard):
            pass
        """
    )
    _run(pytester, "--toolguard-record-mode=once").assert_outcomes(passed=1)
    assert (pytester.path / "cassettes/shared/custom.yaml").is_file()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ('casette="x"', "unknown argument 'casette'; known arguments: cassette, "),
        ('"x"', "takes keyword arguments only"),
        ('record_mode="sometimes"', "unknown record mode 'sometimes'"),
        ('capabilities={"allowed_risk": ["read"]}', "capabilities=: "),
        ('cassette="../outside"', "must be a relative path inside the cassette directory"),
        ("volatile=3", "volatile= must be a list of field paths"),
    ],
)
def test_a_bad_marker_argument_fails_the_test_naming_it(pytester, arguments, message):
    pytester.makepyfile(
        test_marked=f"""
        import pytest

        @pytest.mark.toolguard({arguments})
        def test_marked():
            pass
        """
    )
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    assert "test_marked.py::test_marked - Failed: @pytest.mark.toolguard: " in result.stdout.str()
    assert message in result.stdout.str()


def test_a_bad_marker_fails_cleanly_under_xdist(pytester):
    pytester.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.toolguard(casette="x")
        def test_marked():
            pass

        def test_other():
            pass
        """
    )
    result = pytester.runpytest(*QUIET, "-n", "2")
    result.assert_outcomes(passed=1, errors=1)
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_bad_record_mode_in_the_ini_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\ntoolguard_record_mode = always\n")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini toolguard_record_mode: unknown record mode 'always'" in result.stderr.str()


# -- xdist -----------------------------------------------------------------------------

MANY = """
import pytest
from pytest_toolguard import ToolCall

@pytest.mark.parametrize("n", range(4))
def test_many(toolguard, n):
    toolguard.execute(ToolCall(call_id=f"c{n}", tool_name="list_files"))
"""


def test_recording_under_xdist_writes_each_cassette_once_and_stably(pytester):
    pytester.makepyfile(test_many=MANY)
    pytester.runpytest(*QUIET, "-n", "2", "--toolguard-record-mode=once").assert_outcomes(passed=4)
    folder = pytester.path / "cassettes/test_many"
    files = sorted(folder.iterdir())
    assert [p.name for p in files] == [f"test_many_{n}_.yaml" for n in range(4)]
    assert [load(p).interactions[0].call.call_id for p in files] == [f"c{n}" for n in range(4)]
    before = [p.read_bytes() for p in files]
    pytester.runpytest(*QUIET, "-n", "2", "--toolguard-record-mode=rewrite").assert_outcomes(
        passed=4
    )
    assert [p.read_bytes() for p in sorted(folder.iterdir())] == before


# -- names ------------------------------------------------------------------------------


def test_a_cassette_is_named_from_the_module_path_and_the_test():
    name = cassette_name("tests/unit/test_agent.py::TestEdits::test_write[big/one]")
    assert name.as_posix() == "tests/unit/test_agent/TestEdits.test_write_big_one_.yaml"


def test_unsafe_characters_are_replaced_and_a_leading_dot_too():
    assert safe_name("a b/c:d*e?é") == "a_b_c_d_e__"
    assert safe_name("..hidden") == "_.hidden"


def test_long_names_are_shortened_with_a_hash_that_keeps_them_apart():
    first, second = safe_name("t" * 300 + "1"), safe_name("t" * 300 + "2")
    assert len(first) == len(second) == MAX_NAME_LENGTH
    assert first != second and first.startswith("t" * 50)
    assert len(cassette_name(f"test_x.py::test_{'y' * 300}").name) == MAX_NAME_LENGTH
