"""The rules that decide whether a call may run: ``authorize``.

``authorize`` answers one ``PolicyDecision`` that names the rule that decided and
why, so the audit row can say it. Paths are judged by where they really lead
(resolved through the sandbox, symlinks included), never by how they are
spelt: a read by the file it reaches, a write by the entry it replaces (its
parent resolved, plus the final name; a symlink there is refused). A tool's
``PathAccess`` templates name strings only; each path they expand to (one
per element for ``[*]``) is judged, and one refused path refuses the call.
Only a path whose walk finds nothing there (``NOT_THERE_YET``: to be
created, or ``file.txt/x``) is judged by its spelling; a walk that fails
for any other reason (out of descriptors, no permission, an I/O error)
refuses the call (``policy.path_unresolved``).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .capabilities import Capabilities, under_root
from .contract import ErrorCode
from .hosts import AmbiguousHost, parse_host
from .path_templates import PathValueError
from .sandbox import Location, SandboxError, Workspace

if TYPE_CHECKING:
    from .registry import PathAccess, ToolSpec


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """A path a call touches, as given and as it really resolves.
    ``location`` holds the directory the policy judged open, for the
    handler to reach without resolving ``given`` again (None when the path
    was judged by its spelling: the handler meets the error itself)."""

    given: str
    resolved: str
    mode: str
    location: Location | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The verdict on a call: which rule decided, and why. An allowing
    decision holds its paths' ``Location``s open: give ``locations`` to
    ``Workspace.with_journal`` and ``close()`` it when the call is done."""

    allowed: bool
    code: ErrorCode
    rule: str
    reason: str
    paths: tuple[ResolvedPath, ...] = field(default=())

    @property
    def locations(self) -> tuple[Location, ...]:
        return tuple(p.location for p in self.paths if p.location is not None)

    def close(self) -> None:
        """Release the locations the decision holds. Idempotent."""
        _close(self.paths)

    @classmethod
    def allow(cls, reason: str, paths: tuple[ResolvedPath, ...] = ()) -> PolicyDecision:
        return cls(True, ErrorCode.OK, "policy.allow", reason, paths)

    @classmethod
    def deny(cls, code: ErrorCode, rule: str, reason: str) -> PolicyDecision:
        return cls(False, code, rule, reason)


def authorize(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    capabilities: Capabilities,
    workspace: Workspace,
    variables: Mapping[str, str],
    *,
    redact: Callable[[str], str] | None = None,
) -> PolicyDecision:
    """Judge one schema-valid call. Order: tool allow-list, risk allow-list,
    every declared path (inside the workspace, not forbidden, under a read or
    write root, within the byte limits), then the network host.

    ``redact`` is applied to a path before a reason quotes or cuts it (the
    reason is stored; a secret escaped by quoting would no longer match)."""
    if not capabilities.permits_tool(spec.name):
        return PolicyDecision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.tool_allowlist",
            f"tool {spec.name} is not allowed in this session",
        )
    if not capabilities.permits_risk(spec.risk):
        return PolicyDecision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.risk_allowlist",
            f"tool {spec.name} has risk {spec.risk}, not allowed in this session",
        )
    resolved: list[ResolvedPath] = []
    for access in spec.paths:
        given = _expand(access, spec, arguments, variables)
        if isinstance(given, PolicyDecision):
            _close(resolved)
            return given
        if len(resolved) + len(given) > MAX_PATHS_PER_CALL:
            _close(resolved)
            return PolicyDecision.deny(
                ErrorCode.LIMIT_EXCEEDED,
                "policy.path_count",
                f"tool {spec.name}: the call names over {MAX_PATHS_PER_CALL} paths",
            )
        for path in given:
            verdict = _check_path(access, path, arguments, capabilities, workspace, redact or _same)
            if isinstance(verdict, PolicyDecision):
                _close(resolved)
                return verdict
            resolved.append(verdict)
    if spec.network_host_argument is not None:
        refusal = _check_host(spec, arguments, capabilities)
        if refusal is not None:
            _close(resolved)
            return refusal
    return PolicyDecision.allow("every rule passed", tuple(resolved))


def _close(paths: Sequence[ResolvedPath]) -> None:
    for path in paths:
        if path.location is not None:
            path.location.close()


MAX_PATHS_PER_CALL = 256
"""Paths one call may name through its templates (``[*]`` names one per
element). Each is held open from the check to the act, so an argument of
thousands of elements must not run the process out of descriptors."""


def _expand(
    access: PathAccess,
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    variables: Mapping[str, str],
) -> list[str] | PolicyDecision:
    """The paths ``access`` names for this call, or the refusal. A field
    the schema cannot take as an argument is a variable: without it the
    path cannot be built, and the access is refused, not skipped."""
    missing = None
    if access.default is None:
        missing = next(
            (
                name
                for name in access.fields
                if name not in variables
                and name not in arguments
                and not _may_be_argument(spec.input_schema, name)
            ),
            None,
        )
    if missing is None:
        try:
            return access.expand(arguments, variables)
        except KeyError as absent:
            missing = str(absent.args[0]) if absent.args else "?"
        except PathValueError as exc:
            # Never the value's text: "['../x']" is no path, and judging it
            # confines nothing. The same code as a path that is not a str.
            return PolicyDecision.deny(ErrorCode.INVALID_ARGUMENT, "policy.path_value", str(exc))
    return PolicyDecision.deny(
        ErrorCode.PERMISSION_DENIED,
        "policy.path_template",
        f"tool {spec.name} needs {missing!r} to build its path: an argument, or a "
        "variable passed in ToolRuntime(variables=...)",
    )


def _may_be_argument(schema: Mapping[str, Any], name: str) -> bool:
    properties = schema.get("properties")
    listed = isinstance(properties, Mapping) and name in properties
    return listed or schema.get("additionalProperties") is not False


