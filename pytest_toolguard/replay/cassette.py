"""Cassettes and cases: the YAML files replay reads, and the one recording writes.

A *cassette* is one recorded session: the frozen time, the session (actor,
capabilities, variables, plan), the workspace files the calls needed before
the first call, every interaction (the call, its result, its audit row) and
every file after the last call. A *case* is the same format written by
hand, where each interaction says only what must hold (a code, a message
fragment, an audit rule) and ``final_files`` lists only the files it checks.
An interaction may also hold the approval that let its call through and
the HTTP exchanges its handler made (``approvals`` and ``http`` replay them).

Loading validates against ``cassette.schema.json`` (shipped beside this
module) and raises ``CassetteError`` naming the file and the field, never a
traceback. Dumping is stable: the same session always writes the same bytes.
The format is documented in ``docs/cassettes.md``.

A file has one of two syntaxes for the same document: YAML, the default and
what people write and review, or JSON (RFC 8259), which recording writes for
a cassette of more than ``JSON_ABOVE`` interactions because libyaml takes
about a hundred times as long as ``json`` to parse the same data (6 s
against 0.06 s for 10,000 interactions). JSON is YAML too, so every YAML
tool still reads such a file; this module reads a text that is a JSON object
with ``json`` and any other with the YAML loader, and validates and builds
both the same way.

**The recorded root.** Wherever the document names the recorded workspace
root (``workspace.root``) or another spelling of it (its realpath:
``WorkspaceState.aliases``), in arguments, results, audit expectations,
text files, link targets and HTTP exchanges (URLs, headers, bodies), the
file holds ``{toolguard_root}`` instead (``root_map.ROOT_PLACEHOLDER``; a
literal one in the data is escaped, see ``root_map``); ``workspace.root``
itself stays, for the reader. Loading gives every placeholder back as
``workspace.root``: a loaded cassette names one root, which replay maps to
the world's (``root_map.RootMap``). Binary files and bodies (not UTF-8) are
kept as they are. A document with a placeholder is ``format_version`` 2;
others are still written as 1, which every version reads.

**Contents stored once.** A file content the document names more than once
(a database a session only read, in ``workspace.files`` and ``final_files``)
is written once under ``blobs`` and referred to (``replay.blobs``); such a
document is ``format_version`` 3. Loading puts each content back in place
before anything else reads the document.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import yaml
from jsonschema import Draft202012Validator

from .. import documents
from ..audit.row import AuditRecord
from ..capabilities import Capabilities
from ..contract import ToolCall
from ..documents import DocumentRefused
from ..errors import ToolguardError
from ..file_writes import write_atomically
from ..hooks import Approval
from ..plan import Artifact, PlanStep
from ..schema import SchemaValidator, format_path
from ..storable import storable_data
from . import blobs
from .root_map import RootMap, RootPlaceholder, expanded

FORMAT_VERSION = blobs.BLOB_VERSION
"""The newest version this package reads and writes: 2 stores the recorded
root as a placeholder (see the module docstring), 3 may store a content once
and refer to it (``replay.blobs``). A file of a version not in
``FORMAT_VERSIONS`` is refused with the command that re-records it."""

FORMAT_VERSIONS = (1, 2, 3)
"""The versions this package reads. ``dumps`` writes the oldest that holds
the document: 1 without any placeholder, 2 with one, 3 with ``blobs``."""

_PLAIN_VERSION = 1
"""A document that names its root as it is (``to_dict``'s)."""

_ROOT_VERSION = 2
"""A document that names its root as the placeholder."""

TEXT_LIMIT = 64_000
"""Final files larger than this keep only their hash (no diff on change)."""

JSON_ABOVE = 1000
"""``dumps`` writes a cassette of more interactions than this as JSON
(indented, one value a line, so it still diffs). Below it, where people read
and review cassettes, YAML: a 1,000-interaction YAML file parses in about
0.6 s on an idle machine, a tenth of a second being what its set-up may cost."""

MAX_GENERATED_BYTES = 64 * 1024 * 1024
"""The largest file a recipe (``GeneratedContent``, ``repeat`` ``times``
times) may make, in UTF-8 bytes: recipes are how a small file names a large
one, so the file's own size bounds nothing. The schema's ``times`` has this
maximum too. A tool's read limit (``max_read_bytes``, 5,000,000 by default)
and one more byte fit well within it."""

MAX_GENERATED_TOTAL = 1024 * 1024 * 1024
"""The bytes all the recipes of one file make together (replay makes them
one variant at a time, but makes every one)."""

DEFAULT_ROOT = "/workspace"
"""The workspace root of a cassette or case that names none."""

VOLATILE_FILE_PREFIX = "files."
"""A ``volatile`` entry ``files.<path>``: that file's bytes are not compared."""

Syntax = Literal["yaml", "json"]

Kind = Literal["cassette", "case"]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class CassetteError(ToolguardError, ValueError):
    """A cassette or case that cannot be used. ``str()`` reads
    ``<file>: <field>: <what is wrong>`` and, where it helps, what to do."""

    def __init__(self, path: str | os.PathLike[str], where: str, message: str) -> None:
        self.path = os.fspath(path)
        self.where = where
        super().__init__(f"{self.path}: {where}: {message}")


@dataclass(frozen=True, slots=True)
class Expectation:
    """What must hold for one call's result. A field left None is not
    checked (cases); a cassette sets them all."""

    ok: bool | None = None
    code: str | None = None
    retryable: bool | None = None
    state: str | None = None
    truncated: bool | None = None
    data: Any = None
    check_data: bool = False
    message: str | None = None
    """Recorded for the reader; never compared (messages may be reworded)."""
    message_contains: str | None = None


class Unset:
    """The value of an expectation's field that is not checked (``UNSET``):
    None is a value a row's column may hold and a cassette may expect."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


@dataclass(frozen=True, slots=True)
class AuditExpectation:
    """What must hold for one call's audit row. Each field is the column of
    ``AuditRecord`` of the same name, as the cassette spells it (an enum as
    its text); a field left ``UNSET`` is not checked, any other value (None
    included) must equal the row's. The reader, the writer and the checks
    loop over these fields: a column the cassette also holds is one more
    field here (and in ``cassette.schema.json``)."""

    state: str | Unset = UNSET
    decision: str | Unset = UNSET
    rule: str | Unset = UNSET
    result_code: str | None | Unset = UNSET
    idempotency_outcome: str | None | Unset = UNSET

    @classmethod
    def from_row(cls, row: AuditRecord | None) -> AuditExpectation:
        """Every field set from ``row`` (recording), or none for no row."""
        if row is None:
            return cls()
        values = {item.name: getattr(row, item.name) for item in fields(cls)}
        return cls(**{name: getattr(value, "value", value) for name, value in values.items()})

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AuditExpectation:
        """The fields a cassette's ``audit:`` mapping names."""
        return cls(**{item.name: raw[item.name] for item in fields(cls) if item.name in raw})

    def checked(self) -> dict[str, Any]:
        """The fields that are set, in order: what a cassette writes and
        what replay compares."""
        return {
            item.name: value
            for item in fields(self)
            if (value := getattr(self, item.name)) is not UNSET
        }


@dataclass(frozen=True, slots=True)
class HttpExchange:
    """One HTTP request a handler made and the response it got, redacted,
    in vcrpy's terms (``pytest_toolguard.replay.http`` records and serves
    them). Header values are lists, as a header may repeat."""

    method: str
    uri: str
    status: int
    reason: str = ""
    request_headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    request_body: bytes | None = None
    response_headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    response_body: bytes = b""


@dataclass(frozen=True, slots=True)
class GeneratedContent:
    """A file's content written as a recipe: ``head``, then ``repeat``
    ``times`` times, then ``tail`` (UTF-8). Amplified variants use it for
    files sized around a limit, which would be unreadable written out."""

    repeat: str
    times: int
    head: str = ""
    tail: str = ""

    def content(self) -> bytes:
        """The bytes the recipe makes."""
        return (self.head + self.repeat * self.times + self.tail).encode("utf-8")


@dataclass(frozen=True, slots=True)
class Variant:
    """One variant of an interaction's call, derived by amplification
    (``pytest_toolguard.amplify``) and recorded with the tool trusted then.

    It runs from the state the session had just before the interaction's
    call: ``files`` replace or add workspace files first, then ``arguments``
    are sent instead of the recorded ones. Replay compares the result and
    the audit row as for an interaction, and ``changed_files``: every file
    under the workspace the call created, changed (content or hash) or
    removed (None)."""

    name: str
    """What was varied, for reports: ``max_chars = len(data.content)``."""
    kind: str
    """``boundary``, ``text`` or ``size``: where the variant came from."""
    arguments: Any
    files: Mapping[str, bytes | GeneratedContent] = field(default_factory=dict)
    result: Expectation = field(default_factory=Expectation)
    audit: AuditExpectation = field(default_factory=AuditExpectation)
    changed_files: Mapping[str, FileState | None] = field(default_factory=dict)
    volatile: tuple[str, ...] = ()
    """Result paths not compared (``data.x``, ``result`` for the whole
    result) and ``files.<path>`` for a changed file whose content is not:
    what differed between two runs of the trusted tool."""
    refused: bool = False
    """The arguments fail the tool's input schema: the variant checks the
    refusal they get (counted apart)."""
    data_sha256: str | None = None
    """For a large result: the SHA-256 of its data's canonical JSON, kept
    instead of the data (``result`` then holds no ``data``)."""


@dataclass(frozen=True, slots=True)
class Interaction:
    """One call and what must hold afterwards."""

    call: ToolCall
    result: Expectation = field(default_factory=Expectation)
    audit: AuditExpectation = field(default_factory=AuditExpectation)
    volatile: tuple[str, ...] = ()
    approval: Approval | None = None
    """The hook decision that let the call through when it was recorded;
    replay grants it again (``replay.approvals``)."""
    http: tuple[HttpExchange, ...] = ()
    """The HTTP exchanges its handler made, in order; replay serves them."""
    transcript_result: Mapping[str, Any] | None = None
    """For a session imported from another program's transcript: the result
    the transcript holds (``ok``, ``content``, maybe ``data``). Kept for the
    reader; replay compares the re-executed result, never this."""
    variants: tuple[Variant, ...] = ()
    """Amplified variants of the call, replayed as checks of their own."""


@dataclass(frozen=True, slots=True)
class FileState:
    """A file as recorded: its bytes, or only its hash when it was large."""

    sha256: str
    content: bytes | None = None

    @classmethod
    def of(cls, content: bytes) -> FileState:
        digest = hashlib.sha256(content).hexdigest()
        return cls(digest, content if len(content) <= TEXT_LIMIT else None)


@dataclass(frozen=True, slots=True)
class Session:
    """Who calls and what they may do, as when the cassette was recorded."""

    actor: str = "agent"
    session_id: str = "default"
    capabilities: Capabilities = field(default_factory=Capabilities)
    variables: Mapping[str, str] = field(default_factory=dict)
    idempotency_scope: str | None = None
    plan: tuple[PlanStep, ...] | None = None
    timeouts: Mapping[str, float] = field(default_factory=dict)
    """Per-tool deadlines the runtime had (``ToolRuntime(timeouts=...)``)."""


@dataclass(frozen=True, slots=True)
class WorkspaceState:
    """The files before the first call. ``root`` is the absolute path the
    workspace had; replay recreates it in a fake filesystem."""

    root: str = DEFAULT_ROOT
    files: Mapping[str, bytes] = field(default_factory=dict)
    directories: tuple[str, ...] = ()
    symlinks: Mapping[str, str] = field(default_factory=dict)
    outside_files: Mapping[str, bytes] = field(default_factory=dict)
    modes: Mapping[str, int] = field(default_factory=dict)
    """Permission bits (``0o755``) of files and directories whose bits are
    not the usual ones (0644 for a file, 0755 for a directory), by relative
    path. The directory world applies them; the fake world does not."""
    aliases: tuple[str, ...] = ()
    """Other spellings of ``root`` the recording saw (its realpath, when a
    link leads to it). Never written: ``dumps`` writes them as the root
    placeholder too, which loading gives back as ``root``."""


@dataclass(frozen=True, slots=True)
class Cassette:
    """A cassette or a case, loaded and validated."""

    kind: Kind
    name: str
    session: Session
    workspace: WorkspaceState
    interactions: tuple[Interaction, ...]
    final_files: Mapping[str, FileState | None] = field(default_factory=dict)
    final_files_exact: bool = True
    recorded_at: str | None = None
    recorded_by: str | None = None
    """The command that re-records this cassette."""
    volatile: tuple[str, ...] = ()
    description: str = ""
    source: str = ""
    """The file it was loaded from ('' when built in memory)."""


# -- loading ----------------------------------------------------------------


@contextmanager
def _collector_paused() -> Iterator[None]:
    """PyYAML builds many small objects; the garbage collector's passes over
    them were half of the time to load or dump a large cassette."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of the cassette and case format."""
    text = resources.files(__package__).joinpath("cassette.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


@cache
def _quick_check() -> SchemaValidator:
    """The answer to "valid?", from jsonschema-rs when installed (about a hundredth of
    jsonschema's time on a large cassette); ``_validator`` still explains an
    invalid file. The schema's four patterns (``^[0-9a-f]{64}$``,
    ``^[0-9a-f]{16,64}$``, ``^hook\\..+$``, ``^0[0-7]{3}$``) read the same in
    Rust's regex, or stricter (``$`` does not match before a final newline
    there), so jsonschema decides a doubt.
    The schema is depth-bounded (no ``$ref`` cycle, no ``uniqueItems`` or
    ``const``, ``enum``s of strings; arguments and data are any value), so
    no walk of the document's depth goes before jsonschema-rs.
    ``tests/harness/test_cassette_json.py`` holds the schema to that."""
    return SchemaValidator(
        schema(), root="$", regexes_agree=True, depth_bounded=True, checked=True
    )


def load(path: str | os.PathLike[str], *, source: str | None = None) -> Cassette:
    """Read, validate and build a cassette or case. ``CassetteError`` for a
    file that is unreadable, not YAML, of another format version, or off
    the schema. ``source`` names the file in errors (default: ``path``)."""
    source = os.fspath(path) if source is None else source
    try:
        text = documents.read_text(path)
    except DocumentRefused as exc:
        raise CassetteError(source, "file", str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CassetteError(source, "file", f"cannot be read: {exc}") from None
    return loads(text, source=source)


def loads(text: str, *, source: str = "<string>") -> Cassette:
    """``load`` from YAML or JSON text; ``source`` names it in errors."""
    raw = _parse(text, source)
    if not isinstance(raw, dict):
        raise CassetteError(source, "document", "must be a mapping with format_version, kind, ...")
    version = raw.get("format_version")
    if isinstance(version, int) and version not in FORMAT_VERSIONS:
        recorded_by = raw.get("recorded_by")
        if version > FORMAT_VERSION:
            hint = "upgrade pytest-toolguard to read it"
        elif isinstance(recorded_by, str) and recorded_by:
            hint = f"re-record it: {recorded_by}"
        else:
            hint = "re-record it (it names no recorded_by: re-run what recorded it)"
        raise CassetteError(
            source,
            "format_version",
            f"is {version}; this pytest-toolguard reads "
            f"{' to '.join(map(str, (FORMAT_VERSIONS[0], FORMAT_VERSIONS[-1])))}: {hint}",
        )
    _check_recipes(raw, source)
    try:
        blobs.precheck(raw)
    except blobs.BlobError as exc:
        raise CassetteError(source, exc.where, str(exc)) from None
    errors = (
        []
        if _quick_check().is_valid(raw)
        else sorted(_validator().iter_errors(raw), key=lambda e: list(map(str, e.absolute_path)))
    )
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise CassetteError(source, format_path("$", first.absolute_path), first.message + more)
    try:
        raw = blobs.resolved(raw)
    except blobs.BlobError as exc:
        raise CassetteError(source, exc.where, str(exc)) from None
    if version != _PLAIN_VERSION:
        raw = _root_given_back(raw)
    try:
        with _collector_paused():
            return _build(raw, source)
    except (ValueError, TypeError) as exc:
        raise CassetteError(source, "document", str(exc)) from None


def _check_recipes(raw: Mapping[str, Any], source: str) -> None:
    """``CassetteError`` for a recipe over ``MAX_GENERATED_BYTES``, or
    recipes over ``MAX_GENERATED_TOTAL`` together, judged from their sizes
    before any is made, or whose ``times`` is not an integer. Before the
    schema, which would say only that ``times`` is over its maximum, and
    takes ``10.0`` for an integer (JSON Schema's integers are numbers
    without a fraction): a float, a bool or any other type is refused
    here. A text of the wrong type is left to the schema."""
    total = 0
    for where, recipe in _recipes(raw):
        texts = [recipe.get("head", ""), recipe.get("tail", ""), recipe["repeat"]]
        times = recipe["times"]
        if type(times) is not int:
            raise CassetteError(
                source,
                format_path("$", [*where, "times"]),
                f"must be an integer written without a fraction, not {type(times).__name__}",
            )
        if not all(isinstance(text, str) for text in texts):
            continue
        size = _utf8_length(texts[0]) + _utf8_length(texts[1]) + _utf8_length(texts[2]) * times
        total += size
        if size > MAX_GENERATED_BYTES:
            raise CassetteError(
                source,
                format_path("$", where),
                f"makes a file of {size:,} bytes, more than {MAX_GENERATED_BYTES:,} "
                "(limit: pytest_toolguard.replay.cassette.MAX_GENERATED_BYTES)",
            )
        if total > MAX_GENERATED_TOTAL:
            raise CassetteError(
                source,
                format_path("$", where),
                f"the recipes so far make {total:,} bytes, more than {MAX_GENERATED_TOTAL:,} "
                "(limit: pytest_toolguard.replay.cassette.MAX_GENERATED_TOTAL)",
            )


def _recipes(raw: Mapping[str, Any]) -> Iterator[tuple[list[str | int], Mapping[str, Any]]]:
    """Every recipe of a document not yet validated, with where it is."""
    interactions = raw.get("interactions")
    for index, interaction in enumerate(interactions if isinstance(interactions, list) else ()):
        variants = interaction.get("variants") if isinstance(interaction, Mapping) else None
        for number, variant in enumerate(variants if isinstance(variants, list) else ()):
            files = variant.get("files") if isinstance(variant, Mapping) else None
            for path, value in (files if isinstance(files, Mapping) else {}).items():
                if isinstance(value, Mapping) and "repeat" in value and "times" in value:
                    yield ["interactions", index, "variants", number, "files", str(path)], value


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _parse(text: str, source: str) -> Any:
    """The document: ``json`` for a JSON object's text, the YAML loader for
    any other, each within the limits of ``pytest_toolguard.documents``."""
    with _collector_paused():
        try:
            if _looks_like_json(text):
                try:
                    return documents.parse_json(text)
                except DocumentRefused:
                    raise
                except ValueError:
                    pass  # not strict JSON: a YAML flow mapping, or an error YAML names
            return documents.parse_yaml(text, _Loader)
        except DocumentRefused as exc:
            where = "document" if exc.line is None else f"line {exc.line}"
            raise CassetteError(source, where, str(exc)) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark is not None else "yaml"
            raise CassetteError(
                source, where, f"not valid YAML: {getattr(exc, 'problem', exc)}"
            ) from None
        except ValueError as exc:  # a value the loader cannot build (an int out of range)
            raise CassetteError(source, "yaml", f"not valid YAML: {exc}") from None


def _looks_like_json(text: str) -> bool:
    return text.lstrip(" \t\r\n")[:1] == "{"


def syntax_of(text: str) -> Syntax:
    """``"json"`` for the text of a JSON object (what ``dumps`` writes for a
    large cassette), ``"yaml"`` for any other text."""
    if _looks_like_json(text):
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            return "yaml"
        return "json"
    return "yaml"


def _build(raw: dict[str, Any], source: str) -> Cassette:
    kind: Kind = raw["kind"]
    session = _session(raw["session"])
    interactions = tuple(
        _interaction(item, index, session, kind) for index, item in enumerate(raw["interactions"])
    )
    workspace = raw.get("workspace") or {}
    final = {
        path: None if state is None else _file_state(state)
        for path, state in (raw.get("final_files") or {}).items()
    }
    return Cassette(
        kind=kind,
        name=raw.get("name") or (Path(source).stem if source else "cassette"),
        session=session,
        workspace=WorkspaceState(
            root=workspace.get("root", DEFAULT_ROOT),
            files={path: _content(value) for path, value in (workspace.get("files") or {}).items()},
            directories=tuple(workspace.get("directories") or ()),
            symlinks=dict(workspace.get("symlinks") or {}),
            outside_files={
                path: _content(value)
                for path, value in (workspace.get("outside_files") or {}).items()
            },
            modes={path: int(bits, 8) for path, bits in (workspace.get("modes") or {}).items()},
        ),
        interactions=interactions,
        final_files=final,
        final_files_exact=raw.get("final_files_exact", kind == "cassette"),
        recorded_at=raw.get("recorded_at"),
        recorded_by=raw.get("recorded_by"),
        volatile=tuple(raw.get("volatile") or ()),
        description=raw.get("description", ""),
        source=source,
    )


def _session(raw: Mapping[str, Any]) -> Session:
    caps = dict(raw.get("capabilities") or {})  # Capabilities converts the lists
    plan = raw.get("plan")
    return Session(
        actor=raw.get("actor", "agent"),
        session_id=raw.get("session_id", "default"),
        capabilities=Capabilities(**caps),
        variables=dict(raw.get("variables") or {}),
        idempotency_scope=raw.get("idempotency_scope"),
        plan=None if plan is None else tuple(_plan_step(step) for step in plan),
        timeouts=dict(raw.get("timeouts") or {}),
    )


def _plan_step(raw: Mapping[str, Any]) -> PlanStep:
    return PlanStep(
        id=raw["id"],
        allowed_tools=frozenset(raw["allowed_tools"]),
        required_tools=tuple(raw.get("required_tools") or ()),
        artifacts=tuple(Artifact(a["path"], a.get("schema")) for a in raw.get("artifacts") or ()),
        description=raw.get("description", ""),
    )


def _interaction(raw: Mapping[str, Any], index: int, session: Session, kind: Kind) -> Interaction:
    call = raw["call"]
    approval = raw.get("approval")
    return Interaction(
        call=ToolCall(
            call_id=call.get("call_id", f"call-{index + 1}"),
            tool_name=call["tool_name"],
            arguments=call.get("arguments", {}),
            actor=call.get("actor", session.actor),
            session_id=call.get("session_id", session.session_id),
            idempotency_key=call.get("idempotency_key"),
        ),
        result=_expectation(raw.get("result") or {}),
        audit=AuditExpectation.from_dict(raw.get("audit") or {}),
        volatile=tuple(raw.get("volatile") or ()),
        approval=None
        if approval is None
        else Approval(rule=approval["rule"], reason=approval.get("reason", "")),
        http=tuple(_exchange(item) for item in raw.get("http") or ()),
        transcript_result=raw.get("transcript_result"),
        variants=tuple(_variant(item) for item in raw.get("variants") or ()),
    )


def _expectation(result: Mapping[str, Any]) -> Expectation:
    return Expectation(
        ok=result.get("ok"),
        code=result.get("code"),
        retryable=result.get("retryable"),
        state=result.get("state"),
        truncated=result.get("truncated"),
        data=result.get("data"),
        check_data="data" in result,
        message=result.get("message"),
        message_contains=result.get("message_contains"),
    )


def _variant(raw: Mapping[str, Any]) -> Variant:
    return Variant(
        name=raw["name"],
        kind=raw["kind"],
        arguments=raw["arguments"],
        files={path: _variant_file(value) for path, value in (raw.get("files") or {}).items()},
        result=_expectation(raw.get("result") or {}),
        audit=AuditExpectation.from_dict(raw.get("audit") or {}),
        changed_files={
            path: None if state is None else _file_state(state)
            for path, state in (raw.get("changed_files") or {}).items()
        },
        volatile=tuple(raw.get("volatile") or ()),
        refused=raw.get("refused", False),
        data_sha256=raw.get("data_sha256"),
    )


def _variant_file(value: str | Mapping[str, Any]) -> bytes | GeneratedContent:
    if isinstance(value, Mapping) and "repeat" in value:
        return GeneratedContent(
            repeat=value["repeat"],
            times=value["times"],
            head=value.get("head", ""),
            tail=value.get("tail", ""),
        )
    return _content(value)


def _exchange(raw: Mapping[str, Any]) -> HttpExchange:
    request, response = raw["request"], raw["response"]
    body = request.get("body")
    return HttpExchange(
        method=request["method"],
        uri=request["uri"],
        status=response["status"]["code"],
        reason=response["status"].get("message", ""),
        request_headers=_headers(request.get("headers")),
        request_body=None if body is None else _content(body),
        response_headers=_headers(response.get("headers")),
        response_body=_content(response.get("body", "")),
    )


def _headers(raw: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    return {name: tuple(values) for name, values in (raw or {}).items()}


def _content(value: str | Mapping[str, str]) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return base64.b64decode(value["base64"], validate=True)


def _file_state(value: str | Mapping[str, Any]) -> FileState:
    if isinstance(value, Mapping) and "sha256" in value:
        return FileState(sha256=value["sha256"])
    return FileState.of(_content(value))


# -- the recorded root as a placeholder ---------------------------------------------


_NOT_MAPPED = ("format_version", "kind")


def with_root_placeholder(body: dict[str, Any], aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    """``to_dict``'s ``body`` as a file stores it: every mention of its
    ``workspace.root`` (and of ``aliases``) written as the placeholder, a
    literal placeholder escaped, ``format_version`` 2 when either happened.
    A root that cannot be mapped (``/``, a relative one) stays in the text
    as it is (literal placeholders are still escaped). Text files and bodies
    written as base64 (they hold a NUL or a CR) are mapped inside when they
    are UTF-8; binary ones are left as they are."""
    workspace = body.get("workspace") or {}
    root = workspace.get("root", DEFAULT_ROOT)
    try:
        placeholder = RootPlaceholder((root, *aliases))
    except ValueError:  # a literal placeholder is still escaped
        placeholder = RootPlaceholder(())
    body = _contents_rewritten(body, placeholder.stored)
    placed = {
        key: value if key in _NOT_MAPPED else placeholder.stored(_without_root(key, value))
        for key, value in body.items()
    }
    if "workspace" in placed:
        placed["workspace"] = {"root": root, **placed["workspace"]}
    if placeholder.placed:
        placed["format_version"] = _ROOT_VERSION
    return placed


def upgraded_from_1(raw: dict[str, Any]) -> dict[str, Any]:
    """A format 1 document's plain data as format 2 (``toolguard cassette
    upgrade``): its root written as the placeholder, a literal placeholder
    escaped."""
    return {**with_root_placeholder(raw), "format_version": _ROOT_VERSION}


def upgraded_from_2(raw: dict[str, Any]) -> dict[str, Any]:
    """A format 2 document's plain data as format 3: each content it names
    more than once stored once (``blobs.stored_once``)."""
    return {**blobs.plain(blobs.stored_once(raw)), "format_version": blobs.BLOB_VERSION}


def binary_naming_root(cassette: Cassette) -> tuple[str, ...]:
    """Where ``cassette`` holds bytes that are not UTF-8 (a database, an
    image, a compressed body) naming its root or one of its other
    spellings, literally or percent-encoded: a file (``workspace.files.<path>``,
    ``final_files.<path>``, ``outside_files.<path>``) or an HTTP body
    (``interactions[i].http[j].request.body``). They are stored and rebuilt
    as they are, never mapped: a binary format would not survive a path of
    another length."""
    workspace = cassette.workspace
    try:
        roots = [RootMap(root, root).recorded for root in (workspace.root, *workspace.aliases)]
    except ValueError:
        return ()
    spellings = [form.encode("utf-8") for root in roots for form in (root, quote(root, safe=""))]

    def names_root(data: bytes | None) -> bool:
        if not data or not any(spelling in data for spelling in spellings):
            return False
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    found = [
        f"workspace.files.{path}" for path, data in workspace.files.items() if names_root(data)
    ]
    found += [
        f"outside_files.{path}"
        for path, data in workspace.outside_files.items()
        if names_root(data)
    ]
    found += [
        f"final_files.{path}"
        for path, state in cassette.final_files.items()
        if state is not None and names_root(state.content)
    ]
    for index, item in enumerate(cassette.interactions):
        for number, exchange in enumerate(item.http):
            for side, body in (
                ("request", exchange.request_body),
                ("response", exchange.response_body),
            ):
                if names_root(body):
                    found.append(f"interactions[{index}].http[{number}].{side}.body")
    return tuple(found)


MIGRATIONS: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: upgraded_from_1,
    2: upgraded_from_2,
}
"""``version -> function`` turning a cassette's plain data of that
``format_version`` into the next one (``toolguard cassette upgrade``); a
change of format adds its step here."""


def _root_given_back(raw: dict[str, Any]) -> dict[str, Any]:
    """A stored document (``with_root_placeholder``'s) with its root where
    each placeholder is: the inverse, run on a validated document."""
    workspace = raw.get("workspace") or {}
    root = workspace.get("root", DEFAULT_ROOT)
    given = {
        key: value if key in _NOT_MAPPED else expanded(_without_root(key, value), root)
        for key, value in raw.items()
    }
    if "root" in workspace:
        given["workspace"] = {"root": root, **given["workspace"]}
    return _contents_rewritten(given, lambda data: expanded(data, root))


def _without_root(key: str, value: Any) -> Any:
    """The ``workspace`` entry without its ``root``, which stays as it is."""
    if key == "workspace" and isinstance(value, Mapping):
        return {name: item for name, item in value.items() if name != "root"}
    return value


def _contents_rewritten(body: dict[str, Any], rewrite: Callable[[bytes], bytes]) -> dict[str, Any]:
    """``body`` with ``rewrite`` run over the bytes of every file or body
    written as base64 (text with a NUL or a CR); text ones are left to the
    walk of every string, binary ones to ``rewrite`` (which keeps them)."""

    def content(value: Any) -> Any:
        if not (isinstance(value, Mapping) and set(value) == {"base64"}):
            return value
        try:
            data = base64.b64decode(value["base64"], validate=True)
        except (TypeError, ValueError):
            return value  # the schema's or _content's to refuse
        changed = rewrite(data)
        if changed == data:
            return value
        return {"base64": base64.b64encode(changed).decode("ascii")}

    def files(value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {path: content(item) for path, item in value.items()}

    body = dict(body)
    if isinstance(body.get("workspace"), Mapping):
        workspace = dict(body["workspace"])
        for name in ("files", "outside_files"):
            if name in workspace:
                workspace[name] = files(workspace[name])
        body["workspace"] = workspace
    if "final_files" in body:
        body["final_files"] = files(body["final_files"])
    if isinstance(body.get("interactions"), list):
        body["interactions"] = [
            _interaction_contents(item, content, files) for item in body["interactions"]
        ]
    return body


def _interaction_contents(
    item: Any, content: Callable[[Any], Any], files: Callable[[Any], Any]
) -> Any:
    if not isinstance(item, Mapping):
        return item
    item = dict(item)
    if isinstance(item.get("http"), list):
        exchanges = []
        for exchange in item["http"]:
            if isinstance(exchange, Mapping):
                exchange = dict(exchange)
                for side in ("request", "response"):
                    part = exchange.get(side)
                    if isinstance(part, Mapping) and "body" in part:
                        exchange[side] = {**part, "body": content(part["body"])}
            exchanges.append(exchange)
        item["http"] = exchanges
    if isinstance(item.get("variants"), list):
        variants = []
        for variant in item["variants"]:
            if isinstance(variant, Mapping):
                variant = dict(variant)
                for name in ("files", "changed_files"):
                    if name in variant:
                        variant[name] = files(variant[name])
            variants.append(variant)
        item["variants"] = variants
    return item


# -- dumping ----------------------------------------------------------------


def dumps(cassette: Cassette, *, syntax: Syntax | None = None) -> str:
    """The text of a cassette: stable (same cassette, same bytes). YAML, or
    JSON for more than ``JSON_ABOVE`` interactions (``syntax`` chooses);
    a document JSON cannot hold as it is (a NaN, a date a hand-written YAML
    case gave) is written as YAML whatever was asked.

    Text that is not valid Unicode (a lone surrogate: a file name that is
    not UTF-8, as ``os.fsdecode`` gives it, or a model's broken escape)
    cannot be written to a UTF-8 file: every string is then written as the
    audit row stores it (``storable.storable_text``: ``\\udcff`` spelt out),
    and that escaped text is what loading reads back."""
    body = with_root_placeholder(to_dict(cassette), cassette.workspace.aliases)
    try:
        return _text(blobs.stored_once(body), len(cassette.interactions), syntax)
    except UnicodeEncodeError:
        # Keys are digests of the stored text: taken again once it is escaped.
        stored = blobs.stored_once(storable_data(body))
        return _text(stored, len(cassette.interactions), syntax)


def _text(body: dict[str, Any], interactions: int, syntax: Syntax | None) -> str:
    """``dumps``' text of ``body``; ``UnicodeEncodeError`` when it holds a
    lone surrogate."""
    if syntax == "json" or (syntax is None and interactions > JSON_ABOVE):
        try:
            text = json.dumps(body, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        except (TypeError, ValueError):
            pass
        else:
            if not text.isascii():
                text.encode("utf-8")  # json.dumps lets a lone surrogate through
            return text
    with _collector_paused():
        text = yaml.dump(
            body,
            Dumper=_BlockDumper,
            sort_keys=False,
            allow_unicode=True,
            width=100,
            default_flow_style=False,
        )
    return str(text)


def dump(cassette: Cassette, path: str | os.PathLike[str]) -> None:
    """Write a cassette atomically: a temporary file beside it, then a
    rename, so a crash never leaves half a cassette (vcrpy's lesson).
    ``file_writes.write_atomically``: a link at ``path`` is replaced, never
    written through; a new cassette is 0600, a rewritten one keeps its mode."""
    write_atomically(path, dumps(cassette))


def variants_text(variants: tuple[Variant, ...] | list[Variant]) -> str:
    """The ``variants:`` entry of an interaction as ``dumps`` writes it (its
    key at column 2, where ``dumps`` puts an interaction's fields); a lone
    surrogate escaped as ``dumps`` escapes it."""
    body = [{"variants": [_variant_dict(variant) for variant in variants]}]
    try:
        return _variants_yaml(body)
    except UnicodeEncodeError:
        return _variants_yaml(storable_data(body))


def _variants_yaml(body: list[dict[str, Any]]) -> str:
    with _collector_paused():
        text = yaml.dump(
            body,
            Dumper=_BlockDumper,
            sort_keys=False,
            allow_unicode=True,
            width=100,
            default_flow_style=False,
        )
    return "  " + str(text)[2:]


def to_dict(cassette: Cassette) -> dict[str, Any]:
    """The plain data of a cassette, in the order it is written, naming its
    root as it is (format 1; ``dumps`` writes ``with_root_placeholder``'s)."""
    body: dict[str, Any] = {
        "format_version": _PLAIN_VERSION,
        "kind": cassette.kind,
        "name": cassette.name,
    }
    if cassette.description:
        body["description"] = cassette.description
    if cassette.recorded_at:
        body["recorded_at"] = cassette.recorded_at
    if cassette.recorded_by:
        body["recorded_by"] = cassette.recorded_by
    body["session"] = _session_dict(cassette.session)
    body["workspace"] = _workspace_dict(cassette.workspace)
    body["interactions"] = [_interaction_dict(item) for item in cassette.interactions]
    body["final_files"] = {
        path: None if state is None else _file_state_dict(state)
        for path, state in sorted(cassette.final_files.items())
    }
    if cassette.kind == "case" and cassette.final_files_exact:
        body["final_files_exact"] = True
    if cassette.volatile:
        body["volatile"] = list(cassette.volatile)
    return body


def capabilities_dict(caps: Capabilities) -> dict[str, Any]:
    return {
        "allowed_tools": None if caps.allowed_tools is None else sorted(caps.allowed_tools),
        "allowed_risks": sorted(r.value for r in caps.allowed_risks),
        "read_roots": list(caps.read_roots),
        "write_roots": list(caps.write_roots),
        "network_hosts": list(caps.network_hosts),
        "max_read_bytes": caps.max_read_bytes,
        "max_write_bytes": caps.max_write_bytes,
    }


def _session_dict(session: Session) -> dict[str, Any]:
    body: dict[str, Any] = {
        "actor": session.actor,
        "session_id": session.session_id,
        "capabilities": capabilities_dict(session.capabilities),
        "variables": dict(sorted(session.variables.items())),
    }
    if session.idempotency_scope is not None:
        body["idempotency_scope"] = session.idempotency_scope
    if session.plan is not None:
        body["plan"] = [_plan_step_dict(step) for step in session.plan]
    if session.timeouts:
        body["timeouts"] = dict(sorted(session.timeouts.items()))
    return body


def _plan_step_dict(step: PlanStep) -> dict[str, Any]:
    body: dict[str, Any] = {"id": step.id}
    if step.description:
        body["description"] = step.description
    body["allowed_tools"] = sorted(step.allowed_tools)
    if step.required_tools:
        body["required_tools"] = list(step.required_tools)
    if step.artifacts:
        body["artifacts"] = [
            {"path": a.path, **({"schema": canonical(a.schema)} if a.schema else {})}
            for a in step.artifacts
        ]
    return body


def _workspace_dict(state: WorkspaceState) -> dict[str, Any]:
    body: dict[str, Any] = {
        "root": state.root,
        "files": {path: _content_dict(data) for path, data in sorted(state.files.items())},
    }
    if state.directories:
        body["directories"] = sorted(state.directories)
    if state.symlinks:
        body["symlinks"] = dict(sorted(state.symlinks.items()))
    if state.outside_files:
        body["outside_files"] = {
            path: _content_dict(data) for path, data in sorted(state.outside_files.items())
        }
    if state.modes:
        body["modes"] = {path: f"{bits:04o}" for path, bits in sorted(state.modes.items())}
    return body


def _interaction_dict(item: Interaction) -> dict[str, Any]:
    call = item.call
    body: dict[str, Any] = {
        "call": {
            "call_id": call.call_id,
            "tool_name": call.tool_name,
            # As the model sent them: key order can matter to a tool (JSON it writes).
            "arguments": call.arguments
            if isinstance(call.arguments, str)
            else _plain(call.arguments),
        }
    }
    if call.idempotency_key is not None:
        body["call"]["idempotency_key"] = call.idempotency_key
    body["result"] = _expectation_dict(item.result)
    body["audit"] = item.audit.checked()
    if item.approval is not None:
        body["approval"] = {"rule": item.approval.rule, "reason": item.approval.reason}
    if item.http:
        body["http"] = [_exchange_dict(exchange) for exchange in item.http]
    if item.volatile:
        body["volatile"] = list(item.volatile)
    if item.transcript_result is not None:
        body["transcript_result"] = canonical(item.transcript_result)
    if item.variants:
        body["variants"] = [_variant_dict(variant) for variant in item.variants]
    return body


def _expectation_dict(result: Expectation) -> dict[str, Any]:
    outcome: dict[str, Any] = {}
    for name in ("ok", "code", "retryable", "state", "truncated"):
        value = getattr(result, name)
        if value is not None:
            outcome[name] = value
    if result.check_data:
        outcome["data"] = canonical(result.data)
    if result.message is not None:
        outcome["message"] = result.message
    if result.message_contains is not None:
        outcome["message_contains"] = result.message_contains
    return outcome


def _variant_dict(variant: Variant) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": variant.name,
        "kind": variant.kind,
        "arguments": _plain(variant.arguments),
    }
    if variant.refused:
        body["refused"] = True
    if variant.files:
        body["files"] = {
            path: _variant_file_dict(value) for path, value in sorted(variant.files.items())
        }
    body["result"] = _expectation_dict(variant.result)
    if variant.data_sha256 is not None:
        body["data_sha256"] = variant.data_sha256
    body["audit"] = variant.audit.checked()
    if variant.changed_files:
        body["changed_files"] = {
            path: None if state is None else _file_state_dict(state)
            for path, state in sorted(variant.changed_files.items())
        }
    if variant.volatile:
        body["volatile"] = list(variant.volatile)
    return body


def _variant_file_dict(value: bytes | GeneratedContent) -> str | dict[str, Any]:
    if isinstance(value, bytes):
        return _content_dict(value)
    recipe: dict[str, Any] = {}
    if value.head:
        recipe["head"] = value.head
    recipe["repeat"] = value.repeat
    recipe["times"] = value.times
    if value.tail:
        recipe["tail"] = value.tail
    return recipe


def _exchange_dict(exchange: HttpExchange) -> dict[str, Any]:
    """vcrpy's request and response fields, headers sorted by name."""
    request: dict[str, Any] = {
        "method": exchange.method,
        "uri": exchange.uri,
        "headers": _headers_dict(exchange.request_headers),
    }
    if exchange.request_body is not None:
        request["body"] = _content_dict(exchange.request_body)
    return {
        "request": request,
        "response": {
            "status": {"code": exchange.status, "message": exchange.reason},
            "headers": _headers_dict(exchange.response_headers),
            "body": _content_dict(exchange.response_body),
        },
    }


def _headers_dict(headers: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    return {name: list(headers[name]) for name in sorted(headers, key=str.lower)}


def _content_dict(data: bytes) -> str | dict[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}
    if "\x00" in text or "\r" in text:
        return {"base64": base64.b64encode(data).decode("ascii")}
    return text


def _file_state_dict(state: FileState) -> str | dict[str, Any]:
    if state.content is not None:
        return _content_dict(state.content)
    return {"sha256": state.sha256}


def _plain(value: Any) -> Any:
    """JSON-like data as plain dicts and lists, order kept."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def canonical(value: Any) -> Any:
    """JSON-like data with every mapping's keys sorted, for stable output."""
    if isinstance(value, Mapping):
        return {str(key): canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    return value


class _BlockDumper(_Dumper):  # type: ignore[misc]
    """Multi-line strings as ``|`` blocks, so file contents read as files."""


def _represent_str(dumper: Any, value: str) -> Any:
    style = (
        "|" if "\n" in value and not value.endswith((" ", "\t")) and " \n" not in value else None
    )
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_reference(dumper: Any, value: blobs.Reference) -> Any:
    return dumper.represent_mapping("tag:yaml.org,2002:map", value, flow_style=True)


_BlockDumper.add_representer(str, _represent_str)
_BlockDumper.add_representer(blobs.Reference, _represent_reference)
