"""Recording variants with the trusted tool: ``amplify()`` and ``amplify_file()``.

``amplify(cassette, registry)`` first replays the cassette as it is
(``replay.player.replay``): if the recorded calls do not replay the same,
the tool in use is not the one the cassette trusts, and nothing is
amplified. Then it walks the recorded session (``harness.branching``) and,
for each call that succeeded, tries the candidates of ``derive`` in their
order from the state just before the call, with the registry in use (the
trusted tools):

- each candidate runs twice, the second time with the clock a day later and
  another random seed; what differs between the two (a data field, the
  whole result, a file) is kept as the variant's ``volatile`` list, not
  compared in replay, and the variant is counted volatile;
- a candidate whose arguments fail the input schema is kept as the refusal
  it gets, ``refused``, counted apart; a schema bound (exactly, inside,
  outside) of a tool is kept once per cassette, at the tool's first call;
- a result whose data is large is kept as the data's hash (``data_sha256``);
- dropped, each with its reason: the recorded call itself, a call another
  candidate already makes, one slower than ``BRANCH_SECONDS`` (its
  deadline while amplifying), one whose run reached beyond its world (the
  real disk from the fake world, refused; an entry outside the workspace
  of the directory world: ``Branch.escapes``), its answer not the tool's
  alone, and every candidate past the cap
  (``VariantCaps``: 15 a call, or the tool's own; refusals have a cap of
  the same size of their own).

A call holding HTTP exchanges gets only the variants its input schema
refuses (they end before the handler, so they make no request); the others
are dropped: their requests would have no recorded answer.

It runs in the world replay chooses (``world``; ``branching.walked_world``):
a tool declaring ``world="directory"`` is amplified on real files.

Calls not amplified, with the reason: of a tool the registry lacks, refused
or failed when recorded (their variants would meet the same refusal),
arguments that are not an object.

``amplify_file(path, registry)`` writes the variants into the file
(``write.with_variants``), atomically, and only when the text changed: an
unchanged tool re-amplified leaves the file byte for byte.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .. import documents
from ..contract import CallState, ErrorCode
from ..file_writes import write_atomically
from ..harness.branching import Branch, SessionWalk
from ..harness.clock import DEFAULT_TIME
from ..harness.fake_filesystem import FakeFilesystems
from ..harness.session import secrets_redactor
from ..jsondata import canonical_json
from ..redaction import Redactor
from ..registry import ToolRegistry, ToolSpec
from ..replay.cassette import (
    AuditExpectation,
    Cassette,
    Expectation,
    FileState,
    Interaction,
    Variant,
    load,
)
from ..replay.checks import Difference
from ..replay.player import replay
from ..replay.redacting import redact_file, redact_path
from ..replay.variants import (
    FILES_PREFIX,
    WHOLE_RESULT,
    approved_twin,
    data_hash,
    variant_call,
)
from .changes import strings_in
from .derive import CallFacts, Candidate, candidates
from .limit import limit_sized
from .write import with_variants

DEFAULT_MAX_VARIANTS = 15
"""Variants kept per call, unless the tool has its own cap."""
BRANCH_SECONDS = 2.0
"""A candidate's deadline while amplifying: a slower one would slow replay."""
CLOCK_SHIFT = timedelta(days=1, hours=1, minutes=1, seconds=1, milliseconds=500)
"""How much later the clock is for a candidate's second run."""
DATA_LIMIT = 2000
"""A variant's result data longer than this (canonical JSON) is kept as its hash."""
FILES_PER_DIRECTORY = 3
"""Files of a directory a call read that are varied one by one."""
FILES_BENEATH = 50
"""Files of a directory a call read that are varied all at once (at most)."""
NO_HTTP_ANSWER = "it would make HTTP requests with no recorded answer"
"""Why a variant of a call holding HTTP exchanges that its schema allows is dropped."""


