"""``duplicate_submission`` judges a keyless repeat against what the tool
declares: a tool not declared idempotent whose second identical call
changes files again is reported (its author accepts that by declaring
``acts_on_repeat=True``), a tool declared idempotent must change nothing,
and a repeat that changes nothing passes whatever the declaration."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_faults_catch_bugs import reported, run

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.registry import PathAccess, ToolSpec, tool

TICKET = {"ticket": "notes/T-7.json"}
FILES = {"notes/todo.md": "- old\n", "notes/T-7.json": '{"status": "open", "events": []}'}
LOG = "notes/closed.log"
SCHEMA = {
    "type": "object",
    "properties": {"ticket": {"type": "string"}},
    "required": ["ticket"],
    "additionalProperties": False,
}


def _read(ctx: ToolContext, ticket: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ctx.workspace.read_text(ticket))
    return data


def _write(ctx: ToolContext, ticket: str, data: dict[str, Any]) -> None:
    ctx.workspace.write_text(ticket, json.dumps(data, sort_keys=True))


def close_appending_event(ctx: ToolContext, ticket: str) -> dict[str, Any]:
    """Adds a "closed" event on every call, closed or not."""
    data = _read(ctx, ticket)
    data["status"] = "closed"
    data["events"].append("closed")
    _write(ctx, ticket, data)
    return {"closed": True}


def close_counting_down(ctx: ToolContext, ticket: str) -> dict[str, Any]:
    """Decrements the open-ticket counter on every call."""
    data = _read(ctx, ticket)
    data["status"] = "closed"
    data["open_count"] = data.get("open_count", 5) - 1
    _write(ctx, ticket, data)
    return {"closed": True}


def close_logging(ctx: ToolContext, ticket: str) -> dict[str, Any]:
    """Sets the status (idempotent), then logs the closing on every call."""
    data = _read(ctx, ticket)
    data["status"] = "closed"
    _write(ctx, ticket, data)
    log = ctx.workspace.read_text(LOG) if ctx.workspace.exists(LOG) else ""
    ctx.workspace.write_text(LOG, log + f"closed {ticket}\n")
    return {"closed": True}


def close_once(ctx: ToolContext, ticket: str) -> dict[str, Any]:
    """Closes the ticket; closing a closed ticket changes nothing."""
    data = _read(ctx, ticket)
    if data["status"] != "closed":
        data["status"] = "closed"
        data["events"].append("closed")
        _write(ctx, ticket, data)
    return {"closed": True}


def show_ticket(ctx: ToolContext, ticket: str) -> dict[str, Any]:
    """Reads only."""
    return {"status": _read(ctx, ticket)["status"]}


def spec(handler: Any, risk: Risk = Risk.WRITE, **declared: Any) -> ToolSpec:
    access = PathAccess.write if risk is not Risk.READ else PathAccess.read
    made: ToolSpec = tool(
        name=handler.__name__,
        input_schema=SCHEMA,
        risk=risk,
        paths=[access("{ticket}"), access(LOG)],
        **declared,
    )(handler)
    return made


REPEATING = [close_appending_event, close_counting_down, close_logging]


@pytest.mark.parametrize("handler", REPEATING, ids=lambda h: h.__name__)
def test_undeclared_tool_acting_again_on_a_keyless_repeat_is_reported(handler: Any) -> None:
    outcome = run("duplicate_submission", spec(handler), TICKET, FILES)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "repeated without an idempotency key", "acts_on_repeat"), outcome


@pytest.mark.parametrize("handler", REPEATING, ids=lambda h: h.__name__)
def test_declaring_idempotent_makes_it_the_strict_check(handler: Any) -> None:
    outcome = run("duplicate_submission", spec(handler, idempotent=True), TICKET, FILES)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "declared idempotent, but a second run without a key"), outcome


@pytest.mark.parametrize("handler", REPEATING, ids=lambda h: h.__name__)
def test_declaring_acts_on_repeat_accepts_the_repeat(handler: Any) -> None:
    outcome = run("duplicate_submission", spec(handler, acts_on_repeat=True), TICKET, FILES)

    assert outcome.status == "pass", outcome.problems


@pytest.mark.parametrize(
    ("handler", "risk", "declared"),
    [
        (close_once, Risk.WRITE, {}),
        (close_once, Risk.WRITE, {"idempotent": True}),
        (show_ticket, Risk.READ, {}),
    ],
    ids=["closes-once", "closes-once-declared", "read-only"],
)
def test_repeat_changing_nothing_passes(handler: Any, risk: Risk, declared: Any) -> None:
    outcome = run("duplicate_submission", spec(handler, risk, **declared), TICKET, FILES)

    assert outcome.status == "pass", outcome.problems


def test_idempotent_and_acts_on_repeat_together_are_refused() -> None:
    with pytest.raises(ValueError, match="contradict"):
        spec(close_once, idempotent=True, acts_on_repeat=True)
