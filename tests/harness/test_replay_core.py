"""Record a session, replay it in a fake filesystem under a frozen clock, and
fail on every difference."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import threading

import pytest
import yaml

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.harness.clock import frozen_clock
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import CassetteError, dumps, load, loads, record_session, replay
from pytest_toolguard.tools import builtin_registry

CAPS = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=("runs/r1/artifacts",)
)
CALLS = [
    ("read_csv", {"path": "data/f.csv"}),
    ("read_text", {"path": ".env"}),
    ("read_text", {"path": "../outside.txt"}),
    ("write_json_file", {"artifact_name": "a.json", "content": {"b": 1, "a": [1, 2]}}),
    ("write_json_file", {"artifact_name": "a.json", "content": {"b": 1, "a": [1, 2]}}),
    ("list_files", {"recursive": True}),
    ("write_jsn_file", {}),
]


@pytest.fixture
def recorded(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "data").mkdir(parents=True)
    (workspace / "data" / "f.csv").write_text("id,text\n1,hi\n")
    (workspace / ".env").write_text("TOKEN=do-not-record\n")
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        CAPS,
        SQLiteAuditStore(":memory:"),
        variables={"run_id": "r1"},
    )
    path = tmp_path / "session.yaml"
    with record_session(runtime, path, recorded_by="python record.py session"):
        for index, (name, arguments) in enumerate(CALLS):
            key = "k1" if name == "write_json_file" else None
            runtime.execute(
                ToolCall(
                    call_id=f"c{index}", tool_name=name, arguments=arguments, idempotency_key=key
                )
            )
    runtime.close()
    return path


def test_a_recorded_session_replays_without_difference(recorded):
    report = replay(load(recorded), builtin_registry())
    assert report.differences == ()
    assert len(report.results) == len(CALLS)
    assert [r.code.value for r in report.results] == [
        "OK",
        "FORBIDDEN_PATH",
        "PATH_OUTSIDE_WORKSPACE",
        "OK",
        "IDEMPOTENT_REPLAY",
        "OK",
        "TOOL_NOT_FOUND",
    ]
    assert report.checks > 50


def test_dumping_a_loaded_cassette_gives_the_same_bytes(recorded):
    assert dumps(load(recorded)) == recorded.read_text()


def test_files_no_tool_may_read_never_enter_the_cassette(recorded):
    text = recorded.read_text()
    assert "do-not-record" not in text and ".env:" not in text


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_changed_recorded_code_is_reported_with_both_values(recorded):
    _edit(recorded, "code: FORBIDDEN_PATH", "code: PERMISSION_DENIED")
    [difference] = replay(load(recorded), builtin_registry()).differences
    assert (difference.where, difference.field) == ("interaction 2 (read_text)", "result.code")
    assert (difference.recorded, difference.replayed) == ("PERMISSION_DENIED", "FORBIDDEN_PATH")


def test_a_changed_file_content_is_reported_with_a_diff(recorded):
    _edit(recorded, '    "b": 1\n', '    "b": 2\n')
    report = replay(load(recorded), builtin_registry())
    [difference] = [d for d in report.differences if d.where == "files"]
    assert difference.field == "runs/r1/artifacts/a.json"
    assert '-  "b": 2' in difference.diff and '+  "b": 1' in difference.diff


def test_a_changed_audit_state_is_reported(recorded):
    _edit(
        recorded,
        "state: DENIED\n    decision: deny\n    rule: sandbox.forbidden_path",
        "state: FAILED\n    decision: deny\n    rule: sandbox.forbidden_path",
    )
    fields = {(d.where, d.field) for d in replay(load(recorded), builtin_registry()).differences}
    assert ("interaction 2 (read_text)", "audit.state") in fields


def test_a_changed_tool_is_caught(recorded):
    """A write_json_file that stops sorting keys changes the file replay sees."""
    import json

    from pytest_toolguard.tools import BUILTIN_TOOLS, write_json_file

    def unsorted(ctx, artifact_name, content):
        target = f"runs/{ctx.variables['run_id']}/artifacts/{artifact_name}"
        ctx.workspace.write_text(target, json.dumps(content, indent=2) + "\n")
        return {"path": target, "artifact_name": artifact_name}

    changed = dataclasses.replace(write_json_file, handler=unsorted)
    registry = ToolRegistry(
        [changed if spec.name == "write_json_file" else spec for spec in BUILTIN_TOOLS]
    )
    differences = replay(load(recorded), registry).differences
    assert [(d.where, d.field) for d in differences] == [("files", "runs/r1/artifacts/a.json")]


def test_an_extra_file_in_the_workspace_is_a_difference(recorded):
    _edit(recorded, "final_files:\n", "final_files:\n  runs/r1/artifacts/ghost.md: boo\n")
    differences = replay(load(recorded), builtin_registry()).differences
    assert [(d.where, d.field, d.replayed) for d in differences] == [
        ("files", "runs/r1/artifacts/ghost.md", "missing")
    ]


@pytest.mark.parametrize(
    "text, where",
    [
        (
            "kind: cassette\nsession: {}\ninteractions: []\n",
            "$: 'format_version' is a required property",
        ),
        ("format_version: 1\nkind: tape\nsession: {}\ninteractions: []\n", "$.kind"),
        (
            "format_version: 1\nkind: case\nsession: {}\ninteractions: [{call: {tool_name: 3}}]\n",
            "$.interactions[0].call.tool_name",
        ),
        (
            "format_version: 1\nkind: case\n"
            "session: {capabilities: {allowed_risks: [root]}}\ninteractions: []\n",
            "$.session.capabilities.allowed_risks[0]",
        ),
        ("format_version: [\n", "line"),
        ("- a\n- b\n", "document"),
    ],
)
def test_a_bad_file_is_refused_with_its_name_and_the_field(text, where):
    with pytest.raises(CassetteError) as caught:
        loads(text, source="cassettes/bad.yaml")
    assert str(caught.value).startswith("cassettes/bad.yaml: ")
    assert where in str(caught.value)


@pytest.mark.parametrize(
    ("recorded_by", "hint"),
    [
        ("python scripts/record.py", "re-record it: python scripts/record.py"),
        (
            "pytest --toolguard-record-mode=rewrite tests/test_a.py::test_b",
            "re-record it: pytest --toolguard-record-mode=rewrite tests/test_a.py::test_b",
        ),
        (None, "it names no recorded_by"),
    ],
)
def test_an_old_format_says_how_to_re_record_with_its_own_recorder(recorded_by, hint):
    text = "format_version: 0\nkind: cassette\nsession: {}\ninteractions: []\n"
    if recorded_by:
        text += f"recorded_by: {recorded_by}\n"
    with pytest.raises(CassetteError) as caught:
        loads(text, source="x.yaml")
    assert hint in str(caught.value)
    if recorded_by and "pytest" not in recorded_by:
        assert "--toolguard-record-mode" not in str(caught.value)


@pytest.mark.parametrize("backend", ["freezegun", "time-machine"])
def test_handlers_on_worker_threads_see_the_frozen_clock(tmp_path, backend):
    seen = []

    @tool(input_schema={"type": "object"})
    def now(ctx):
        seen.append(
            (
                threading.current_thread().name,
                datetime.datetime.now(datetime.timezone.utc).isoformat(),
            )
        )
        return {}

    runtime = ToolRuntime(ToolRegistry([now]), str(tmp_path), isolation="thread")
    with frozen_clock("2030-05-06T07:08:09+00:00", backend):
        assert runtime.execute(ToolCall(call_id="1", tool_name="now")).ok
    runtime.close()
    assert seen == [("toolguard-worker", "2030-05-06T07:08:09+00:00")]


@pytest.mark.parametrize("backend", ["freezegun", "time-machine"])
def test_an_event_loop_keeps_running_time_under_the_frozen_clock(tmp_path, backend):
    """The wall clock is frozen, the loop's timers are not: an async tool
    that sleeps, and an HTTP client's timeouts, still end."""
    seen = []

    @tool(input_schema={"type": "object"}, timeout_seconds=5)
    async def nap(ctx):
        await asyncio.sleep(0.01)
        await asyncio.wait_for(asyncio.sleep(0.01), timeout=1)
        seen.append(datetime.datetime.now(datetime.timezone.utc).isoformat())
        return {}

    runtime = ToolRuntime(ToolRegistry([nap]), str(tmp_path), isolation="thread")
    with frozen_clock("2030-05-06T07:08:09+00:00", backend):
        result = runtime.execute(ToolCall(call_id="1", tool_name="nap"))
    runtime.close()
    assert result.ok, (result.code, result.message)
    assert seen == ["2030-05-06T07:08:09+00:00"]