def _check_path(
    access: PathAccess,
    given: str,
    arguments: Mapping[str, Any],
    capabilities: Capabilities,
    workspace: Workspace,
    redact: Callable[[str], str],
) -> ResolvedPath | PolicyDecision:
    location: Location | None = None
    # An absolute path spelt beneath the root is judged (and pinned for the
    # handler) as the relative path it names; see Workspace.relative.
    relative = workspace.relative(given)
    try:
        # Judged by where it really leads: the sandbox applies its rules
        # (forbidden names included) to every link target on the way. The
        # same walk gives the size a read is judged by. A write acts on the
        # final entry itself, so only its parent is resolved (a link there
        # is refused: a write never follows or replaces one). The location
        # stays open: the handler reaches what was judged, not the path again.
        location = workspace.locate(relative, access.mode)
        real, size = location.resolved, location.size
    except OSError as exc:
        if exc.errno not in NOT_THERE_YET:
            # The walk could not look (out of descriptors, a directory it may
            # not search, an I/O error): its spelling says nothing about a
            # link on the way, so the path is refused, never guessed.
            return _unresolved(given, exc, redact)
        # `file.txt/x`: judged by its spelling; the handler meets the error.
        size = None
        try:
            real = workspace.normalize(relative)
        except SandboxError as exc:
            return _sandbox_denial(exc, redact)
    except SandboxError as exc:
        return _sandbox_denial(exc, redact)
    verdict = _check_resolved(access, arguments, capabilities, given, real, size, redact)
    if verdict is not None:
        if location is not None:
            location.close()
        return verdict
    return ResolvedPath(given=given, resolved=real, mode=access.mode, location=location)


NOT_THERE_YET = frozenset({errno.ENOENT, errno.ENOTDIR})
"""The errors of resolving a path that mean what it names is not there (a
directory on the way missing, or a file where a directory should be): the
path is then judged by its spelling, and the handler meets the same error.
Any other error refuses the call (``policy.path_unresolved``)."""


def _unresolved(given: str, exc: OSError, redact: Callable[[str], str]) -> PolicyDecision:
    name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return PolicyDecision.deny(
        ErrorCode.PERMISSION_DENIED,
        "policy.path_unresolved",
        f"{redact(given)} could not be resolved to be checked ({name}: {exc.strerror}): "
        "refused rather than judged by its spelling",
    )


def _check_resolved(
    access: PathAccess,
    arguments: Mapping[str, Any],
    capabilities: Capabilities,
    given: str,
    real: str,
    size: int | None,
    redact: Callable[[str], str],
) -> PolicyDecision | None:
    """The root and limit rules for a path resolved to ``real``."""
    roots = capabilities.read_roots if access.mode == "read" else capabilities.write_roots
    if not any(under_root(real, root) for root in roots):
        kind = "read" if access.mode == "read" else "write"
        allowed = ", ".join(roots) or "none"
        return PolicyDecision.deny(
            ErrorCode.PERMISSION_DENIED,
            f"policy.{kind}_root",
            f"{_shown(real, given, redact)} is outside the allowed {kind} roots ({allowed})",
        )
    if access.mode == "read":
        if size is not None and size > capabilities.max_read_bytes:
            return PolicyDecision.deny(
                ErrorCode.LIMIT_EXCEEDED,
                "policy.read_limit",
                f"{_shown(real, given, redact)} is {size} bytes, over the read limit of "
                f"{capabilities.max_read_bytes}",
            )
    elif access.content is not None and access.content in arguments:
        size = content_size(arguments[access.content])
        if size > capabilities.max_write_bytes:
            return PolicyDecision.deny(
                ErrorCode.LIMIT_EXCEEDED,
                "policy.write_limit",
                f"{access.content} is {size} bytes (UTF-8), over the write limit of "
                f"{capabilities.max_write_bytes}",
            )
    return None


def _same(text: str) -> str:
    return text


def _shown(real: str, given: str, redact: Callable[[str], str]) -> str:
    """The resolved path as a reason names it; the given spelling, redacted,
    when that holds a secret: normalizing (``https://`` -> ``https:/``) can
    hide a secret from the patterns."""
    safe = redact(given)
    return redact(real) if safe == given else safe


def _sandbox_denial(exc: SandboxError, redact: Callable[[str], str]) -> PolicyDecision:
    return PolicyDecision.deny(
        exc.code, _SANDBOX_RULES.get(exc.code, "sandbox"), exc.describe(redact)
    )


_SANDBOX_RULES = {
    ErrorCode.PATH_OUTSIDE_WORKSPACE: "sandbox.outside_workspace",
    ErrorCode.FORBIDDEN_PATH: "sandbox.forbidden_path",
    ErrorCode.INVALID_ARGUMENT: "sandbox.invalid_path",
    ErrorCode.LIMIT_EXCEEDED: "sandbox.limit",
}


def content_size(value: Any) -> int:
    """UTF-8 bytes a content argument will take on disk."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return len(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8"))


def _check_host(
    spec: ToolSpec, arguments: Mapping[str, Any], capabilities: Capabilities
) -> PolicyDecision | None:
    name = spec.network_host_argument
    assert name is not None
    target = arguments.get(name)
    try:
        host = parse_host(target) if isinstance(target, str) else None
    except AmbiguousHost as exc:
        return PolicyDecision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.network_host",
            f"argument {name} is refused: {exc}",
        )
    if host is None:
        return PolicyDecision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.network_host",
            f"argument {name} names no host",
        )
    if not capabilities.permits_host(host):
        allowed = ", ".join(capabilities.network_hosts) or "none"
        return PolicyDecision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.network_host",
            f"host {host} is not among the allowed network hosts ({allowed})",
        )
    return None
