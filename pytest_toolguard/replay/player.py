"""Replaying a cassette or case through the real executor.

``replay(cassette, registry)`` rebuilds the recorded workspace in a fake
filesystem, freezes the clock at the recorded time, runs every recorded call
through a fresh ``ToolRuntime`` with the recorded session, and compares:

- per interaction: ok, code, retryable, state, truncated and data (exact,
  after redacting the replayed data as the recorder did, except volatile
  fields); for cases also a message fragment;
- per call, its audit row: state, decision, deciding rule, result code and
  idempotency outcome;
- after the last call, every file under the workspace (none missing, none
  extra, none different) and every recorded file outside it (unchanged);
- that no handler outlived its deadline;
- that every HTTP request a handler made had a recorded exchange (the
  recorded approvals are granted again: ``approvals``; the recorded HTTP
  exchanges are served, with no network: ``http``).

It never raises for a difference: every one is collected in the returned
``ReplayReport``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..audit import AuditRecord, SQLiteAuditStore
from ..contract import ToolCall, ToolResult
from ..hooks import PostToolUse, PreToolUse
from ..plan import PlanProgress
from ..redaction import Redactor
from ..registry import ToolRegistry
from ..runtime import ToolRuntime
from .approvals import approval_hooks
from .cassette import AuditExpectation, Cassette, Expectation, FileState, Interaction
from .environment import fake_filesystem, frozen_clock, read_files, read_tree
from .http import HttpPlayback, HttpUnavailable, UnmatchedRequest
from .redacting import redact_file, redact_path

ORPHAN_JOIN_SECONDS = 5.0

_PLACEHOLDER = re.compile(r"<redacted:([a-z0-9_]+)>")


@dataclass(frozen=True, slots=True)
class Difference:
    """One thing that replayed differently from what was recorded."""

    where: str
    """``interaction 3 (write_json_file)``, ``files`` or ``runtime``."""
    field: str
    recorded: Any
    replayed: Any
    diff: str = ""
    """A unified diff, for text and file contents."""


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The outcome of replaying one cassette or case."""

    cassette: Cassette
    results: tuple[ToolResult, ...]
    differences: tuple[Difference, ...]
    checks: int
    audit_rows: tuple[AuditRecord, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.differences


def replay(
    cassette: Cassette,
    registry: ToolRegistry,
    *,
    redactor: Redactor | None = None,
    secrets: Mapping[str, str] | None = None,
    volatile: Sequence[str] = (),
) -> ReplayReport:
    """Replay ``cassette`` through a fresh runtime over ``registry``.

    ``secrets`` maps a placeholder keyword (``authorization`` for
    ``<redacted:authorization>``) to the real value to send; placeholders
    without one are sent as they are. ``volatile`` adds field paths (such as
    ``data.files_searched``) that are not compared in any interaction.
    """
    redactor = redactor or Redactor()
    checker = _Checker(redactor, tuple(cassette.volatile) + tuple(volatile), registry)
    http = checker.http_playback(cassette, registry)  # imports vcrpy outside the fake world
    # The clock first: pyfakefs unloads modules first imported while it is
    # active, so the clock's backend must be imported outside it.
    with frozen_clock(cassette.recorded_at), fake_filesystem(cassette):
        outside_before = dict(cassette.workspace.outside_files)
        store = SQLiteAuditStore(":memory:")
        session = cassette.session
        hooks: list[PreToolUse | PostToolUse] = [PlanProgress(session.plan)] if session.plan else []
        runtime = ToolRuntime(
            http.registry(registry) if http else registry,
            cassette.workspace.root,
            session.capabilities,
            store,
            hooks=[*hooks, *approval_hooks(cassette, redactor)],
            redactor=redactor,
            variables=session.variables,
            idempotency_scope=session.idempotency_scope,
            timeouts=session.timeouts,
        )
        results: list[ToolResult] = []
        stored: list[Any] = []
        runtime.add_listener(lambda call, result, data, approval: stored.append(data))
        try:
            for index, interaction in enumerate(cassette.interactions):
                if http:
                    http.current = index
                result = runtime.execute(_with_secrets(interaction.call, secrets))
                results.append(result)
                checker.result(index, interaction, result, stored[-1])
        finally:
            orphans = runtime.close(join_timeout=ORPHAN_JOIN_SECONDS)
            if http:
                http.close()
        if http:
            checker.http_requests(cassette.interactions, http.unmatched())
        for orphan in orphans:
            checker.add("runtime", "handlers", "none still running", orphan)
        rows = tuple(store.rows())
        store.close()
        checker.audit(cassette.interactions, rows)
        checker.files(cassette, _redacted_paths(redactor, read_tree(cassette.workspace.root)))
        checker.outside(outside_before, read_files(outside_before))
    return ReplayReport(cassette, tuple(results), tuple(checker.differences), checker.checks, rows)


def _redacted_paths(redactor: Redactor, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` keyed by their paths as a cassette keeps them."""
    return {redact_path(redactor, path): data for path, data in files.items()}


def _with_secrets(call: ToolCall, secrets: Mapping[str, str] | None) -> ToolCall:
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
        # Arguments recorded as JSON text: each secret goes in JSON-escaped,
        # so a quote or backslash in it cannot change the document.
        text = _PLACEHOLDER.sub(
            lambda m: (
                json.dumps(secrets[m.group(1)])[1:-1] if m.group(1) in secrets else m.group(0)
            ),
            call.arguments,
        )
        return replace(call, arguments=text)
    return replace(call, arguments=fill(call.arguments))


class _Checker:
    """Collects differences and counts the checks made."""

    def __init__(
        self, redactor: Redactor, volatile: tuple[str, ...], registry: ToolRegistry | None = None
    ) -> None:
        self.redactor = redactor
        self.volatile = volatile
        self.registry = registry
        self.differences: list[Difference] = []
        self.checks = 0

    def add(self, where: str, name: str, recorded: Any, replayed: Any, diff: str = "") -> None:
        self.differences.append(Difference(where, name, recorded, replayed, diff))

    def http_playback(self, cassette: Cassette, registry: ToolRegistry) -> HttpPlayback | None:
        """The HTTP playback ``cassette`` needs (see ``HttpPlayback.for_cassette``);
        None, and a difference saying what to install, when vcrpy is missing
        for the exchanges it holds."""
        try:
            return HttpPlayback.for_cassette(cassette, registry, self.redactor)
        except HttpUnavailable as exc:
            self.add("runtime", "http", "vcrpy serving the recorded exchanges", str(exc))
            return None

    def http_requests(
        self, interactions: Sequence[Interaction], unmatched: Sequence[UnmatchedRequest]
    ) -> None:
        """A difference per HTTP request that no recorded exchange answered."""
        self.checks += 1
        for request in unmatched:
            index = request.interaction
            where = (
                f"interaction {index + 1} ({interactions[index].call.tool_name})"
                if index is not None and index < len(interactions)
                else "http"
            )
            self.add(
                where,
                "http request",
                "none recorded",
                f"{request.method} {request.uri} (no recorded exchange; not sent)",
            )

    def compare(self, where: str, name: str, recorded: Any, replayed: Any) -> None:
        self.checks += 1
        if recorded != replayed:
            self.add(where, name, recorded, replayed, _text_diff(recorded, replayed))

    def result(
        self, index: int, interaction: Interaction, result: ToolResult, stored_data: Any
    ) -> None:
        """Compare one result; ``stored_data`` is its data as the runtime
        stores it (redacted, then cut: see ``ToolRuntime.add_listener``),
        which is what the recorder kept."""
        where = f"interaction {index + 1} ({interaction.call.tool_name})"
        expected: Expectation = interaction.result
        replayed = {
            "ok": result.ok,
            "code": result.code.value,
            "retryable": result.retryable,
            "state": result.state.value,
            "truncated": result.truncated,
        }
        for name, value in replayed.items():
            recorded = getattr(expected, name)
            if recorded is not None:
                self.compare(where, f"result.{name}", recorded, value)
        if expected.code is not None and expected.code != result.code.value:
            # The code alone does not say why: show both messages with it.
            code = self.differences[-1]
            self.differences[-1] = replace(
                code, diff=_messages(expected.message, result.message) + code.diff
            )
        if expected.check_data:
            volatile = self.volatile + interaction.volatile
            recorded_data = _without(expected.data, volatile)
            replayed_data = _without(stored_data, volatile)
            self.compare(where, "result.data", recorded_data, replayed_data)
        if expected.message_contains is not None:
            self.checks += 1
            if expected.message_contains not in result.message:
                self.add(
                    where, "result.message", f"... {expected.message_contains} ...", result.message
                )

    def audit(self, interactions: Sequence[Interaction], rows: Sequence[AuditRecord]) -> None:
        self.compare("audit", "rows", len(interactions), len(rows))
        for index, (interaction, row) in enumerate(zip(interactions, rows, strict=False)):
            where = f"interaction {index + 1} ({interaction.call.tool_name})"
            expected: AuditExpectation = interaction.audit
            self.compare(where, "audit.call_id", interaction.call.call_id, row.call_id)
            if not row.state.finished:
                self.add(where, "audit.state", "a finished state", row.state.value)
            for name in ("state", "decision", "rule"):
                recorded = getattr(expected, name)
                if recorded is not None:
                    value = getattr(row, name)
                    self.compare(where, f"audit.{name}", recorded, getattr(value, "value", value))
            if expected.check_result_code:
                code = row.result_code.value if row.result_code else None
                self.compare(where, "audit.result_code", expected.result_code, code)
            if expected.check_idempotency_outcome:
                self.compare(
                    where,
                    "audit.idempotency_outcome",
                    expected.idempotency_outcome,
                    row.idempotency_outcome,
                )

    def files(self, cassette: Cassette, actual: Mapping[str, bytes]) -> None:
        expected = cassette.final_files
        paths = sorted(set(expected) | (set(actual) if cassette.final_files_exact else set()))
        for path in paths:
            self.checks += 1
            want: FileState | None = expected.get(path)
            have = actual.get(path)
            if want is None and path in expected:  # recorded as absent
                if have is not None:
                    self.add("files", path, "absent", _describe(have))
            elif want is None:
                self.add("files", path, "absent (not in the cassette)", _describe(have))
            elif have is None:
                self.add("files", path, _describe_state(want), "missing")
            else:
                have = redact_file(self.redactor, have)
                if FileState.of(have).sha256 != want.sha256:
                    diff = (
                        _text_diff(want.content, have, path, min_lines=1)
                        if want.content is not None
                        else ""
                    )
                    self.add("files", path, _describe_state(want), _describe(have), diff)

    def outside(self, before: Mapping[str, bytes], after: Mapping[str, bytes | None]) -> None:
        for path, content in sorted(before.items()):
            self.checks += 1
            if after.get(path) != content:
                self.add("outside the workspace", path, "unchanged", _describe(after.get(path)))


def _without(value: Any, paths: Sequence[str]) -> Any:
    """``value`` with the fields at dotted ``paths`` removed (``*`` matches
    any key or index); paths start at the result, so ``data.x`` removes
    ``value["x"]``."""
    for path in paths:
        parts = path.split(".")
        if parts and parts[0] == "data":
            value = _drop(value, parts[1:])
    return value


def _drop(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(value, Mapping):
        if not rest:
            return {k: v for k, v in value.items() if not (head == "*" or k == head)}
        return {k: _drop(v, rest) if head in ("*", k) else v for k, v in value.items()}
    if isinstance(value, list):
        if not rest:
            return [v for i, v in enumerate(value) if not (head == "*" or str(i) == head)]
        return [_drop(v, rest) if head in ("*", str(i)) else v for i, v in enumerate(value)]
    return value


def _messages(recorded: str | None, replayed: str) -> str:
    lines = [f"replayed message: {replayed}"]
    if recorded is not None:
        lines.insert(0, f"recorded message: {recorded}")
    return "".join(line + "\n" for line in lines)


def _describe(content: bytes | None) -> str:
    if content is None:
        return "missing"
    return f"{len(content)} bytes, sha256 {FileState.of(content).sha256[:12]}"


def _describe_state(state: FileState) -> str:
    if state.content is not None:
        return _describe(state.content)
    return f"sha256 {state.sha256[:12]}"


def _text_diff(recorded: Any, replayed: Any, name: str = "", *, min_lines: int = 2) -> str:
    """A unified diff when both sides are text (or JSON data that prints as
    several lines) and one side has ``min_lines`` lines; '' otherwise. Files
    ask for one line: a one-line file is still a file to compare."""

    def lines(value: Any) -> list[str] | None:
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                return None
        if not isinstance(value, str):
            if value is None or isinstance(value, (bool, int, float)):
                return None
            value = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
        split: list[str] = value.splitlines(keepends=True)
        return split

    old, new = lines(recorded), lines(replayed)
    if old is None or new is None or (len(old) < min_lines and len(new) < min_lines):
        return ""
    diff = difflib.unified_diff(old, new, f"recorded {name}".strip(), f"replayed {name}".strip())
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff)
