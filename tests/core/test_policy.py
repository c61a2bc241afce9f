"""Permission: tools, risks, approvals, paths, limits and hosts. Each refusal
names the rule that decided, in the result and in the audit row."""

from __future__ import annotations

import os

import pytest
from conftest import EVERY_RISK, spy_tool

from pytest_toolguard import Approver, Capabilities, ErrorCode, PathAccess, Risk, ToolCall
from pytest_toolguard.tools import builtin_registry

READ_WRITE = frozenset({Risk.READ, Risk.WRITE})


def call(tool_name, arguments, call_id="c1"):
    return ToolCall(call_id=call_id, tool_name=tool_name, arguments=arguments)


@pytest.fixture
def files(workspace_dir):
    (workspace_dir / "src").mkdir()
    (workspace_dir / "docs").mkdir()
    (workspace_dir / "src" / "app.py").write_text("print('hi')\n")
    (workspace_dir / ".env").write_text("TOKEN=x\n")
    (workspace_dir / "config").mkdir()
    (workspace_dir / "config" / ".env").write_text("TOKEN=x\n")
    return workspace_dir


@pytest.fixture
def edit_session(toolguard_runtime, files):
    caps = Capabilities(
        allowed_tools=frozenset({"read_text", "write_file", "list_files"}),
        allowed_risks=READ_WRITE,
        write_roots=("src", "tests"),
        max_read_bytes=1000,
        max_write_bytes=100,
    )
    return toolguard_runtime(builtin_registry(), caps)


def rule_of(runtime, call_id="c1"):
    row = runtime.audit.get(call_id)
    assert row is not None
    return row.rule


def test_tool_outside_the_allow_list_is_denied(edit_session):
    result = edit_session.execute(call("search_text", {"query": "x"}))
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert rule_of(edit_session) == "policy.tool_allowlist"


def test_read_only_session_cannot_use_a_write_tool(toolguard_runtime, files):
    runtime = toolguard_runtime(builtin_registry(), Capabilities())
    result = runtime.execute(call("write_file", {"path": "src/a.py", "content": "x"}))
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert rule_of(runtime) == "policy.risk_allowlist"
    assert not (files / "src" / "a.py").exists()


@pytest.mark.parametrize(
    "path", [".env", "config/.env", "config\\.env", "src/../.env", "CONFIG/.ENV", ".env/x"]
)
def test_env_file_in_any_component_with_either_separator_is_forbidden(edit_session, path):
    result = edit_session.execute(call("read_text", {"path": path}))
    assert result.code is ErrorCode.FORBIDDEN_PATH
    assert rule_of(edit_session) == "sandbox.forbidden_path"


def test_writing_env_is_forbidden_too(edit_session, files):
    result = edit_session.execute(call("write_file", {"path": "src/.env", "content": "x"}))
    assert result.code is ErrorCode.FORBIDDEN_PATH
    assert not (files / "src" / ".env").exists()


def test_symlink_to_env_is_judged_by_its_target(edit_session, files):
    os.symlink(".env", files / "src" / "settings.txt")
    result = edit_session.execute(call("read_text", {"path": "src/settings.txt"}))
    assert result.code is ErrorCode.FORBIDDEN_PATH


@pytest.mark.parametrize(
    "path", ["../outside.txt", "/etc/passwd", "src/../../x", "\\etc\\passwd", "C:\\x"]
)
def test_paths_leaving_the_workspace_are_refused(edit_session, path):
    result = edit_session.execute(call("read_text", {"path": path}))
    assert result.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert rule_of(edit_session) == "sandbox.outside_workspace"


def test_symlink_leading_outside_is_refused(edit_session, files, tmp_path):
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", files / "src" / "link.txt")
    result = edit_session.execute(call("read_text", {"path": "src/link.txt"}))
    assert result.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert "outside" not in str(result.data)


def test_write_outside_the_write_roots_is_denied(edit_session, files):
    result = edit_session.execute(call("write_file", {"path": "docs/private.md", "content": "x"}))
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert rule_of(edit_session) == "policy.write_root"
    assert "docs/private.md" in result.message
    assert not (files / "docs" / "private.md").exists()


