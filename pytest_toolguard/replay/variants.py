"""Replaying the amplified variants of a cassette: ``replay_variants()``.

Each interaction may hold variants of its call (``cassette.Variant``,
written by ``pytest_toolguard.amplify``). ``replay_variants`` walks the
recorded session once (``harness.branching.SessionWalk``) and, just before
each recorded call, runs each of its variants from the state the session
had then, comparing what ``checks.ReplayChecks`` compares for an
interaction (result, data, audit row), the message of a cut result (its
size before the cut) and of a refusal (the schema errors), and the files
the variant's call created, changed or removed. Every difference names its variant:
``interaction 3 (read_text), variant `max_chars = len(data.content)```.

It never raises for a difference; a cassette whose HTTP exchanges cannot be
served is one difference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..contract import ToolCall
from ..harness.branching import Branch, SessionWalk
from ..harness.fake_filesystem import FakeFilesystems
from ..harness.known_secrets import KnownSecrets
from ..harness.session import secrets_redactor
from ..jsondata import canonical_json
from ..redaction import Redactor
from ..registry import ToolRegistry
from .cassette import (
    VOLATILE_FILE_PREFIX,
    Cassette,
    FileState,
    GeneratedContent,
    Interaction,
    Variant,
)
from .checks import Difference, ReplayChecks, describe_content
from .http import HttpUnavailable
from .redacting import redact_file

WHOLE_RESULT = "result"
"""A variant's volatile entry meaning: its result is not compared at all."""
FILES_PREFIX = VOLATILE_FILE_PREFIX
"""A variant's volatile entry ``files.<path>``: that file's content is not compared."""


@dataclass(frozen=True, slots=True)
class VariantsReport:
    """What replaying the variants of one cassette found."""

    cassette: Cassette
    differences: tuple[Difference, ...]
    checks: int
    variants: int
    """Variants replayed (refusals included)."""
    refused: int
    """Of which, variants whose arguments fail the input schema."""

    @property
    def ok(self) -> bool:
        return not self.differences


def data_hash(data: Any) -> str:
    """The SHA-256 of ``data``'s canonical JSON: a large variant result's
    data is kept as this."""
    return hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


def variant_label(index: int, interaction: Interaction, variant: Variant) -> str:
    """``interaction 3 (read_text), variant `max_chars = 4000```; ``index`` from 0."""
    return f"interaction {index + 1} ({interaction.call.tool_name}), variant `{variant.name}`"


def variant_call(interaction: Interaction, position: int, variant: Variant) -> ToolCall:
    """The call a variant sends: the recorded call with the variant's
    arguments, its own call id (``call-03~2``) and, when the recorded call
    had one, its own idempotency key (a reused key would only be answered
    from the store)."""
    call = interaction.call
    suffix = f"~{position + 1}"
    key = None if call.idempotency_key is None else call.idempotency_key + suffix
    return replace(
        call, call_id=call.call_id + suffix, arguments=variant.arguments, idempotency_key=key
    )


def variant_files(variant: Variant) -> dict[str, bytes]:
    """The files a variant writes before its call, as bytes."""
    return {
        path: value.content() if isinstance(value, GeneratedContent) else value
        for path, value in variant.files.items()
    }


def approved_twin(interaction: Interaction, call: ToolCall) -> tuple[Interaction, ...]:
    """A variant of an approved call is approved as its call was."""
    if interaction.approval is None:
        return ()
    return (Interaction(call=call, approval=interaction.approval),)


