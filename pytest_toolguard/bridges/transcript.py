"""A session another program ran, as the calls it made, and that session
re-executed into a cassette.

The readers (``claude_code.read_session``, ``openai.read_responses``,
``openai.read_chat``, ``anthropic.read_messages``, ``mcp.read_jsonrpc_log``)
are pure functions over their wire formats. Each gives a ``Transcript``:
the calls in order, each with the result the transcript holds for it, and
a ``Problem`` for every line or item it could not use (a truncated JSON
line, a result with no call, a repeated id, arguments that are not JSON).
Good calls are kept whatever else is wrong.

A transcript has no workspace, no audit and no file state, so
``transcript_to_cassette`` makes them by running the calls again: through
the user's registry, in a copy of a workspace directory they name,
recorded by the same ``Recorder`` as ``record_session``. The calls' absolute
paths that name the session's workspace (the directory named, by its given
or real path, and the root the session ran in) are mapped to the copy
before each call, and the copy's path to the cassette's root in what is
recorded (``replay.root_map.RootMap``), so that neither the import nor a
replay acts on the user's directory. An import during which the directory
named, or the scratch directory around the copy, changed writes no
cassette: its report names what changed. Each interaction
keeps the transcript's own result as ``transcript_result``, and the report
lists the calls whose re-executed outcome differs (ok against error); an
outcome the transcript's format cannot say (``TranscriptResult.ok`` None:
OpenAI Chat and Responses) is never compared, only counted.

Nothing from the transcript reaches the cassette unredacted: the calls'
arguments and results are redacted by the recorder, the transcript's
result by ``kept_result`` (the tool's redactor, as for the call's own
result; the Claude Code hook keeps Claude Code's response the same way),
the ids as the audit row stores them (``gate.stored_id``), the root as a
path. Text that is not valid Unicode (a lone surrogate) is escaped, so
that the cassette can be written (``kept_interaction``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import documents
from ..capabilities import Capabilities, Risk
from ..contract import ToolCall, ToolResult
from ..documents import DocumentRefused
from ..redaction import Redactor
from ..registry import ToolRegistry
from ..replay.cassette import Cassette, Interaction, dump
from ..replay.recorder import Recorder
from ..replay.redacting import redact_path, tool_redactor
from ..runtime import ToolRuntime
from ..storable import storable_data, storable_text
from .gate import stored_id
from .import_copy import IntoCopy, changed_entries, entries, named_by_root, session_roots

DEFAULT_ROOT = "/workspace"
"""The root an imported cassette names when the transcript has no ``cwd``."""

IMPORT_CAPABILITIES = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",)
)
"""What an imported session may do unless told otherwise: read and write
anywhere in its workspace. External and dangerous tools still need an
approval, which a replayed cassette cannot give: they are recorded (and
replay) as APPROVAL_REQUIRED."""


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
class Problem:
    """A line or item of a transcript that could not be used."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def shown(self, redactor: Redactor) -> Problem:
        """The problem as a report may print it: a message that quotes the
        transcript (a call's id, a tool name) redacted, every text storable."""
        return Problem(
            storable_text(redactor.redact_text(self.where)),
            storable_text(redactor.redact_text(self.message)),
        )


@dataclass(frozen=True, slots=True)
class Transcript:
    """The calls of one session, in order, and what could not be read."""

    format: str
    calls: tuple[TranscriptCall, ...]
    problems: tuple[Problem, ...] = ()
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
        self.problems: list[Problem] = []
        self.session_id: str | None = None
        self.cwd: str | None = None

    def problem(self, where: str, message: str) -> None:
        self.problems.append(Problem(where, message))

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


