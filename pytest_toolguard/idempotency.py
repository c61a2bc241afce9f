"""Idempotency keys and what a repeated call gets.

A model repeats calls: it missed the last result, a retry fired after a
timeout, a workflow resumed from an earlier step. For a tool with side
effects (send a message, create a ticket) the second call must not act
again. The semantics follow Stripe's idempotent requests and the IETF
``Idempotency-Key`` HTTP header draft:

* **The key names a business action, not a call.** ``call_id`` identifies one
  call record; the idempotency key says "these calls are the same action".
  ``make_idempotency_key`` derives it from the tool name, the canonical JSON
  of the arguments and a *scope* (a task, ticket or operation id). The scope
  should not be the whole session: two legitimate identical edits in one
  session would be refused. A key a client supplies is scoped the same way
  with ``scope_client_key``, so it never collides across tools or scopes.
* **The first outcome wins.** Once a call's handler has started, its outcome,
  success or failure or timeout, is what every later call with that key
  gets (``ClaimOutcome.REPLAY``, reported as ``IDEMPOTENT_REPLAY``); the
  handler never runs twice. A call whose process died while its handler ran
  is recorded as interrupted and replays as that failure: the side effect
  may have happened, so it is never attempted again.
* **Same key while the first is running** -> ``ClaimOutcome.RUNNING``
  (``DUPLICATE_CALL``, retryable: ask again later for the outcome).
* **Same key, other arguments** -> ``ClaimOutcome.CONFLICT``
  (``IDEMPOTENCY_CONFLICT``): the client reused a key for a different action.
* **A refused call frees its key.** The runtime claims a key only after
  parsing, schema, policy and hooks have passed, so a refused call never
  holds one. The claim and the RUNNING audit row are one transaction, so an
  audit write that fails leaves no claim; a claim whose handler then fails
  to start is freed with ``SQLiteAuditStore.release``, and a retry runs.

The claim itself is atomic: ``SQLiteAuditStore.start`` claims the key and
writes the RUNNING audit row in one ``BEGIN IMMEDIATE`` transaction. A
``SELECT`` followed by an ``INSERT`` is not atomic: two concurrent calls both
see "no key" and both run (``tests/core/test_idempotency_store.py`` shows it).

This module is pure: key derivation and the decision of what a claim means
given what is stored. Storage lives in ``pytest_toolguard.audit``.

**What a claim remembers of the arguments.** Two calls that differ only in
a password must not share an outcome, so a claim compares the *raw*
arguments; but a plain hash of them, stored, would let anyone holding the
database test guesses of the password against it (the audit row shows the
arguments redacted, so the guess list is short). A claim therefore stores
only ``arguments_fingerprint``: an HMAC-SHA256 of the raw arguments' digest
keyed by a random secret of the store (``new_fingerprint_key``, made once
with the schema and kept in it). Every process and runtime sharing the
store reads the same key, so they agree on every fingerprint. Where that
stops: whoever holds the whole database holds the key too, and can test
guesses against the rows of calls that carried an idempotency key (only
those have a fingerprint); a copy of the audit rows alone, without the
key, cannot. The audit row's own ``arguments_hash`` covers the *redacted*
arguments it shows, and so fingerprints no secret. The claim's own name is
keyed the same way (``claim_fingerprint`` of ``scope_client_key``): the raw
session id and client key it is scoped on are no more testable than the
arguments.

``make_idempotency_key`` derives a key from the arguments a caller gives
it: give it arguments without secrets (or a secret scope), since the key is
shown in the audit row.
"""

from __future__ import annotations

import enum
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .contract import ErrorCode
from .jsondata import canonical_json, json_hash, sha256_text


def make_idempotency_key(tool_name: str, arguments: Mapping[str, Any], scope: str) -> str:
    """sha256 hex digest of ``scope\\ntool_name\\n<canonical JSON of arguments>``.

    The same action (tool, arguments in any key order, scope) always gives
    the same key; another tool or scope gives another key. Canonical JSON
    never holds a raw newline, so the text splits one way only provided the
    tool name has none: ``ValueError`` when it does. ``TypeError`` when the
    arguments are not JSON-encodable.
    """
    if "\n" in tool_name:
        raise ValueError("a tool name used in an idempotency key must not contain a newline")
    return sha256_text(f"{scope}\n{tool_name}\n{canonical_json(dict(arguments))}")


