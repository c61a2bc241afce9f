"""A hostile cassette, case or transcript costs no more than its size: every
document over a limit is refused with one line naming the limit and the
file, never expanded, under ``load``, ``pytest --toolguard-replay`` and the
``toolguard`` command.

Each load runs in a child process held to 1 GiB of address space and a
bound of CPU time (``RLIMIT_AS``, ``RLIMIT_CPU``): a document that expands
dies there (MemoryError, SIGXCPU) instead of passing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import python_path

from pytest_toolguard import documents
from pytest_toolguard.bridges.transcripts.claude_code import read_session
from pytest_toolguard.bridges.transcripts.mcp import read_jsonrpc_log
from pytest_toolguard.bridges.transcripts.openai import read_chat, read_responses
from pytest_toolguard.replay import cassette as cassette_module
from pytest_toolguard.replay.cassette import CassetteError, load, loads

ROOT = Path(__file__).resolve().parents[2]
MEMORY = 1 << 30
CPU_SECONDS = 30

# -- the documents ---------------------------------------------------------------

HEAD = """\
format_version: 1
kind: case
session:
  capabilities: {allowed_risks: [read]}
workspace:
  files:
    notes.txt: hello
"""


def case(arguments: str = "{path: notes.txt}", *, extra: str = "") -> str:
    """A valid case of one read_text call, ``arguments`` as YAML flow text."""
    return (
        HEAD
        + extra
        + (
            f"interactions:\n- call: {{tool_name: read_text, arguments: {arguments}}}\n"
            "  result: {ok: true}\n"
        )
    )


def with_recipes(*recipes: str) -> str:
    """A case whose one interaction has a variant per recipe (YAML flow)."""
    variants = "".join(
        f"  - {{name: v{n}, kind: size, arguments: {{path: notes.txt}}, "
        f"files: {{notes.txt: {recipe}}}, result: {{ok: true}}, audit: {{}}}}\n"
        for n, recipe in enumerate(recipes)
    )
    return case() + "  variants:\n" + variants


def billion_laughs() -> str:
    """Nine levels of nine aliases inside a call's arguments: 9**9 strings."""
    levels = ['l0: &l0 "lol"'] + [
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)
    ]
    return (
        HEAD
        + "interactions:\n- call:\n    tool_name: read_text\n    arguments:\n"
        + "      path: notes.txt\n"
        + "".join(f"      {line}\n" for line in levels)
    )


def alias_to_a_large_string() -> str:
    big = "x" * 100_000
    return case(f"{{path: &s {big}, again: [{', '.join(['*s'] * 2000)}]}}")


def deep_block_mapping() -> str:
    nested = "".join("  " * (depth + 3) + f"k{depth}:\n" for depth in range(150))
    return (
        HEAD
        + "interactions:\n- call:\n    tool_name: read_text\n    arguments:\n"
        + "      path: notes.txt\n      deep:\n"
        + nested
        + "  " * 153
        + "end\n"
    )


def json_case(arguments: str) -> str:
    return (
        '{"format_version": 1, "kind": "case", "session": {}, "interactions": ['
        f'{{"call": {{"tool_name": "read_text", "arguments": {arguments}}}, '
        '"result": {"ok": true}}]}'
    )


def deep(depth: int, opening: str = "[", closing: str = "]") -> str:
    return opening * depth + closing * depth


MiB = 1 << 20

