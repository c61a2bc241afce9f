"""The audit row: one call as the runtime saw it, and how it ends.

``AuditRecord`` is the row; each of its fields that is a column of
``tool_call_audit`` says how it is kept there (``Column``: its SQL type,
constraints, and the schema version that added it), so that the table of
both stores, their migrations, the column lists and the conversions
between records and rows are all made from this one class
(``pytest_toolguard.audit.schema``). ``Outcome`` is what ``finish`` writes
into a RUNNING row: its fields that are columns are the columns finish
sets. A new field of the row is added here, once, with its column.

Every text a store is given must be redacted already (the stores never
redact); the helpers below only make it storable.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal

from ..contract import CallState, ErrorCode
from ..errors import ToolguardError
from ..storable import storable_data, storable_text
from .lease import LeaseOwner, owner_is_dead

LEASE_GRACE_SECONDS = 30.0
"""What a lease lasts beyond the call's deadline, by default: time for the
runtime to answer TIMEOUT and write the finishing update after the deadline
(through a reconnect, for a server)."""

MAX_LEASE_SECONDS = 10 * 365 * 86400.0
"""Leases are cut to ten years (a call without a practical deadline): the
expiry stays a four-digit-year timestamp, which text compares in order."""

INTERRUPTED_MESSAGE = "interrupted: the process died while the handler ran"

AuditDecision = Literal["allow", "deny", "ask", "none"]
"""What the row says decided the call: a rule or hook allowed, denied or
asked for approval, or nothing had to (``none``)."""
_DECISIONS: frozenset[str] = frozenset({"allow", "deny", "ask", "none"})


class AuditUnavailable(ToolguardError):
    """The audit store could not read or write. The runtime answers
    ``AUDIT_UNAVAILABLE`` and does not run the handler. The message names the
    operation and the store's reason, never the database path; ``operation``
    is the store method that failed."""

    def __init__(self, message: str, operation: str = "") -> None:
        super().__init__(message)
        self.operation = operation


@dataclass(frozen=True, slots=True)
class Column:
    """How a field is kept in ``tool_call_audit``, in either dialect.

    ``sql_type`` is SQLite's (``INTEGER`` is ``BIGINT`` on PostgreSQL);
    ``since`` is the SQLite schema version that added the column (a later
    version adds it to existing databases with ``ALTER TABLE``);
    ``by_store`` marks the lease columns, which the store writes itself on
    ``start``, never the caller."""

    sql_type: Literal["TEXT", "INTEGER"] = "TEXT"
    required: bool = False
    sql_default: str | None = None
    check: str | None = None
    since: int = 1
    by_store: bool = False


def _column(default: Any = MISSING, **spec: Any) -> Any:
    """A dataclass field kept in ``tool_call_audit`` as ``Column(**spec)``."""
    return field(default=default, metadata={"column": Column(**spec)})


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One row of ``tool_call_audit``: one call, as the runtime saw it.

    Text fields must be redacted already. ``started_at``/``finished_at`` are
    ISO 8601 UTC text. ``rule`` names what decided (``policy.write_root``,
    ``schema.input``, ``hook.plan_progress``), ``reason`` says why.
    ``replay_of`` names the call that holds the idempotency key (for a
    replay, a DUPLICATE_CALL or an IDEMPOTENCY_CONFLICT), or the call a
    rollback undid; ``idempotency_outcome`` is ``claimed``, ``replay``,
    ``running`` or ``conflict`` when the call carried a key. ``audit_id``
    is the row id: None until stored. ``ValueError`` for a decision outside
    allow/deny/ask/none.
    """

    call_id: str = _column(required=True)
    session_id: str = _column(required=True)
    actor: str = _column(required=True)
    tool_name: str = _column(required=True)
    risk: str = _column(required=True)
    arguments_json: str = _column(required=True)
    arguments_hash: str = _column(required=True)
    idempotency_key: str | None = _column(None)
    decision: AuditDecision = _column(
        "none", required=True, check="decision IN ('allow', 'deny', 'ask', 'none')"
    )
    rule: str = _column("", required=True, sql_default="''")
    reason: str = _column("", required=True, sql_default="''")
    state: CallState = _column(required=True)
    result_code: ErrorCode | None = _column(None)
    result_preview: str | None = _column(None)
    error_message: str | None = _column(None)
    started_at: str = _column(required=True)
    finished_at: str | None = _column(None)
    duration_ms: int | None = _column(None, sql_type="INTEGER")
    replay_of: str | None = _column(None)
    idempotency_outcome: str | None = _column(None)
    audit_id: int | None = None
    lease_owner: str | None = _column(None, since=2, by_store=True)
    """Who wrote a row that ran a handler (``LeaseOwner`` text); set by the
    store on ``start`` (a value given is ignored), None for ``record`` rows."""
    lease_expires_at: str | None = _column(None, since=2, by_store=True)
    """When that row's lease ends, by the database's clock (ISO 8601 UTC
    text); set by the store, kept after the row finished."""

    def __post_init__(self) -> None:
        if self.decision not in _DECISIONS:
            raise ValueError(
                f"decision must be one of allow, deny, ask, none; got {self.decision!r}"
            )

    def finished(self, outcome: Outcome) -> AuditRecord:
        """This row as ``finish`` leaves it with ``outcome``."""
        return replace(self, **{name: getattr(outcome, name) for name in FINISH_COLUMNS})


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a RUNNING row ends: what ``finish(audit_id, outcome)`` writes.

    Its fields that are columns of the row (all but ``stored_result``) are
    the columns ``finish`` sets; ``stored_result`` is what a call's
    idempotency key keeps (``ToolResult``'s field names; what later calls
    with the key replay), used only when ``finish`` is given the key."""

    state: CallState
    result_code: ErrorCode | None = None
    result_preview: str | None = None
    error_message: str | None = None
    finished_at: str
    duration_ms: int | None = None
    stored_result: Mapping[str, Any] | None = None


def table_columns() -> tuple[tuple[str, Column], ...]:
    """Every column of ``tool_call_audit`` but ``audit_id``, in table order:
    by the version that added it (``ALTER TABLE`` appends), then as declared."""
    declared = [
        (item.name, item.metadata["column"])
        for item in fields(AuditRecord)
        if "column" in item.metadata
    ]
    return tuple(sorted(declared, key=lambda column: column[1].since))


AUDIT_COLUMNS: tuple[str, ...] = tuple(name for name, spec in table_columns() if not spec.by_store)
"""The columns a caller's record fills, in the order ``row_values`` gives."""
LEASE_COLUMNS: tuple[str, ...] = tuple(name for name, spec in table_columns() if spec.by_store)
"""Columns after ``AUDIT_COLUMNS``, written by the store itself on ``start``."""
FINISH_COLUMNS: tuple[str, ...] = tuple(
    item.name for item in fields(Outcome) if item.name in AUDIT_COLUMNS
)
"""The columns ``finish`` sets, in the order ``finish_values`` gives."""

