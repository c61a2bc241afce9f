"""The built-in faults: one class each, registered in this order.

Each states, in its class attributes, where it applies, how it is injected
and what must hold; the README's fault table is made from them.
"""

from __future__ import annotations

import base64
import inspect
import json
import posixpath
import threading
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

from ..capabilities import Risk
from ..contract import CallState, ErrorCode, ToolCall, ToolResult
from ..errors import ToolguardError
from ..plan import PlanProgress, PlanStep
from ..redaction import Redactor
from ..replay.cassette import dumps
from ..replay.http import Answer
from ..replay.recorder import Recorder
from ..runtime import ToolRuntime
from .base import DECOY_MARKER, JOIN_SECONDS, Cell, Fault, Target, register_fault
from .network import HTTP_ERRORS, NETWORK_ERRORS, http_status

TIMEOUT_SECONDS = 0.005
"""The deadline the ``timeout`` fault gives the call. Deterministic however
short: the handler is held until the runtime has answered."""

RESULT_LIMIT = 64
"""The result limit the ``oversized_output`` fault sets."""

FAKE_SECRET = "ghp_" + "T00lGuardFakeSecretTok3n0123456789ab"
"""A GitHub-token-shaped fake secret (40 characters): the redactor knows
its shape, so it must never be stored."""

_REFUSED = (
    ErrorCode.PATH_OUTSIDE_WORKSPACE,
    ErrorCode.FORBIDDEN_PATH,
    ErrorCode.INVALID_ARGUMENT,
    ErrorCode.PERMISSION_DENIED,
)


class InjectedFault(ToolguardError):
    """What the ``handler_exception`` fault raises."""


def _needs_handler(target: Target) -> bool:
    return target.spec is not None and target.handler_ran


class _AfterSuccess(Fault):
    """A fault of calls that reached their handler and succeeded when
    recorded: those that change the handler's world."""

    applies_to = "calls that succeeded when recorded"

    def applies(self, target: Target) -> bool:
        return _needs_handler(target)


# -- timeout ---------------------------------------------------------------------------


@register_fault
class Timeout(_AfterSuccess):
    name = "timeout"
    injection = (
        f"deadline {TIMEOUT_SECONDS * 1000:g} ms; the handler is held until the runtime "
        "has answered, then runs on"
    )
    expected = (
        "TIMEOUT, retryable, state TIMED_OUT; the late handler changes no file; "
        "no handler alive at teardown"
    )

    def inject(self, cell: Cell) -> None:
        released = threading.Event()

        def held(handler: Callable[..., Any]) -> Callable[..., Any]:
            def late(ctx: Any, **arguments: Any) -> Any:
                released.wait(JOIN_SECONDS)
                return handler(ctx, **arguments)

            return late

        cell.replace_handler(held)
        runtime = cell.make_runtime(timeouts={cell.target.call.tool_name: TIMEOUT_SECONDS})
        before = cell.tree()
        result = cell.execute(cell.call(), runtime)
        released.set()
        cell.expect(result, ErrorCode.TIMEOUT, state=CallState.TIMED_OUT, retryable=True)
        cell.settle(runtime)
        cell.check_unchanged(before, "the call timed out")


# -- symlink_escape --------------------------------------------------------------------


@register_fault
class SymlinkEscape(Fault):
    name = "symlink_escape"
    applies_to = "successful calls with a path argument inside the workspace"
    injection = (
        "the path's first component replaced by a symlink to a decoy directory outside: "
        "before the call, and again swapped in after the policy check, as the handler starts"
    )
    expected = "refused (PATH_OUTSIDE_WORKSPACE or a refused open); nothing outside read or changed"

    def applies(self, target: Target) -> bool:
        return _needs_handler(target) and bool(_link_points(target))

    def inject(self, cell: Cell) -> None:
        points = _link_points(cell.target)
        decoys = {first: _plant_mirror(cell, first) for first in points}
        cell.outside_planted()  # once, before any call: an escape must not be absorbed
        for first, decoy in decoys.items():
            with _swapped(cell, first, decoy):
                result = cell.execute(cell.call())
            self._refused(cell, result, f"{first} was a symlink to outside before the call")

            original = cell.replace_handler(_swapping_first(cell, first, decoy))
            result = cell.execute(cell.call())
            self._refused(cell, result, f"{first} became a symlink to outside during the call")
            cell.restore_handler(original)

    @staticmethod
    def _refused(cell: Cell, result: ToolResult, when: str) -> None:
        if result.ok:
            # A listing or search may succeed by skipping the link; it must
            # not have gone through it (the decoy marker check sees that).
            cell.check(
                DECOY_MARKER not in json.dumps(result.data, default=str),
                f"{when}: the call read through it",
            )
        else:
            cell.check(
                result.code in _REFUSED or result.code is ErrorCode.EXECUTION_ERROR,
                f"{when}: expected a refusal, got {result.code.value}",
            )