# name -> (the document's text, or None for a sparse file of its size; the
# limit its refusal names; overrides of documents' limits for the child)
Hostile = tuple[Callable[[], str | None], str, dict[str, int]]
HOSTILE: dict[str, Hostile] = {
    "billion laughs, nested aliases": (billion_laughs, "alias", {}),
    "alias to a large string": (alias_to_a_large_string, "alias", {}),
    "recursive alias": (lambda: case("&a {path: notes.txt, self: *a}"), "alias", {}),
    "merge key of an alias": (
        lambda: case("{path: notes.txt, <<: *m}", extra="defaults: &m {x: 1}\n"),
        "alias",
        {},
    ),
    "deep flow sequence": (
        lambda: case(f"{{path: notes.txt, d: {deep(100_000)}}}"),
        "MAX_DEPTH",
        {},
    ),
    "deep flow mapping": (
        lambda: case("{path: notes.txt, d: " + "{a: " * 5000 + "1" + "}" * 5000 + "}"),
        "MAX_DEPTH",
        {},
    ),
    "deep block mapping": (deep_block_mapping, "MAX_DEPTH", {}),
    "just over the depth limit": (
        lambda: case(f"{{path: notes.txt, d: {deep(documents.MAX_DEPTH - 4)}}}"),
        "MAX_DEPTH",
        {},
    ),
    "huge repeat": (
        lambda: with_recipes("{repeat: xxxxxxxxxx, times: 4000000000}"),
        "MAX_GENERATED_BYTES",
        {},
    ),
    "long repeat text times a big count": (
        lambda: with_recipes(f"{{repeat: {'y' * MiB}, times: 65}}"),
        "MAX_GENERATED_BYTES",
        {},
    ),
    "multi-byte repeat text": (
        lambda: with_recipes(f"{{repeat: '\u00e9', times: {cassette_module.MAX_GENERATED_BYTES}}}"),
        "MAX_GENERATED_BYTES",
        {},
    ),
    "recipes adding up past the total": (
        lambda: with_recipes(*[f"{{repeat: z, times: {60 * MiB}}}"] * 20),
        "MAX_GENERATED_TOTAL",
        {},
    ),
    "repeat nested in repeat": (
        lambda: with_recipes("{repeat: {repeat: x, times: 1000000000}, times: 1000000000}"),
        "$.interactions[0].variants[0].files",
        {},
    ),
    "huge decimal int": (
        lambda: case(f"{{path: notes.txt, n: {'9' * 100_000}}}"),
        "MAX_NUMBER_CHARS",
        {},
    ),
    "base-60 int": (
        lambda: case("{path: notes.txt, n: 1" + ":59" * 100_000 + "}"),
        "MAX_NUMBER_CHARS",
        {},
    ),
    "explicit int tag on a quoted text": (
        lambda: case(f"{{path: notes.txt, n: !!int '{'7' * 50_000}'}}"),
        "MAX_NUMBER_CHARS",
        {},
    ),
    "long string": (
        lambda: case(f"{{path: notes.txt, s: {'s' * (2 * MiB)}}}"),
        "MAX_DOCUMENT_BYTES",
        {"MAX_DOCUMENT_BYTES": MiB},
    ),
    "too many values": (
        lambda: case(f"{{path: notes.txt, l: [{', '.join(['0'] * 5000)}]}}"),
        "MAX_YAML_NODES",
        {"MAX_YAML_NODES": 1000},
    ),
    "a JSON cassette nested deeply": (
        lambda: json_case('{"path": "notes.txt", "d": ' + deep(100_000) + "}"),
        "MAX_DEPTH",
        {},
    ),
    "a JSON cassette just over the depth limit": (
        lambda: json_case('{"path": "notes.txt", "d": ' + deep(documents.MAX_DEPTH - 4) + "}"),
        "MAX_DEPTH",
        {},
    ),
    "a JSON cassette with a huge int": (
        lambda: json_case('{"path": "notes.txt", "n": ' + "8" * 100_000 + "}"),
        "MAX_NUMBER_CHARS",
        {},
    ),
    "a very large file": (lambda: None, "MAX_DOCUMENT_BYTES", {}),
}

CHILD = """\
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))
from pytest_toolguard import documents
from pytest_toolguard.replay.cassette import CassetteError, load
for name, value in json.loads(sys.argv[2]).items():
    setattr(documents, name, value)
try:
    cassette = load(sys.argv[1])
except CassetteError as exc:
    print(json.dumps({{"refused": str(exc)}}))
else:
    print(json.dumps({{"loaded": len(cassette.interactions)}}))
"""