def test_a_refused_symlink_escape_recorded_alone_replays(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    runtime = ToolRuntime(builtin_registry(), str(workspace))
    path = tmp_path / "escape.yaml"
    with record_session(runtime, path):
        call = ToolCall(call_id="c1", tool_name="read_text", arguments={"path": "link.txt"})
        assert runtime.execute(call).code.value == "PATH_OUTSIDE_WORKSPACE"
    runtime.close()
    report = replay(load(path), builtin_registry())
    assert report.differences == ()
    assert report.results[0].code.value == "PATH_OUTSIDE_WORKSPACE"


def test_the_sessions_deadlines_are_recorded_and_replayed(tmp_path):
    runtime = ToolRuntime(builtin_registry(), str(tmp_path), timeouts={"read_text": 2.5})
    path = tmp_path / "deadlines.yaml"
    with record_session(runtime, path):
        runtime.execute(ToolCall(call_id="c1", tool_name="list_files"))
    runtime.close()
    cassette = load(path)
    assert cassette.session.timeouts == {"read_text": 2.5}
    assert replay(cassette, builtin_registry()).differences == ()


def test_a_tools_own_redactor_is_used_when_recording_and_replaying(tmp_path):
    from pytest_toolguard import Redactor

    @tool(
        input_schema={"type": "object", "properties": {"customer_pin": {"type": "string"}}},
        redactor=Redactor(extra_keys=["customer_pin"]),
    )
    def lookup(ctx, customer_pin):
        return {"customer_pin": customer_pin, "status": "found"}

    runtime = ToolRuntime(ToolRegistry([lookup]), str(tmp_path))
    path = tmp_path / "pin.yaml"
    with record_session(runtime, path):
        runtime.execute(
            ToolCall(call_id="c1", tool_name="lookup", arguments={"customer_pin": "8642-1357"})
        )
    runtime.close()
    assert "8642-1357" not in path.read_text()
    assert replay(load(path), ToolRegistry([lookup])).differences == ()


def test_output_cut_inside_a_token_leaves_no_fragment_and_replays(tmp_path):
    token = "ghp_" + "Q7w9" * 9
    prefix = '{"log": "deploy key ghp_'

    @tool(input_schema={"type": "object"}, result_limit=len(prefix) + 15)
    def dump(ctx):
        return {"log": f"deploy key {token} installed"}

    runtime = ToolRuntime(ToolRegistry([dump]), str(tmp_path))
    path = tmp_path / "cut.yaml"
    with record_session(runtime, path):
        result = runtime.execute(ToolCall(call_id="c1", tool_name="dump"))
    runtime.close()
    assert result.truncated and token[4:19] in result.data  # the model sees the cut data
    assert token[4:19] not in path.read_text()
    assert replay(load(path), ToolRegistry([dump])).differences == ()


def test_a_secret_filled_into_json_text_arguments_stays_one_string():
    from pytest_toolguard.harness.session import with_secrets

    call = ToolCall(call_id="c1", tool_name="t", arguments='{"auth": "<redacted:authorization>"}')
    filled = with_secrets(call, {"authorization": 'Bearer a"b\\c'})
    import json

    assert json.loads(filled.arguments) == {"auth": 'Bearer a"b\\c'}


def test_a_pattern_rusts_regex_reads_stricter_is_decided_by_jsonschema():
    # jsonschema-rs answers "valid?" first; Python's re lets "$" match before a
    # final newline, Rust's regex does not: jsonschema's verdict stands.
    digest = "ab" * 32 + "\n"
    text = (
        "format_version: 1\nkind: case\nsession: {}\ninteractions: []\n"
        f"final_files: {{a.txt: {{sha256: {json.dumps(digest)}}}}}\n"
    )
    from jsonschema import Draft202012Validator

    from pytest_toolguard.replay.cassette import schema

    assert Draft202012Validator(schema()).is_valid(yaml.safe_load(text))
    assert loads(text).final_files["a.txt"] is not None
