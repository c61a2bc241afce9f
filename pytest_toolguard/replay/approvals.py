"""Recorded approvals, granted again in replay.

When a PreToolUse hook let a call through (an ``Approver`` whose callback
said yes, a policy hook answering ``allow``), the recorder keeps that
decision with the interaction (``approval: {rule: hook.approver, reason:
...}``). Replay, fixture playback and fault cells have no such hook and no
human to ask, so ``approval_hooks(cassette)`` stands in for them: one
PreToolUse hook per recorded hook name (so the audit row's rule is the
recorded ``hook.<name>``), each answering ``allow`` with the recorded
reason for exactly the calls recorded as approved by it, and no opinion
(``proceed``) for any other call.

A call is granted when its tool and its arguments, redacted, are those of
an approved interaction: a replayed call and a fault cell's repeat of it
are granted; a call the recording never made, or made with other
arguments, is not, and a tool that needs an approval answers
APPROVAL_REQUIRED as it would with no hook. Limits: the decision is matched
by content, not position, so if the same call was once approved and once
refused, replay approves both; refusals by a hook (``deny``, ``ask``) are
not recorded (the call replays as refused by ``policy.approval``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..documents import parse_json
from ..hooks import Approval, HookDecision, PreToolUse, PreToolUseEvent
from ..jsondata import canonical_json
from ..redaction import Redactor
from .cassette import Cassette, Interaction

HOOK_PREFIX = "hook."


class RecordedApprovals:
    """A PreToolUse hook named like the one that approved the calls it
    grants: ``allow`` with the recorded reason for a granted call,
    ``proceed`` for any other. Stateless, so safe from several threads."""

    def __init__(self, name: str, grants: Mapping[str, str], redactor: Redactor) -> None:
        self.name = name
        self._grants = dict(grants)
        """``_call_key`` -> the recorded reason."""
        self._redactor = redactor

    def pre_tool_use(self, event: PreToolUseEvent) -> HookDecision:
        reason = self._grants.get(_call_key(event.spec.name, event.arguments, self._redactor))
        if reason is None:
            return HookDecision.proceed()
        return HookDecision.allow(reason)

    def __repr__(self) -> str:
        return f"<RecordedApprovals {self.name}: {len(self._grants)} call(s)>"


def approval_hooks(
    cassette: Cassette | Sequence[Interaction], redactor: Redactor | None = None
) -> list[PreToolUse]:
    """The hooks that grant the recorded approvals of ``cassette`` (or of
    these interactions), one per approving hook, in order of first
    approval. Empty when nothing was approved. ``redactor`` must be the one
    the call's arguments are redacted with (the runtime's)."""
    interactions = cassette.interactions if isinstance(cassette, Cassette) else cassette
    redactor = redactor or Redactor()
    grants: dict[str, dict[str, str]] = {}
    for interaction in interactions:
        approval = interaction.approval
        if approval is None:
            continue
        arguments = _arguments(interaction.call.arguments)
        if arguments is None:
            continue
        key = _call_key(interaction.call.tool_name, arguments, redactor)
        grants.setdefault(hook_name(approval), {}).setdefault(key, approval.reason)
    return [RecordedApprovals(name, calls, redactor) for name, calls in grants.items()]


def hook_name(approval: Approval) -> str:
    """The name of the hook an approval's rule names (``hook.approver`` ->
    ``approver``)."""
    rule = approval.rule
    return rule[len(HOOK_PREFIX) :] if rule.startswith(HOOK_PREFIX) else rule


def _arguments(value: Any) -> Mapping[str, Any] | None:
    """Recorded arguments as an object (they may be JSON text); None when
    they are not one (such a call never reached the hooks)."""
    if isinstance(value, (str, bytes, bytearray)):
        try:
            value = parse_json(value)  # a cassette's: bounded
        except ValueError:
            return None
    return value if isinstance(value, Mapping) else None


def _call_key(tool_name: str, arguments: Mapping[str, Any], redactor: Redactor) -> str:
    """A call's identity for granting: its tool and its arguments redacted
    (a recorded call holds placeholders; the replayed one may carry the
    real secret from ``toolguard_secrets``; redaction is idempotent)."""
    return canonical_json([tool_name, redactor.redact(dict(arguments))])
