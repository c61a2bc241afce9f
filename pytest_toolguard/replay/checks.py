"""What replay compares, and how it says what differed.

``ReplayChecks`` collects every ``Difference`` between a recorded session
and its replay, and counts the checks made: per interaction its result
(ok, code, retryable, state, truncated, data after redaction, except
volatile fields; for cases a message fragment) and its audit row (state,
decision, rule, result code, idempotency outcome); after the last call every
file under the workspace and every recorded file outside it; the handlers
still running; the HTTP requests no recorded exchange answered; each reach
of the real disk the fake world refused (``harness.escapes``: a
difference even when the handler swallowed the refusal). ``replay()``
and fixture playback (``tape``) both report through it.

Every ``Difference`` is made here, and holds no known secret: its where,
field, values and diff pass ``KnownSecrets.scrub`` (the real values replay
sent for placeholders) before anything is diffed, cut or shown, and a
file's size and hash are those of its scrubbed bytes (a hash of a file
holding a secret would let a guess of the secret be checked).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..audit import AuditRecord
from ..contract import ToolResult
from ..harness.escapes import Escape
from ..harness.known_secrets import KnownSecrets
from ..redaction import Redactor
from ..registry import ToolRegistry
from .cassette import AuditExpectation, Cassette, Expectation, FileState, Interaction
from .http import HttpPlayback, HttpUnavailable, UnmatchedRequest
from .redacting import redact_file


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


class ReplayChecks:
    """Collects differences and counts the checks made. ``secrets`` are
    scrubbed from every difference (see the module docstring)."""

    def __init__(
        self,
        redactor: Redactor,
        volatile: tuple[str, ...],
        registry: ToolRegistry | None = None,
        secrets: KnownSecrets | None = None,
    ) -> None:
        self.redactor = redactor
        self.volatile = volatile
        self.registry = registry
        self.secrets = secrets or KnownSecrets()
        self.differences: list[Difference] = []
        self.checks = 0

    def add(self, where: str, name: str, recorded: Any, replayed: Any, diff: str = "") -> None:
        """Keep a difference, every part of it scrubbed of the known secrets."""
        self.differences.append(self.scrubbed(Difference(where, name, recorded, replayed, diff)))

    def scrubbed(self, difference: Difference) -> Difference:
        """``difference`` scrubbed as ``add`` scrubs (one made elsewhere)."""
        scrub = self.secrets.scrub
        return Difference(
            scrub(difference.where),
            scrub(difference.field),
            scrub(difference.recorded),
            scrub(difference.replayed),
            scrub(difference.diff),
        )

    def add_diffed(
        self,
        where: str,
        name: str,
        recorded: Any,
        replayed: Any,
        path: str = "",
        min_lines: int = 2,
    ) -> None:
        """``add`` with a unified diff of the two values (see ``_text_diff``),
        made from the scrubbed values: a secret is never cut across lines."""
        scrub = self.secrets.scrub
        recorded, replayed = scrub(recorded), scrub(replayed)
        diff = _text_diff(recorded, replayed, scrub(path), min_lines=min_lines)
        self.add(where, name, recorded, replayed, diff)

    def describe(self, content: bytes | None) -> str:
        """``describe_content`` of ``content`` scrubbed of the known secrets."""
        return describe_content(None if content is None else self.secrets.data(content))

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
        """A difference per HTTP request that no recorded exchange answered
        or that was refused for its host."""
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
                f"{request.method} {request.uri} ({request.why})",
            )

    def escapes(self, where: str, escapes: Sequence[Escape]) -> None:
        """A difference per reach of the real disk the world refused, with
        its message (what was reached, and ``declare world="directory"``)."""
        self.checks += 1
        for escape in escapes:
            self.add(where, "real disk", "not reached", escape.message)

    def compare(self, where: str, name: str, recorded: Any, replayed: Any) -> None:
        self.checks += 1
        if recorded != replayed:
            self.add_diffed(where, name, recorded, replayed)

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
            messages = self.secrets.scrub(_messages(expected.message, result.message))
            self.differences[-1] = replace(code, diff=messages + code.diff)
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
            # Rows are bound by position; the id is data, compared when the
            # call had one (without one, the runtime generates it).
            if interaction.call.call_id:
                self.compare(where, "audit.call_id", interaction.call.call_id, row.call_id)
            if not row.state.finished:
                self.add(where, "audit.state", "a finished state", row.state.value)
            for name, recorded in expected.checked().items():
                value = getattr(row, name)
                self.compare(where, f"audit.{name}", recorded, getattr(value, "value", value))

    def files(self, cassette: Cassette, actual: Mapping[str, bytes]) -> None:
        expected = cassette.final_files
        paths = sorted(set(expected) | (set(actual) if cassette.final_files_exact else set()))
        for path in paths:
            self.checks += 1
            want: FileState | None = expected.get(path)
            have = actual.get(path)
            if want is None and path in expected:  # recorded as absent
                if have is not None:
                    self.add("files", path, "absent", self.describe(have))
            elif want is None:
                self.add("files", path, "absent (not in the cassette)", self.describe(have))
            elif have is None:
                self.add("files", path, _describe_state(want), "missing")
            else:
                # Compared as a cassette would keep it: redacted, and holding
                # a placeholder where replay wrote a secret it sent.
                have = self.secrets.data(redact_file(self.redactor, have))
                if FileState.of(have).sha256 != want.sha256:
                    if want.content is None:
                        self.add("files", path, _describe_state(want), describe_content(have))
                    else:
                        self.add(
                            "files",
                            path,
                            _describe_state(want),
                            describe_content(have),
                            self._file_diff(want.content, have, path),
                        )

    def _file_diff(self, want: bytes, have: bytes, path: str) -> str:
        scrub = self.secrets.scrub
        return _text_diff(scrub(want), scrub(have), scrub(path), min_lines=1)

    def outside(self, before: Mapping[str, bytes], after: Mapping[str, bytes | None]) -> None:
        for path, content in sorted(before.items()):
            self.checks += 1
            if after.get(path) != content:
                self.add("outside the workspace", path, "unchanged", self.describe(after.get(path)))


def without_volatile(value: Any, paths: Sequence[str]) -> Any:
    """A result's ``data`` with the fields a ``volatile`` list names
    removed (``data.x``, ``data.items.*.id``; other entries, such as
    ``files.<path>``, are not the data's): what replay compares of it."""
    return _without(value, paths)


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


def describe_content(content: bytes | None) -> str:
    """A file's bytes as a report shows them: size and hash (or missing)."""
    if content is None:
        return "missing"
    return f"{len(content)} bytes, sha256 {FileState.of(content).sha256[:12]}"


def _describe_state(state: FileState) -> str:
    if state.content is not None:
        return describe_content(state.content)
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
