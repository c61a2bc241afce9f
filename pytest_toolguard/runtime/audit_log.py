"""The audit log: building each call's row, and writing it come what may.

Every call leaves exactly one row. A call refused before its handler gets
one finished row (``refuse``); a call that will run its handler claims its
idempotency key and commits its RUNNING row in one transaction (``start``:
a held key answers the call from the stored outcome instead), and the row
is finished once the handler's result is known (``settle``).

A write that fails while the call's outcome is already real (a refusal,
or the finish after a handler ran) is queued, never turned into a second
outcome: ``flush`` retries the queue, and the runtime flushes before each
call and at ``close``. A store that is down when the RUNNING row should be
written means the handler never runs (AUDIT_UNAVAILABLE, fail closed).

A READ call run in this process without an idempotency key is deferred
(``start(defer=True)``): one commit, its finished row, written by ``settle``
before the result is returned; when it cannot be committed the result is
withheld (AUDIT_UNAVAILABLE, no data). Fail closed for READ tools means
that no data leaves unless its row is committed; the handler may have run.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from ..audit.lease import call_tag
from ..audit.row import AuditRecord, AuditUnavailable, Outcome, RowNotRunning
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..idempotency import Claim, ClaimOutcome, scope_client_key
from ..jsondata import canonical_json, json_hash, sha256_text
from ..registry import ToolSpec
from ..storable import storable_text
from .attempt import Attempt, Refusal, Running
from .limits import ARGUMENTS_LIMIT, PENDING_LIMIT, PREVIEW_LIMIT
from .messages import text, warn
from .results import failure, redacted_output, replayed_code, stored_outcome
from .settings import RuntimeSettings


class AuditLog:
    """The rows of one runtime's calls in ``settings.audit``, and the queue
    of writes to retry."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._pending: list[Callable[[], object]] = []
        self._pending_lock = threading.Lock()

    @property
    def has_pending(self) -> bool:
        """Writes are queued for retry."""
        return bool(self._pending)

    # -- refused calls ------------------------------------------------------------

    def refuse(self, attempt: Attempt, refusal: Refusal) -> ToolResult:
        """The failed result of a call refused before its handler, with its
        finished row written (or queued)."""
        if refusal.state is CallState.DENIED:
            attempt.decision = "ask" if refusal.code is ErrorCode.APPROVAL_REQUIRED else "deny"
        result = failure(
            self.settings,
            attempt,
            refusal.code,
            refusal.message,
            refusal.state,
            redacted=refusal.redacted,
        )
        attempt.rule, attempt.reason = refusal.rule, result.message
        self.write_row(attempt, result)
        return result

    def _audit_down(self, attempt: Attempt, exc: AuditUnavailable) -> ToolResult:
        # The handler never runs; the row of this refusal is queued like any
        # other that could not be written, so it is not lost either.
        return self.refuse(
            attempt,
            Refusal(
                ErrorCode.AUDIT_UNAVAILABLE,
                f"the audit log could not record the call, so it did not run: {text(exc)}",
                "audit.unavailable",
                CallState.DENIED,
            ),
        )

    # -- the claim and the RUNNING row ----------------------------------------------

    def start(
        self, call: ToolCall, spec: ToolSpec, attempt: Attempt, *, defer: bool = False
    ) -> ToolResult | Running:
        """The idempotency claim and the RUNNING row, in one transaction:
        the running call, or the answer of a held key or a store that is down.

        ``defer`` (a READ tool run in this process, without an idempotency
        key): no RUNNING row yet. ``settle`` writes the call's one row with
        its outcome, committed before the result is returned, and withholds
        the result (AUDIT_UNAVAILABLE) when it cannot; a handler that changes
        a file anyway gets its RUNNING row committed first (``Running.begin``)
        and its row finished as usual. One commit instead of two; a call whose
        process dies mid-read leaves no row (it changed nothing), and the
        temporary files of such a handler's writes are untagged."""
        arguments = attempt.arguments
        assert arguments is not None
        claim_key = self._claim_key(spec, attempt)
        if defer and claim_key is None:
            running = Running(call, spec, arguments, attempt, None, None, "", threading.Lock())
            running.begin = lambda: self._begin_deferred(running)
            return running
        record = self.record(attempt, CallState.RUNNING, None, "", "")
        try:
            # The lease outlasts the deadline by the store's grace: a live
            # call's row is finished before another worker may take it over.
            if claim_key is None:
                audit_id, claim = self.settings.audit.start(
                    record, lease_seconds=self.settings.deadline(spec)
                )
            else:
                # The raw arguments decide a conflict (two calls differing only
                # in a secret are two actions); the store keeps only a keyed
                # fingerprint of this digest.
                audit_id, claim = self.settings.audit.start(
                    record,
                    claim_key=claim_key,
                    lease_seconds=self.settings.deadline(spec),
                    arguments_digest=json_hash(arguments),
                )
        except AuditUnavailable as exc:
            return self._audit_down(attempt, exc)
        if audit_id is None:
            assert claim is not None
            return self._answer_claim(attempt, claim)
        attempt.idempotency_outcome = "claimed" if claim_key else None
        tag = call_tag(audit_id, record.started_at)
        return Running(call, spec, arguments, attempt, audit_id, claim_key, tag)

    def _claim_key(self, spec: ToolSpec, attempt: Attempt) -> str | None:
        # Scoped on the raw session and key: their redacted forms collide
        # (two JWT session ids are both <redacted:jwt>).
        key = attempt.raw_idempotency_key
        if key is None:
            return None
        scope = self.settings.idempotency_scope
        if scope is not None:
            return scope_client_key(key, spec.name, scope)
        return scope_client_key(key, spec.name, attempt.raw_session_id, scope_kind="session")

    def _answer_claim(self, attempt: Attempt, claim: Claim) -> ToolResult:
        attempt.idempotency_outcome = claim.outcome.value.lower()
        attempt.replay_of = claim.original_call_id
        if claim.outcome is ClaimOutcome.RUNNING:
            return self.refuse(
                attempt,
                Refusal(
                    ErrorCode.DUPLICATE_CALL,
                    f"a call with this idempotency key ({claim.original_call_id}) is still "
                    "running; "
                    "retry later to get its outcome",
                    "idempotency.running",
                    CallState.DENIED,
                ),
            )
        if claim.outcome is ClaimOutcome.CONFLICT:
            return self.refuse(
                attempt,
                Refusal(
                    ErrorCode.IDEMPOTENCY_CONFLICT,
                    f"idempotency key already used by call {claim.original_call_id} "
                    "with other arguments",
                    "idempotency.conflict",
                    CallState.DENIED,
                ),
            )
        stored = claim.stored_result or {}
        original_ok = bool(stored.get("ok"))
        original_code = str(stored.get("code", "EXECUTION_ERROR"))
        result = ToolResult(
            call_id=attempt.call_id,
            tool_name=attempt.tool_name,
            ok=original_ok,
            code=ErrorCode.IDEMPOTENT_REPLAY if original_ok else replayed_code(original_code),
            message=(
                f"replayed the outcome of call {claim.original_call_id}: "
                f"{stored.get('message', '')}"
            ),
            data=stored.get("data"),
            retryable=False,
            duration_ms=attempt.elapsed_ms(),
            state=CallState.SUCCEEDED if original_ok else CallState.FAILED,
            truncated=bool(stored.get("truncated", False)),
            total_size=stored.get("total_size"),
        )
        attempt.rule, attempt.reason = "idempotency.replay", f"replay of {claim.original_call_id}"
        self.write_row(attempt, result)
        return result

    # -- finishing the RUNNING row ----------------------------------------------------

    def _begin_deferred(self, running: Running) -> None:
        """The RUNNING row of a deferred call whose handler is about to change
        something; ``AuditUnavailable`` (the change is refused) when it cannot
        be written, or when the call was answered already."""
        assert running.deferred is not None
        with running.deferred:
            if running.audit_id is not None:
                return
            if running.settled:
                raise AuditUnavailable(
                    f"call {running.attempt.call_id} was answered: a late change is not recorded"
                )
            record = self.record(running.attempt, CallState.RUNNING, None, "", "")
            audit_id, _ = self.settings.audit.start(
                record, lease_seconds=self.settings.deadline(running.spec)
            )
            running.audit_id = audit_id

    def settle(self, running: Running, outcome: ToolResult | Exception) -> ToolResult:
        """Finish the RUNNING row with the handler's result (an exception: a
        bug of ours after the handler may have run) and return the result.
        A deferred call's one row is written here (``start(defer=True)``)."""
        if running.deferred is not None:
            with running.deferred:
                running.settled = True
                if running.audit_id is None:
                    return self._write_deferred(running, outcome)
        spec, attempt, claim_key = running.spec, running.attempt, running.claim_key
        stored: dict[str, Any] | None = None
        if isinstance(outcome, ToolResult) and claim_key:
            try:
                redacted = redacted_output(self.settings, attempt)
                stored = stored_outcome(outcome, redacted, spec.result_limit)
            except Exception as exc:
                outcome = exc
        if isinstance(outcome, Exception):
            outcome = self._internal_error(attempt, outcome)
            stored = stored_outcome(outcome, None, spec.result_limit) if claim_key else None
        # The RUNNING row is always finished, so neither a second row nor a
        # key stuck at DUPLICATE_CALL is left behind.
        assert running.audit_id is not None
        self._finish(running.audit_id, attempt, outcome, claim_key, stored)
        return outcome

    def _internal_error(self, attempt: Attempt, exc: Exception) -> ToolResult:
        """The answer when a bug of ours raised ``exc`` after the handler may
        have run: its output dropped, EXECUTION_ERROR."""
        attempt.output = attempt.redacted_output = None
        return failure(
            self.settings,
            attempt,
            ErrorCode.EXECUTION_ERROR,
            f"internal error in the executor: {type(exc).__name__}",
            CallState.FAILED,
        )

    def _write_deferred(self, running: Running, outcome: ToolResult | Exception) -> ToolResult:
        """The one row of a deferred call, committed before its result is
        returned. When it cannot be committed the result is withheld:
        AUDIT_UNAVAILABLE, no data, the row of that answer queued (the
        handler ran, but nothing it read leaves the executor unrecorded)."""
        attempt = running.attempt
        if isinstance(outcome, Exception):
            outcome = self._internal_error(attempt, outcome)
        try:
            try:
                self.settings.audit.record(self._finished(attempt, outcome))
            except AuditUnavailable:
                raise
            except Exception as exc:
                # The store refused this row's content: the row is still
                # written, without the preview (as _finish does for a RUNNING row).
                self.settings.audit.record(
                    self._finished(attempt, outcome, "", _refused_outcome(exc))
                )
        except Exception as exc:
            attempt.output = attempt.redacted_output = None
            reason = text(exc) if isinstance(exc, AuditUnavailable) else type(exc).__name__
            withheld = failure(
                self.settings,
                attempt,
                ErrorCode.AUDIT_UNAVAILABLE,
                f"the audit log could not record the call, so its result is withheld: {reason}",
                CallState.FAILED,
            )
            self.write_row(attempt, withheld)
            return withheld
        return outcome

    def _finish(
        self,
        audit_id: int,
        attempt: Attempt,
        result: ToolResult,
        claim_key: str | None,
        stored: dict[str, Any] | None,
    ) -> None:
        preview = self._preview(attempt, result)
        finished_at = self.settings.now()
        error = "" if result.ok else result.message  # redacted when the result was made

        def finish(preview: str, error: str, stored: dict[str, Any] | None) -> None:
            outcome = Outcome(
                state=result.state,
                result_code=result.code,
                result_preview=preview,
                error_message=error,
                finished_at=finished_at,
                duration_ms=result.duration_ms,
                stored_result=stored,
            )
            self.settings.audit.finish(audit_id, outcome, claim_key=claim_key)

        try:
            self._try_or_queue(lambda: finish(preview, error, stored))
        except Exception as exc:
            # The store refused this row's content: the same row is still
            # finished and the key settled, without the preview and outcome
            # (never a second row, never a key left running).
            dropped = _refused_outcome(exc)
            bare = {
                "ok": result.ok,
                "code": result.code.value,
                "message": dropped,
                "data": None,
                "truncated": False,
                "total_size": None,
            }
            try:
                self._try_or_queue(lambda: finish("", dropped, bare if claim_key else None))
            except Exception as again:
                warn(f"audit row {audit_id} could not be finished: {type(again).__name__}")

    def finish_reported(
        self, row: AuditRecord, result: ToolResult, data: Any, claim_key: str | None
    ) -> bool:
        """Finish ``row``, a RUNNING row whose handler another program ran
        (a gate's admitted call), with the ``result`` it reported: a
        redacted preview of ``data`` (its tool's redactor, as ``execute``
        shows one), the result's message as the error, the outcome stored
        under ``claim_key`` when given. Queued for retry when the store is
        down, as every finishing write. False when the row is no longer
        RUNNING (another process finished it, or recovery marked it
        INTERRUPTED): nothing is queued then."""
        assert row.audit_id is not None
        audit_id = row.audit_id
        preview = ""
        if data is not None:
            spec = self.settings.registry.get(row.tool_name)
            redacted = self.settings.redactor_for(spec).redact(data)
            shown = json.dumps(redacted, ensure_ascii=False, sort_keys=True, default=str)
            preview = shown[:PREVIEW_LIMIT]
        outcome = Outcome(
            state=result.state,
            result_code=result.code,
            result_preview=preview,
            error_message=result.message,
            finished_at=self.settings.now(),
            duration_ms=result.duration_ms,
            stored_result=None if claim_key is None else _kept_as_is(result),
        )
        try:
            self._try_or_queue(
                lambda: self.settings.audit.finish(audit_id, outcome, claim_key=claim_key)
            )
        except RowNotRunning:
            return False
        return True

    # -- rows ------------------------------------------------------------------------

    def write_row(self, attempt: Attempt, result: ToolResult) -> None:
        """The one finished row of a call that ran no handler of ours (a
        refusal, a replay, a rollback)."""
        record = self._finished(attempt, result)
        self._try_or_queue(lambda: self.settings.audit.record(record))

    def _finished(
        self,
        attempt: Attempt,
        result: ToolResult,
        preview: str | None = None,
        error: str | None = None,
    ) -> AuditRecord:
        """The finished row of ``attempt`` answered ``result`` (its preview
        and error message unless given)."""
        return self.record(
            attempt,
            result.state,
            result.code,
            self._preview(attempt, result) if preview is None else preview,
            ("" if result.ok else result.message) if error is None else error,
            finished_at=self.settings.now(),
            duration_ms=result.duration_ms,
        )

    def record(
        self,
        attempt: Attempt,
        state: CallState,
        code: ErrorCode | None,
        preview: str,
        error: str,
        *,
        finished_at: str | None = None,
        duration_ms: int | None = None,
    ) -> AuditRecord:
        """The row of ``attempt`` as it stands: arguments redacted and
        bounded, every text storable; ``arguments_hash`` is the SHA-256 of
        the redacted arguments' canonical JSON before it is cut (equal to
        the raw arguments' when nothing was redacted)."""
        redactor = self.settings.redactor_for(attempt.spec)
        arguments = attempt.arguments
        if arguments is not None:
            redacted = redactor.redact(arguments)
            # Arguments with no secret redact to equal data: the same text
            # (redaction keeps every number and boolean as it was).
            shown = canonical_json(arguments if redacted == arguments else redacted)
            # The hash of what the row shows, whole: a hash of the raw
            # arguments would let a guess of a redacted secret be checked.
            digest = sha256_text(shown)
        else:
            shown, digest = "null", ""
        if len(shown) > ARGUMENTS_LIMIT:
            shown = shown[:ARGUMENTS_LIMIT] + f"...(truncated, {len(shown)} characters)"
        return AuditRecord(
            call_id=attempt.call_id,
            session_id=attempt.session_id,
            actor=attempt.actor,
            tool_name=attempt.tool_name,
            risk=str(attempt.spec.risk) if attempt.spec else "",
            arguments_json=storable_text(shown),
            arguments_hash=digest,
            idempotency_key=attempt.idempotency_key,
            decision=attempt.decision,
            rule=attempt.rule,
            reason=storable_text(attempt.reason),  # our own text, or redacted by refuse()
            state=state,
            result_code=code,
            result_preview=storable_text(preview),
            error_message=storable_text(error),  # a result's message: redacted by failure()
            started_at=attempt.started_at,
            finished_at=finished_at,
            duration_ms=duration_ms,
            replay_of=attempt.replay_of,
            idempotency_outcome=attempt.idempotency_outcome,
        )

    def _preview(self, attempt: Attempt, result: ToolResult) -> str:
        if attempt.output is not None:
            redacted = redacted_output(self.settings, attempt)
            if attempt.output_text is not None and redacted == attempt.output:
                # Nothing was redacted: the text is the one the output check wrote.
                return attempt.output_text[:PREVIEW_LIMIT]
        elif result.data is not None:  # a replayed outcome: stored redacted
            redacted = self.settings.redactor_for(attempt.spec).redact(result.data)
        else:
            return ""
        shown = json.dumps(redacted, ensure_ascii=False, sort_keys=True, default=str)
        return shown[:PREVIEW_LIMIT]

    # -- the retry queue ----------------------------------------------------------------

    def _try_or_queue(self, write: Callable[[], object]) -> None:
        """``write()``, queued for retry when the store is unavailable. A row
        that is no longer RUNNING is no outage: ``RowNotRunning`` propagates."""
        try:
            write()
        except RowNotRunning:
            raise
        except AuditUnavailable as exc:
            with self._pending_lock:
                if len(self._pending) < PENDING_LIMIT:
                    self._pending.append(write)
                    kept = "queued for retry"
                else:
                    kept = "DROPPED: the retry queue is full"
            warn(f"audit write failed ({text(exc)}); {kept}")

    def flush(self) -> int:
        """Retry queued audit writes; returns how many are still pending."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        failed = []
        for write in pending:
            try:
                write()
            except RowNotRunning as exc:  # finished meanwhile elsewhere: never will be here
                warn(f"a queued audit write is dropped: {text(exc)}")
            except AuditUnavailable:
                failed.append(write)
        with self._pending_lock:
            self._pending[:0] = failed
            return len(self._pending)


def _kept_as_is(result: ToolResult) -> dict[str, Any]:
    """What a key keeps of a result whose data is redacted and cut already
    (a gate's reported outcome): the fields ``stored_outcome`` keeps."""
    return {
        "ok": result.ok,
        "code": result.code.value,
        "message": result.message,
        "data": result.data,
        "truncated": result.truncated,
        "total_size": result.total_size,
    }


def _refused_outcome(exc: Exception) -> str:
    """The error text of a row whose outcome the store refused to hold."""
    return f"the audit store refused the outcome ({type(exc).__name__}); not kept"