_FIELD_VALUES = operator.attrgetter(*AUDIT_COLUMNS)
_OUTCOME_VALUES = operator.attrgetter(*FINISH_COLUMNS)
_STATE, _RESULT_CODE, _IDEMPOTENCY_KEY, _IDEMPOTENCY_OUTCOME = (
    AUDIT_COLUMNS.index(name)
    for name in ("state", "result_code", "idempotency_key", "idempotency_outcome")
)
_ENUMS: Mapping[str, type[CallState] | type[ErrorCode]] = {
    "state": CallState,
    "result_code": ErrorCode,
}


def _storable(value: Any) -> Any:
    # ``isascii`` inline: the common row is all ASCII, and a call per value
    # costs as much as the rest of a row's conversion.
    return value if not isinstance(value, str) or value.isascii() else storable_text(value)


def row_values(
    rec: AuditRecord,
    state: CallState,
    *,
    idempotency_key: str | None = None,
    idempotency_outcome: str | None = None,
) -> list[Any]:
    """``rec``'s values in ``AUDIT_COLUMNS`` order, enums as their text;
    ``state`` is ``rec.state`` checked by the caller, the two idempotency
    values replace ``rec``'s when given."""
    # Made storable here too: a row that a store cannot encode would leave
    # the call without its row (or a RUNNING row never finished).
    values = [_storable(value) for value in _FIELD_VALUES(rec)]
    values[_STATE] = state.value
    code = values[_RESULT_CODE]
    if code is not None:
        values[_RESULT_CODE] = ErrorCode(code).value
    if idempotency_key is not None:
        values[_IDEMPOTENCY_KEY] = storable_text(idempotency_key)
    if idempotency_outcome is not None:
        values[_IDEMPOTENCY_OUTCOME] = idempotency_outcome
    return values


