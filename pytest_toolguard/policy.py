"""Who may do what: capabilities, risks, and the rules that decide a call.

``authorize`` answers one ``Decision`` that names the rule that decided and
why, so the audit row can say it. Paths are judged by where they really lead
(resolved through the sandbox, symlinks included), never by how they are
spelt.
"""

from __future__ import annotations

import difflib
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .contract import ErrorCode
from .sandbox import SandboxError, Workspace

if TYPE_CHECKING:
    from .registry import PathAccess, ToolSpec


class Risk(str, enum.Enum):
    """How much harm a tool can do, from the seed's four levels."""

    READ = "read"
    """Search, read, list: runs once the session may use it."""
    WRITE = "write"
    """Changes files: limited to write roots, audited, rollback kept."""
    EXTERNAL = "external"
    """Reaches outside (messages, forms, APIs): needs an approval."""
    DANGEROUS = "dangerous"
    """Deletes, changes permissions, runs commands: needs an approval."""

    @property
    def needs_approval(self) -> bool:
        return self in (Risk.EXTERNAL, Risk.DANGEROUS)

    @classmethod
    def _missing_(cls, value: object) -> Risk:
        """``Risk("READ")`` is ``Risk.READ``; any other unknown value raises
        ``ValueError`` listing the valid ones."""
        if isinstance(value, str):
            for risk in cls:
                if risk.value == value.strip().lower():
                    return risk
        valid = ", ".join(risk.value for risk in cls)
        close = difflib.get_close_matches(str(value).lower(), [risk.value for risk in cls], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{value!r} is not a valid Risk (use one of: {valid}){hint}")

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one session may do. The defaults allow reading the whole
    workspace and nothing else.

    ``allowed_tools=None`` means every registered tool (still filtered by
    risk). Roots are workspace-relative directories ("." is everything);
    a path is inside a root when the root is one of its leading components.
    """

    allowed_tools: frozenset[str] | None = None
    allowed_risks: frozenset[Risk] = frozenset({Risk.READ})
    read_roots: tuple[str, ...] = (".",)
    write_roots: tuple[str, ...] = ()
    network_hosts: tuple[str, ...] = ()
    max_read_bytes: int = 5_000_000
    max_write_bytes: int = 2_000_000

    def __new__(cls, *args: Any, **kwargs: Any) -> Capabilities:
        # Only to name a misspelt keyword, with the ones that exist (Python's
        # own TypeError names neither a close match nor the valid fields).
        check_keywords(cls.__name__, kwargs, tuple(f.name for f in fields(cls)))
        return object.__new__(cls)  # (not super(): slots=True makes a new class)

    def __post_init__(self) -> None:
        if self.allowed_tools is not None:
            object.__setattr__(self, "allowed_tools", frozenset(self.allowed_tools))
        object.__setattr__(self, "allowed_risks", frozenset(Risk(r) for r in self.allowed_risks))
        object.__setattr__(self, "read_roots", tuple(_clean_root(r) for r in self.read_roots))
        object.__setattr__(self, "write_roots", tuple(_clean_root(r) for r in self.write_roots))
        object.__setattr__(self, "network_hosts", tuple(h.lower() for h in self.network_hosts))

    def permits_tool(self, name: str) -> bool:
        return self.allowed_tools is None or name in self.allowed_tools

    def permits_risk(self, risk: Risk) -> bool:
        return risk in self.allowed_risks

    def permits_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        for allowed in self.network_hosts:
            if allowed.startswith("*."):
                if host.endswith(allowed[1:]) and host != allowed[2:]:
                    return True
            elif host == allowed:
                return True
        return False


def check_keywords(what: str, given: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """``TypeError`` for the first keyword in ``given`` not in ``known``,
    suggesting the closest known one and listing them all."""
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"{what}() got an unexpected keyword argument {name!r}{hint} "
                f"(known: {', '.join(known)})"
            )


def _clean_root(root: str) -> str:
    cleaned = root.replace("\\", "/").strip("/")
    return cleaned or "."


def under_root(path: str, root: str) -> bool:
    """Component-wise prefix: ``src/a.py`` is under ``src``, ``srcx`` is not."""
    return root == "." or path == root or path.startswith(root + "/")


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """A path a call touches, as given and as it really resolves."""

    given: str
    resolved: str
    mode: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on a call: which rule decided, and why."""

    allowed: bool
    code: ErrorCode
    rule: str
    reason: str
    paths: tuple[ResolvedPath, ...] = field(default=())

    @classmethod
    def allow(cls, reason: str, paths: tuple[ResolvedPath, ...] = ()) -> Decision:
        return cls(True, ErrorCode.OK, "policy.allow", reason, paths)

    @classmethod
    def deny(cls, code: ErrorCode, rule: str, reason: str) -> Decision:
        return cls(False, code, rule, reason)


def authorize(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    capabilities: Capabilities,
    workspace: Workspace,
    variables: Mapping[str, str],
) -> Decision:
    """Judge one schema-valid call. Order: tool allow-list, risk allow-list,
    every declared path (inside the workspace, not forbidden, under a read or
    write root, within the byte limits), then the network host."""
    if not capabilities.permits_tool(spec.name):
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.tool_allowlist",
            f"tool {spec.name} is not allowed in this session",
        )
    if not capabilities.permits_risk(spec.risk):
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.risk_allowlist",
            f"tool {spec.name} has risk {spec.risk}, not allowed in this session",
        )
    resolved: list[ResolvedPath] = []
    for access in spec.paths:
        verdict = _check_path(access, spec, arguments, capabilities, workspace, variables)
        if isinstance(verdict, Decision):
            return verdict
        if verdict is not None:
            resolved.append(verdict)
    if spec.network_host_argument is not None:
        verdict = _check_host(spec, arguments, capabilities)
        if verdict is not None:
            return verdict
    return Decision.allow("every rule passed", tuple(resolved))