def _bounded() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def load_in_a_bounded_child(path: Path, overrides: dict[str, int] | None = None) -> dict[str, str]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD.format(memory=MEMORY, cpu=CPU_SECONDS),
            str(path),
            json.dumps(overrides or {}),
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": python_path(ROOT),
        },
        check=False,
    )
    assert done.returncode == 0, f"the load died (signal or error): {done.stderr[-2000:]}"
    outcome: dict[str, str] = json.loads(done.stdout)
    return outcome


def write_hostile(tmp_path: Path, name: str) -> Path:
    make = HOSTILE[name][0]
    text = make()
    path = tmp_path / "hostile.yaml"
    if text is None:
        with open(path, "wb") as sparse:
            sparse.truncate(documents.MAX_DOCUMENT_BYTES + 1)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def assert_one_line_naming(message: str, path: Path | str, limit: str) -> None:
    assert "\n" not in message.strip(), message[:500]
    assert str(path) in message, message[:500]
    assert limit in message, message[:500]
    assert len(message) < 1000, message[:500]


# -- load ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_document_is_refused_within_bounded_memory_and_time(
    tmp_path: Path, name: str
) -> None:
    path = write_hostile(tmp_path, name)
    outcome = load_in_a_bounded_child(path, HOSTILE[name][2])
    assert "refused" in outcome, outcome
    assert_one_line_naming(outcome["refused"], path, HOSTILE[name][1])


@pytest.mark.parametrize(
    "text",
    [
        case(),
        case(f"{{path: notes.txt, d: {deep(documents.MAX_DEPTH - 5)}}}"),
        case(f"{{path: notes.txt, n: {'9' * documents.MAX_NUMBER_CHARS}}}"),
        case("&unused {path: notes.txt}"),
        case("{path: notes.txt, <<: {x: 1}}"),
        with_recipes(f"{{repeat: x, times: {cassette_module.MAX_GENERATED_BYTES}}}"),
        json_case('{"path": "notes.txt", "d": ' + deep(documents.MAX_DEPTH - 5) + "}"),
    ],
    ids=[
        "plain",
        "exactly as deep as the limit",
        "long number within",
        "anchor unused",
        "inline merge",
        "recipe at the limit",
        "JSON exactly as deep as the limit",
    ],
)
def test_a_document_within_the_limits_loads_in_the_same_bounds(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fine.yaml"
    path.write_text(text, encoding="utf-8")
    assert load_in_a_bounded_child(path) == {"loaded": 1}


def test_the_schema_bounds_times_by_the_same_limit() -> None:
    recipe = cassette_module.schema()["$defs"]["generated_content"]["properties"]["times"]
    assert recipe["maximum"] == cassette_module.MAX_GENERATED_BYTES


def test_loads_of_a_text_longer_than_the_limit_is_refused_before_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", 1000)
    with pytest.raises(CassetteError) as refused:
        loads(case(f"{{path: notes.txt, s: {'s' * 2000}}}"), source="long.yaml")
    assert_one_line_naming(str(refused.value), "long.yaml", "MAX_DOCUMENT_BYTES")


def test_a_file_that_never_ends_is_read_no_further_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", 4096)
    with pytest.raises(CassetteError) as refused:
        load("/dev/zero")
    assert_one_line_naming(str(refused.value), "/dev/zero", "MAX_DOCUMENT_BYTES")


# -- transcripts ------------------------------------------------------------------

GOOD_CLAUDE_LINE = json.dumps(
    {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}}
            ]
        },
    }
)
DEEP_CALL = {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}