@dataclass(frozen=True, slots=True)
class VariantCaps:
    """How many variants each call keeps: ``default``, or its tool's own."""

    default: int = DEFAULT_MAX_VARIANTS
    per_tool: Mapping[str, int] = field(default_factory=dict)

    def of(self, tool: str) -> int:
        return self.per_tool.get(tool, self.default)

    @classmethod
    def parse(cls, values: Sequence[str]) -> VariantCaps:
        """From ``["12", "read_text=20"]``: a bare number is the default, a
        ``tool=N`` a tool's own. ``ValueError`` naming a bad entry."""
        default, per_tool = DEFAULT_MAX_VARIANTS, {}
        for value in values:
            tool, equals, number = value.rpartition("=")
            try:
                count = int(number)
            except ValueError:
                count = -1
            if count < 0 or (equals and not tool):
                raise ValueError(f"max variants {value!r}: give N or TOOL=N, N >= 0")
            if equals:
                per_tool[tool] = count
            else:
                default = count
        return cls(default, per_tool)


@dataclass(frozen=True, slots=True)
class Dropped:
    """A candidate not kept, and why."""

    interaction: int
    """From 1."""
    tool: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class AmplifyReport:
    """What amplifying one cassette did."""

    source: str
    kept: int = 0
    """Variants kept, refusals and volatile ones included."""
    refused: int = 0
    """Of the kept, variants whose arguments fail the input schema."""
    volatile: int = 0
    """Of the kept, variants with a part not compared (time or randomness)."""
    dropped: tuple[Dropped, ...] = ()
    skipped: tuple[str, ...] = ()
    """Calls not amplified: ``interaction 1 (write_file): why``."""
    replay_differences: tuple[Difference, ...] = ()
    """The recording run's differences: when any, nothing was amplified."""
    written: bool = False
    """The file was rewritten (False: unchanged, or not amplified)."""

    @property
    def ok(self) -> bool:
        """The recording run passed (so the variants could be recorded)."""
        return not self.replay_differences

    def reasons(self) -> Counter[str]:
        """How many candidates were dropped for each reason."""
        return Counter(_reason_kind(item.reason) for item in self.dropped)

    def lines(self, *, every_drop: bool = True) -> list[str]:
        """The report for a person: counts, then each drop and skip."""
        if not self.ok:
            return [
                f"{self.source}: not amplified: the recording run differs "
                f"({len(self.replay_differences)} difference(s)); replay it, fix or re-record it"
            ]
        state = "written" if self.written else "unchanged"
        lines = [
            f"{self.source}: {self.kept} variant(s) kept ({self.refused} refusal(s), "
            f"{self.volatile} volatile), {len(self.dropped)} dropped; {state}"
        ]
        for reason, count in sorted(self.reasons().items()):
            lines.append(f"  dropped {count}: {reason}")
        if every_drop:
            for item in self.dropped:
                lines.append(
                    f"    interaction {item.interaction} ({item.tool}) `{item.name}`: {item.reason}"
                )
        lines += [f"  not amplified: {why}" for why in self.skipped]
        return lines


def _reason_kind(reason: str) -> str:
    """A reason without the part naming one variant, interaction or escape."""
    return reason.split(" `")[0].split(" at interaction")[0].split(": ")[0]


def amplify(
    cassette: Cassette,
    registry: ToolRegistry,
    *,
    caps: VariantCaps | None = None,
    redactor: Redactor | None = None,
    secrets: Mapping[str, str] | None = None,
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
) -> tuple[Cassette, AmplifyReport]:
    """``cassette`` with fresh variants on its calls (its old ones
    replaced), and the report (see the module docstring). When the
    recording run differs, the cassette comes back as it was. Without a
    ``redactor``, what is recorded is redacted with the default rules and
    the ``secrets``' values (``secrets_redactor``): a real secret replay
    put in a call never reaches a variant."""
    caps = caps or VariantCaps()
    # The secrets' values go into the calls replayed: everything recorded
    # from them is redacted with their patterns, as replay and fault cells do.
    redactor = redactor or secrets_redactor(secrets) or Redactor()
    plain = replace(
        cassette, interactions=tuple(replace(i, variants=()) for i in cassette.interactions)
    )
    recorded = replay(
        plain,
        registry,
        redactor=redactor,
        secrets=secrets,
        fake_filesystems=fake_filesystems,
        world=world,
    )
    if not recorded.ok:
        return cassette, AmplifyReport(cassette.source, replay_differences=recorded.differences)
    run = _Amplifier(plain, registry, caps, redactor)
    interactions: list[Interaction] = []
    with SessionWalk(
        plain,
        registry,
        redactor=redactor,
        secrets=secrets,
        fake_filesystems=fake_filesystems,
        world=world,
    ) as walk:
        for index, interaction in enumerate(plain.interactions):
            why = run.why_not(interaction, recorded.results[index].state)
            if why:
                run.skipped.append(f"interaction {index + 1} ({interaction.call.tool_name}): {why}")
                interactions.append(interaction)
            else:
                variants = run.variants(walk, index, interaction)
                interactions.append(replace(interaction, variants=variants))
            walk.step()
    amplified = replace(plain, interactions=tuple(interactions))
    kept = [v for i in interactions for v in i.variants]
    return amplified, AmplifyReport(
        cassette.source,
        kept=len(kept),
        refused=sum(v.refused for v in kept),
        volatile=sum(bool(v.volatile) for v in kept),
        dropped=tuple(run.dropped),
        skipped=tuple(run.skipped),
    )


