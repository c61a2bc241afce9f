"""Secrets never reach the audit database through messages.

A message quoted the caller's path with ``repr()``, which turned the tab of
``notes/Bearer\\tsk_live_...`` into ``\\\\t``: the Bearer pattern no longer
matched, and ``error_message`` held the token. A policy ``reason`` held a URL
password because the path was cut at 200 characters before the ``@`` the
pattern needs. Raw text is now redacted before it is quoted, escaped or cut.
The table: secrets whose quoted or cut form hides them, times every way a
message about a path is built (sandbox refusals judged by the policy, OS
errors raised in a handler, a tool's own error, a hook's reason).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, ErrorCode, HookDecision, Risk, ToolCall, ToolSpec
from pytest_toolguard.tools import builtin_registry

MARK = "SeCrEtMaRk"

# (id, the secret as written in a path, the text that must never be stored)
SECRETS: list[tuple[str, str, str]] = [
    ("bearer-tab", f"Bearer\tsk_live_{MARK}123", MARK),
    ("bearer-newline", f"Bearer\n{MARK}_live_456", MARK),
    ("bearer-vtab", f"Bearer\x0b{MARK}_live_789", MARK),
    ("github-after-tab", "x\tghp_" + MARK * 4, "ghp_" + MARK),
    ("jwt-after-newline", f"x\neyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{MARK}x.c2lnbmF0dXJl", MARK),
    ("aws-after-tab", "x\tAKIA" + "Q" * 16, "AKIA" + "Q" * 8),
    ("assign-quotes", f"a\"b token='{MARK}42' c", MARK),
    # cut at 200 characters inside the password, before its '@'
    # (the first 4 characters of the mark are enough to show a cut leak)
    ("url-password-cut", "u" * 177 + f"/https://u:{MARK}77xyz@host/x", MARK[:4]),
    ("url-password-far", "v" * 300 + f"/https://u:{MARK}88xyz@host/x", MARK),
]

# (id, tool, arguments given the secret path, files to plant given it)
MESSAGES: list[tuple[str, str, Any]] = [
    ("nul-refused-by-policy", "read_text", lambda p: {"path": f"notes/{p}\0"}),
    ("forbidden-refused-by-policy", "read_text", lambda p: {"path": f"{p}/.env"}),
    ("climb-refused-by-policy", "read_text", lambda p: {"path": f"../{p}"}),
    ("long-component-refused", "read_text", lambda p: {"path": f"{p}/{'y' * 260}"}),
    ("outside-read-root", "read_text", lambda p: {"path": f"private/{p}"}),
    ("missing-file-in-handler", "read_text", lambda p: {"path": f"notes/{p}.txt"}),
    ("file-as-directory", "read_text", lambda p: {"path": f"notes/a.txt/{p}"}),
    ("wait-gives-up", "wait_for_file", lambda p: {"path": f"notes/{p}", "wait_seconds": 0.05}),
    ("write-to-a-directory", "write_file", lambda p: {"path": "notes", "content": p}),
    (
        "write-missing-parent-file",
        "write_file",
        lambda p: {"path": f"notes/a.txt/{p}", "content": "x"},
    ),
]


class DenyQuoting:
    """A hook whose reason quotes the path with repr(), as hooks do."""

    name = "deny_quoting"

    def pre_tool_use(self, event: Any) -> HookDecision:
        return HookDecision("deny", reason=f"path {event.arguments.get('path')!r} refused")


@pytest.fixture
def runtime(toolguard_runtime, workspace_dir: Path):
    (workspace_dir / "notes").mkdir()
    (workspace_dir / "notes" / "a.txt").write_text("a\n")
    return toolguard_runtime(
        builtin_registry(),
        Capabilities(
            allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
            read_roots=("notes",),
            write_roots=("notes",),
        ),
    )


def stored_bytes(tmp_path: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(tmp_path.glob("audit-*.db*")))


@pytest.mark.parametrize(
    ("secret", "hidden"), [s[1:] for s in SECRETS], ids=[s[0] for s in SECRETS]
)
@pytest.mark.parametrize(
    ("tool", "arguments"), [m[1:] for m in MESSAGES], ids=[m[0] for m in MESSAGES]
)
def test_a_secret_in_a_path_never_reaches_a_message_or_the_database(
    runtime, tmp_path: Path, secret: str, hidden: str, tool: str, arguments: Any
) -> None:
    result = runtime.execute(ToolCall(call_id="c1", tool_name=tool, arguments=arguments(secret)))
    assert not result.ok
    assert hidden not in result.message
    row = runtime.audit.get("c1")
    assert row is not None
    assert hidden not in (row.error_message or "") and hidden not in row.reason
    assert hidden.encode() not in stored_bytes(tmp_path)


@pytest.mark.parametrize(
    ("secret", "hidden"), [s[1:] for s in SECRETS], ids=[s[0] for s in SECRETS]
)
def test_a_hook_reason_quoting_a_secret_path_is_not_stored(
    toolguard_runtime, tmp_path: Path, secret: str, hidden: str
) -> None:
    runtime = toolguard_runtime(builtin_registry(), hooks=[DenyQuoting()])
    result = runtime.execute(
        ToolCall(call_id="c1", tool_name="read_text", arguments={"path": secret})
    )
    assert not result.ok and hidden not in result.message
    assert hidden.encode() not in stored_bytes(tmp_path)


@pytest.mark.parametrize(
    ("secret", "hidden"), [s[1:] for s in SECRETS], ids=[s[0] for s in SECRETS]
)
def test_a_secret_in_an_id_is_redacted_before_it_is_cut(
    toolguard_runtime, tmp_path: Path, secret: str, hidden: str
) -> None:
    runtime = toolguard_runtime(builtin_registry())
    runtime.execute(
        ToolCall(call_id=secret[:256], tool_name="list_files", session_id=secret[-256:])
    )
    assert hidden.encode() not in stored_bytes(tmp_path)


def test_a_sandbox_error_redacts_its_quoted_values_after_a_round_trip_through_pickle(
    tmp_path: Path,
) -> None:
    import pickle

    from pytest_toolguard import Redactor, Workspace
    from pytest_toolguard.sandbox import PathOutsideWorkspace

    secret = f"Bearer\tsk_live_{MARK}123"
    (tmp_path / secret).symlink_to("/outside")
    with Workspace(tmp_path) as ws, pytest.raises(PathOutsideWorkspace) as caught:
        ws.read_bytes(f"{secret}/x")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert MARK in str(copy)  # the plain message quotes the raw link name
    assert MARK not in copy.describe(Redactor().redact_text)


# -- secret by name only: a value of no shape under a key that names a secret --------

SHAPELESS = "plain-Hunter2-toolguard-7c1e"
"""A secret no pattern knows: secret only by the name of its argument."""

SECRET_SCHEMA = {
    "type": "object",
    "properties": {"api_key": {"type": "string"}, "settings": {"type": "object"}},
}


def value_in(arguments: Any) -> Any:
    """The one string value in ``arguments``, however deep."""
    while isinstance(arguments, Mapping):
        (arguments,) = arguments.values()
    return arguments


def quoting_handler(ctx: Any, **arguments: Any) -> Any:
    """A tool whose error quotes the value it rejects, as careless tools do."""
    value = value_in(arguments)
    raise ValueError(f"rejected {value!r}: {value} is not {json.dumps(value)}")


class DenyQuotingArguments:
    """A hook whose reason quotes the value it refuses, as JSON."""

    name = "deny_quoting_arguments"

    def pre_tool_use(self, event: Any) -> HookDecision:
        return HookDecision("deny", reason=f"refused {json.dumps(value_in(event.arguments))}")


def secret_tool() -> ToolSpec:
    return ToolSpec("login", "logs in", SECRET_SCHEMA, quoting_handler)


@pytest.mark.parametrize(
    "arguments",
    [{"api_key": SHAPELESS}, {"settings": {"db": {"password": SHAPELESS}}}],
    ids=["top-level", "nested"],
)
def test_a_handler_error_quoting_a_secret_argument_keeps_its_value_out(
    toolguard_runtime, registry_of, tmp_path: Path, arguments: dict[str, Any]
) -> None:
    runtime = toolguard_runtime(registry_of(secret_tool()))
    result = runtime.execute(ToolCall(call_id="c1", tool_name="login", arguments=arguments))
    assert result.code is ErrorCode.EXECUTION_ERROR
    assert SHAPELESS not in result.message
    assert "rejected" in result.message  # the rest of the message is kept
    assert SHAPELESS.encode() not in stored_bytes(tmp_path)


def test_a_hook_reason_quoting_a_secret_argument_keeps_its_value_out(
    toolguard_runtime, registry_of, tmp_path: Path
) -> None:
    runtime = toolguard_runtime(registry_of(secret_tool()), hooks=[DenyQuotingArguments()])
    result = runtime.execute(
        ToolCall(call_id="c1", tool_name="login", arguments={"api_key": SHAPELESS})
    )
    assert result.code is ErrorCode.BLOCKED
    assert SHAPELESS not in result.message and "refused" in result.message
    assert SHAPELESS.encode() not in stored_bytes(tmp_path)


class AllowQuotingArguments:
    """A hook whose allowing reason quotes the value it let through."""

    name = "allow_quoting_arguments"

    def pre_tool_use(self, event: Any) -> HookDecision:
        return HookDecision("allow", reason=f"approved {value_in(event.arguments)!r}")


def test_an_approval_reason_quoting_a_secret_argument_keeps_its_value_out(
    toolguard_runtime, registry_of, tmp_path: Path
) -> None:
    tool = ToolSpec("login", "logs in", SECRET_SCHEMA, lambda ctx, **a: {"ok": True})
    runtime = toolguard_runtime(registry_of(tool), hooks=[AllowQuotingArguments()])
    result = runtime.execute(
        ToolCall(call_id="c1", tool_name="login", arguments={"api_key": SHAPELESS})
    )
    assert result.ok
    assert "approved" in runtime.audit.get("c1").reason
    assert SHAPELESS.encode() not in stored_bytes(tmp_path)