def deep_value(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("reader", "text", "where"),
    [
        (read_session, GOOD_CLAUDE_LINE + "\n" + deep(100_000) + "\n", "line 2"),
        (read_session, GOOD_CLAUDE_LINE + "\n" + deep(documents.MAX_DEPTH + 1) + "\n", "line 2"),
        (
            read_jsonrpc_log,
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "f", '
            '"arguments": {}}}\n{"jsonrpc": "2.0", "id": 2, "params": ' + deep(5000) + "}\n",
            "line 2",
        ),
        (
            read_responses,
            json.dumps(
                [
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {**DEEP_CALL, "extra": deep_value(documents.MAX_DEPTH + 1)},
                ]
            ),
            "item 2",
        ),
        (
            read_chat,
            json.dumps(
                [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            },
                            {
                                "id": "c2",
                                "type": "function",
                                "function": {
                                    "name": "g",
                                    "arguments": deep(documents.MAX_DEPTH + 1),
                                },
                            },
                        ],
                    }
                ]
            ),
            "message 1",
        ),
    ],
    ids=[
        "claude-code very deep line",
        "claude-code line just over",
        "mcp deep line",
        "openai-responses deep item",
        "openai-chat deep arguments",
    ],
)
def test_a_transcript_record_nested_too_deeply_is_a_problem_naming_the_limit_and_the_rest_is_kept(
    reader: Callable[[str], object], text: str, where: str
) -> None:
    transcript = reader(text)
    problems = [str(problem) for problem in transcript.problems]  # type: ignore[attr-defined]
    assert any(p.startswith(where) and "MAX_DEPTH" in p for p in problems), problems
    assert len(transcript.calls) == 1  # type: ignore[attr-defined]


# -- the toolguard command ------------------------------------------------------------


def toolguard_bounded(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_toolguard", *arguments],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": python_path(ROOT),
        },
        preexec_fn=_bounded,
        check=False,
    )


@pytest.mark.parametrize("action", ["check", "upgrade"])
@pytest.mark.parametrize(
    "name",
    [
        "billion laughs, nested aliases",
        "huge repeat",
        "a JSON cassette nested deeply",
        "huge decimal int",
        "deep flow sequence",
        "a very large file",
    ],
)
def test_toolguard_cassette_refuses_a_hostile_file_with_one_line(
    tmp_path: Path, name: str, action: str
) -> None:
    path = write_hostile(tmp_path, name)
    before = path.stat()
    done = toolguard_bounded("cassette", action, str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert_one_line_naming(done.stderr, path, HOSTILE[name][1])
    assert path.stat().st_mtime_ns == before.st_mtime_ns  # never rewritten


def import_arguments(tmp_path: Path, path: Path) -> list[str]:
    (tmp_path / "ws").mkdir()
    return [
        "import",
        "claude-code",
        str(path),
        "--registry",
        "pytest_toolguard.bridges.definitions.claude_code:claude_code_registry",
        "--workspace",
        str(tmp_path / "ws"),
        "-o",
        str(tmp_path / "out.yaml"),
    ]


def test_toolguard_import_refuses_a_transcript_over_the_size_limit_with_one_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "session.jsonl"
    with open(path, "wb") as sparse:
        sparse.truncate(documents.MAX_DOCUMENT_BYTES + 1)
    done = toolguard_bounded(*import_arguments(tmp_path, path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert_one_line_naming(done.stderr, path, "MAX_DOCUMENT_BYTES")
    assert not (tmp_path / "out.yaml").exists()


def test_toolguard_import_of_deep_lines_only_names_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text((deep(100_000) + "\n") * 3)
    done = toolguard_bounded(*import_arguments(tmp_path, path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert_one_line_naming(done.stderr, path, "MAX_DEPTH")


# -- pytest --toolguard-replay ------------------------------------------------------

REPLAYED = [
    "billion laughs, nested aliases",
    "huge repeat",
    "a JSON cassette nested deeply",
    "base-60 int",
    "recursive alias",
]


def test_replay_fails_each_hostile_file_with_one_line_naming_its_limit(pytester) -> None:
    (pytester.path / "cases").mkdir()
    for number, name in enumerate(REPLAYED):
        text = HOSTILE[name][0]()
        assert text is not None
        (pytester.path / "cases" / f"h{number}.yaml").write_text(text, encoding="utf-8")
    result = pytester.runpytest("-p", "no:xdist", "-p", "no:hypothesispytest", "--toolguard-replay")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= len(REPLAYED) and "passed" not in outcomes, outcomes
    text = result.stdout.str()
    assert "Traceback" not in text and "pytest_toolguard/" not in text
    for number, name in enumerate(REPLAYED):
        lines = [line for line in text.splitlines() if line.startswith(f"cases/h{number}.yaml: ")]
        assert lines, text[-3000:]
        assert HOSTILE[name][1] in lines[0]