def amplify_file(
    path: str | os.PathLike[str],
    registry: ToolRegistry,
    *,
    source: str | None = None,
    caps: VariantCaps | None = None,
    redactor: Redactor | None = None,
    secrets: Mapping[str, str] | None = None,
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
) -> AmplifyReport:
    """Amplify the cassette or case at ``path`` and write its variants in
    place (atomically; only when its text changes). ``CassetteError`` for
    a file that cannot be loaded."""
    target = Path(path)
    cassette = load(target, source=source)
    original = documents.read_text(target)  # within its limits: load read it
    amplified, report = amplify(
        cassette,
        registry,
        caps=caps,
        redactor=redactor,
        secrets=secrets,
        fake_filesystems=fake_filesystems,
        world=world,
    )
    if not report.ok:
        return report
    text = with_variants(
        original, [i.variants for i in amplified.interactions], source=report.source
    )
    if text == original:
        return report
    write_atomically(target, text)
    return replace(report, written=True)


class _Amplifier:
    """The state of one cassette's amplification: drops, skips, refusals kept."""

    def __init__(
        self, cassette: Cassette, registry: ToolRegistry, caps: VariantCaps, redactor: Redactor
    ) -> None:
        self.cassette = cassette
        self.registry = registry
        self.caps = caps
        self.redactor = redactor
        self.dropped: list[Dropped] = []
        self.skipped: list[str] = []
        self.bounds: dict[tuple[str, str], int] = {}
        """A tool's schema bound kept (its name, ``Candidate.bound``) -> its
        interaction (from 1)."""
        recorded_at = cassette.recorded_at or DEFAULT_TIME
        self.later = (datetime.fromisoformat(recorded_at) + CLOCK_SHIFT).isoformat()

    def why_not(self, interaction: Interaction, state: CallState) -> str:
        """Why a call is not amplified ('' when it is)."""
        if self.registry.get(interaction.call.tool_name) is None:
            return "the registry has no such tool"
        if state is not CallState.SUCCEEDED:
            return f"it did not succeed ({state.value}): its variants would meet the same end"
        if _arguments(interaction.call.arguments) is None:
            return "its arguments are not an object"
        return ""

    def variants(
        self, walk: SessionWalk, index: int, interaction: Interaction
    ) -> tuple[Variant, ...]:
        spec = self.registry.get(interaction.call.tool_name)
        arguments = _arguments(interaction.call.arguments)
        assert spec is not None and arguments is not None  # why_not said so
        call = interaction.call
        probed: list[Candidate] = []
        if interaction.http:  # only refusals: no branch may make a request
            facts = CallFacts(
                arguments, spec.input_schema, _fixed_arguments(spec), data=interaction.result.data
            )
        else:
            baseline = walk.branch(
                replace(call, call_id=call.call_id + "~0"),
                approved=approved_twin(interaction, call),
            )
            read, beneath = _files_read(walk, baseline.touched, baseline.stored_data)
            # Varied files are written into the cassette: kept as the recorder
            # keeps files (the world holds what replay wrote, real secrets too).
            read, beneath = self._kept(read), self._kept(beneath)
            facts = CallFacts(
                arguments=arguments,
                schema=spec.input_schema,
                fixed=_fixed_arguments(spec),
                files_read=read,
                beneath=beneath,
                data=baseline.stored_data,
            )
            if baseline.result.ok and not baseline.result.truncated:
                probed = limit_sized(
                    facts,
                    spec.result_limit,
                    lambda candidate: self._result_size(walk, interaction, spec, candidate),
                )
        recorded = Candidate("the recorded call", "", "", arguments).identity()
        seen: dict[str, str] = {recorded: "the recorded call"}
        cap = self.caps.of(spec.name)
        kept: list[Variant] = []

        def refuses(candidate: Candidate) -> bool:
            return not spec.input_validator.is_valid(dict(candidate.arguments))

        for candidate in candidates(facts, probed=probed, refused=refuses):
            refused = refuses(candidate)
            # Refusals are counted apart, and capped apart: they are cheap
            # (refused before any handler runs) and check the schema's bounds.
            count = sum(variant.refused == refused for variant in kept)
            reason = self._why_dropped(candidate, seen, spec, count, cap, refused)
            if not reason and interaction.http and not refused:
                reason = NO_HTTP_ANSWER
            if not reason:
                variant, reason = self._record(walk, interaction, spec, candidate, len(kept))
                if variant is not None:
                    kept.append(variant)
                    if candidate.bound:
                        self.bounds[(spec.name, candidate.bound)] = index + 1
            if reason:
                self.dropped.append(Dropped(index + 1, spec.name, candidate.name, reason))
        return tuple(kept)

    def _kept(self, files: Mapping[str, bytes]) -> dict[str, bytes]:
        return {
            redact_path(self.redactor, path): redact_file(self.redactor, data)
            for path, data in files.items()
        }

    def _why_dropped(
        self,
        candidate: Candidate,
        seen: dict[str, str],
        spec: ToolSpec,
        kept: int,
        cap: int,
        refused: bool,
    ) -> str:
        identity = candidate.identity()
        if identity in seen:
            first = seen[identity]
            return (
                "the recorded call itself"
                if first == "the recorded call"
                else (f"the same call as variant `{first}`")
            )
        seen[identity] = candidate.name
        if candidate.bound:
            where = self.bounds.get((spec.name, candidate.bound))
            if where is not None:
                return f"the same bound is checked at interaction {where}"
        if kept >= cap:
            what = "refusal(s)" if refused else "variant(s)"
            return f"over the cap of {cap} {what} for {spec.name}"
        return ""

    def _result_size(
        self, walk: SessionWalk, interaction: Interaction, spec: ToolSpec, candidate: Candidate
    ) -> int | None:
        """The characters of JSON of ``candidate``'s result before any cut
        (None when it fails): how ``limit.limit_sized`` measures."""
        draft = Variant(candidate.name, candidate.kind, dict(candidate.arguments), candidate.files)
        call = variant_call(interaction, 0, draft)
        files = {
            path: value if isinstance(value, bytes) else value.content()
            for path, value in candidate.files.items()
        }
        result = walk.branch(
            call,
            files=files,
            approved=approved_twin(interaction, call),
            timeouts={spec.name: min(spec.timeout_seconds, BRANCH_SECONDS)},
        ).result
        if not result.ok:
            return None
        if result.total_size is not None:
            return result.total_size
        return len(json.dumps(result.data, ensure_ascii=False, sort_keys=True))

    def _record(
        self,
        walk: SessionWalk,
        interaction: Interaction,
        spec: ToolSpec,
        candidate: Candidate,
        position: int,
    ) -> tuple[Variant | None, str]:
        draft = Variant(candidate.name, candidate.kind, dict(candidate.arguments), candidate.files)
        call = variant_call(interaction, position, draft)
        files = {
            path: value if isinstance(value, bytes) else value.content()
            for path, value in candidate.files.items()
        }
        deadline = {spec.name: min(spec.timeout_seconds, BRANCH_SECONDS)}
        approved = approved_twin(interaction, call)
        first = walk.branch(call, files=files, approved=approved, seed=0, timeouts=deadline)
        if first.result.code is ErrorCode.TIMEOUT or first.problems:
            return None, f"slower than {BRANCH_SECONDS:g} s (its deadline while amplifying)"
        if first.escapes:
            return None, _escaped(first.escapes)
        second = walk.branch(
            call, files=files, approved=approved, seed=1, frozen_at=self.later, timeouts=deadline
        )
        if second.escapes:
            return None, _escaped(second.escapes)
        refused = not spec.input_validator.is_valid(dict(candidate.arguments))
        volatile = _volatile(first, second)
        expectation, digest = _expectation(first), None
        if len(canonical_json(first.stored_data)) > DATA_LIMIT and not any(
            path == WHOLE_RESULT or path.startswith("data") for path in volatile
        ):
            expectation = replace(expectation, data=None, check_data=False)
            digest = data_hash(first.stored_data)
        return (
            replace(
                draft,
                result=expectation,
                data_sha256=digest,
                audit=_audit(first),
                changed_files={
                    path: None if data is None else _file_state(redact_file(self.redactor, data))
                    for path, data in first.changed.items()
                },
                volatile=volatile,
                refused=refused,
            ),
            "",
        )