def scope_client_key(
    client_key: str,
    tool_name: str,
    scope: str,
    *,
    scope_kind: Literal["scope", "session"] = "scope",
) -> str:
    """The stored key for a key a client supplied (``ToolCall.idempotency_key``).

    Scoped like ``make_idempotency_key``, so one client key used with two
    tools, or in two scopes, names two actions; ``scope_kind`` says whether
    ``scope`` is a runtime's ``idempotency_scope`` or a session id, so a
    scope never collides with a session of the same name. Give the raw
    values, never redacted or escaped ones (two JWT session ids redact
    alike). The parts are hashed as a JSON array of exact strings (lone
    surrogates kept), so two different quadruples never give the same text:
    no collision but sha256's. Deterministic; never raises for strings.
    """
    return json_hash(["client-key", scope_kind, scope, tool_name, client_key])


FINGERPRINT_KEY_BYTES = 32
"""The size of a store's fingerprint key."""


def new_fingerprint_key() -> str:
    """A fresh random fingerprint key, as hex text a store keeps."""
    return secrets.token_hex(FINGERPRINT_KEY_BYTES)


def arguments_fingerprint(key: str, arguments_digest: str) -> str:
    """What a claim stores of its call's arguments: HMAC-SHA256, keyed by a
    store's ``key`` (hex text from ``new_fingerprint_key``), of
    ``arguments_digest`` (``jsondata.json_hash`` of the raw arguments), as
    hex. Equal digests give equal fingerprints under one key; without the
    key, a fingerprint says nothing testable about the arguments.
    ``ValueError`` for a key that is not hex text."""
    return hmac.new(
        bytes.fromhex(key), arguments_digest.encode("utf-8", "surrogatepass"), "sha256"
    ).hexdigest()


def claim_fingerprint(key: str, claim_key: str) -> str:
    """The name a store keeps a claim under: HMAC-SHA256, keyed by the
    store's ``key``, of the claim's key (``scope_client_key``, a hash of
    the raw session id or scope and the raw client key, either of which
    may be a secret the audit row shows redacted). Set apart from
    ``arguments_fingerprint`` by its own prefix. A store looks a claim up
    by it, so the same key under one store finds the same claim; without
    the store's key it confirms no guess of a session id or client key.
    ``ValueError`` for a key that is not hex text."""
    message = f"claim\n{claim_key}".encode("utf-8", "surrogatepass")
    return hmac.new(bytes.fromhex(key), message, "sha256").hexdigest()


class ClaimOutcome(str, enum.Enum):
    """What an attempt to claim an idempotency key found."""

    CLAIMED = "claimed"
    """This call owns the key; its handler will run."""
    REPLAY = "replay"
    """An earlier call with this key finished; its stored outcome is returned."""
    RUNNING = "running"
    """An earlier call with this key is still running."""
    CONFLICT = "conflict"
    """The key was used before with other arguments."""

    def __str__(self) -> str:
        return self.value


_CODES: Mapping[ClaimOutcome, ErrorCode | None] = {
    ClaimOutcome.CLAIMED: None,
    ClaimOutcome.REPLAY: ErrorCode.IDEMPOTENT_REPLAY,
    ClaimOutcome.RUNNING: ErrorCode.DUPLICATE_CALL,
    ClaimOutcome.CONFLICT: ErrorCode.IDEMPOTENCY_CONFLICT,
}


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim. ``original_call_id`` is the call that owns the
    key (None when this call claimed it); ``stored_result`` is the outcome it
    stored when it finished (``REPLAY`` only, and None if it stored none)."""

    outcome: ClaimOutcome
    key: str
    original_call_id: str | None = None
    stored_result: dict[str, Any] | None = None

    @property
    def error_code(self) -> ErrorCode | None:
        """The code the call is answered with instead of running: None for
        ``CLAIMED``, else ``IDEMPOTENT_REPLAY``, ``DUPLICATE_CALL`` or
        ``IDEMPOTENCY_CONFLICT``."""
        return _CODES[self.outcome]


@dataclass(frozen=True, slots=True)
class StoredKey:
    """An idempotency key as a store holds it. ``arguments_hash`` is the
    claim's ``arguments_fingerprint`` (the column keeps its old name)."""

    key: str
    tool_name: str
    arguments_hash: str
    call_id: str
    status: Literal["running", "done"]
    result: dict[str, Any] | None = None


def resolve_claim(stored: StoredKey, tool_name: str, fingerprint: str) -> Claim:
    """What a call to ``tool_name`` whose arguments have ``fingerprint``
    (``arguments_fingerprint`` under the store's key) gets when ``stored``
    already holds its key. Another tool or other arguments win over status:
    reusing a key for another action is a conflict even while the first
    call runs."""
    if stored.arguments_hash != fingerprint or stored.tool_name != tool_name:
        return Claim(ClaimOutcome.CONFLICT, stored.key, stored.call_id, None)
    if stored.status == "running":
        return Claim(ClaimOutcome.RUNNING, stored.key, stored.call_id, None)
    return Claim(ClaimOutcome.REPLAY, stored.key, stored.call_id, stored.result)
