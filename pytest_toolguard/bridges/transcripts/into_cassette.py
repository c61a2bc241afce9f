"""A transcript re-executed into a cassette.

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
the ids as the audit row stores them (``runtime.storable_id``), the root as a
path. Text that is not valid Unicode (a lone surrogate) is escaped, so
that the cassette can be written (``kept_interaction``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...capabilities import Capabilities, Risk
from ...contract import ToolCall, ToolResult
from ...redaction import Redactor
from ...registry import ToolRegistry
from ...replay.cassette import Cassette, Interaction, dump
from ...replay.recorder import Recorder
from ...replay.redacting import redact_path, tool_redactor
from ...runtime import ToolRuntime
from ...runtime.admission import storable_id
from ...storable import storable_data, storable_text
from ..errors import BridgeError
from .import_copy import IntoCopy, changed_entries, entries, named_by_root, session_roots
from .transcript import Transcript, TranscriptCall, TranscriptProblem, TranscriptResult

DEFAULT_ROOT = "/workspace"
"""The root an imported cassette names when the transcript has no ``cwd``."""

IMPORT_CAPABILITIES = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",)
)
"""What an imported session may do unless told otherwise: read and write
anywhere in its workspace. External and dangerous tools still need an
approval, which a replayed cassette cannot give: they are recorded (and
replay) as APPROVAL_REQUIRED."""


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
    ``runtime``'s audit row stores them (``storable_id``: a token there
    redacted), and every other text from outside (arguments, the result's
    data and message, the transcript's result) storable: a lone surrogate,
    which no UTF-8 file can hold, becomes its ``\\udXXXX`` escape."""
    call, result = interaction.call, interaction.result
    return replace(
        interaction,
        call=replace(
            call,
            call_id=storable_id(runtime.redactor, call.call_id),
            tool_name=storable_id(runtime.redactor, call.tool_name),
            session_id=storable_id(runtime.redactor, call.session_id),
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
    transcript's, as ``TranscriptProblem.shown`` prints them (redacted with the
    import's redactor); its mismatches name calls by their stored ids."""

    cassette: Cassette
    path: str
    imported: int
    problems: tuple[TranscriptProblem, ...]
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
                kept.append((storable_id(runtime.redactor, item.call_id), shown))
                said = None if item.result is None else item.result.ok
                if item.result is not None and said is None:
                    unknown += 1  # the format cannot say: never compared
                elif said is not None and said != result.ok:
                    mismatches.append(
                        Mismatch(
                            storable_id(runtime.redactor, item.call_id),
                            storable_id(runtime.redactor, item.tool_name),
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
                recorded.session,
                session_id=storable_id(runtime.redactor, recorded.session.session_id),
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