def _escaped(escapes: Sequence[str]) -> str:
    more = f" (and {len(escapes) - 1} more)" if len(escapes) > 1 else ""
    return f"its run reached beyond its world, so its answer is not the tool's: {escapes[0]}{more}"


def _arguments(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = documents.parse_json(value)  # a cassette's: bounded
        except ValueError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


def _fixed_arguments(spec: ToolSpec) -> frozenset[str]:
    """Arguments the policy reads as paths or hosts: not varied as text."""
    names = {name for access in spec.paths for name in access.fields}
    if spec.network_host_argument:
        names.add(spec.network_host_argument)
    return frozenset(names)


def _files_read(
    walk: SessionWalk, touched: Sequence[str], data: Any
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The files under the workspace that the paths a handler asked about
    name, as they are now: to vary one by one (of a directory, a few of its
    files, those the data names first), and all of them (of a directory, up
    to ``FILES_BENEATH``)."""
    tree = walk.world.tree()
    quoted = set(strings_in(data))
    root = walk.world.root
    found: dict[str, bytes] = {}
    beneath: dict[str, bytes] = {}
    for asked in touched:
        path = posixpath.normpath(asked)
        if posixpath.isabs(path):
            path = posixpath.relpath(path, root)
        if path.startswith(".."):
            continue
        if path in tree:
            found[path] = beneath[path] = tree[path]
            continue
        prefix = "" if path == "." else path.rstrip("/") + "/"
        # Files the result names first (the ones a search matched), then the others.
        below = sorted(
            (name for name in tree if name.startswith(prefix)),
            key=lambda name: (name not in quoted, name),
        )
        for name in below[:FILES_PER_DIRECTORY]:
            found[name] = tree[name]
        for name in below[:FILES_BENEATH]:
            beneath[name] = tree[name]
    return found, beneath


def _file_state(content: bytes) -> FileState:
    """A changed file as a variant keeps it: its content when short, else its hash."""
    state = FileState.of(content)
    return state if len(content) <= DATA_LIMIT else FileState(state.sha256)


def _expectation(branch: Branch) -> Expectation:
    result = branch.result
    return Expectation(
        ok=result.ok,
        code=result.code.value,
        retryable=result.retryable,
        state=result.state.value,
        truncated=result.truncated,
        data=branch.stored_data,
        check_data=True,
        message=result.message,
    )


def _audit(branch: Branch) -> AuditExpectation:
    return AuditExpectation.from_row(branch.audit_row)


def _volatile(first: Branch, second: Branch) -> tuple[str, ...]:
    """What differed between the two runs of a candidate."""
    one, two = first.result, second.result
    if (one.ok, one.code, one.state, one.truncated) != (two.ok, two.code, two.state, two.truncated):
        found = [WHOLE_RESULT]
    elif first.stored_data == second.stored_data:
        found = []
    elif isinstance(first.stored_data, Mapping) and isinstance(second.stored_data, Mapping):
        keys = sorted(set(first.stored_data) | set(second.stored_data))
        found = [
            f"data.{key}"
            for key in keys
            if first.stored_data.get(key, ...) != second.stored_data.get(key, ...)
        ]
    else:
        found = ["data"]
    paths = sorted(set(first.changed) | set(second.changed))
    found += [FILES_PREFIX + p for p in paths if first.changed.get(p) != second.changed.get(p)]
    return tuple(found)