def test_write_root_is_a_component_prefix_not_a_string_prefix(edit_session, files):
    result = edit_session.execute(call("write_file", {"path": "srcx/a.py", "content": "x"}))
    assert result.code is ErrorCode.PERMISSION_DENIED


def test_symlink_cannot_smuggle_a_write_out_of_the_write_roots(edit_session, files):
    os.symlink("../docs", files / "src" / "docs-link")
    result = edit_session.execute(
        call("write_file", {"path": "src/docs-link/x.md", "content": "x"})
    )
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert not (files / "docs" / "x.md").exists()


def test_write_inside_the_write_roots_is_allowed(edit_session, files):
    result = edit_session.execute(call("write_file", {"path": "src/new.py", "content": "x = 1\n"}))
    assert result.ok, result.message
    assert (files / "src" / "new.py").read_text() == "x = 1\n"
    assert rule_of(edit_session) == "policy.allow"


def test_write_limit_counts_utf8_bytes_not_characters(edit_session, files):
    result = edit_session.execute(call("write_file", {"path": "src/a.txt", "content": "é" * 60}))
    assert result.code is ErrorCode.LIMIT_EXCEEDED  # 60 characters, 120 bytes > 100
    assert rule_of(edit_session) == "policy.write_limit"
    assert edit_session.execute(
        call("write_file", {"path": "src/a.txt", "content": "e" * 60}, "c2")
    ).ok


def test_read_over_the_limit_is_refused_before_reading(edit_session, files):
    (files / "src" / "big.txt").write_text("x" * 1001)
    result = edit_session.execute(call("read_text", {"path": "src/big.txt"}))
    assert result.code is ErrorCode.LIMIT_EXCEEDED
    assert rule_of(edit_session) == "policy.read_limit"


def test_read_outside_the_read_roots_is_denied(toolguard_runtime, files):
    runtime = toolguard_runtime(builtin_registry(), Capabilities(read_roots=("docs",)))
    result = runtime.execute(call("read_text", {"path": "src/app.py"}))
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert rule_of(runtime) == "policy.read_root"


@pytest.fixture
def send_message(spy):
    return spy_tool(
        spy,
        "send_message",
        risk=Risk.EXTERNAL,
        schema={
            "type": "object",
            "properties": {"url": {"type": "string"}, "text": {"type": "string"}},
            "required": ["url"],
            "additionalProperties": False,
        },
        network_host_argument="url",
    )


def external_caps(hosts=("hooks.example.com",)):
    return Capabilities(allowed_risks=EVERY_RISK, network_hosts=hosts)


def test_external_tool_without_approval_answers_approval_required(
    toolguard_runtime, registry_of, send_message, spy
):
    runtime = toolguard_runtime(registry_of(send_message), external_caps())
    result = runtime.execute(call("send_message", {"url": "https://hooks.example.com/x"}))
    assert result.code is ErrorCode.APPROVAL_REQUIRED
    row = runtime.audit.get("c1")
    assert row is not None and (row.decision, row.rule) == ("ask", "policy.approval")
    assert spy.count == 0


@pytest.mark.parametrize(
    "verdict, code",
    [(True, ErrorCode.OK), (False, ErrorCode.BLOCKED), (None, ErrorCode.APPROVAL_REQUIRED)],
)
def test_approver_callback_decides_external_calls(
    toolguard_runtime, registry_of, send_message, spy, verdict, code
):
    asked = []
    approver = Approver(lambda event: asked.append(event.spec.name) or verdict)
    runtime = toolguard_runtime(registry_of(send_message), external_caps(), hooks=[approver])
    result = runtime.execute(call("send_message", {"url": "https://hooks.example.com/x"}))
    assert result.code is code
    assert asked == ["send_message"]
    assert spy.count == (1 if verdict else 0)


