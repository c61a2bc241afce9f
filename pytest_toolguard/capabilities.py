"""What a session may do: the risk levels of tools and a session's capabilities.

Data only: ``Capabilities`` cleans what it is given (roots made
workspace-relative POSIX text, hosts normalized, risks parsed) and answers
simple questions (``permits_tool``, ``permits_risk``, ``permits_host``);
the rules that judge a call live in ``policy``.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .hosts import normalize_host


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
        object.__setattr__(self, "read_roots", tuple(clean_root(r) for r in self.read_roots))
        object.__setattr__(self, "write_roots", tuple(clean_root(r) for r in self.write_roots))
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


def clean_root(root: str) -> str:
    """A read or write root as ``Capabilities`` keeps it: ``/`` separators, no
    leading or trailing ``/``; ``"."`` for the whole workspace."""
    cleaned = root.replace("\\", "/").strip("/")
    return cleaned or "."


def under_root(path: str, root: str) -> bool:
    """Component-wise prefix: ``src/a.py`` is under ``src``, ``srcx`` is not."""
    return root == "." or path == root or path.startswith(root + "/")
