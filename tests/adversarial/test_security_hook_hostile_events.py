"""``toolguard hook`` never fails open: whatever arrives on its stdin, it
answers (exit 0 with a decision) or blocks (exit 2 with one line on
stderr), never exit 1 with a traceback, which Claude Code reads as "go
ahead".

A hand table covers each field of an event nested deep, holding a lone
surrogate, of the wrong type, huge or missing, and stdin that is not JSON,
not UTF-8 or empty; Hypothesis (derandomized) then sends events built from
hostile pieces. Each goes through the real entry point (``main``, with a
cassette configured, as the one that crashed did); a few go through the
``toolguard`` process itself, to check the exit status Claude Code sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import hook_in_process, python_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_toolguard import CallState, SQLiteAuditStore
from pytest_toolguard.cli import USAGE_ERROR

ROOT = Path(__file__).parents[2]
SESSION = "hostile-session"
COMMANDS = ("pre-tool-use", "post-tool-use", "stop")
SURROGATES = ("\ud800", "\udfff", "a\udc80b")


def make_project(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "toolguard.yaml").write_text(
        yaml.safe_dump(
            {
                "audit": ".toolguard/audit.db",
                "cassette": "cassettes/{session_id}.yaml",
                "capabilities": {"allowed_risks": ["read", "write"], "write_roots": ["."]},
            }
        )
    )
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


def event(project: Path, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session_id": SESSION,
        "transcript_path": str(project / "t.jsonl"),
        "cwd": str(project),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(project / "src" / "new.py"), "content": "y = 2\n"},
        "tool_use_id": "toolu_hostile",
    }
    body.update(fields)
    return {key: value for key, value in body.items() if value is not MISSING}


MISSING: Any = object()


def nested(depth: int, leaf: Any = "x") -> str:
    """JSON text of an object nested ``depth`` deep (built as text: a
    Python value that deep could not even be dumped)."""
    return '{"a":' * depth + json.dumps(leaf) + "}" * depth


def assert_answered_or_blocked(command: str, status: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "Traceback" not in out
    assert status in (0, USAGE_ERROR), (status, err)
    if status == USAGE_ERROR:
        assert out == ""
        assert err.startswith("toolguard: ") and err.count("\n") == 1, err
        return
    assert err == ""
    if command == "pre-tool-use":
        decision = json.loads(out)["hookSpecificOutput"]["permissionDecision"]
        assert decision in ("allow", "ask", "deny")
    else:
        assert out == ""


def encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


# -- the hand table -----------------------------------------------------------------


def table(project: Path) -> dict[str, bytes]:
    """Hostile stdin by name: every field deep, surrogate, wrong-typed,
    huge, missing; and stdin that is not an event at all."""
    cases: dict[str, bytes] = {
        "not json": b"{not json",
        "empty stdin": b"",
        "whitespace only": b" \n\t ",
        "invalid utf-8": b'{"tool_name": "Write", "x": "\xff\xfe"}',
        "a json array": b"[1, 2, 3]",
        "a json string": b'"PreToolUse"',
        "null": b"null",
        "nested 5000 deep": nested(5000).encode(),
        "NaN": b'{"tool_name": "Write", "tool_use_id": "t", "tool_input": {"x": NaN}}',
        "a huge number": b'{"tool_name": "Write", "tool_use_id": "t", "tool_input": {"x": 1'
        + b"0" * 5000
        + b"}}",
    }
    base = event(project)
    for field, value in base.items():
        cases[f"{field} missing"] = encoded(event(project, **{field: MISSING}))
        wrongs = {
            "null": None,
            "a number": 7,
            "a float": 1.5,
            "a boolean": True,
            "a list": [value],
            "an object": {"x": value},
            "empty": "",
        }
        for shown, wrong in wrongs.items():
            cases[f"{field} as {shown}"] = encoded(event(project, **{field: wrong}))
        for depth in (100, 990, 5000):
            text = json.dumps(event(project, **{field: "@@"}))
            cases[f"{field} nested {depth} deep"] = text.replace('"@@"', nested(depth)).encode()
        if isinstance(value, str):
            for surrogate in SURROGATES:
                cases[f"{field} with {surrogate!a}"] = encoded(
                    event(project, **{field: value + surrogate})
                )
            cases[f"{field} of 1 MB"] = encoded(event(project, **{field: value + "x" * 2**20}))
    for surrogate in SURROGATES:
        cases[f"tool_input value with {surrogate!a}"] = encoded(
            event(project, tool_input={"file_path": "src/a.py", "content": surrogate})
        )
        cases[f"tool_input key with {surrogate!a}"] = encoded(
            event(project, tool_input={"file_path": "src/a.py", surrogate: "x"})
        )
        cases[f"tool_input path with {surrogate!a}"] = encoded(
            event(project, tool_input={"file_path": f"src/a{surrogate}.py", "content": "x"})
        )
        cases[f"tool_response with {surrogate!a}"] = encoded(
            event(project, tool_response={"out": surrogate, surrogate: [surrogate]})
        )
        cases[f"error with {surrogate!a}"] = encoded(event(project, error=f"boom {surrogate}"))
    for depth in (100, 990, 5000):
        for field in ("tool_response", "error"):
            text = json.dumps(event(project, **{field: "@@"}))
            cases[f"{field} nested {depth} deep"] = text.replace('"@@"', nested(depth)).encode()
    cases["tool_response as a huge list"] = encoded(event(project, tool_response=[0] * 200_000))
    cases["content of 3 MB"] = encoded(
        event(project, tool_input={"file_path": "src/a.py", "content": "x" * 3 * 2**20})
    )
    return cases


TABLE_NAMES = sorted(table(Path("/p")))


@pytest.mark.parametrize("name", TABLE_NAMES)
def test_a_hostile_event_is_answered_or_blocked_never_a_traceback(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    stdin = table(project)[name]
    for command in COMMANDS:
        # The pre event first, so a post event finds the call's row waiting.
        status, out, err = hook_in_process(monkeypatch, capsys, project, command, stdin)
        assert_answered_or_blocked(command, status, out, err)


@pytest.mark.parametrize(
    "name",
    [
        "nested 5000 deep",
        "tool_input nested 5000 deep",
        "tool_response nested 5000 deep",
        "not json",
        "empty stdin",
        "invalid utf-8",
        "tool_input missing",
        "tool_use_id missing",
        "tool_input as a list",
    ],
)
def test_an_event_the_hook_cannot_read_blocks_with_exit_2(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    stdin = table(project)[name]
    for command in ("pre-tool-use", "post-tool-use"):
        status, out, err = hook_in_process(monkeypatch, capsys, project, command, stdin)
        assert (status, out) == (USAGE_ERROR, "")
        assert err.startswith("toolguard: ") and err.count("\n") == 1


@pytest.mark.parametrize("field", ["tool_use_id", "session_id"])
@pytest.mark.parametrize("surrogate", SURROGATES)
def test_a_surrogate_in_an_id_still_joins_the_call_to_its_row(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    field: str,
    surrogate: str,
) -> None:
    odd = {field: f"{event(project)[field]}{surrogate}"}
    pre = hook_in_process(
        monkeypatch, capsys, project, "pre-tool-use", encoded(event(project, **odd))
    )
    assert pre[0] == 0 and json.loads(pre[1])["hookSpecificOutput"]["permissionDecision"] == "allow"
    (project / "src" / "new.py").write_text("y = 2\n")  # Claude Code's Write
    post = event(project, hook_event_name="PostToolUse", tool_response={"ok": True}, **odd)
    status, _, err = hook_in_process(monkeypatch, capsys, project, "post-tool-use", encoded(post))
    assert status == 0, err
    with SQLiteAuditStore(project / ".toolguard" / "audit.db") as store:
        rows = [row for row in store.rows() if row.tool_name == "Write"]
    assert [row.state for row in rows] == [CallState.SUCCEEDED]
    cassette = next((project / "cassettes").glob("*.yaml")).read_bytes()
    cassette.decode("utf-8")  # written, and valid UTF-8


def test_a_call_needing_approval_whose_row_is_not_found_is_asked_never_allowed(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A token as the id: the row keeps it redacted, and the hook must find it.
    bash = event(
        project,
        tool_name="Bash",
        tool_input={"command": "ls"},
        tool_use_id="ghp_" + "Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7Qr9St1Uv3Wx5",
    )
    config = yaml.safe_load((project / "toolguard.yaml").read_text())
    config["capabilities"]["allowed_risks"].append("dangerous")
    (project / "toolguard.yaml").write_text(yaml.safe_dump(config))
    status, out, _ = hook_in_process(monkeypatch, capsys, project, "pre-tool-use", encoded(bash))
    assert status == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "ask"


# -- generated events ---------------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(SURROGATES),
    st.builds(
        lambda a, s, b: a + s + b,
        st.text(max_size=5),
        st.sampled_from(SURROGATES),
        st.text(max_size=5),
    ),
    st.sampled_from(["", ".", "..", "/", "../../etc/passwd", ".env", "\x00", "~", "C:\\x"]),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | HOSTILE_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(HOSTILE_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)
FIELD_VALUES = st.one_of(
    JSON_VALUES,
    st.integers(min_value=50, max_value=1200).map(lambda depth: ("@@nested", depth)),
)
FIELDS = (
    "session_id",
    "cwd",
    "hook_event_name",
    "tool_name",
    "tool_use_id",
    "tool_input",
    "tool_response",
    "error",
    "transcript_path",
)
TOOL_NAMES = st.sampled_from(["Write", "Edit", "MultiEdit", "Read", "Glob", "Grep", "Bash", "X"])


def hostile_stdin(project: Path, tool: str, changes: dict[str, Any]) -> bytes:
    body = event(project, tool_name=tool)
    deep: dict[str, int] = {}
    for field, value in changes.items():
        if isinstance(value, tuple):
            deep[field] = value[1]
            value = f"@@{field}"
        body[field] = value
    text = json.dumps(body)
    for field, depth in deep.items():
        text = text.replace(json.dumps(f"@@{field}"), nested(depth))
    return text.encode("utf-8", "surrogatepass")


@settings(
    derandomize=True,
    database=None,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    command=st.sampled_from(COMMANDS),
    tool=TOOL_NAMES,
    changes=st.dictionaries(st.sampled_from(FIELDS), FIELD_VALUES, max_size=4),
)
def test_generated_hostile_events_are_answered_or_blocked(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    tool: str,
    changes: dict[str, Any],
) -> None:
    stdin = hostile_stdin(project, tool, changes)
    status, out, err = hook_in_process(monkeypatch, capsys, project, command, stdin)
    assert_answered_or_blocked(command, status, out, err)


# -- the process Claude Code runs ---------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "nested 5000 deep",
        "tool_input nested 5000 deep",
        "tool_response nested 5000 deep",
        "tool_use_id with '\\ud800'",
        "invalid utf-8",
        "empty stdin",
    ],
)
def test_the_hook_process_exits_0_or_2_without_a_traceback(project: Path, name: str) -> None:
    environment = {
        **os.environ,
        "PYTHONPATH": python_path(ROOT),
    }
    for command in ("pre-tool-use", "post-tool-use"):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest_toolguard",
                "hook",
                command,
                "--config",
                "toolguard.yaml",
            ],
            input=table(project)[name],
            capture_output=True,
            cwd=project,
            env=environment,
            timeout=120,
        )
        assert run.returncode in (0, USAGE_ERROR), run.stderr
        assert b"Traceback" not in run.stderr
        if run.returncode == USAGE_ERROR:
            assert run.stderr.startswith(b"toolguard: ") and run.stderr.count(b"\n") == 1