def test_dangerous_tools_need_approval_too(toolguard_runtime, registry_of, spy):
    runtime = toolguard_runtime(
        registry_of(spy_tool(spy, "rm", risk=Risk.DANGEROUS)), external_caps()
    )
    assert runtime.execute(call("rm", {})).code is ErrorCode.APPROVAL_REQUIRED


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example.org/x",
        "https://hooks.example.com.evil.org/",
        "http://user@evil.org",
        "nohost://",
    ],
)
def test_external_host_outside_the_allowed_hosts_is_denied(
    toolguard_runtime, registry_of, send_message, spy, url
):
    runtime = toolguard_runtime(
        registry_of(send_message), external_caps(), hooks=[Approver(lambda e: True)]
    )
    result = runtime.execute(call("send_message", {"url": url}))
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert rule_of(runtime) == "policy.network_host"
    assert spy.count == 0


def test_wildcard_host_allows_subdomains_only(toolguard_runtime, registry_of, send_message, spy):
    runtime = toolguard_runtime(
        registry_of(send_message),
        external_caps(("*.example.com",)),
        hooks=[Approver(lambda e: True)],
    )
    assert runtime.execute(call("send_message", {"url": "https://api.example.com/"})).ok
    assert runtime.execute(call("send_message", {"url": "https://example.com/"}, "c2")).code is (
        ErrorCode.PERMISSION_DENIED
    )


# -- path templates -------------------------------------------------------------

UNTYPED_PATH = {"type": "object", "properties": {"path": {}}, "additionalProperties": False}


def path_writer(spy, schema=None):
    return spy_tool(spy, "put", risk=Risk.WRITE, schema=schema, paths=(PathAccess.write("{path}"),))


@pytest.mark.parametrize(
    ("where", "code", "rule"),
    [
        ("{root}/src/new.py", ErrorCode.OK, "policy.allow"),
        ("{root}/docs/new.md", ErrorCode.PERMISSION_DENIED, "policy.write_root"),
        ("{root}/../outside.txt", ErrorCode.PATH_OUTSIDE_WORKSPACE, "sandbox.outside_workspace"),
        ("{root}-other/src/x", ErrorCode.PATH_OUTSIDE_WORKSPACE, "sandbox.outside_workspace"),
        ("/etc/passwd", ErrorCode.PATH_OUTSIDE_WORKSPACE, "sandbox.outside_workspace"),
    ],
)
def test_an_absolute_path_is_judged_against_the_workspace_root(
    toolguard_runtime, registry_of, spy, files, where, code, rule
):
    session = toolguard_runtime(
        registry_of(path_writer(spy)),
        Capabilities(allowed_risks=READ_WRITE, write_roots=("src",)),
    )
    result = session.execute(call("put", {"path": where.format(root=files)}))
    assert result.code is code, result.message
    assert rule_of(session) == rule
    assert spy.count == (1 if code is ErrorCode.OK else 0)


@pytest.mark.parametrize("spelt", ["{root}/src/x.py", "{root}//src/./x.py", "{real}/src/x.py"])
def test_a_builtin_handler_writes_an_absolute_path_inside_the_workspace(edit_session, files, spelt):
    # The policy judges it inside; the handler's workspace reaches the same file.
    where = spelt.format(root=files, real=os.path.realpath(files))
    result = edit_session.execute(call("write_file", {"path": where, "content": "x"}))
    assert result.ok, result.message
    assert (files / "src" / "x.py").read_text() == "x"


@pytest.mark.parametrize(
    "spelt", ["{root}/../outside.txt", "{root}-other/x.py", "{root}/src/../../outside.txt"]
)
def test_a_builtin_handler_never_writes_an_absolute_path_outside(edit_session, files, spelt):
    result = edit_session.execute(
        call("write_file", {"path": spelt.format(root=files), "content": "x"})
    )
    assert result.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert not (files.parent / "outside.txt").exists()
    assert not (files.parent / f"{files.name}-other").exists()


@pytest.mark.parametrize("value", [["src/x"], {"p": "src/x"}, 3, None, False])
def test_a_path_argument_that_is_not_a_string_is_refused_never_stringified(
    toolguard_runtime, registry_of, spy, value
):
    session = toolguard_runtime(
        registry_of(path_writer(spy, UNTYPED_PATH)), Capabilities(allowed_risks=READ_WRITE)
    )
    result = session.execute(call("put", {"path": value}))
    assert result.code is ErrorCode.INVALID_ARGUMENT
    assert rule_of(session) == "policy.path_value"
    assert spy.count == 0