def _swapping_first(
    cell: Cell, first: str, decoy: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A handler wrapper that swaps the link in as the handler starts
    (after the policy check) and back when it ends."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(handler):
            # Held across the await: a coroutine's body runs after the call returns it.
            async def swapping_async(ctx: Any, **arguments: Any) -> Any:
                with _swapped(cell, first, decoy):
                    return await handler(ctx, **arguments)

            return swapping_async

        def swapping(ctx: Any, **arguments: Any) -> Any:
            with _swapped(cell, first, decoy):
                return handler(ctx, **arguments)

        return swapping

    return wrap


def _link_points(target: Target) -> tuple[str, ...]:
    """The first components of the call's workspace paths (after filling
    the tool's path templates), where a symlink can be put."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None:
        return ()
    values = {**arguments, **target.cassette.session.variables}
    paths: list[str] = []
    for access in spec.paths:
        try:
            paths.append(access.template.format_map(values))
        except (KeyError, ValueError, IndexError):
            continue
    declared = {name for access in spec.paths for name in access.fields}
    paths += [arguments[name] for name in target.path_arguments if name not in declared]
    points: list[str] = []
    for path in paths:
        normal = posixpath.normpath(path)
        if normal.startswith(("/", "..")) or normal == ".":
            continue
        first = normal.split("/")[0]
        if first not in points:
            points.append(first)
    return tuple(points)


def _plant_mirror(cell: Cell, first: str) -> str:
    """A decoy copy of ``first`` outside the workspace: every file beneath
    it with decoy content, plus a file whose name is the marker."""
    decoy = posixpath.join(cell.outside_dir, "mirror", first)
    fs, source = cell.fs, posixpath.join(cell.root, first)
    if fs.isdir(source):
        for relative in cell.tree():
            if relative.startswith(first + "/"):
                path = posixpath.join(cell.outside_dir, "mirror", relative)
                fs.create_file(path, contents=f"{DECOY_MARKER} {relative}\n")
        fs.create_file(posixpath.join(decoy, DECOY_MARKER + ".txt"), contents=DECOY_MARKER)
    else:
        fs.create_file(decoy, contents=f"{DECOY_MARKER} {first}\n")
    return decoy


class _swapped:
    """Within the block, ``root/first`` is a symlink to ``decoy``; the real
    entry waits beside it and comes back afterwards."""

    def __init__(self, cell: Cell, first: str, decoy: str) -> None:
        self.path = posixpath.join(cell.root, first)
        self.aside = posixpath.join(cell.root, f"{first}.toolguard-aside")
        self.decoy = decoy
        self.fs = cell.fs
        self.moved = False

    def __enter__(self) -> None:
        import os

        if os.path.lexists(self.path):
            os.rename(self.path, self.aside)
            self.moved = True
        os.symlink(self.decoy, self.path)

    def __exit__(self, *exc: object) -> None:
        import os

        if os.path.islink(self.path):
            os.unlink(self.path)
        elif os.path.lexists(self.path):  # the tool replaced the link: keep the evidence
            return
        if self.moved:
            os.rename(self.aside, self.path)


# -- path_traversal --------------------------------------------------------------------

_PAYLOADS = (
    "../../../../../../etc/passwd",
    "/etc/passwd",
    "..",
    "../",
    "../toolguard-outside/secret.txt",
    "./../toolguard-outside/secret.txt",
    "a/../../toolguard-outside/secret.txt",
    "..%2f..%2f..%2f..%2fetc%2fpasswd",
    "%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "%252e%252e%252f%252e%252e%252fetc%252fpasswd",
    "....//....//....//etc/passwd",
    "..\\..\\..\\..\\etc\\passwd",
    "\u2025/\u2025/\u2025/\u2025/etc/passwd",
    "..%c0%af..%c0%af..%c0%afetc/passwd",
    "//etc/passwd",
    "/./etc/./passwd",
    "etc/passwd\x00.txt",
    "~/.ssh/id_rsa",
)
"""Raw payloads in the styles of the traversal corpus (tests/corpora):
dot-dot, absolute, encoded once and twice, overlong UTF-8, backslashes, a
Unicode two-dot leader, a NUL. Each is also sent decoded."""


def traversal_payloads() -> tuple[str, ...]:
    """Every payload, raw and decoded (URL-unquoted up to three times,
    NFKC-normalised, backslashes made slashes), without repeats."""
    seen: dict[str, None] = {}
    for raw in _PAYLOADS:
        seen[raw] = None
        value = raw
        for _ in range(3):
            value = unquote(value)
            seen[value] = None
        for variant in (unicodedata.normalize("NFKC", value), value.replace("\\", "/")):
            seen[variant] = None
            seen[unicodedata.normalize("NFKC", variant.replace("\\", "/"))] = None
    return tuple(seen)


def escapes(path: str) -> bool:
    """Whether ``path`` read lexically as a POSIX path leaves a root: it is
    absolute or climbs above it with ``..``."""
    if path.startswith("/"):
        return True
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


@register_fault
class PathTraversal(Fault):
    name = "path_traversal"
    applies_to = "calls with a path argument"
    injection = (
        f"each path argument replaced by {len(traversal_payloads())} payloads "
        "(traversal corpus styles, raw and decoded)"
    )
    expected = (
        "every escaping path refused (in a declared path argument); nothing outside read or changed"
    )

    def applies(self, target: Target) -> bool:
        return target.spec is not None and bool(target.path_arguments)

    def inject(self, cell: Cell) -> None:
        arguments = cell.target.arguments or {}
        declared = cell.target.declared_path_arguments
        for name in cell.target.path_arguments:
            for payload in traversal_payloads():
                result = cell.execute(cell.call({**arguments, name: payload}))
                # An argument only named like a path may not be one (a
                # language's "source"): there, the decoy and outside checks judge.
                if name in declared and escapes(payload):
                    cell.check(
                        not result.ok,
                        f"{name}={payload!r} escapes the workspace but the call succeeded",
                    )


# -- duplicate_submission --------------------------------------------------------------

BURST = 8


@register_fault
class DuplicateSubmission(_AfterSuccess):
    name = "duplicate_submission"
    injection = (
        f"the call sent twice in a row with one idempotency key, then {BURST} times at once "
        "from threads with another; a tool declared idempotent also twice without a key"
    )
    expected = (
        "one handler run per key; the repeats answer IDEMPOTENT_REPLAY (same data) or "
        "DUPLICATE_CALL; an idempotent tool's second keyless run changes no file"
    )

    def inject(self, cell: Cell) -> None:
        key = cell.target.call.idempotency_key or f"toolguard-{cell.target.label}"
        first = cell.execute(cell.call(idempotency_key=key))
        again = cell.execute(cell.call(idempotency_key=key))
        cell.check(cell.handler_calls == 1, f"handler ran {cell.handler_calls} times for one key")
        _check_replay(cell, first, again)

        # Another key, on a runtime without the session's plan: the plan may
        # have moved on after the first call, and is not what this tests.
        burst_key = key + "-burst"
        calls = [cell.call(idempotency_key=burst_key) for _ in range(BURST)]
        results = _at_once(cell, calls, cell.make_runtime(hooks=[]))
        ran = cell.handler_calls - 1
        cell.check(ran == 1, f"{BURST} concurrent submissions ran the handler {ran} times")
        # The one that ran answers its outcome; the others DUPLICATE_CALL, or
        # its stored outcome: IDEMPOTENT_REPLAY, or a failure's own code.
        others = {r.code for r in results if r.code not in _REPEAT_CODES}
        cell.check(
            len(others) <= 1,
            f"{BURST} concurrent submissions: expected one outcome besides IDEMPOTENT_REPLAY "
            f"and DUPLICATE_CALL, got {sorted(r.code.value for r in results)}",
        )

        spec = cell.spec
        if spec is not None and spec.idempotent:
            cell.execute(cell.call())
            once = cell.tree()
            cell.execute(cell.call())
            twice = cell.tree()
            changed = sorted(p for p in set(once) | set(twice) if once.get(p) != twice.get(p))
            cell.check(
                not changed,
                "the tool is declared idempotent, but a second run without a key changed "
                + ", ".join(changed[:5]),
            )


_REPEAT_CODES = (ErrorCode.IDEMPOTENT_REPLAY, ErrorCode.DUPLICATE_CALL)


def _check_replay(cell: Cell, first: ToolResult, again: ToolResult) -> None:
    if first.ok:
        cell.expect(again, ErrorCode.IDEMPOTENT_REPLAY)
        cell.check(again.data == first.data, "the replayed data differs from the first outcome's")
    else:
        cell.check(
            again.code is first.code,
            f"the repeat answered {again.code.value}, the first {first.code.value}",
        )


def _at_once(cell: Cell, calls: list[ToolCall], runtime: ToolRuntime) -> list[ToolResult]:
    """Execute ``calls`` through ``runtime`` from one thread each, released
    together."""
    barrier = threading.Barrier(len(calls))
    results: list[ToolResult | None] = [None] * len(calls)

    def submit(index: int) -> None:
        barrier.wait(JOIN_SECONDS)
        results[index] = cell.execute(calls[index], runtime)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS * 2)
    finished = [r for r in results if r is not None]
    cell.check(len(finished) == len(calls), "a concurrent submission did not return")
    return finished


# -- partial_write ---------------------------------------------------------------------


@register_fault
class PartialWrite(Fault):
    name = "partial_write"
    applies_to = "successful calls of tools that write"
    injection = "the fake disk has one byte free when the call starts (ENOSPC mid-write)"
    expected = (
        "EXECUTION_ERROR, state FAILED; every file holds its old content (no torn file, "
        "no temporary file left)"
    )

    def applies(self, target: Target) -> bool:
        return _needs_handler(target) and target.writes and bool(_strings(target.arguments))

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        cell.fs.set_disk_usage(_PLENTY)  # pyfakefs counts usage once a size is set
        used = cell.fs.get_disk_usage().used
        # One byte to spare: a write that first truncates (and so frees) the
        # old content tears as soon as the new content is longer than it.
        cell.fs.set_disk_usage(used + 1)
        try:
            result = cell.execute(cell.call())
        finally:
            cell.fs.set_disk_usage(_PLENTY)
        if result.ok:
            # It fit: nothing was interrupted, so nothing to judge.
            return
        cell.expect(result, ErrorCode.EXECUTION_ERROR, state=CallState.FAILED)
        cell.check_unchanged(before, "the write was interrupted")


_PLENTY = 1 << 40


def _strings(value: Any) -> list[str]:
    """Every string in ``value``, depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


# -- handler_exception -----------------------------------------------------------------


@register_fault
class HandlerException(_AfterSuccess):
    name = "handler_exception"
    injection = "the handler raises InjectedFault"
    expected = "EXECUTION_ERROR naming InjectedFault, state FAILED; no file changed"

    def inject(self, cell: Cell) -> None:
        def raising(handler: Callable[..., Any]) -> Callable[..., Any]:
            def fail(ctx: Any, **arguments: Any) -> Any:
                raise InjectedFault("injected by pytest-toolguard")

            return fail

        cell.replace_handler(raising)
        before = cell.tree()
        result = cell.execute(cell.call())
        if cell.expect(result, ErrorCode.EXECUTION_ERROR, state=CallState.FAILED):
            cell.check(
                "InjectedFault" in result.message,
                f"the message does not name the exception: {result.message!r}",
            )
        cell.check_unchanged(before, "the handler raised before doing anything")


# -- audit_unavailable -----------------------------------------------------------------


@register_fault
class AuditUnavailable(_AfterSuccess):
    name = "audit_unavailable"
    injection = "the audit store fails when the call starts; then, in a fresh try, when it finishes"
    expected = (
        "at start: AUDIT_UNAVAILABLE, retryable, the handler never runs; at finish: the "
        "handler's outcome, its row written by flush_audit() once the store is back"
    )

    def inject(self, cell: Cell) -> None:
        store = cell.store_of(cell.runtime)
        before = cell.tree()
        store.inject_fault("start")
        call = cell.call()
        cell.unaudited(call.call_id)
        try:
            result = cell.execute(call)
        finally:
            store.clear_fault()
        cell.expect(result, ErrorCode.AUDIT_UNAVAILABLE, retryable=True)
        cell.check_refused(before, "the start could not be audited")

        store.inject_fault("finish")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                result = cell.execute(cell.call())
        finally:
            store.clear_fault()
        cell.check(cell.handler_calls == 1, "the handler did not run once the start was stored")
        cell.check(
            result.code is not ErrorCode.AUDIT_UNAVAILABLE or not result.ok,
            "a failed finish turned a success into AUDIT_UNAVAILABLE",
        )
        pending = cell.runtime.flush_audit()
        cell.check(pending == 0, f"{pending} audit writes still pending after the store came back")


# -- oversized_output ------------------------------------------------------------------


@register_fault
class OversizedOutput(_AfterSuccess):
    name = "oversized_output"
    injection = f"the tool's result limit lowered to {RESULT_LIMIT} characters"
    expected = "ok, truncated, total_size kept, data cut to the limit; the audit preview bounded"

    def inject(self, cell: Cell) -> None:
        from ..runtime import PREVIEW_LIMIT

        cell.replace_spec(result_limit=RESULT_LIMIT)
        result = cell.execute(cell.call())
        if not cell.expect(result, ErrorCode.OK):
            return
        if result.total_size is None:
            cell.check(not result.truncated, "truncated without a total size")
            return
        cell.check(result.truncated, "cut but not flagged truncated")
        cell.check(result.total_size > RESULT_LIMIT, "total_size is not the full size")
        shown = result.data if isinstance(result.data, str) else json.dumps(result.data)
        cell.check(len(shown) <= RESULT_LIMIT, f"data of {len(shown)} characters passed the limit")
        for row in cell.store_of(cell.runtime).rows():
            cell.check(
                len(row.result_preview or "") <= PREVIEW_LIMIT,
                f"audit preview of {len(row.result_preview or '')} characters",
            )


# -- response_lost ---------------------------------------------------------------------


@register_fault
class ResponseLost(_AfterSuccess):
    name = "response_lost"
    injection = "the first answer is dropped; the caller retries with the same idempotency key"
    expected = "the retry answers the stored outcome (same data); the handler ran once"

    def inject(self, cell: Cell) -> None:
        key = cell.target.call.idempotency_key or f"toolguard-lost-{cell.target.label}"
        first = cell.execute(cell.call(idempotency_key=key))
        after_first = cell.tree()
        retry = cell.execute(cell.call(idempotency_key=key))
        cell.check(cell.handler_calls == 1, f"the handler ran {cell.handler_calls} times")
        _check_replay(cell, first, retry)
        cell.check_unchanged(after_first, "the retry was a replay")


# -- schema_drift ----------------------------------------------------------------------

_UNKNOWN_FIELD = "toolguard_unknown_field"


@register_fault
class SchemaDrift(Fault):
    name = "schema_drift"
    applies_to = "calls whose recorded arguments passed the input schema"
    injection = (
        "a required field dropped, an unknown field added, a wrong type, a value out of range "
        "(each that the schema can refuse)"
    )
    expected = "INVALID_ARGUMENT naming the field; the handler never runs; no file changed"

    def applies(self, target: Target) -> bool:
        return (
            target.spec is not None
            and target.arguments is not None
            and target.interaction.result.code
            not in (ErrorCode.INVALID_ARGUMENT.value, ErrorCode.INVALID_REQUEST.value)
            and any(True for _ in _drifts(target))
        )

    def inject(self, cell: Cell) -> None:
        before = cell.tree()
        for what, field, arguments in _drifts(cell.target):
            result = cell.execute(cell.call(arguments))
            if cell.expect(result, ErrorCode.INVALID_ARGUMENT):
                cell.check(
                    field in result.message,
                    f"{what}: the message does not name {field!r}: {result.message!r}",
                )
        cell.check_refused(before, "every call was invalid")


def _drifts(target: Target) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(what, field, arguments) for each drift the schema can refuse."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None:
        return
    schema = spec.input_schema
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name in arguments:
            yield "required field dropped", name, {k: v for k, v in arguments.items() if k != name}
            break
    if schema.get("additionalProperties") is False:
        yield "unknown field", _UNKNOWN_FIELD, {**arguments, _UNKNOWN_FIELD: 1}
    for name in arguments:
        wrong = _wrong_type(properties.get(name))
        if wrong is not _NOTHING:
            yield "wrong type", name, {**arguments, name: wrong}
            break
    for name in arguments:
        bad = _out_of_range(properties.get(name))
        if bad is not _NOTHING:
            yield "out of range", name, {**arguments, name: bad}
            break


_NOTHING = object()


def _wrong_type(schema: Any) -> Any:
    if not isinstance(schema, Mapping) or "type" not in schema:
        return _NOTHING
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    for candidate, kinds in (
        (12345, ("integer", "number")),
        ("not-a-number", ("string",)),
        ([], ("array",)),
        ({"x": 1}, ("object",)),
    ):
        if not any(kind in types for kind in kinds):
            return candidate
    return _NOTHING


def _out_of_range(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return _NOTHING
    if "maxLength" in schema:
        return "x" * (int(schema["maxLength"]) + 1)
    if "minLength" in schema and int(schema["minLength"]) > 0:
        return ""
    if "maximum" in schema:
        return schema["maximum"] + 1
    if "minimum" in schema:
        return schema["minimum"] - 1
    if "enum" in schema:
        return "toolguard-not-in-enum"
    return _NOTHING


# -- capability_revoked ----------------------------------------------------------------


@register_fault
class CapabilityRevoked(_AfterSuccess):
    name = "capability_revoked"
    injection = "the same call in a read-only session (read risk only, no write roots)"
    expected = (
        "PERMISSION_DENIED for a tool that is not read-only (the handler never runs); "
        "a read still answers OK"
    )

    def inject(self, cell: Cell) -> None:
        session = cell.target.cassette.session
        read_only = replace(
            session.capabilities, allowed_risks=frozenset({Risk.READ}), write_roots=()
        )
        runtime = cell.make_runtime(capabilities=read_only)
        before = cell.tree()
        result = cell.execute(cell.call(), runtime)
        if cell.target.writes:
            cell.expect(result, ErrorCode.PERMISSION_DENIED)
            cell.check_refused(before, "the session is read-only")
        else:
            cell.expect(result, ErrorCode.OK)
            cell.check_unchanged(before, "a read-only tool ran in a read-only session")


# -- unknown_tool ----------------------------------------------------------------------


@register_fault
class UnknownTool(Fault):
    name = "unknown_tool"
    applies_to = "calls of a registered tool whose arguments parse"
    injection = "the tool name misspelt (last letter changed)"
    expected = "TOOL_NOT_FOUND suggesting the real name; no handler runs"

    def applies(self, target: Target) -> bool:
        return target.spec is not None and target.arguments is not None

    def inject(self, cell: Cell) -> None:
        name = cell.target.call.tool_name
        wrong = name[:-1] + ("y" if name.endswith("x") else "x")
        while wrong in cell.registry:
            wrong += "x"
        before = cell.tree()
        result = cell.execute(cell.call(tool_name=wrong))
        if cell.expect(result, ErrorCode.TOOL_NOT_FOUND):
            cell.check(f"did you mean {name}" in result.message, "no suggestion of the real name")
        cell.check_refused(before, "the tool does not exist")


# -- plan_violation --------------------------------------------------------------------


@register_fault
class PlanViolation(_AfterSuccess):
    name = "plan_violation"
    injection = "a plan whose current step allows only another tool"
    expected = "BLOCKED; the handler never runs; no file changed"

    def inject(self, cell: Cell) -> None:
        step = PlanStep("toolguard_other_step", frozenset({"toolguard_other_tool"}))
        runtime = cell.make_runtime(hooks=[PlanProgress([step])])
        before = cell.tree()
        result = cell.execute(cell.call(), runtime)
        cell.expect(result, ErrorCode.BLOCKED)
        cell.check_refused(before, "the plan's step does not allow the tool")


# -- secret_in_payload -----------------------------------------------------------------


@register_fault
class SecretInPayload(Fault):
    name = "secret_in_payload"
    applies_to = "successful calls with a text argument"
    injection = "a fake token appended to the longest text argument and to the handler's output"
    expected = (
        "the token (raw, base64, hex or URL-encoded) in neither the audit database's bytes "
        "nor the recorded cassette"
    )

    def applies(self, target: Target) -> bool:
        return _needs_handler(target) and bool(_strings(target.arguments))

    def inject(self, cell: Cell) -> None:
        arguments = _plant(cell.target.arguments, FAKE_SECRET)

        def leaking(handler: Callable[..., Any]) -> Callable[..., Any]:
            if inspect.iscoroutinefunction(handler):  # plant in the awaited output

                async def leak_async(ctx: Any, **kwargs: Any) -> Any:
                    return _plant(await handler(ctx, **kwargs), FAKE_SECRET)

                return leak_async

            def leak(ctx: Any, **kwargs: Any) -> Any:
                return _plant(handler(ctx, **kwargs), FAKE_SECRET)

            return leak

        cell.replace_handler(leaking)
        runtime = cell.make_runtime()
        # The cell already serves the HTTP of external tools: record none.
        recorder = Recorder(runtime, name="secret_in_payload", record_http=False)
        recorder.start()
        cell.execute(cell.call(arguments), runtime)
        recorder.stop()
        stored = {
            "the audit database": cell.store_of(runtime).serialize(),
            "the recorded cassette": dumps(recorder.cassette()).encode(),
        }
        for where, data in stored.items():
            for form, needle in secret_forms(FAKE_SECRET):
                cell.check(needle not in data, f"the fake secret ({form}) is in {where}")


def _plant(value: Any, secret: str) -> Any:
    """``value`` with `` <secret>`` appended to its longest string (a copy)."""
    texts = _strings(value)
    if not texts:
        return value
    longest = max(texts, key=len)
    done = False

    def walk(item: Any) -> Any:
        nonlocal done
        if isinstance(item, str) and item == longest and not done:
            done = True
            return f"{item} {secret}"
        if isinstance(item, Mapping):
            return {key: walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def secret_forms(secret: str) -> list[tuple[str, bytes]]:
    """The byte strings that give ``secret`` away: raw, hex, URL-encoded,
    and base64 at each of the three alignments (the part of the encoding
    that does not depend on neighbouring bytes)."""
    raw = secret.encode()
    forms = [("raw", raw), ("hex", raw.hex().encode()), ("URL-encoded", quote(secret).encode())]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw + b"\0\0")
        start = -(-pad * 4 // 3) + 1
        forms.append((f"base64/{pad}", encoded[start : start + (len(raw) * 4 // 3) - 4]))
    return forms


# -- network_error, http_error ----------------------------------------------------------


class _WithRecordedHttp(Fault):
    """A fault of calls that succeeded when recorded and whose handler made
    HTTP requests: what the network does is changed, the tool must notice."""

    applies_to = "successful calls whose handler made recorded HTTP requests"

    def applies(self, target: Target) -> bool:
        return _needs_handler(target) and bool(target.interaction.http)

    def _answer(self, cell: Cell, what: str, answer: Answer) -> None:
        """One call with every request of its handler answered by
        ``answer``; the oracle of both faults."""
        assert cell.http is not None  # applies() saw recorded exchanges
        met: list[Any] = []

        def counted(request: Any, response: dict[str, Any]) -> dict[str, Any]:
            met.append(request)
            return answer(request, response)

        before = cell.tree()
        with cell.http.injected(counted):
            result = cell.execute(cell.call())
        cell.check(
            bool(met), f"{what}: the handler made no recorded HTTP request, so it never failed"
        )
        recorded = cell.target.interaction.result.data
        cell.check(
            not (result.ok and Redactor().redact(result.data) == recorded),
            f"{what}: answered {result.code.value} with the recorded data, "
            "as if the request had succeeded",
        )
        cell.check_unchanged(before, f"{what}: the request failed")


@register_fault
class NetworkError(_WithRecordedHttp):
    name = "network_error"
    injection = (
        "each request the handler makes fails in the HTTP layer: connection refused, "
        "then reset, then timed out (one call each)"
    )
    expected = (
        "not OK with the recorded data (an error, or data saying what failed); "
        "no file changed; the audit row finished"
    )

    def inject(self, cell: Cell) -> None:
        for what, answer in NETWORK_ERRORS.items():
            self._answer(cell, what, answer)


@register_fault
class HttpError(_WithRecordedHttp):
    name = "http_error"
    injection = (
        f"each recorded request answered {', '.join(map(str, HTTP_ERRORS))} instead "
        "(one call each; Retry-After on 429 and 503)"
    )
    expected = (
        "not OK with the recorded data (an error, or data saying what failed); "
        "no file changed; the audit row finished"
    )

    def inject(self, cell: Cell) -> None:
        for code in HTTP_ERRORS:
            self._answer(cell, f"HTTP {code}", http_status(code))
