"""Who may do what: capabilities, risks, and the rules that decide a call.

``authorize`` answers one ``Decision`` that names the rule that decided and
why, so the audit row can say it. Paths are judged by where they really lead
(resolved through the sandbox, symlinks included), never by how they are
spelt: a read by the file it reaches, a write by the entry it replaces (its
parent resolved, plus the final name; a symlink there is refused).
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import ipaddress
import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from .contract import ErrorCode
from .sandbox import Location, SandboxError, Workspace

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
        object.__setattr__(
            self, "network_hosts", tuple(normalize_host(h) for h in self.network_hosts)
        )

    def permits_tool(self, name: str) -> bool:
        return self.allowed_tools is None or name in self.allowed_tools

    def permits_risk(self, risk: Risk) -> bool:
        return risk in self.allowed_risks

    def permits_host(self, host: str) -> bool:
        """Whether ``host`` (as ``target_host`` gives it) is allowed: equal to
        an entry, or a subdomain of a ``*.`` entry (``*.x.com`` allows
        ``a.x.com``, not ``x.com``). Both sides are compared in lowercase
        ASCII (IDNA), without a trailing dot."""
        host = normalize_host(host)
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
    """A path a call touches, as given and as it really resolves.
    ``location`` holds the directory the policy judged open, for the
    handler to reach without resolving ``given`` again (None when the path
    was judged by its spelling: the handler meets the error itself)."""

    given: str
    resolved: str
    mode: str
    location: Location | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Decision:
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
    *,
    redact: Callable[[str], str] | None = None,
) -> Decision:
    """Judge one schema-valid call. Order: tool allow-list, risk allow-list,
    every declared path (inside the workspace, not forbidden, under a read or
    write root, within the byte limits), then the network host.

    ``redact`` is applied to a path before a reason quotes or cuts it (the
    reason is stored; a secret escaped by quoting would no longer match)."""
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
        verdict = _check_path(
            access, spec, arguments, capabilities, workspace, variables, redact or _same
        )
        if isinstance(verdict, Decision):
            _close(resolved)
            return verdict
        if verdict is not None:
            resolved.append(verdict)
    if spec.network_host_argument is not None:
        verdict = _check_host(spec, arguments, capabilities)
        if verdict is not None:
            _close(resolved)
            return verdict
    return Decision.allow("every rule passed", tuple(resolved))


def _close(paths: Sequence[ResolvedPath]) -> None:
    for path in paths:
        if path.location is not None:
            path.location.close()


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
    redact: Callable[[str], str],
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
    location: Location | None = None
    try:
        # Judged by where it really leads: the sandbox applies its rules
        # (forbidden names included) to every link target on the way. The
        # same walk gives the size a read is judged by. A write acts on the
        # final entry itself, so only its parent is resolved (a link there
        # is refused: a write never follows or replaces one). The location
        # stays open: the handler reaches what was judged, not the path again.
        location = workspace.locate(given, access.mode)
        real, size = location.resolved, location.size
    except OSError:
        # `file.txt/x`: judged by its spelling; the handler meets the error.
        size = None
        try:
            real = workspace.normalize(given)
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


def _check_resolved(
    access: PathAccess,
    arguments: Mapping[str, Any],
    capabilities: Capabilities,
    given: str,
    real: str,
    size: int | None,
    redact: Callable[[str], str],
) -> Decision | None:
    """The root and limit rules for a path resolved to ``real``."""
    roots = capabilities.read_roots if access.mode == "read" else capabilities.write_roots
    if not any(under_root(real, root) for root in roots):
        kind = "read" if access.mode == "read" else "write"
        allowed = ", ".join(roots) or "none"
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            f"policy.{kind}_root",
            f"{_shown(real, given, redact)} is outside the allowed {kind} roots ({allowed})",
        )
    if access.mode == "read":
        if size is not None and size > capabilities.max_read_bytes:
            return Decision.deny(
                ErrorCode.LIMIT_EXCEEDED,
                "policy.read_limit",
                f"{_shown(real, given, redact)} is {size} bytes, over the read limit of "
                f"{capabilities.max_read_bytes}",
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
    return None


def _same(text: str) -> str:
    return text


def _shown(real: str, given: str, redact: Callable[[str], str]) -> str:
    """The resolved path as a reason names it; the given spelling, redacted,
    when that holds a secret: normalizing (``https://`` -> ``https:/``) can
    hide a secret from the patterns."""
    safe = redact(given)
    return redact(real) if safe == given else safe


def _sandbox_denial(exc: SandboxError, redact: Callable[[str], str]) -> Decision:
    return Decision.deny(exc.code, _SANDBOX_RULES.get(exc.code, "sandbox"), exc.describe(redact))


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
    try:
        host = parse_host(target) if isinstance(target, str) else None
    except AmbiguousHost as exc:
        return Decision.deny(
            ErrorCode.PERMISSION_DENIED,
            "policy.network_host",
            f"argument {name} is refused: {exc}",
        )
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


class AmbiguousHost(ValueError):
    """A URL or host whose host HTTP clients could read differently: the
    allow-list cannot judge it, so it is refused. The message says why
    without quoting the URL."""


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SCHEME_WITHOUT_SLASHES = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?![0-9]*(?:[/?#]|$))")
_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_HEX_OR_DECIMAL = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)")


def target_host(target: str) -> str | None:
    """The host an HTTP client connects to for ``target``, a URL
    (``https://api.x.com/v1`` -> ``api.x.com``) or a bare host
    (``api.x.com:443``); None when it names no host or when clients could
    disagree on it (see ``parse_host``)."""
    try:
        return parse_host(target)
    except AmbiguousHost:
        return None


def parse_host(target: str) -> str | None:
    """The host ``target`` names, as every common client reads it, in the
    form ``permits_host`` compares: lowercase, IDNA-encoded ASCII, no
    trailing dot, IPv6 without brackets. None when there is no host.

    Raises ``AmbiguousHost`` for what clients read differently
    (``urllib.parse`` takes the host after the last ``@``; urllib3,
    requests and WHATWG browsers end the authority at a ``\\``): a
    backslash, whitespace or a control character anywhere; more than one
    ``@`` in the authority; a scheme without ``//``; a port that is not a
    number up to 65535; ``%`` in the host; a non-ASCII host that IDNA maps
    (full-width letters, ``ß``, ideographic dots, soft hyphens); an empty
    label; and every IPv4 spelling but the dotted-decimal one (``0x7f.1``,
    ``2130706433``, ``0177.0.0.1``, ``127.1``) and IPv4-mapped IPv6
    (``[::ffff:127.0.0.1]``).
    """
    for character in target:
        if character == "\\":
            raise AmbiguousHost("it holds a backslash, which some HTTP clients read as '/'")
        if character.isspace() or unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp"):
            raise AmbiguousHost("it holds whitespace or a control or format character")
    if _SCHEME.match(target):
        rest = target[target.index("://") + 3 :]
    elif target.startswith("//"):
        rest = target[2:]
    elif _SCHEME_WITHOUT_SLASHES.match(target):
        raise AmbiguousHost("it has a scheme but no '//' before the host")
    else:
        rest = target
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if authority.count("@") > 1:
        raise AmbiguousHost("its authority holds more than one '@'")
    host_port = authority.rpartition("@")[2]
    if host_port.startswith("["):
        host, has_port, port = _split_bracketed(host_port)
    elif host_port.count(":") > 1:
        raise AmbiguousHost("an IPv6 address must be written in brackets")
    else:
        host, has_port, port = host_port.partition(":")
    if has_port and not (_PORT.fullmatch(port) and int(port) <= 65535):
        raise AmbiguousHost("its port is not a number from 0 to 65535")
    if not host:
        return None
    if host_port.startswith("["):
        return _ipv6(host)
    return _domain_or_ipv4(host)


def normalize_host(host: str) -> str:
    """An allow-list entry or a parsed host in the form hosts are compared:
    lowercase, IDNA-encoded when that is possible, brackets and one
    trailing dot removed. Never raises."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    if not host.isascii():
        with contextlib.suppress(UnicodeError):
            host = host.encode("idna").decode("ascii")
    with contextlib.suppress(ValueError):
        host = ipaddress.IPv6Address(host).compressed
    return host


def _split_bracketed(host_port: str) -> tuple[str, str, str]:
    close = host_port.find("]")
    if close < 0:
        raise AmbiguousHost("an IPv6 address lacks its closing ']'")
    after = host_port[close + 1 :]
    if after and not after.startswith(":"):
        raise AmbiguousHost("text follows the IPv6 address's ']'")
    return host_port[1:close], after[:1], after[1:]


def _ipv6(text: str) -> str:
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise AmbiguousHost("the host in brackets is not an IPv6 address") from None
    if address.scope_id is not None or address.ipv4_mapped is not None:
        raise AmbiguousHost("IPv4-mapped IPv6 addresses and zone ids are refused")
    return address.compressed


def _domain_or_ipv4(host: str) -> str:
    if "%" in host:
        raise AmbiguousHost("its host holds '%', which some clients percent-decode")
    host = host.lower()
    if not host.isascii():
        # Only a name IDNA leaves as it is: one it maps (full-width
        # letters, 'ß', ideographic dots) may be read otherwise by a client.
        try:
            encoded = host.encode("idna").decode("ascii")
            stable = encoded.encode("ascii").decode("idna") == host
        except UnicodeError:
            stable = False
        if not stable:
            raise AmbiguousHost("its host is not a name IDNA leaves unchanged")
        host = encoded
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels) or len(name) > 253:
        raise AmbiguousHost("its host is not a valid host name (an empty or invalid label)")
    if _HEX_OR_DECIMAL.fullmatch(labels[-1]):
        # WHATWG and inet_aton read a name ending in a number as IPv4, in
        # several notations; only the usual one is judged.
        try:
            canonical = str(ipaddress.IPv4Address(name))
        except ValueError:
            canonical = ""
        if canonical != name:
            raise AmbiguousHost("its host is an IPv4 address in an unusual notation")
    return name
