"""A session another program ran, as the calls it made.

The readers (in this package: ``claude_code.read_session``,
``openai.read_responses``, ``openai.read_chat``,
``anthropic.read_messages``, ``mcp.read_jsonrpc_log``) are pure functions
over their wire formats, sharing ``CallCollector`` and ``json_records``.
Each gives a ``Transcript``: the calls in order, each with the result the
transcript holds for it, and a ``TranscriptProblem`` for every line or
item it could not use (a truncated JSON line, a result with no call, a
repeated id, arguments that are not JSON). Good calls are kept whatever
else is wrong. ``into_cassette`` re-executes a transcript into a cassette.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ... import documents
from ...documents import DocumentRefused
from ...redaction import Redactor
from ...storable import storable_text


@dataclass(frozen=True, slots=True)
class TranscriptResult:
    """What the transcript says a call returned."""

    ok: bool | None
    """Whether the call succeeded; None when the format cannot say (OpenAI
    Chat and Responses carry no error flag): such an outcome is never
    compared with the re-executed one."""
    content: Any = None
    """The result as the transcript holds it: text, content blocks or JSON."""
    data: Any = None
    """Structured data beside it, when the format has some (MCP
    ``structuredContent``, Claude Code's ``toolUseResult``)."""

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": self.ok, "content": self.content}
        if self.data is not None:
            body["data"] = self.data
        return body


@dataclass(frozen=True, slots=True)
class TranscriptCall:
    """One tool call a transcript holds."""

    call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    where: str
    """Where it is in the file: ``line 4``, ``item 2``, ``message 3``."""
    result: TranscriptResult | None = None


@dataclass(frozen=True, slots=True)
class TranscriptProblem:
    """A line or item of a transcript that could not be used."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def shown(self, redactor: Redactor) -> TranscriptProblem:
        """The problem as a report may print it: a message that quotes the
        transcript (a call's id, a tool name) redacted, every text storable."""
        return TranscriptProblem(
            storable_text(redactor.redact_text(self.where)),
            storable_text(redactor.redact_text(self.message)),
        )


@dataclass(frozen=True, slots=True)
class Transcript:
    """The calls of one session, in order, and what could not be read."""

    format: str
    calls: tuple[TranscriptCall, ...]
    problems: tuple[TranscriptProblem, ...] = ()
    session_id: str | None = None
    cwd: str | None = None
    """The directory the session ran in, when the format says (Claude Code)."""


class CallCollector:
    """Builds a transcript as a reader walks its file: calls by id, results
    matched to them, and a problem for each thing that does not fit."""

    def __init__(self, format: str) -> None:
        self.format = format
        self._calls: dict[str, TranscriptCall] = {}
        self._order: list[str] = []
        self._first_seen: dict[str, str] = {}
        self.problems: list[TranscriptProblem] = []
        self.session_id: str | None = None
        self.cwd: str | None = None

    def problem(self, where: str, message: str) -> None:
        self.problems.append(TranscriptProblem(where, message))

    def call(self, where: str, call_id: Any, name: Any, arguments: Any) -> None:
        """A call; ``arguments`` a mapping or the JSON text of one."""
        if not isinstance(call_id, str) or not call_id:
            self.problem(where, "tool call without an id: skipped")
            return
        if not isinstance(name, str) or not name:
            self.problem(where, f"tool call {call_id} without a tool name: skipped")
            return
        if call_id in self._first_seen:
            self.problem(
                where,
                f"duplicate call id {call_id} (first at {self._first_seen[call_id]}): skipped",
            )
            return
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            self.problem(where, f"call {call_id} ({name}): {parsed}: skipped")
            self._first_seen[call_id] = where
            return
        self._first_seen[call_id] = where
        self._calls[call_id] = TranscriptCall(call_id, name, parsed, where)
        self._order.append(call_id)

    def result(self, where: str, call_id: Any, result: TranscriptResult) -> None:
        if not isinstance(call_id, str) or call_id not in self._first_seen:
            self.problem(where, f"result for {call_id!r} with no matching tool call: skipped")
            return
        call = self._calls.get(call_id)
        if call is None:  # the call itself was skipped; its problem says why
            return
        if call.result is not None:
            self.problem(where, f"second result for call {call_id}: ignored")
            return
        self._calls[call_id] = replace(call, result=result)

    def transcript(self) -> Transcript:
        return Transcript(
            format=self.format,
            calls=tuple(self._calls[call_id] for call_id in self._order),
            problems=tuple(self.problems),
            session_id=self.session_id,
            cwd=self.cwd,
        )


def undecodable(transcript: Transcript) -> TranscriptProblem | None:
    """The first place ``transcript`` holds text that is not valid Unicode
    (a lone surrogate: JSON's ``\\ud800`` escape spells one, no UTF-8 file
    can hold one), as a problem naming it; None when there is none. The
    session's ids, each call's id, name, arguments and result, and what
    the problems quote (a skipped call's id) are read."""
    if _holds_surrogate(transcript.session_id) or _holds_surrogate(transcript.cwd):
        return TranscriptProblem("the session", "its id or cwd is text that is not valid Unicode")
    for problem in transcript.problems:
        if _holds_surrogate(problem.message):
            return TranscriptProblem(problem.where, "quotes text that is not valid Unicode")
    for call in transcript.calls:
        fields = {
            "id": call.call_id,
            "tool name": call.tool_name,
            "arguments": call.arguments,
            "result": None if call.result is None else call.result.to_dict(),
        }
        for name, value in fields.items():
            if _holds_surrogate(value):
                return TranscriptProblem(
                    call.where,
                    f"the call's {name} holds text that is not valid Unicode (a lone surrogate)",
                )
    return None


def _holds_surrogate(value: Any) -> bool:
    # A walk with a stack: a transcript's results may be nested deeper than
    # Python recurses.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def json_records(
    text: str, collector: CallCollector, *, noun: str, containers: Sequence[str] = ()
) -> Iterator[tuple[str, Any]]:
    """The records of a transcript file with where each is: a JSON array
    (``item 3``), a JSON object holding the array under one of
    ``containers`` (``{"messages": [...]}``), or JSON lines (``line 3``).
    A line that is not JSON is a problem naming it; the others still come.
    So is a record nested deeper than ``documents.MAX_DEPTH``, or a text
    over ``documents.MAX_DOCUMENT_BYTES`` (then nothing comes)."""
    try:
        documents.check_length(text)
    except DocumentRefused as exc:
        collector.problem("file", str(exc))
        return
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            document = None  # JSON lines, or a broken document: read line by line
        if isinstance(document, Mapping):
            for key in containers:
                if isinstance(document.get(key), list):
                    document = document[key]
                    break
            else:
                document = [document]
        if isinstance(document, list):
            for index, item in enumerate(document, start=1):
                try:
                    documents.check_depth(item)
                except DocumentRefused as exc:
                    collector.problem(f"{noun} {index}", f"{exc}: skipped")
                    continue
                yield f"{noun} {index}", item
            return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = documents.parse_json(line)
        except DocumentRefused as exc:
            collector.problem(f"line {number}", f"{exc}: skipped")
            continue
        except json.JSONDecodeError as exc:
            collector.problem(f"line {number}", f"not valid JSON ({exc.msg}; truncated?)")
            continue
        except ValueError as exc:  # an integer of more digits than Python reads
            collector.problem(f"line {number}", f"not valid JSON ({exc})")
            continue
        yield f"line {number}", record


def parse_arguments(arguments: Any) -> dict[str, Any] | str:
    """A call's arguments as a dict, or why they are not one (a string)."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = documents.parse_json(arguments)
        except DocumentRefused as exc:
            return f"arguments refused: {exc}"
        except json.JSONDecodeError as exc:
            return f"arguments are not valid JSON ({exc.msg} at character {exc.pos})"
        except ValueError as exc:  # an integer of more digits than Python reads
            return f"arguments are not valid JSON ({exc})"
    if not isinstance(arguments, Mapping):
        return f"arguments are a JSON {type(arguments).__name__}, not an object"
    return dict(arguments)


def text_of(content: Any) -> str:
    """The text of a result's content: a string, or the ``text`` of its
    text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "text"
        )
    return ""
