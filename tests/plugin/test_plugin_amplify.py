"""``pytest --toolguard-amplify`` and the variants items of ``--toolguard-replay``:
the file written, the summary, a changed tool caught with the variant named."""

from __future__ import annotations

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.replay import record_session
from pytest_toolguard.tools import builtin_registry

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")

MUTATED_READ_TEXT = """
import pytest
from pytest_toolguard.registry import ToolRegistry
from pytest_toolguard.tools import builtin_registry


def read_text_flag_at_limit(ctx, path, max_chars=4000):
    content = ctx.workspace.read_text(path, max_bytes=ctx.max_read_bytes)
    return {
        "path": ctx.workspace.resolve(path),
        "content": content[:max_chars],
        "truncated": len(content) >= max_chars,
        "total_chars": len(content),
    }


@pytest.fixture(scope="session")
def toolguard_registry():
    specs = [
        spec.with_handler(read_text_flag_at_limit) if spec.name == "read_text" else spec
        for spec in builtin_registry()
    ]
    return ToolRegistry(specs)
"""


@pytest.fixture(scope="module")
def cassette_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("recorded")
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        Capabilities(allowed_risks=frozenset({Risk.READ})),
        SQLiteAuditStore(":memory:"),
    )
    path = base / "notes.yaml"
    with record_session(runtime, path):
        runtime.execute(ToolCall("call-1", "read_text", {"path": "notes.txt"}))
    return path.read_text()


def _amplified(pytester: pytest.Pytester, cassette_text: str) -> pytest.RunResult:
    pytester.mkdir("cassettes")
    (pytester.path / "cassettes" / "notes.yaml").write_text(cassette_text)
    return pytester.runpytest("--toolguard-amplify", *NO_XDIST)


def test_amplify_writes_the_variants_into_the_cassette_and_says_how_many_it_kept(
    pytester: pytest.Pytester, cassette_text: str
) -> None:
    result = _amplified(pytester, cassette_text)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*toolguard amplify: cassettes/notes.yaml: 21 variant(s) kept (6 refusal(s)*"]
    )
    assert "variants:" in (pytester.path / "cassettes" / "notes.yaml").read_text()


def test_replay_runs_the_variants_as_an_item_of_their_own(
    pytester: pytest.Pytester, cassette_text: str
) -> None:
    _amplified(pytester, cassette_text)
    result = pytester.runpytest("--toolguard-replay", "-v", *NO_XDIST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*notes.yaml::variants PASSED*", "toolguard variants: 21 replayed (6 refusals)*"]
    )


def test_a_tool_changed_off_the_recorded_path_fails_its_variant_by_name(
    pytester: pytest.Pytester, cassette_text: str
) -> None:
    _amplified(pytester, cassette_text)
    pytester.makeconftest(MUTATED_READ_TEXT)
    result = pytester.runpytest("--toolguard-replay", *NO_XDIST)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*interaction 1 (read_text), variant `max_chars = data.total_chars`: result.data"]
    )


def test_amplify_refuses_to_write_when_the_recorded_calls_replay_differently(
    pytester: pytest.Pytester, cassette_text: str
) -> None:
    pytester.makeconftest(MUTATED_READ_TEXT.replace("len(content) >= max_chars", "True"))
    result = _amplified(pytester, cassette_text)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*not amplified: the recording run differs*"])
    assert "variants:" not in (pytester.path / "cassettes" / "notes.yaml").read_text()


def test_a_bad_variant_cap_in_the_ini_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntoolguard_amplify_max_variants = read_text=many\n")
    result = pytester.runpytest("--toolguard-amplify", *NO_XDIST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*toolguard_amplify_max_variants*TOOL=N*"])