def fill_template(
    access: PathAccess, arguments: Mapping[str, Any], variables: Mapping[str, str]
) -> str | None:
    """The path an access names, or None when its optional argument is absent.
    Raises KeyError naming a field found in neither variables nor arguments."""
    values: dict[str, str] = {}
    for name in access.fields:
        if name in variables:
            values[name] = str(variables[name])
        elif name in arguments:
            values[name] = str(arguments[name])
        elif access.default is not None:
            return access.default
        elif len(access.fields) == 1:
            return None
        else:
            raise KeyError(name)
    return access.template.format(**values)


def _check_path(
    access: PathAccess,
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    capabilities: Capabilities,
    workspace: Workspace,
    variables: Mapping[str, str],
) -> ResolvedPath | Decision | None:
    try:
        given = fill_template(access, arguments, variables)
    except KeyError as missing:
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.path_template",
            f"tool {spec.name} needs the variable {missing} to build its path; "
            "pass it in ToolRuntime(variables=...)",
        )
    if given is None:
        return None
    try:
        # Judged by where it really leads: the sandbox applies its rules
        # (forbidden names included) to every link target on the way. The
        # same walk gives the size a read is judged by.
        real, size = workspace.resolve_with_size(given)
    except OSError:
        # `file.txt/x`: judged by its spelling; the handler meets the error.
        size = None
        try:
            real = workspace.normalize(given)
        except SandboxError as exc:
            return Decision.deny(exc.code, _SANDBOX_RULES.get(exc.code, "sandbox"), str(exc))
    except SandboxError as exc:
        return Decision.deny(exc.code, _SANDBOX_RULES.get(exc.code, "sandbox"), str(exc))
    roots = capabilities.read_roots if access.mode == "read" else capabilities.write_roots
    if not any(under_root(real, root) for root in roots):
        kind = "read" if access.mode == "read" else "write"
        allowed = ", ".join(roots) or "none"
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            f"policy.{kind}_root",
            f"{real} is outside the allowed {kind} roots ({allowed})",
        )
    if access.mode == "read":
        if size is not None and size > capabilities.max_read_bytes:
            return Decision.deny(
                ErrorCode.LIMIT_EXCEEDED,
                "policy.read_limit",
                f"{real} is {size} bytes, over the read limit of {capabilities.max_read_bytes}",
            )
    elif access.content is not None and access.content in arguments:
        size = content_size(arguments[access.content])
        if size > capabilities.max_write_bytes:
            return Decision.deny(
                ErrorCode.LIMIT_EXCEEDED,
                "policy.write_limit",
                f"{access.content} is {size} bytes (UTF-8), over the write limit of "
                f"{capabilities.max_write_bytes}",
            )
    return ResolvedPath(given=given, resolved=real, mode=access.mode)


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
) -> Decision | None:
    name = spec.network_host_argument
    assert name is not None
    target = arguments.get(name)
    host = target_host(target) if isinstance(target, str) else None
    if host is None:
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.network_host",
            f"argument {name} names no host",
        )
    if not capabilities.permits_host(host):
        allowed = ", ".join(capabilities.network_hosts) or "none"
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.network_host",
            f"host {host} is not among the allowed network hosts ({allowed})",
        )
    return None


def target_host(target: str) -> str | None:
    """The host of a URL (``https://api.x.com/v1`` -> ``api.x.com``) or of a
    bare host name."""
    text = target.strip()
    if "://" not in text:
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    return host or None
