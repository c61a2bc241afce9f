"""What the stdio tests ask of processes: whether one ended (waited for on
a pidfd, no sleep), whether it still runs (a zombie does not), and which
processes carry a server's marker."""

from __future__ import annotations

import os
import select


def ended(pid: int, timeout: float) -> bool:
    """Whether ``pid`` ended within ``timeout`` s (waited for on a pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def running(pid: int) -> bool:
    """Whether ``pid`` runs (not ended, not a zombie), read from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def servers_running(command: list[str] | None = None) -> set[int]:
    """The processes carrying a server's marker (what from_mcp_command
    started), of ``command`` only when given: other workers of the run start
    servers of their own meanwhile."""
    words = [] if command is None else command
    fixed = words[: words.index("{workspace}")] if "{workspace}" in words else words
    fixed = [word for word in fixed if "{workspace}" not in word]
    wanted = "\0".join(fixed).encode()
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                marked = b"TOOLGUARD_MCP_SERVER=" in handle.read()
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                ours = wanted in handle.read()
        except OSError:
            continue
        if marked and ours and running(int(name)):
            found.add(int(name))
    return found
