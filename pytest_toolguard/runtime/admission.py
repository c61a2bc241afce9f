"""Admission: every step before the idempotency claim decides whether a call
may run.

In order: the call's fields (INVALID_REQUEST), its arguments parsed and
copied as plain JSON (INVALID_REQUEST), the registry lookup
(TOOL_NOT_FOUND), the input schema (INVALID_ARGUMENT), the policy
(PERMISSION_DENIED, PATH_OUTSIDE_WORKSPACE, FORBIDDEN_PATH,
LIMIT_EXCEEDED), then the PreToolUse hooks (BLOCKED, APPROVAL_REQUIRED),
whose rewritten arguments go through the schema and the policy again, and
the approval that external and dangerous tools need. A step that refuses
raises ``Refusal``; nothing here writes an audit row.
"""

from __future__ import annotations

import difflib
import json
import time
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..contract import CallState, ErrorCode, ToolCall
from ..hooks import Approval, HookDecision, PreToolUse, PreToolUseEvent
from ..jsondata import copy_json, plain, plain_json_problem
from ..policy import PolicyDecision, authorize
from ..redaction import Redactor, strings_in
from ..registry import ToolSpec
from ..storable import storable_text
from .attempt import Attempt, Refusal, bad_request
from .limits import MAX_ID_LENGTH
from .messages import first_line, hide_secret_arguments, json_type, text
from .settings import RuntimeSettings


def storable_id(redactor: Redactor, text: str) -> str:
    """An id (a call's, a session's, a tool name, an actor, an idempotency
    key) as the audit row stores it: redacted whole (before it is escaped
    or cut, so a cut cannot hide a token from the patterns), a lone
    surrogate escaped, cut to ``MAX_ID_LENGTH``. Idempotent: a stored id
    stores as itself. Ids come from a model: a token there is as secret as
    one in the arguments, and whatever keeps ids (a cassette) keeps this."""
    return storable_text(redactor.redact_text(text))[:MAX_ID_LENGTH]


