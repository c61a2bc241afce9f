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

The hook's own files (its configuration, audit database, cassette) are
forbidden to every call it judges (``own_files``; ``run_hook`` builds the
runtime on a ``GuardedWorkspace``). An event the hook cannot read
(``read_event``: not UTF-8, not JSON, nested too deeply, fields of the
wrong type, no ``tool_use_id`` or ``tool_input``) is ``HookEventError``,
which ``toolguard hook`` answers with exit 2: Claude Code blocks the call.
Ids are looked up as the audit row stores them (``gate.stored_id``).

Why a waiting row rather than a refusal row at ``ask`` and a second row
once approved: every call has exactly one audit row; the row of an approved
call exists before the tool runs (fail closed, as for any admitted call);
and Claude Code sends no event when the user declines, so only a row left
open can still become the outcome. Its decision is ``allow`` (toolguard
left the call to the prompt); its state says what came of it. Without a
Stop hook a declined call's row stays RUNNING.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ... import documents
from ...audit import AuditRecord, SQLiteAuditStore
from ...capabilities import Capabilities
from ...contract import CallState, ErrorCode, ToolCall, ToolResult
from ...documents import DocumentRefused
from ...hooks import Approval, HookDecision, PreToolUseEvent
from ...registry import ToolRegistry
from ...runtime import ToolRuntime
from ...sandbox import SandboxError
from ..definitions.claude_code import runs_here
from ..errors import BridgeError
from ..transcripts.claude_code import PATH_ARGUMENTS, relative_arguments
from ..transcripts.into_cassette import registry_name
from .gate import admit, finish_admitted_row, stored_id
from .hook_cassette import HookCassette
from .own_files import (
    GuardedWorkspace,
    OwnFileRefused,
    OwnFiles,
    claude_settings,
    loaded_code,
    module_names,
)

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


EVENT_FIELDS: Mapping[str, tuple[type, ...]] = {
    "session_id": (str,),
    "cwd": (str,),
    "hook_event_name": (str,),
    "tool_name": (str,),
    "tool_use_id": (str,),
    "tool_input": (Mapping,),
    "transcript_path": (str,),
    "permission_mode": (str,),
}
"""The types of the event fields the hook reads, as Claude Code sends them."""


class HookEventError(BridgeError):
    """The hook's input is not an event it can answer (not UTF-8, not
    JSON, nested too deeply to read, or not shaped as Claude Code sends
    one), or its configuration is not one. ``toolguard hook`` answers it
    with exit 2, which blocks."""


CONFIG_KEYS = ("audit", "capabilities", "cassette", "registry", "unknown_tools")
"""The keys of ``toolguard hook``'s configuration file."""


def check_config(loaded: Any) -> dict[str, Any]:
    """The hook's configuration (YAML, loaded): a mapping of ``CONFIG_KEYS``
    (None: empty); ``HookEventError`` saying what is wrong."""
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise HookEventError(f"must be a mapping ({', '.join(CONFIG_KEYS)})")
    extra = sorted(repr(key) for key in set(loaded) - set(CONFIG_KEYS))
    if extra:
        raise HookEventError(f"unknown key {extra[0]} (known: {', '.join(CONFIG_KEYS)})")
    for key in ("audit", "registry", "unknown_tools"):
        if loaded.get(key) is not None and not isinstance(loaded[key], str):
            raise HookEventError(f"{key} must be a string")
    if loaded.get("unknown_tools", "ask") not in ("allow", "ask", "deny"):
        raise HookEventError("unknown_tools must be allow, ask or deny")
    return loaded


def read_event(raw: bytes | str, command: str) -> dict[str, Any]:
    """The hook event in ``raw`` (the hook's stdin) for ``command``, checked
    (``event_problem``); ``HookEventError`` saying what is wrong. Read
    within ``documents``' limits: at most ``MAX_DOCUMENT_BYTES``, nested at
    most ``MAX_DEPTH`` (deeper is refused, whichever field it is in)."""
    try:
        documents.check_length(raw)  # before decoding: bytes, then characters
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        event = documents.parse_json(text)
    except UnicodeDecodeError:
        raise HookEventError("the hook input on stdin is not UTF-8 text") from None
    except DocumentRefused as exc:
        raise HookEventError(f"the hook input on stdin is refused: {exc}") from None
    except ValueError as exc:
        raise HookEventError(f"the hook input on stdin is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise HookEventError(
            "the hook input is not a JSON object: is this a Claude Code hook event?"
        )
    problem = event_problem(command, event)
    if problem:
        raise HookEventError(f"the hook input {problem}")
    return event


def event_problem(command: str, event: Mapping[str, Any]) -> str:
    """What is wrong with ``event`` for ``command`` ('' when nothing): a
    field of another type than Claude Code sends, or, for a tool event, no
    ``tool_name``, ``tool_input`` or ``tool_use_id`` (the id joins the two
    events of a call). The hook answers such an event with exit 2: it
    blocks (judging other arguments than the tool's would fail open)."""
    for name, types in EVENT_FIELDS.items():
        value = event.get(name)
        if value is not None and not isinstance(value, types):
            return f"has a {name} that is not a {'JSON object' if Mapping in types else 'string'}"
    if command != "stop":
        if not event.get("tool_name"):
            return "has no tool_name: is this a PreToolUse/PostToolUse event?"
        if not event.get("tool_use_id"):
            return "has no tool_use_id: is this a PreToolUse/PostToolUse event?"
        if not isinstance(event.get("tool_input"), Mapping):
            return "has no tool_input object: is this a PreToolUse/PostToolUse event?"
    return ""