def undecodable(transcript: Transcript) -> Problem | None:
    """The first place ``transcript`` holds text that is not valid Unicode
    (a lone surrogate: JSON's ``\\ud800`` escape spells one, no UTF-8 file
    can hold one), as a problem naming it; None when there is none. The
    session's ids, each call's id, name, arguments and result, and what
    the problems quote (a skipped call's id) are read."""
    if _holds_surrogate(transcript.session_id) or _holds_surrogate(transcript.cwd):
        return Problem("the session", "its id or cwd is text that is not valid Unicode")
    for problem in transcript.problems:
        if _holds_surrogate(problem.message):
            return Problem(problem.where, "quotes text that is not valid Unicode")
    for call in transcript.calls:
        fields = {
            "id": call.call_id,
            "tool name": call.tool_name,
            "arguments": call.arguments,
            "result": None if call.result is None else call.result.to_dict(),
        }
        for name, value in fields.items():
            if _holds_surrogate(value):
                return Problem(
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


# -- into a cassette ----------------------------------------------------------


def kept_result(result: TranscriptResult, redactor: Redactor) -> dict[str, Any]:
    """``result`` as a cassette's ``transcript_result`` keeps it: redacted
    by ``redactor`` (the call's tool's, as for its own result) before
    anything is written, every text storable (a lone surrogate escaped)."""
    body: dict[str, Any] = storable_data(redactor.redact(result.to_dict()))
    return body


def kept_interaction(interaction: Interaction, runtime: ToolRuntime) -> Interaction:
    """``interaction`` (the recorder's, already redacted) as an importer or
    the Claude Code hook writes it: the call's ids and tool name as
    ``runtime``'s audit row stores them (``stored_id``: a token there
    redacted), and every other text from outside (arguments, the result's
    data and message, the transcript's result) storable: a lone surrogate,
    which no UTF-8 file can hold, becomes its ``\\udXXXX`` escape."""
    call, result = interaction.call, interaction.result
    return replace(
        interaction,
        call=replace(
            call,
            call_id=stored_id(runtime, call.call_id),
            tool_name=stored_id(runtime, call.tool_name),
            session_id=stored_id(runtime, call.session_id),
            arguments=storable_data(call.arguments),
        ),
        result=replace(
            result, data=storable_data(result.data), message=storable_data(result.message)
        ),
        transcript_result=storable_data(interaction.transcript_result),
    )


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A call whose re-executed outcome differs from the transcript's."""

    call_id: str
    tool_name: str
    where: str
    transcript_ok: bool
    result: ToolResult

    def __str__(self) -> str:
        said = "ok" if self.transcript_ok else "an error"
        got = "ok" if self.result.ok else f"{self.result.code.value}: {self.result.message}"
        return (
            f"{self.where} {self.call_id} ({self.tool_name}): transcript {said}, re-executed {got}"
        )


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What ``transcript_to_cassette`` did. Its problems are the
    transcript's, as ``Problem.shown`` prints them (redacted with the
    import's redactor); its mismatches name calls by their stored ids."""

    cassette: Cassette
    path: str
    imported: int
    problems: tuple[Problem, ...]
    mismatches: tuple[Mismatch, ...] = field(default=())
    changed_outside: tuple[str, ...] = field(default=())
    """What the calls changed outside the copy they ran in: entries of the
    directory named (``workspace/<path>``) or beside the copy
    (``beside the copy/<path>``), redacted. When there are any, the
    cassette was not written."""
    unknown_outcomes: int = 0
    """Calls whose transcript holds a result that does not say whether it
    failed (OpenAI Chat and Responses): not compared."""

    @property
    def written(self) -> bool:
        """Whether the cassette was written (nothing changed outside the copy)."""
        return not self.changed_outside

    def lines(self) -> list[str]:
        """The report as lines for a terminal."""
        head = (
            f"{self.path}: {self.imported} call(s) imported, {len(self.problems)} problem(s), "
            f"{len(self.mismatches)} outcome(s) differ from the transcript"
        )
        if not self.written:
            head = (
                f"{self.path}: not written: the calls changed {len(self.changed_outside)} "
                "file(s) outside the copy they ran in (a tool that writes paths it was not "
                "given, or that the import could not map to the copy)"
            )
        out = [head]
        out += [f"  changed outside: {path}" for path in self.changed_outside]
        out += [f"  problem: {problem}" for problem in self.problems]
        out += [f"  differs: {mismatch}" for mismatch in self.mismatches]
        if self.unknown_outcomes:
            out.append(
                f"  not compared: {self.unknown_outcomes} call(s) whose transcript result "
                "does not say whether it failed"
            )
        return out


ToolNamer = Callable[[str, ToolRegistry], str]


def registry_name(name: str, registry: ToolRegistry) -> str:
    """The registry's tool for a transcript's name: the same name, or for
    ``mcp__<server>__<tool>`` (Claude Code's name of an MCP tool) the bare
    ``<tool>`` when only that is registered."""
    if name in registry:
        return name
    if name.startswith("mcp__"):
        bare = name.split("__", 2)[-1]
        if bare in registry:
            return bare
    return name


def transcript_to_cassette(
    transcript: Transcript,
    registry: ToolRegistry,
    *,
    workspace: str | os.PathLike[str],
    output: str | os.PathLike[str],
    capabilities: Capabilities | None = None,
    variables: Mapping[str, str] | None = None,
    root: str | None = None,
    name: str | None = None,
    recorded_by: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    map_arguments: Callable[[TranscriptCall], Mapping[str, Any]] | None = None,
) -> ImportReport:
    """Re-execute ``transcript``'s calls through ``registry`` in a copy of
    ``workspace`` (the directory is left as it is) and write the cassette
    to ``output``. Absolute paths in the calls' arguments that name
    ``workspace`` (as given or by its real path), ``root`` or the
    transcript's ``cwd`` are mapped to the copy before each call; the
    cassette names the copy as its root. When the directory named, or the
    scratch directory around the copy, changed meanwhile (a tool wrote a
    path it was not given), no cassette is written and the report's
    ``changed_outside`` says what changed.

    The session is ``capabilities`` (default ``IMPORT_CAPABILITIES``) and
    ``variables``; the cassette's root is ``root``, else the transcript's
    ``cwd``, else ``/workspace``. ``progress(done, total)`` is called after
    each call; ``map_arguments`` may rewrite a call's arguments first
    (Claude Code's absolute paths). Call ids, the session id and the order
    are kept (each id as the audit row stores it: a token in it redacted).
    Everything written is redacted first. ``BridgeError`` when
    ``workspace`` is not a directory."""
    from .definitions import BridgeError

    source = Path(workspace)
    if not source.is_dir():
        raise BridgeError(f"workspace {os.fspath(workspace)!r} is not a directory")
    calls = transcript.calls
    mismatches: list[Mismatch] = []
    unknown = 0
    named = os.path.realpath(source)
    named_before = entries(named)
    with tempfile.TemporaryDirectory(prefix="toolguard-import-") as scratch:
        copy = os.path.join(scratch, "workspace")
        shutil.copytree(source, copy, symlinks=True)
        scratch_before = entries(scratch, skip=copy)
        into_copy = IntoCopy(named, session_roots(source, root, transcript.cwd), copy)
        runtime = ToolRuntime(
            registry,
            copy,
            capabilities or IMPORT_CAPABILITIES,
            variables=variables,
        )
        recorder = Recorder(
            runtime,
            name=name or Path(output).stem,
            recorded_by=recorded_by,
            description=f"imported from a {transcript.format} transcript",
        )
        kept: list[tuple[str, dict[str, Any] | None]] = []
        recorder.start()
        try:
            for done, item in enumerate(calls, start=1):
                arguments = into_copy(map_arguments(item) if map_arguments else item.arguments)
                tool_name = registry_name(item.tool_name, registry)
                result = runtime.execute(
                    ToolCall(
                        call_id=item.call_id,
                        tool_name=tool_name,
                        arguments=dict(arguments),
                        session_id=transcript.session_id or "default",
                    )
                )
                # The transcript's result is redacted as the call's own is.
                redactor = tool_redactor(registry, tool_name, runtime.redactor)
                shown = None if item.result is None else kept_result(item.result, redactor)
                kept.append((stored_id(runtime, item.call_id), shown))
                said = None if item.result is None else item.result.ok
                if item.result is not None and said is None:
                    unknown += 1  # the format cannot say: never compared
                elif said is not None and said != result.ok:
                    mismatches.append(
                        Mismatch(
                            stored_id(runtime, item.call_id),
                            stored_id(runtime, item.tool_name),
                            item.where,
                            said,
                            result,
                        )
                    )
                if progress is not None:
                    progress(done, len(calls))
            recorder.stop()
            recorded = recorder.cassette()
            interactions = tuple(
                kept_interaction(interaction, runtime) for interaction in recorded.interactions
            )
            session = replace(
                recorded.session, session_id=stored_id(runtime, recorded.session.session_id)
            )
            shown_root = storable_text(
                redact_path(runtime.redactor, root or transcript.cwd or DEFAULT_ROOT)
            )
            shown_by = (
                None
                if recorded_by is None
                else storable_text(runtime.redactor.redact_text(recorded_by))
            )
        finally:
            recorder.stop()
            runtime.close()
        changed = [
            *(f"workspace/{path}" for path in changed_entries(named_before, entries(named))),
            *(
                f"beside the copy/{path}"
                for path in changed_entries(scratch_before, entries(scratch, skip=copy))
            ),
        ]
    # One interaction per executed call, in order (the recorder hears each
    # execute once): the transcript's result joins its own call, even when
    # two ids read the same once redacted.
    results = [result for _, result in kept]
    if len(kept) != len(interactions):  # a call the recorder missed: matched by id
        by_id = dict(kept)
        results = [by_id.get(i.call.call_id) for i in interactions]
    interactions = tuple(
        replace(interaction, transcript_result=result)
        for interaction, result in zip(interactions, results, strict=True)
    )
    cassette = replace(
        recorded,
        recorded_by=shown_by,
        session=session,
        workspace=replace(recorded.workspace, root=shown_root),
        interactions=interactions,
    )
    cassette = named_by_root(cassette, copy, shown_root, source=os.fspath(output))
    if not changed:
        dump(cassette, output)
    return ImportReport(
        cassette=cassette,
        path=os.fspath(output),
        imported=len(interactions),
        problems=tuple(problem.shown(runtime.redactor) for problem in transcript.problems),
        mismatches=tuple(mismatches),
        unknown_outcomes=unknown,
        changed_outside=tuple(
            storable_text(redact_path(runtime.redactor, path)) for path in changed
        ),
    )