class Admission:
    """The steps before the claim, over the runtime's ``settings``."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings

    def receive(self, call: object) -> Attempt:
        """The attempt of ``call`` (any object: untrusted), its ids made safe
        to store. Never raises for what ``call`` holds, as long as reading
        its attributes does not raise."""
        redactor = self.settings.redactor

        def field_text(name: str, fallback: str) -> str:
            value = plain(getattr(call, name, None))
            if not isinstance(value, str) or not value:
                return fallback
            return storable_id(redactor, value)

        call_id = field_text("call_id", "")
        if not call_id:
            call_id = f"tg-{uuid.uuid4().hex}"
        key = plain(getattr(call, "idempotency_key", None))
        metadata = getattr(call, "metadata", None)
        session = plain(getattr(call, "session_id", None))
        return Attempt(
            call_id=call_id,
            tool_name=field_text("tool_name", "<invalid>"),
            actor=field_text("actor", "<invalid>"),
            session_id=field_text("session_id", "<invalid>"),
            idempotency_key=storable_id(redactor, key) if isinstance(key, str) else None,
            metadata=metadata if isinstance(metadata, Mapping) else {},
            started_at=self.settings.now(),
            t0=time.perf_counter(),
            raw_session_id=session if isinstance(session, str) else "",
            raw_idempotency_key=key if isinstance(key, str) else None,
        )

    def check_fields(self, call: ToolCall) -> None:
        """The ids are non-empty strings within ``MAX_ID_LENGTH``, the
        metadata a mapping."""
        for name in ("call_id", "tool_name", "actor", "session_id"):
            value = plain(getattr(call, name))
            if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
                raise bad_request(
                    f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters",
                    "request.fields",
                )
        key = plain(call.idempotency_key)
        if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_ID_LENGTH):
            raise bad_request(
                "idempotency_key must be null or a non-empty string of at most "
                f"{MAX_ID_LENGTH} characters",
                "request.fields",
            )
        if not isinstance(call.metadata, Mapping):
            raise bad_request("metadata must be an object", "request.fields")

    def parse(self, raw: object) -> dict[str, Any]:
        """The arguments as a private copy of plain JSON data (JSON text is
        parsed first)."""
        if isinstance(raw, (str, bytes, bytearray)):
            try:
                raw = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise bad_request(
                    f"arguments are not valid JSON: {first_line(exc)}", "request.parse"
                ) from None
        if not isinstance(raw, Mapping):
            raise bad_request(
                f"arguments must be a JSON object, got {json_type(raw)}", "request.parse"
            )
        copied: dict[str, Any] = {}
        try:
            problem = plain_json_problem(raw)
            if not problem:
                copied = copy_json(raw)
        except Exception as exc:  # a mapping that cannot even be read
            problem = f"cannot be read ({type(exc).__name__})"
        if problem:
            raise bad_request(f"arguments must be plain JSON data: {problem}", "request.parse")
        return copied

    def lookup(self, tool_name: str) -> ToolSpec:
        """The registered tool, or TOOL_NOT_FOUND suggesting the closest
        one the session may see."""
        settings = self.settings
        spec = settings.registry.get(tool_name)
        if spec is not None:
            return spec
        visible = [
            name for name in settings.registry.names() if settings.capabilities.permits_tool(name)
        ]
        close = difflib.get_close_matches(tool_name, visible, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise Refusal(
            ErrorCode.TOOL_NOT_FOUND,
            f"unknown tool: {tool_name}{hint}",
            "registry.lookup",
            CallState.FAILED,
        )

    def admit(self, call: ToolCall, spec: ToolSpec, attempt: Attempt) -> None:
        """Schema, policy and PreToolUse hooks; a rewrite goes through schema
        and policy again. Refuses with ``Refusal``."""
        arguments = attempt.arguments
        assert arguments is not None
        self.validate_and_authorize(spec, arguments, attempt)
        approval: Approval | None = None
        for hook in self.settings.hooks:
            if not isinstance(hook, PreToolUse):
                continue
            rule = f"hook.{getattr(hook, 'name', type(hook).__name__)}"
            # A copy: a hook changing it in place would skip schema and policy.
            event = PreToolUseEvent(
                call=call, spec=spec, arguments=MappingProxyType(copy_json(arguments))
            )
            try:
                answer = hook.pre_tool_use(event)
                if not isinstance(answer, HookDecision):
                    raise TypeError(f"returned {type(answer).__name__}, not a HookDecision")
            except Exception as exc:  # fail closed
                raise Refusal(
                    ErrorCode.BLOCKED,
                    f"{rule} failed: {type(exc).__name__}: {text(exc)}",
                    rule,
                    CallState.DENIED,
                ) from None
            if answer.action == "deny":
                raise Refusal(
                    ErrorCode.BLOCKED,
                    answer.reason or f"{rule} denied the call",
                    rule,
                    CallState.DENIED,
                )
            if answer.action == "ask":
                raise Refusal(
                    ErrorCode.APPROVAL_REQUIRED,
                    answer.reason or f"{rule} asks for approval",
                    rule,
                    CallState.DENIED,
                )
            if answer.arguments is not None:
                try:
                    arguments = self.parse(answer.arguments)
                except Refusal as refusal:
                    raise Refusal(
                        refusal.code, f"{rule} rewrite: {refusal.message}", rule, CallState.DENIED
                    ) from None
                attempt.arguments = arguments
                self.validate_and_authorize(spec, arguments, attempt, via=f"{rule}.rewrite")
                approval = None  # an earlier approval was for other arguments
            if answer.action == "allow":
                redactor = self.settings.redactor_for(spec)
                reason = redactor.redact_message(
                    hide_secret_arguments(answer.reason or "approved", redactor, arguments),
                    strings_in(arguments),
                )
                approval = Approval(rule, reason)
        if spec.risk.needs_approval and approval is None:
            raise Refusal(
                ErrorCode.APPROVAL_REQUIRED,
                f"tool {spec.name} has risk {spec.risk} and needs an approval "
                "(a PreToolUse hook or an Approver answering allow)",
                "policy.approval",
                CallState.DENIED,
            )
        if approval is not None:
            attempt.rule, attempt.reason = approval.rule, approval.reason
        attempt.approval = approval
        attempt.decision = "allow"

    def validate_and_authorize(
        self, spec: ToolSpec, arguments: Mapping[str, Any], attempt: Attempt, via: str = ""
    ) -> None:
        """The input schema, then the policy; the allowing decision (and the
        locations it holds) becomes ``attempt.policy``."""
        settings = self.settings
        redactor = settings.redactor_for(spec)
        errors = spec.input_validator.errors(arguments, show_key=redactor.redact_text)
        if errors:
            raise Refusal(
                ErrorCode.INVALID_ARGUMENT,
                "; ".join(errors),
                via or "schema.input",
                CallState.FAILED,
                redacted=True,
            )
        decision: PolicyDecision = authorize(
            spec,
            arguments,
            settings.capabilities,
            settings.workspace,
            settings.variables,
            redact=redactor.redact_text,
        )
        if not decision.allowed:
            raise Refusal(decision.code, decision.reason, via or decision.rule, CallState.DENIED)
        if attempt.policy is not None:  # judged again after a hook's rewrite
            attempt.policy.close()
        attempt.policy = decision
        attempt.rule, attempt.reason = decision.rule, decision.reason