def finish_values(outcome: Outcome) -> list[Any]:
    """``outcome``'s values in ``FINISH_COLUMNS`` order, enums as their
    text, texts storable. ``ValueError`` when its state is not finished."""
    state = CallState(outcome.state)
    if not state.finished:
        raise ValueError(f"finish() needs a finished state, got {state}")
    values = [_storable(value) for value in _OUTCOME_VALUES(outcome)]
    for name, enum in _ENUMS.items():
        if name in FINISH_COLUMNS:
            index = FINISH_COLUMNS.index(name)
            if values[index] is not None:
                values[index] = enum(values[index]).value
    return values


def record_from_row(row: Sequence[Any]) -> AuditRecord:
    """The record of a row read as ``audit_id``, ``AUDIT_COLUMNS``, then
    ``LEASE_COLUMNS`` (the lease may be left out)."""
    audit_id, *values = row
    named = dict(zip(AUDIT_COLUMNS + LEASE_COLUMNS, values, strict=False))
    for name, enum in _ENUMS.items():
        if named[name] is not None:
            named[name] = enum(named[name])
    return AuditRecord(audit_id=audit_id, **named)


def result_json(result: Mapping[str, Any] | None) -> str | None:
    """The JSON text an idempotency key keeps for ``result`` (None for
    None): keys sorted, values JSON cannot encode as their ``str``, text
    made ``storable_text``."""
    if result is None:
        return None
    text = json.dumps(dict(result), ensure_ascii=False, sort_keys=True, default=str)
    return (
        text
        if text.isascii()
        else json.dumps(storable_data(json.loads(text)), ensure_ascii=False, sort_keys=True)
    )


def interrupted_result(call_id: str, tool_name: str) -> dict[str, Any]:
    """The outcome ``recover`` stores for a key whose call was interrupted:
    what a later call with that key replays. Uses ``ToolResult``'s field
    names, as results passed to ``finish`` should."""
    return {
        "call_id": call_id,
        "tool_name": tool_name,
        "ok": False,
        "code": ErrorCode.EXECUTION_ERROR.value,
        "message": INTERRUPTED_MESSAGE,
        "data": None,
        "retryable": False,
        "state": CallState.INTERRUPTED.value,
    }


def interrupted_row(rec: AuditRecord, now: str) -> AuditRecord:
    """``rec`` as ``recover`` leaves it: INTERRUPTED, EXECUTION_ERROR,
    ``INTERRUPTED_MESSAGE``, finished at ``now``."""
    return replace(
        rec,
        state=CallState.INTERRUPTED,
        result_code=ErrorCode.EXECUTION_ERROR,
        error_message=INTERRUPTED_MESSAGE,
        finished_at=now,
    )


class RowNotRunning(AuditUnavailable):
    """``finish`` of a row that is not RUNNING (any more): the store is up,
    and writing again will never succeed, so the write is not queued."""


def not_running_error(audit_id: int) -> RowNotRunning:
    """The error ``finish`` raises for a row that is not RUNNING."""
    return RowNotRunning(
        f"audit row {audit_id} is not RUNNING: unknown, or finished already "
        "(recover() marks rows whose lease ended INTERRUPTED)",
        "finish",
    )


def lease_length(lease_seconds: float | None, grace: float) -> float:
    """The seconds a new row's lease lasts: ``lease_seconds`` (the call's
    deadline; None counts as 0, for a caller without one) plus ``grace``,
    within [0, ``MAX_LEASE_SECONDS``]. ``ValueError`` for a negative or
    non-finite length."""
    for part in (lease_seconds or 0.0, grace):
        if not (isinstance(part, (int, float)) and 0 <= part < float("inf")):
            raise ValueError(f"a lease needs finite seconds >= 0, got {part!r}")
    return min(float((lease_seconds or 0.0) + grace), MAX_LEASE_SECONDS)


def takes_over(lease_owner: str | None, expired: bool, here: LeaseOwner) -> bool:
    """Whether ``recover`` takes over a RUNNING row: its lease expired, or it
    has none (a row older than leases), or its owner is provably dead."""
    if expired:
        return True
    owner = LeaseOwner.parse(lease_owner)
    return owner is None or owner_is_dead(owner, here)