def replay_variants(
    cassette: Cassette,
    registry: ToolRegistry,
    *,
    redactor: Redactor | None = None,
    secrets: Mapping[str, str] | None = None,
    fake_filesystems: FakeFilesystems | None = None,
    world: str = "auto",
) -> VariantsReport:
    """Replay every variant of ``cassette`` through fresh branches of its
    recorded session over ``registry`` (see the module docstring), in the
    world replay chooses (``world``: ``auto``, ``fake``, ``directory``).
    Without a ``redactor``, the ``secrets``' values are redacted too, as
    amplify redacted them when it recorded the variants. A variant whose
    run reached beyond its world (``Branch.escapes``) is a difference."""
    redactor = redactor or secrets_redactor(secrets) or Redactor()
    known = KnownSecrets(secrets)  # never shown in a difference
    differences: list[Difference] = []
    checks_made = replayed = refused = 0
    try:
        with SessionWalk(
            cassette,
            registry,
            redactor=redactor,
            secrets=secrets,
            fake_filesystems=fake_filesystems,
            world=world,
        ) as walk:
            for index, interaction in enumerate(cassette.interactions):
                for position, variant in enumerate(interaction.variants):
                    call = variant_call(interaction, position, variant)
                    branch = walk.branch(
                        call,
                        files=variant_files(variant),
                        approved=approved_twin(interaction, call),
                    )
                    checks = ReplayChecks(redactor, cassette.volatile, registry, known)
                    compare_variant(checks, index, interaction, variant, call, branch)
                    for escape in branch.escapes:
                        checks.add("runtime", "beyond the world", "not reached", escape)
                    label = variant_label(index, interaction, variant)
                    differences += [replace(d, where=label) for d in checks.differences]
                    checks_made += checks.checks
                    replayed += 1
                    refused += variant.refused
                walk.step()
    except HttpUnavailable as exc:
        differences.append(Difference("runtime", "http", "vcrpy serving the exchanges", str(exc)))
    return VariantsReport(cassette, tuple(differences), checks_made, replayed, refused)


def compare_variant(
    checks: ReplayChecks,
    index: int,
    interaction: Interaction,
    variant: Variant,
    call: ToolCall,
    branch: Branch,
) -> None:
    """Compare what a variant's branch did with what was recorded for it."""
    volatile = set(variant.volatile)
    expected = Interaction(
        call=call, result=variant.result, audit=variant.audit, volatile=variant.volatile
    )
    where = variant_label(index, interaction, variant)
    if WHOLE_RESULT in volatile:  # only that it ends, with its audit row
        expected = Interaction(call=call)
    else:
        checks.result(index, expected, branch.result, branch.stored_data)
        cut = variant.result.ok and variant.result.truncated
        if (cut or variant.refused) and variant.result.message is not None:
            # A cut result's data hides what was cut, its size before the
            # cut in the message does not; a refusal's message is the
            # schema errors the model reads.
            checks.compare(where, "result.message", variant.result.message, branch.result.message)
        if variant.data_sha256 is not None:
            checks.compare(
                where, "result.data (sha256)", variant.data_sha256, data_hash(branch.stored_data)
            )
    if branch.audit_row is None:
        checks.add(where, "audit.rows", 1, 0)
    else:
        checks.audit([expected], [branch.audit_row])
    for problem in branch.problems:
        checks.add(where, "handlers", "none still running", problem)
    for path in sorted(set(variant.changed_files) | set(branch.changed)):
        if FILES_PREFIX + path in volatile:
            continue
        checks.checks += 1
        name = f"changed file {path}"
        recorded, have = variant.changed_files.get(path), branch.changed.get(path)
        if path not in branch.changed:
            checks.add(where, name, _describe(recorded), "unchanged")
        elif path not in variant.changed_files:
            checks.add(where, name, "unchanged", _describe_bytes(have))
        elif recorded is None or have is None:
            if (recorded is None) != (have is None):
                checks.add(where, name, _describe(recorded), _describe_bytes(have))
        else:
            content = redact_file(checks.redactor, have)
            if FileState.of(content).sha256 != recorded.sha256:
                checks.add(where, name, _describe(recorded), describe_content(content))


def _describe(state: FileState | None) -> str:
    if state is None:
        return "removed"
    return describe_content(state.content) if state.content is not None else state.sha256[:12]


def _describe_bytes(data: bytes | None) -> str:
    return "removed" if data is None else describe_content(data)
