"""``toolguard hook EVENT``: one Claude Code hook event, read from stdin and
answered by ``claude_code_hook.run_hook``.

The command's configuration (``--config``, already read and checked with
``claude_code_hook.check_config``) names the registry (default: Claude
Code's built-in tools, ``definitions.claude_code``), the capabilities, the
cassette and the audit database (default ``DEFAULT_HOOK_AUDIT`` under the
event's ``cwd``). Whatever stops the command is a ``HookCommandError`` whose
message says what and where; the command line reports it and exits 2,
which Claude Code reads as "block the call".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, BinaryIO, TextIO

from ...audit import AuditUnavailable
from ...capabilities import Capabilities
from ...documents import MAX_DOCUMENT_BYTES
from ...replay.registry_loading import (
    IMPORTED_FROM_CWD_FIRST,
    SpecError,
    importable_from,
    load_registry,
)
from ..definitions.claude_code import claude_code_registry
from ..errors import BridgeError
from .claude_code_hook import HookCommand, HookEventError, read_event, run_hook
from .hook_cassette import HookCassetteError, session_cassette

DEFAULT_HOOK_AUDIT = ".toolguard/audit.db"
"""The audit database, under the event's ``cwd``, unless ``audit:`` names one."""


class HookCommandError(BridgeError):
    """The hook command cannot answer the event: a bad event, registry,
    configuration, cassette or audit database; the message names it."""


def hook_command(
    event_name: HookCommand,
    stdin: TextIO,
    config: Mapping[str, Any],
    *,
    config_file: str | None,
) -> dict[str, Any] | None:
    """The answer to the hook event ``event_name`` (``pre-tool-use``,
    ``post-tool-use``, ``stop``) whose JSON is on ``stdin``, under
    ``config`` (read from ``config_file``): the JSON object to print, or
    None. ``HookCommandError`` for what stops it."""
    event = _event(getattr(stdin, "buffer", None), stdin, event_name)
    unknown = config.get("unknown_tools", "ask")
    given = event.get("cwd")
    cwd: str = given if isinstance(given, str) and given else os.getcwd()
    if not os.path.isdir(cwd):
        raise HookCommandError(f"the event's cwd {cwd!r} is not a directory")
    spec = config.get("registry")
    with importable_from(os.getcwd()) as finder:  # the project's code is its own (run_hook)
        registry = _registry(spec) if spec else claude_code_registry()
    try:
        capabilities = Capabilities(**(config.get("capabilities") or {}))
    except (TypeError, ValueError) as exc:
        raise HookCommandError(f"{config_file}: capabilities: {exc}") from None
    session_id = event.get("session_id") or "default"
    try:
        cassette = session_cassette(config.get("cassette"), cwd, session_id)
    except HookCassetteError as exc:
        raise HookCommandError(f"{config_file}: {exc}") from None
    database = os.path.join(cwd, config.get("audit") or DEFAULT_HOOK_AUDIT)
    os.makedirs(os.path.dirname(database) or ".", exist_ok=True)
    try:
        return run_hook(
            event_name,
            event,
            cwd=cwd,
            registry=registry,
            capabilities=capabilities,
            database=database,
            config_file=config_file,
            cassette=cassette,
            unknown_tools=unknown,
            imported=(finder.directory, (*finder.asked, *IMPORTED_FROM_CWD_FIRST)),
        )
    except AuditUnavailable as exc:
        raise HookCommandError(f"audit database {database}: {exc}") from None
    except HookCassetteError as exc:
        raise HookCommandError(f"cassette {cassette}: {exc}") from None


def _event(stream: BinaryIO | None, stdin: TextIO, event_name: str) -> dict[str, Any]:
    """The event read from the bytes of stdin (invalid UTF-8 is refused, not
    escaped), never more than ``read_event`` accepts."""
    most = MAX_DOCUMENT_BYTES + 1  # never more read: read_event refuses what is over
    try:
        return read_event(stream.read(most) if stream is not None else stdin.read(most), event_name)
    except HookEventError as exc:
        raise HookCommandError(str(exc)) from None


def _registry(spec: str) -> Any:
    try:
        return load_registry(spec)
    except SpecError as exc:
        raise HookCommandError(str(exc)) from None
