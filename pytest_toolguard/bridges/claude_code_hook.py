"""Claude Code's tool hooks answered by our pipeline: PreToolUse decides,
PostToolUse reports the outcome, Stop closes what never reported.

``toolguard hook pre-tool-use|post-tool-use|stop`` (``cli``) answers one
event per process; the audit store carries the session from one event to
the next (and the cassette, with ``hook_cassette``). Claude Code runs its
own tools: we decide each call and keep its one audit row.

- ``pre_tool_use``: the call through our pipeline up to the handler
  (``ToolRuntime.admit``). A refusal is ``deny`` with its code and message;
  its row is final (DENIED or FAILED). An admitted call is ``allow`` and
  leaves its RUNNING row, committed before Claude Code can run the tool. A
  call whose tool needs an approval (EXTERNAL, DANGEROUS: Bash, WebFetch)
  is admitted by ``ClaudeCodePrompt``, the runtime's stand-in for Claude
  Code's permission prompt, and answered ``ask``: its RUNNING row (rule
  ``hook.claude_code_prompt``) waits for the user's answer. A tool the
  registry does not hold gets the configured answer and no row.
- ``post_tool_use`` (PostToolUse, and PostToolUseFailure with its
  ``error``): finishes the call's RUNNING row, SUCCEEDED or FAILED
  (EXECUTION_ERROR). After an ``ask`` that is the approved call's outcome
  in the same row.
- ``stop`` (Stop, SessionEnd): Claude has finished its turn, so every call
  of the session has reported its outcome or never will. A row still
  waiting for the prompt was not approved: DENIED with APPROVAL_REQUIRED.
  A row of an allowed call with no outcome (a tool that failed while no
  PostToolUseFailure hook is set, an interrupted tool) is INTERRUPTED.

Why a waiting row rather than a refusal row at ``ask`` and a second row
once approved: every call has exactly one audit row; the row of an approved
call exists before the tool runs (fail closed, as for any admitted call);
and Claude Code sends no event when the user declines, so only a row left
open can still become the outcome. Its decision is ``allow`` (toolguard
left the call to the prompt); its state says what came of it. Without a
Stop hook a declined call's row stays RUNNING.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..audit import AuditRecord
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..hooks import Approval, HookDecision, PreToolUseEvent
from ..registry import ToolRegistry
from ..runtime import ToolRuntime
from .claude_code import relative_arguments, runs_here
from .gate import admit, close_admitted
from .hook_cassette import HookCassette
from .transcript import registry_name

ACTOR = "claude-code"
"""The actor of every call a Claude Code hook audits."""

HookAnswer = Literal["allow", "ask", "deny"]
HookCommand = Literal["pre-tool-use", "post-tool-use", "stop"]


class ClaudeCodePrompt:
    """The PreToolUse hook standing in for Claude Code's permission prompt:
    a tool that needs an approval is let through to it (``allow``, rule
    ``hook.claude_code_prompt``), so that its row is written before the
    user answers; ``pre_tool_use`` then answers Claude Code ``ask``. No
    opinion on any other tool."""

    name = "claude_code_prompt"
    rule = f"hook.{name}"

    def pre_tool_use(self, event: PreToolUseEvent) -> HookDecision:
        spec = event.spec
        if not spec.risk.needs_approval:
            return HookDecision.proceed()
        return HookDecision.allow(
            f"left to the user: Claude Code asks before {spec.name} ({spec.risk}) runs"
        )


def prompt_approval(row: AuditRecord | None) -> Approval | None:
    """The approval of a call the user approved at Claude Code's prompt
    (its row decided by ``ClaudeCodePrompt``), as a cassette keeps it:
    replay grants it again. None for any other row."""
    if row is None or row.rule != ClaudeCodePrompt.rule:
        return None
    return Approval(row.rule, row.reason)


def hook_call(event: Mapping[str, Any], registry: ToolRegistry) -> ToolCall:
    """The ``ToolCall`` a hook event describes: its ``tool_use_id``, the
    registry's name for its tool and its input (paths made relative to
    the event's ``cwd``)."""
    tool_input = event.get("tool_input")
    arguments = tool_input if isinstance(tool_input, Mapping) else {}
    cwd = event.get("cwd")
    if isinstance(cwd, str) and cwd:
        arguments = relative_arguments(arguments, cwd)
    return ToolCall(
        call_id=str(event.get("tool_use_id") or ""),
        tool_name=registry_name(str(event.get("tool_name") or ""), registry),
        arguments=dict(arguments),
        actor=ACTOR,
        session_id=str(event.get("session_id") or "default"),
    )


@dataclass(frozen=True, slots=True)
class PreToolUseAnswer:
    """What ``pre_tool_use`` decided about one call."""

    call: ToolCall
    decision: HookAnswer
    reason: str
    refusal: ToolResult | None = None
    """Our pipeline's refusal (for ``deny``), recorded as ``execute`` would."""
    known: bool = True
    """False for a tool the registry does not hold (no row was written)."""

    def output(self) -> dict[str, Any]:
        """The JSON Claude Code reads on the hook's stdout."""
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": self.decision,
                "permissionDecisionReason": self.reason,
            }
        }


