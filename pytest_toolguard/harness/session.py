"""A runtime of a recorded session, and the recorded calls to send it.

``session_runtime(cassette, registry, store)`` is the ``ToolRuntime`` the
session had when it was recorded: its workspace root, capabilities,
variables, idempotency scope and deadlines; its plan (a fresh
``PlanProgress``) unless other hooks are given; the recorded approvals
granted again after those hooks (``replay.approvals``); and, with ``http``,
the recorded HTTP exchanges served to its network tools
(``replay.http.HttpPlayback``). Replay, fixture playback and fault cells
all build their runtimes here.

``with_secrets(call, secrets)`` fills the real values of placeholders
(``<redacted:authorization>``) into a recorded call's arguments;
``secrets_redactor(secrets)`` is a redactor that also knows those values,
whatever their shape, so the runtime redacts them as the recording did.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from ..audit import AuditStore
from ..capabilities import Capabilities
from ..contract import ToolCall
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..redaction import Redactor
from ..registry import ToolRegistry
from ..replay.approvals import approval_hooks
from ..replay.cassette import Cassette
from ..replay.http import HttpPlayback
from ..runtime import ToolRuntime
from .known_secrets import KnownSecrets

_PLACEHOLDER = re.compile(r"<redacted:([a-z0-9_]+)>")


RuntimeClass = Callable[..., ToolRuntime]
"""What makes the runtime: ``ToolRuntime`` or a subclass (taking its arguments)."""


def recorded_hooks(cassette: Cassette) -> list[PreToolUse | PostToolUse]:
    """The hooks the session ran with that replay can run again: a fresh
    ``PlanProgress`` of its plan (none without one)."""
    plan = cassette.session.plan
    return [PlanProgress(plan)] if plan else []


def session_runtime(
    cassette: Cassette,
    registry: ToolRegistry,
    store: AuditStore,
    *,
    redactor: Redactor | None = None,
    hooks: Sequence[PreToolUse | PostToolUse] | None = None,
    approvals: Sequence[PreToolUse] | None = None,
    capabilities: Capabilities | None = None,
    timeouts: Mapping[str, float] | None = None,
    http: HttpPlayback | None = None,
    runtime_class: RuntimeClass | None = None,
    isolation: Literal["inline", "thread"] = "thread",
) -> ToolRuntime:
    """The recorded session's runtime over ``registry`` and ``store`` (see
    the module docstring). ``hooks`` replaces the recorded plan;
    ``approvals`` the hooks granting the recorded approvals (made from the
    cassette when None); ``capabilities`` the recorded ones; ``timeouts``
    are added over the recorded deadlines; ``runtime_class`` makes the
    runtime (default: ``ToolRuntime``); ``isolation`` where handlers run
    (``"thread"``: a handler past its deadline runs on, as an oracle of late
    writes needs). Raises what ``ToolRuntime`` raises for a bad setting."""
    session = cassette.session
    if approvals is None:
        approvals = approval_hooks(cassette, redactor)
    make = runtime_class or ToolRuntime
    return make(
        http.registry(registry) if http is not None else registry,
        cassette.workspace.root,
        capabilities if capabilities is not None else session.capabilities,
        store,
        hooks=[*(recorded_hooks(cassette) if hooks is None else hooks), *approvals],
        redactor=redactor,
        variables=session.variables,
        idempotency_scope=session.idempotency_scope,
        timeouts={**session.timeouts, **(timeouts or {})},
        isolation=isolation,
    )


def secrets_redactor(secrets: Mapping[str, str] | None) -> Redactor | None:
    """A redactor that replaces each value of ``secrets`` (at least
    ``MIN_SECRET_LENGTH`` long), in every form ``KnownSecrets`` knows, by
    ``<redacted:keyword>`` wherever it occurs, on top of the default rules;
    None (the runtime's default) when there is nothing to add. A keyword
    that is not ``[a-z0-9_]+`` is redacted as ``secret``."""
    known = KnownSecrets(secrets)
    return Redactor(extra_patterns=known.patterns) if known else None


def with_secrets(call: ToolCall, secrets: Mapping[str, str] | None) -> ToolCall:
    """``call`` with every ``<redacted:keyword>`` placeholder whose keyword
    ``secrets`` names replaced by the real value (others are left as they
    are). Arguments recorded as JSON text get each secret JSON-escaped, so a
    quote or backslash in it cannot change the document."""
    if not secrets:
        return call

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: secrets.get(m.group(1), m.group(0)), value)
        if isinstance(value, Mapping):
            return {key: fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fill(item) for item in value]
        return value

    if isinstance(call.arguments, str):
        text = _PLACEHOLDER.sub(
            lambda m: (
                json.dumps(secrets[m.group(1)])[1:-1] if m.group(1) in secrets else m.group(0)
            ),
            call.arguments,
        )
        return replace(call, arguments=text)
    return replace(call, arguments=fill(call.arguments))
