"""Who holds a RUNNING audit row, and until when.

A call that runs its handler leaves its audit row RUNNING until the handler
ends. When several processes (on one machine, or on several sharing a
PostgreSQL store) work on one audit log, ``recover`` must tell a row whose
process died from one whose process is still working. So each RUNNING row
carries a **lease**: its *owner* (the process that wrote it: host, pid and
the process's start time) and the time its lease *expires*.

The lease lasts the call's deadline (the runtime passes the tool's timeout)
plus the store's grace period, which covers what the runtime does after the
deadline (answer TIMEOUT and write the finishing update, through a
reconnect if need be). A live process finishes its rows within that time,
so a row past its expiry belongs to a process that died, hung, or lost the
store for longer than the grace. Expiry is judged by the *database's*
clock (SQLite's in the process, the PostgreSQL server's for a fleet), never
by the runtime's clock, which replay freezes and which differs between
machines.

A lease also ends when its owner is provably dead: an owner of this host
(same host name, same boot, same pid namespace) whose pid no longer runs,
or runs a process started at another time (a reused pid). This needs
Linux's ``/proc``; elsewhere only expiry counts. An owner on another host
is never judged dead: its lease must expire.

This module is pure data and ``/proc`` reads; it imports nothing of ours.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from dataclasses import dataclass

_PROC = "/proc"


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """The process that holds a lease. ``host`` is the host's name followed
    by ``#`` and a short hash of its boot and pid namespace where Linux
    tells them (so two containers with one name, or one host after a
    reboot, are different hosts); ``started`` is the process's start time
    (clock ticks since boot on Linux, else nanoseconds since the epoch at
    this module's first use in the process).

    ``str(owner)`` is the text stored in ``lease_owner``
    (``"<pid>:<started>@<host>"``); ``LeaseOwner.parse`` reads it back."""

    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"{self.pid}:{self.started}@{self.host}"

    @classmethod
    def parse(cls, text: str | None) -> LeaseOwner | None:
        """The owner ``text`` names, or None when it is not one (an older
        row, or text written by something else)."""
        if not text:
            return None
        head, at, host = text.partition("@")
        pid, colon, started = head.partition(":")
        if not (at and colon and pid.isdigit() and started):
            return None
        return cls(host=host, pid=int(pid), started=started)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may
    hold spaces and parentheses), or None when there is no such process."""
    text = _read(f"{_PROC}/{pid}/stat")
    if text is None or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


def _start_ticks(pid: int) -> str | None:
    fields = _stat_fields(pid)
    # Field 22 of stat(5) is the start time; fields[0] here is field 3 (state).
    return fields[19] if fields is not None and len(fields) > 19 else None


def _host_scope() -> str:
    """A short hash of this boot and pid namespace ('' where Linux does not
    tell them: then no owner of this host can be judged dead)."""
    boot = _read(f"{_PROC}/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink(f"{_PROC}/self/ns/pid")
    except OSError:
        namespace = None
    if not boot or not namespace:
        return ""
    return hashlib.sha256(f"{boot}\n{namespace}".encode()).hexdigest()[:8]


@dataclass(slots=True)
class _Self:
    """This process's identity, read from ``/proc`` when the module is
    imported and again in a forked child: never later, when a fake
    filesystem (replay's pyfakefs) may hide ``/proc``."""

    pid: int
    scope: str
    started: str


def _read_self() -> _Self:
    pid = os.getpid()
    scope = _host_scope()
    started = _start_ticks(pid) if scope else None
    return _Self(pid, scope, started or str(time.time_ns()))


_SELF = _read_self()
# No lock: two threads computing an owner at once compute the same one, and
# a lock held by another thread at a fork would hang the child.
_cached: dict[tuple[int, str | None], LeaseOwner] = {}


def _after_fork_in_child() -> None:
    global _SELF
    _SELF = _read_self()
    _cached.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_owner(host: str | None = None) -> LeaseOwner:
    """The owner this process writes: ``host`` (default: the host's name)
    with this boot's scope, this pid, this process's start time. Computed
    once per process and host name (a forked child computes its own)."""
    me = _SELF
    key = (me.pid, host)
    owner = _cached.get(key)
    if owner is not None:
        return owner
    name = host if host is not None else socket.gethostname()
    owner = LeaseOwner(
        host=f"{name}#{me.scope}" if me.scope else name,
        pid=me.pid,
        started=me.started,
    )
    _cached[key] = owner
    return owner


def owner_is_dead(owner: LeaseOwner, here: LeaseOwner) -> bool:
    """Whether ``owner`` is provably dead, seen from ``here`` (this
    process's own owner): it is of the same host (name and scope), and its
    pid runs no process (``kill(pid, 0)``), or runs a zombie, or one
    started at another time (a reused pid). False whenever that cannot be
    told (another host; a ``/proc`` that cannot be read, as under a fake
    filesystem, counts the process as alive)."""
    if owner.host != here.host or "#" not in here.host:
        return False
    if owner == here or owner.pid <= 0:
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: a process of another user runs under that pid
        pass
    fields = _stat_fields(owner.pid)
    if fields is None:
        return False
    if fields[0] in ("Z", "X", "x"):
        return True
    started = fields[19] if len(fields) > 19 else None
    return started is not None and started != owner.started


def call_tag(audit_id: int, started_at: str) -> str:
    """The 16 hex characters that name one call's temporary files
    (``.toolguard-tmp-<tag>-<random>``): derived from its audit row (its id
    and start time) alone, so ``recover`` can find the leftovers of the
    calls it interrupted."""
    text = f"{audit_id}\n{started_at}"
    return hashlib.blake2s(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