def hook_call(event: Mapping[str, Any], registry: ToolRegistry) -> ToolCall:
    """The ``ToolCall`` a hook event describes: its ``tool_use_id``, the
    registry's name for its tool and its input (paths made relative to
    the event's ``cwd``). Ids are given as the event has them; the audit
    row keeps them as ``gate.stored_id`` makes them."""
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


def call_row(runtime: ToolRuntime, call_id: str) -> AuditRecord | None:
    """The audit row of the call ``call_id`` names (the event's id), found
    by the id as the row stores it."""
    return runtime.audit.get(stored_id(runtime, call_id))


def names_own_file(runtime: ToolRuntime, arguments: Mapping[str, Any]) -> str | None:
    """The first path argument of Claude Code's (``PATH_ARGUMENTS``) that
    names one of the hook's own files, for a tool the registry does not
    hold (its paths are not declared): None when none does, or when the
    runtime's workspace is not a ``GuardedWorkspace``."""
    workspace = runtime.workspace
    if not isinstance(workspace, GuardedWorkspace):
        return None
    for name in PATH_ARGUMENTS:
        value = arguments.get(name)
        if not isinstance(value, str):
            continue
        try:
            workspace.locate(value, "read").close()
        except OwnFileRefused:
            return value
        except (SandboxError, OSError, ValueError):
            continue
    return None


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
    and no row, unless a path argument of Claude Code's names one of the
    hook's own files (``names_own_file``): ``deny``."""
    call = hook_call(event, runtime.registry)
    if call.tool_name not in runtime.registry:
        arguments = call.arguments if isinstance(call.arguments, Mapping) else {}
        own = names_own_file(runtime, arguments)
        if own is not None:
            return PreToolUseAnswer(
                call,
                "deny",
                f"toolguard: {ErrorCode.FORBIDDEN_PATH.value}: "
                f"{runtime.redactor.redact_text(repr(own))} is one of toolguard's own files",
                known=False,
            )
        return PreToolUseAnswer(
            call, unknown_tools, f"toolguard: {call.tool_name} is not in its registry", known=False
        )
    refusal = admit(runtime, call)
    if refusal is None:
        spec = runtime.registry.get(call.tool_name)
        row = call_row(runtime, call.call_id)
        # Left to the prompt, or not found again: Claude Code asks the user.
        if (
            spec is not None
            and spec.risk.needs_approval
            and (row is None or prompt_approval(row) is not None)
        ):
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
    elif failed and isinstance(response, Mapping) and isinstance(response.get("error"), str):
        message = response["error"]
    else:
        message = "the tool failed" if failed else ""
    row = call_row(runtime, call.call_id)
    if row is None:
        return None
    code = ErrorCode.EXECUTION_ERROR if failed else ErrorCode.OK
    state = CallState.FAILED if failed else CallState.SUCCEEDED
    if not finish_admitted_row(
        runtime, row, state=state, code=code, data=response, message=message, call=call
    ):
        return None
    return ToolResult(
        call_id=row.call_id,  # as stored: the row is found again by it
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
    session_id = stored_id(runtime, str(event.get("session_id") or "default"))
    closed: list[AuditRecord] = []
    for row in runtime.audit.rows(session_id):
        if row.state is not CallState.RUNNING or row.actor != ACTOR:
            continue
        if prompt_approval(row) is not None:
            done = finish_admitted_row(
                runtime,
                row,
                state=CallState.DENIED,
                code=ErrorCode.APPROVAL_REQUIRED,
                message=NOT_APPROVED,
            )
        else:
            done = finish_admitted_row(
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
                approval=prompt_approval(call_row(runtime, result.call_id)),
                response=event.get("tool_response", event.get("error")),
            )
        return None
    stop(event, runtime)
    return None


def run_hook(
    command: HookCommand,
    event: Mapping[str, Any],
    *,
    cwd: str,
    registry: ToolRegistry,
    capabilities: Capabilities,
    database: str,
    config_file: str | None = None,
    cassette: str | None = None,
    unknown_tools: HookAnswer = "ask",
    imported: tuple[str, Sequence[str]] | None = None,
) -> dict[str, Any] | None:
    """Answer one event as ``toolguard hook`` does (``answer``): through a
    runtime in ``cwd`` auditing into the SQLite ``database``, recording
    into ``cassette`` when one is given. The hook's own files (the
    configuration ``config_file``, the database, the cassette) are
    forbidden to the call whatever ``capabilities`` say (``own_files``),
    and so are Claude Code's settings files, which register the hook, and
    every Python file this process loaded from ``cwd`` (the registry's
    module and what it imports: the code the next event runs). ``imported``
    is a directory modules were looked for in, with the names looked for
    (``registry_loading.DirectoryFinder``): a file of such a name there is
    forbidden too, existing or not. Raises ``AuditUnavailable`` and
    ``HookCassetteError``."""
    own = OwnFiles.of(
        config=config_file,
        database=database,
        cassette=cassette,
        extra=(
            *claude_settings(cwd),
            *loaded_code(cwd),
            *(module_names(*imported) if imported is not None else ()),
        ),
    )
    prompt = ClaudeCodePrompt()
    with (
        SQLiteAuditStore(database) as store,
        GuardedWorkspace(cwd, own) as workspace,
        ToolRuntime(registry, workspace, capabilities, store, hooks=[prompt]) as runtime,
    ):
        recording = (
            None
            if cassette is None
            else HookCassette(
                cassette,
                runtime,
                session_id=stored_id(runtime, str(event.get("session_id") or "default")),
                own_files=[database],
            )
        )
        return answer(command, event, runtime, cassette=recording, unknown_tools=unknown_tools)
