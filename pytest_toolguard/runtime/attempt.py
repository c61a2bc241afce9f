"""One call on its way through the pipeline: what its audit row will say.

``Attempt`` gathers the facts a call's row and result need as the call
goes. Each step writes only its own fields:

- arrival (``admission.Admission.receive``): the ids, as safe to store, the
  raw session and key (they scope the idempotency claim), the start time;
- admission (``Admission.admit``): ``spec``, ``arguments``, ``policy``,
  ``approval``, ``decision``, and ``rule``/``reason`` of what let it in;
- the audit log (``audit_log.AuditLog``): ``idempotency_outcome``,
  ``replay_of``, and ``rule``/``reason`` of a refusal or a replay;
- invocation: ``output``, the handler's whole output.

``Refusal`` is how a step stops the pipeline before the handler runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..audit.row import AuditDecision
from ..contract import CallState, ErrorCode, ToolCall
from ..errors import ToolguardError
from ..hooks import Approval
from ..policy import PolicyDecision
from ..registry import ToolSpec


class Refusal(ToolguardError):
    """The pipeline stops here with this outcome (no handler ran). Raised
    and caught inside the runtime only."""

    def __init__(
        self, code: ErrorCode, message: str, rule: str, state: CallState, *, redacted: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.rule = rule
        self.state = state
        self.redacted = redacted
        """True when the message is already safe to show and store (schema
        errors: value-free, keys redacted); free text is redacted otherwise."""


def bad_request(message: str, rule: str) -> Refusal:
    """An ``INVALID_REQUEST`` refusal (state FAILED)."""
    return Refusal(ErrorCode.INVALID_REQUEST, message, rule, CallState.FAILED)


@dataclass(slots=True)
class Attempt:
    """The per-call facts the pipeline gathers as it goes (see the module
    docstring for which step writes which)."""

    call_id: str
    tool_name: str
    actor: str
    session_id: str
    idempotency_key: str | None
    metadata: Mapping[str, Any]
    started_at: str
    t0: float
    raw_session_id: str = ""
    raw_idempotency_key: str | None = None
    """The call's own values, which scope the idempotency claim."""
    spec: ToolSpec | None = None
    arguments: Mapping[str, Any] | None = None
    decision: AuditDecision = "none"
    rule: str = ""
    reason: str = ""
    approval: Approval | None = None
    """The hook decision that let the call through, once admitted."""
    policy: PolicyDecision | None = None
    """The allowing decision, holding open the locations it judged (closed
    when the call ends; left to the handler if it overran)."""
    idempotency_outcome: str | None = None
    replay_of: str | None = None
    output: Any = None
    """The handler's whole output, before truncation: previews and stored
    outcomes are redacted from it, never from a cut (a cut token would no
    longer match its pattern)."""
    redacted_output: Any = None
    """``output`` redacted, once per call (``results.redacted_output``)."""
    output_text: str | None = None
    """``output``'s JSON text (keys sorted, non-ASCII kept), when the output
    check's text is known to be exactly that; None when not known."""

    def elapsed_ms(self) -> int:
        """Milliseconds since the call arrived (never negative)."""
        return max(0, int((time.perf_counter() - self.t0) * 1000))

    def release(self) -> None:
        """Close the locations the policy opened for the call, unless a
        handler that overran its deadline still holds them (it closes them
        itself)."""
        if self.policy is not None:
            self.policy.close()


@dataclass(slots=True)
class Running:
    """A call whose RUNNING row is committed (or, for a READ call, deferred):
    what running its handler and
    finishing its row need. Running the handler is the one step ``execute``
    and ``aexecute`` do differently."""

    call: ToolCall
    spec: ToolSpec
    arguments: Mapping[str, Any]
    attempt: Attempt
    audit_id: int | None
    """None while the row is deferred (see ``deferred``)."""
    claim_key: str | None
    temp_tag: str = ""
    """Names the handler's temporary files, so recover finds them after a crash."""
    deferred: threading.Lock | None = None
    """Set for a READ call whose row is written once, with its outcome
    (``AuditLog.start(defer=True)``); held while that row is written, or
    while its RUNNING row is, before the handler's first change."""
    settled: bool = False
    """The deferred call was answered: a late change is refused."""
    begin: Callable[[], None] | None = None
    """A deferred call's RUNNING row, committed before its handler's first
    change through the workspace (None when not deferred)."""