def pre_tool_use(
    event: Mapping[str, Any], runtime: ToolRuntime, *, unknown_tools: HookAnswer = "ask"
) -> PreToolUseAnswer:
    """Decide a PreToolUse event: ``allow`` when our pipeline admits the
    call (its RUNNING row written), ``ask`` when it was admitted to Claude
    Code's prompt (a ``ClaudeCodePrompt`` among ``runtime.hooks``; without
    one such a call is refused with APPROVAL_REQUIRED, answered ``ask``,
    and its outcome is never audited), ``deny`` with the code and message
    otherwise. A tool the registry does not hold gets ``unknown_tools``
    and no row."""
    call = hook_call(event, runtime.registry)
    if call.tool_name not in runtime.registry:
        return PreToolUseAnswer(
            call, unknown_tools, f"toolguard: {call.tool_name} is not in its registry", known=False
        )
    refusal = admit(runtime, call)
    if refusal is None:
        spec = runtime.registry.get(call.tool_name)
        if spec is not None and prompt_approval(runtime.audit.get(call.call_id)) is not None:
            return PreToolUseAnswer(
                call, "ask", f"toolguard: {call.tool_name} ({spec.risk}) needs your approval"
            )
        return PreToolUseAnswer(call, "allow", f"toolguard: {call.tool_name} allowed by policy")
    reason = f"toolguard: {refusal.code.value}: {refusal.message}"
    decision: HookAnswer = "ask" if refusal.code is ErrorCode.APPROVAL_REQUIRED else "deny"
    return PreToolUseAnswer(call, decision, reason, refusal)


def post_tool_use(event: Mapping[str, Any], runtime: ToolRuntime) -> ToolResult | None:
    """Finish the audit row of the call a PostToolUse (or
    PostToolUseFailure) event reports, and return the outcome as our
    result: OK, or EXECUTION_ERROR when the event is a failure (its
    ``error``, or a ``tool_response`` saying ``is_error`` or ``error``).
    None when no admitted call of that id is waiting."""
    call = hook_call(event, runtime.registry)
    response = event.get("tool_response")
    error = event.get("error")
    failed = (
        event.get("hook_event_name") == "PostToolUseFailure"
        or isinstance(error, str)
        or (
            isinstance(response, Mapping)
            and bool(response.get("is_error") or response.get("error"))
        )
    )
    if isinstance(error, str) and error:
        message = error
    elif failed and isinstance(response, Mapping) and response.get("error"):
        message = str(response["error"])
    else:
        message = "the tool failed" if failed else ""
    row = runtime.audit.get(call.call_id)
    if row is None:
        return None
    code = ErrorCode.EXECUTION_ERROR if failed else ErrorCode.OK
    state = CallState.FAILED if failed else CallState.SUCCEEDED
    if not close_admitted(runtime, row, state=state, code=code, data=response, message=message):
        return None
    return ToolResult(
        call_id=call.call_id,
        tool_name=row.tool_name,
        ok=not failed,
        code=code,
        message=runtime.redactor.redact_text(message),
        retryable=code.retryable,
        state=state,
    )


NOT_APPROVED = "not approved at Claude Code's prompt: the turn ended with no outcome for it"
NO_OUTCOME = (
    "Claude Code reported no outcome before the turn ended (a failure with no "
    "PostToolUseFailure hook, or an interrupted tool)"
)


def stop(event: Mapping[str, Any], runtime: ToolRuntime) -> list[AuditRecord]:
    """Close the rows of the event's session that are still RUNNING (a
    Stop or SessionEnd event: no call of the turn is still running). A row
    waiting for the prompt becomes DENIED with APPROVAL_REQUIRED, any other
    INTERRUPTED with EXECUTION_ERROR. Returns the rows closed, as they were."""
    session_id = str(event.get("session_id") or "default")
    closed: list[AuditRecord] = []
    for row in runtime.audit.rows(session_id):
        if row.state is not CallState.RUNNING or row.actor != ACTOR:
            continue
        if prompt_approval(row) is not None:
            done = close_admitted(
                runtime,
                row,
                state=CallState.DENIED,
                code=ErrorCode.APPROVAL_REQUIRED,
                message=NOT_APPROVED,
            )
        else:
            done = close_admitted(
                runtime,
                row,
                state=CallState.INTERRUPTED,
                code=ErrorCode.EXECUTION_ERROR,
                message=NO_OUTCOME,
            )
        if done:
            closed.append(row)
    return closed


def answer(
    command: HookCommand,
    event: Mapping[str, Any],
    runtime: ToolRuntime,
    *,
    cassette: HookCassette | None = None,
    unknown_tools: HookAnswer = "ask",
) -> dict[str, Any] | None:
    """One event, as ``toolguard hook COMMAND`` answers it: the JSON for
    Claude Code's stdin (PreToolUse), or None. With ``cassette``, a call's
    files are kept before it can run, a refused call is appended at once,
    and a call Claude Code ran here-replayably is appended with its
    outcome (``hook_cassette``). ``HookCassetteError`` when the cassette
    cannot take the event; it is checked before the call is admitted."""
    if command == "pre-tool-use":
        call = hook_call(event, runtime.registry)
        if cassette is not None and call.tool_name in runtime.registry:
            cassette.before_call(call)
        decided = pre_tool_use(event, runtime, unknown_tools=unknown_tools)
        if cassette is not None and decided.refusal is not None:
            cassette.append_refusal(decided.call, decided.refusal)
        return decided.output()
    if command == "post-tool-use":
        result = post_tool_use(event, runtime)
        spec = runtime.registry.get(result.tool_name) if result is not None else None
        if cassette is not None and result is not None and spec is not None and runs_here(spec):
            cassette.append_outcome(
                hook_call(event, runtime.registry),
                result,
                approval=prompt_approval(runtime.audit.get(result.call_id)),
                response=event.get("tool_response", event.get("error")),
            )
        return None
    stop(event, runtime)
    return None
