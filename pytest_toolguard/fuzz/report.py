"""What fuzzing found: the ``Problem`` kinds, one ``FuzzFailure`` per
minimal failing call, and the ``FuzzReport`` of one tool."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Problem(str, enum.Enum):
    """Each way a fuzzed call can fail; the value is a stable id."""

    EXECUTE_RAISED = "execute-raised"
    """``ToolRuntime.execute`` raised instead of answering (a runtime bug)."""
    INVALID_REACHED_HANDLER = "invalid-reached-handler"
    """The handler ran with arguments the input schema refuses (a runtime bug)."""
    INVALID_NOT_REFUSED = "invalid-not-refused"
    """Arguments the schema refuses were answered with another code than
    INVALID_ARGUMENT (a runtime bug)."""
    VALID_REFUSED = "valid-refused"
    """Arguments the schema accepts were refused by the input schema check."""
    OUTSIDE_CHANGED = "outside-changed"
    """Something outside the workspace root was created, removed or changed."""
    OUTSIDE_READ = "outside-read"
    """The result or the handler's output holds the content of a decoy
    outside the workspace (``harness.world.DECOY_MARKER``): the tool read outside."""
    OUTSIDE_ACCESS = "outside-access"
    """The handler resolved a path outside the workspace (``open``, ``stat``,
    ``listdir``, ``readlink``, ``realpath``: ``harness.accesses``), whatever
    it found there."""
    REAL_DISK = "real-disk"
    """The handler reached the real disk from the fake world (SQLite on a
    file, a process started, a real file opened for writing, a write
    beneath a read-only real directory: ``harness.escapes``), refused; the
    tool needs ``world="directory"``."""
    FORBIDDEN_READ = "forbidden-read"
    """The result or the handler's output holds a forbidden ``.env`` file's
    content (``harness.world.FORBIDDEN_MARKER``)."""
    UNDECLARED_CHANGE = "undeclared-change"
    """The call changed a file its tool's declarations do not allow
    (``harness.effects``: a READ tool anything; another tool a file beneath
    no declared write path)."""
    SECRET_LEAKED = "secret-leaked"
    """The value of an argument named like a secret (``password``,
    ``api_key``, ...) is in the result, its message or the audit row."""
    THREAD_LEFT = "thread-left"
    """The handler answered with a thread it started still running."""
    AUDIT_ROWS = "audit-rows"
    """Not exactly one finished audit row with the result's code."""
    OUTPUT_INVALID = "output-invalid"
    """The handler's output broke the tool's output schema (OUTPUT_INVALID)."""
    OUTPUT_NOT_JSON = "output-not-json"
    """The handler returned something that is not JSON data (OUTPUT_INVALID)."""
    OUTPUT_UNCHECKED = "output-unchecked"
    """An OK result whose output breaks the output schema (a runtime bug)."""
    HANDLER_BASE_EXCEPTION = "handler-base-exception"
    """The handler raised a BaseException that is not an Exception."""
    HANDLER_RAN_TWICE = "handler-ran-twice"
    """One call ran the handler more than once."""
    TIMEOUT = "timeout"
    """The handler overran its deadline and ran on instead of stopping when
    cancelled (``ctx.cancelled``; writes then raise ``CallCancelled``)."""
    HANDLER_STILL_RUNNING = "handler-still-running"
    """The handler was still running ``ORPHAN_JOIN_SECONDS`` after the call
    was answered; it may write to the real disk later."""
    NETWORK_REFUSED_OK = "network-refused-ok"
    """The handler's network request was refused (fuzzing never reaches the
    network unless asked to: ``fuzz.network``), yet the call answered OK:
    the tool claims an effect that did not happen."""
    FLAKY = "flaky"
    """A failure that did not happen again with the same arguments."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class FuzzFailure:
    """One failing call: the tool, what went wrong, and the (minimal)
    arguments that make it happen. ``valid`` says whether the input schema
    accepts them. ``arguments`` is None only for a ``FLAKY`` failure whose
    arguments Hypothesis did not keep."""

    tool: str
    problem: Problem
    detail: str
    arguments: dict[str, Any] | None
    valid: bool

    @property
    def arguments_json(self) -> str:
        """The arguments as one line of JSON (ASCII, sorted keys)."""
        return json.dumps(self.arguments, ensure_ascii=True, sort_keys=True)

    @property
    def call_json(self) -> str:
        """The call as a model would send it: ``{"tool_name": ..., "arguments": ...}``."""
        return json.dumps(
            {"tool_name": self.tool, "arguments": self.arguments}, ensure_ascii=True, sort_keys=True
        )

    @property
    def reproduce(self) -> str:
        """One line of Python that runs the failing call again with the
        same checks, in the same fuzz workspace; ``spec`` is the tool's
        ``ToolSpec`` (``registry.get(name)``)."""
        return f"pytest_toolguard.fuzz.check_call(spec, json.loads({self.arguments_json!r}))"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (it travels on a pytest report); ``from_dict`` reverses it."""
        return {
            "tool": self.tool,
            "problem": self.problem.value,
            "detail": self.detail,
            "arguments": self.arguments,
            "valid": self.valid,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FuzzFailure:
        return cls(
            tool=data["tool"],
            problem=Problem(data["problem"]),
            detail=data["detail"],
            arguments=data["arguments"],
            valid=data["valid"],
        )

    def format(self) -> str:
        """Three lines: the problem, the call, how to reproduce it."""
        kind = "valid" if self.valid else "invalid"
        return (
            f"[{self.problem}] with {kind} arguments: {self.detail}\n"
            f"  call:      {self.call_json}\n"
            f"  reproduce: {self.reproduce}"
        )


@dataclass(frozen=True, slots=True)
class FuzzReport:
    """What fuzzing one tool found.

    ``valid_calls`` and ``invalid_calls`` count the calls executed with
    arguments the input schema accepts or refuses (explicit examples and
    shrinking included); ``handler_calls`` how many of them ran the handler;
    ``codes`` how they were answered.
    ``failures`` holds one minimal failing call per ``Problem`` and kind of
    arguments (valid, invalid). ``skipped`` says why the tool could not be
    fuzzed: a schema the strategies cannot translate (nothing was run), or
    a handler that no call reached (the refusals that stopped them);
    ``notes`` what could not be tried (no invalid arguments exist, say)."""

    tool: str
    valid_calls: int
    invalid_calls: int
    handler_calls: int
    failures: tuple[FuzzFailure, ...]
    skipped: str | None = None
    notes: tuple[str, ...] = ()
    seed: int = 0
    codes: Mapping[str, int] = field(default_factory=dict)
    """How many calls were answered with each ``ErrorCode`` value (valid and
    invalid together): shows what the fuzzing reached (did any read succeed?)."""
    network: bool = False
    """Whether handlers were let reach the network (``network=True``); by
    default every reach was refused (``fuzz.network``)."""

    @property
    def ok(self) -> bool:
        """No failure (a skipped tool is not a failure)."""
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (it travels on a pytest report); ``from_dict`` reverses it."""
        return {
            "tool": self.tool,
            "valid_calls": self.valid_calls,
            "invalid_calls": self.invalid_calls,
            "handler_calls": self.handler_calls,
            "failures": [failure.as_dict() for failure in self.failures],
            "skipped": self.skipped,
            "notes": list(self.notes),
            "seed": self.seed,
            "codes": dict(self.codes),
            "network": self.network,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FuzzReport:
        return cls(
            tool=data["tool"],
            valid_calls=data["valid_calls"],
            invalid_calls=data["invalid_calls"],
            handler_calls=data["handler_calls"],
            failures=tuple(FuzzFailure.from_dict(item) for item in data["failures"]),
            skipped=data["skipped"],
            notes=tuple(data["notes"]),
            seed=data["seed"],
            codes=dict(data["codes"]),
            network=bool(data.get("network", False)),
        )

    def format(self) -> str:
        """A readable multi-line report: a summary line, then each failure."""
        if self.skipped is not None and not (self.valid_calls or self.invalid_calls):
            return f"fuzz {self.tool}: skipped: {self.skipped}"
        ran = (
            f"{self.valid_calls} valid and {self.invalid_calls} invalid calls, "
            f"handler ran {self.handler_calls} times, seed {self.seed}"
        )
        verdict = "ok" if self.ok else f"{len(self.failures)} failure(s)"
        if self.skipped is not None:
            verdict = f"skipped: {self.skipped}"
        lines = [f"fuzz {self.tool}: {verdict} ({ran})"]
        if self.network:
            lines.append("  network: allowed (network=True): handlers reached the real network")
        if self.codes:
            answered = ", ".join(f"{code} {count}" for code, count in sorted(self.codes.items()))
            lines.append(f"  answered: {answered}")
        lines.extend(f"  note: {note}" for note in self.notes)
        for failure in self.failures:
            lines.extend("  " + line for line in failure.format().splitlines())
        return "\n".join(lines)
