"""Which host a URL or host argument names, as HTTP clients read it.

``parse_host`` gives the host every common client (``urllib``, urllib3,
requests, httpx, browsers) would connect to, in the form the network
allow-list compares (``Capabilities.permits_host``), or raises
``AmbiguousHost`` when clients could disagree. Pure functions, no I/O and
no name resolution.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import unicodedata

from .errors import ToolguardError


class AmbiguousHost(ToolguardError, ValueError):
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
