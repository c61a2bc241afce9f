"""What the machine allows for the processes a tool starts in the
directory world (``child_processes`` uses it): libfaketime
(``find_libfaketime``), a private mount namespace in which a process may
bind-mount (``namespace_command``, asked once), and the command prefix that
shows the world at the recorded root (``root_binding``); what cannot be
done is said once (``say_once``, a ``ChildProcessWarning``).
"""

from __future__ import annotations

import glob
import os
import posixpath
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from typing import Protocol

from .escapes import is_beneath

NO_FAKETIME = "TOOLGUARD_NO_FAKETIME"
NO_NAMESPACE = "TOOLGUARD_NO_NAMESPACE"
"""Environment variables that, set to a non-empty value, turn libfaketime or
the mount namespace off (what the machine without them would do)."""

LIBFAKETIME_NAMES = ("libfaketimeMT.so.1", "libfaketime.so.1")
"""libfaketime's libraries, the thread-safe one first."""

LIBFAKETIME_PLACES = (
    "/usr/lib/*-linux-gnu/faketime",
    "/usr/lib/faketime",
    "/usr/lib64/faketime",
    "/usr/local/lib/faketime",
    "/usr/local/lib",
    "/opt/homebrew/lib/faketime",
)
"""Where distributions and ``make install`` put them."""


class ChildProcessWarning(UserWarning):
    """What the directory world cannot do for the processes tools start on
    this machine (no libfaketime, no mount namespace); said once a process."""


_SAID: set[str] = set()
_SAID_LOCK = threading.Lock()


def say_once(message: str) -> None:
    """Warn ``message`` (a ``ChildProcessWarning``) the first time only."""
    with _SAID_LOCK:
        if message in _SAID:
            return
        _SAID.add(message)
    warnings.warn(message, ChildProcessWarning, stacklevel=2)


# -- what the machine allows -------------------------------------------------------


@cache
def _installed_libfaketime() -> str | None:
    for pattern in LIBFAKETIME_PLACES:
        for directory in sorted(glob.glob(pattern)):
            for name in LIBFAKETIME_NAMES:
                path = posixpath.join(directory, name)
                if os.path.isfile(path):
                    return path
    return None


def find_libfaketime() -> str | None:
    """The libfaketime library to preload, or None (not installed, or
    ``TOOLGUARD_NO_FAKETIME`` set)."""
    if os.environ.get(NO_FAKETIME):
        return None
    return _installed_libfaketime()


@cache
def _working_namespace() -> tuple[str, ...] | None:
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        return None
    probe = tempfile.gettempdir()
    private = ("--propagation", "private")
    tries: list[tuple[str, ...]] = [(unshare, "-m", *private)] if os.geteuid() == 0 else []
    tries.append((unshare, "-U", "-r", "-m", *private))
    for command in tries:
        try:
            done = subprocess.run(  # a bind onto itself, in the new namespace only
                [*command, "--", "mount", "--bind", probe, probe],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return command
    return None


def namespace_command() -> tuple[str, ...] | None:
    """The ``unshare`` command that gives a process a private mount
    namespace in which it may bind-mount, or None where the machine refuses
    (or ``TOOLGUARD_NO_NAMESPACE`` is set). Asked once a process."""
    if os.environ.get(NO_NAMESPACE):
        return None
    return _working_namespace()


def scratch_parent() -> str:
    """Where the overlays' upper layers are made: a memory file system
    (``/dev/shm``) when the machine has one (an overlay's upper layer on a
    journalled disk costs tens of milliseconds a process), else the
    temporary directory."""
    memory = "/dev/shm"
    if os.path.isdir(memory) and os.access(memory, os.W_OK | os.X_OK):
        return memory
    return tempfile.gettempdir()


@cache
def _working_overlay() -> bool:
    command = namespace_command()
    if command is None or shutil.which("sh") is None:
        return False
    with tempfile.TemporaryDirectory(prefix="toolguard-probe-", dir=scratch_parent()) as probe:
        low, upper, work = (posixpath.join(probe, name) for name in ("low", "upper", "work"))
        for directory in (low, upper, work):
            os.mkdir(directory)
        script = (
            'mount -t overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" toolguard "$1" '
            '&& : > "$1/written"'
        )
        try:
            subprocess.run(  # an overlay over a directory, in the new namespace only
                [*command, "--", "/bin/sh", "-c", script, "probe", low, upper, work],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        written = os.path.exists(posixpath.join(upper, "written"))
        return written and not os.path.exists(posixpath.join(low, "written"))


def overlay_works() -> bool:
    """Whether a process in the namespace ``namespace_command`` gives may
    cover a directory with an overlay whose upper layer is on the real
    disk (the kernel refuses one in some user namespaces, or on some file
    systems). Asked once a process."""
    return namespace_command() is not None and _working_overlay()


def _refused() -> str:
    if os.environ.get(NO_NAMESPACE):
        return f"{NO_NAMESPACE} is set"
    return "this machine gives no private mount namespace (unshare -m refused)"


def frozen_seconds(moment: str) -> int:
    """A frozen time (ISO 8601; without an offset it is UTC, as the
    in-process clock reads it) as whole seconds since the epoch."""
    when = datetime.fromisoformat(moment)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp())


# -- binding the world at the recorded root ----------------------------------------

_BIND = (
    "w=$1; r=$2; p=$3; t=$4; n=$5; shift 5; "
    'if [ -z "$p" ]; then mount --bind -- "$w" "$r" || exit 125; else '
    'd=; while [ "$n" -gt 0 ]; do d="$d\n$1"; shift; n=$((n - 1)); done; '
    "set -f; IFS='\n'; [ -z \"$d\" ] || mkdir -p -- $d; unset IFS; set +f; "
    'printf "%s" "$t" > "$p/fstab"; mount -a -T "$p/fstab" >/dev/null 2>&1; '
    '[ "$w" -ef "$r" ] || exit 125; fi; exec "$@"'
)
"""The recorded root exists: the world bound over it, then the command.
With a ``real_data.Cover`` (its place, its mount table, the ``n``
directories to make), one ``mount -a`` binds the world (the table's first
line) and covers the real data; the world must be there, the rest may be
refused."""

_HELPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def mount(source, target, kind, flags, data):
    if libc.mount(source, target.encode(), kind, flags, data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target)
def cover(top, into):
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    entries = list(os.scandir(fd))
    mount(b"toolguard", into, b"tmpfs", 0, b"mode=0755")
    for entry in entries:
        path = os.path.join(into, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.name, dir_fd=fd), path)
            continue
        if entry.is_dir(follow_symlinks=False):
            os.mkdir(path)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        mount(f"/proc/self/fd/{fd}/{entry.name}".encode(), path, None, 4096 | 16384, None)
    os.close(fd)
world, top, root, stage, place, table, count = sys.argv[1:8]
made = sys.argv[8 : 8 + int(count)]
program, argv = sys.argv[8 + int(count)], sys.argv[9 + int(count) :]
if top == "/":
    here = os.getcwd()
    cover("/", stage)
    libc.umount2((stage + stage).encode(), 2)  # the stage seen again through its own parent
    os.makedirs(stage + root, exist_ok=True)
    mount(world.encode(), stage + root, None, 4096 | 16384, None)
    os.chroot(stage)
    os.chdir(here)
else:
    if top != root:
        cover(top, top)
        os.makedirs(root, exist_ok=True)
    mount(world.encode(), root, None, 4096 | 16384, None)
if place:
    import subprocess
    for directory in [place, *made]:
        os.makedirs(directory, exist_ok=True)
    with open(os.path.join(place, "fstab"), "w") as handle:
        handle.write(table)
    subprocess.run(["mount", "-a", "-T", handle.name], capture_output=True, check=False)
os.execvp(program, argv)
"""
"""The world bound at the recorded root, then ``program`` run with
``argv`` (``MS_BIND | MS_REC``). When the recorded root does not exist
(``top`` is its nearest existing parent), ``top`` is first covered by a
memory file system holding its entries (each bound back) and the missing
directories down to the root; when that parent is ``/``, which cannot be
covered, the memory file system is made at ``stage`` (an empty directory
of the world's) and the process is changed into it as its root
(``chroot``), in its own directory. Then the real data is covered
(``real_data.Cover``), when ``place`` is given. Used for a missing root
and for a command whose program differs from its ``argv[0]``."""


def mangled(text: str) -> str:
    """``text`` as a field of a mount table (``fstab``): blanks, ``#`` and
    backslashes as octal escapes."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\#" else c for c in text)


@dataclass(frozen=True, slots=True)
class Cover:
    """What one process's namespace mounts over the real data (``real_data``): the mount
    table ``table`` (``fstab``) it writes in ``place`` after making the
    directories ``made`` (the overlays' upper layers and work directories)."""

    place: str
    table: str
    made: tuple[str, ...]


def open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` ends, where
    the kernel gives one (``pidfd_open``); else None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


class Covering(Protocol):
    """What covers the real data in each process's namespace (``real_data.RealData``)."""

    def cover(self) -> Cover | None: ...


@dataclass(frozen=True, slots=True)
class RootBinding:
    """How a process gets the world at the recorded root: ``wrap`` gives
    the command that does it, then runs the process's own."""

    namespace: tuple[str, ...]
    """The ``unshare`` command (``namespace_command``)."""
    world_root: str
    recorded_root: str
    top: str
    """The recorded root, or its nearest existing parent when it is missing."""
    stage: str = ""
    """Where a new root is made when ``top`` is ``/`` (see ``_HELPER``)."""
    real_data: Covering | None = None
    """What each process covers too (``real_data.RealData``)."""

    def wrap(
        self,
        argv: list[str],
        program: str | None = None,
    ) -> list[str]:
        """``argv`` (run as ``program`` when given, else ``argv[0]``), run
        in a private mount namespace showing the world at the recorded
        root, the real data covered there (``real_data.cover()``: the
        process makes its directories and mount table, then ``mount -a
        -T``; an entry the kernel refuses is left out)."""
        world, recorded = self.world_root, self.recorded_root
        cover = self.real_data.cover() if self.real_data is not None else None
        covering = (
            [cover.place, cover.table, str(len(cover.made)), *cover.made]
            if cover is not None
            else ["", "", "0"]
        )
        if program is None and self.top == recorded:  # the cheap way: a shell
            if cover is not None:  # one mount command for both: each costs milliseconds
                bind = f"{mangled(world)} {mangled(recorded)} none bind 0 0\n"
                covering[1] = bind + cover.table
            return [
                *self.namespace,
                "--",
                "/bin/sh",
                "-c",
                _BIND,
                "toolguard",
                world,
                recorded,
                *covering,
                *argv,
            ]
        helper = [sys.executable, "-I", "-S", "-c", _HELPER]
        return [
            *self.namespace,
            "--",
            *helper,
            world,
            self.top,
            recorded,
            self.stage,
            *covering,
            program or argv[0],
            *argv,
        ]


def root_binding(
    world_root: str, recorded_root: str, stage: str, real_data: Covering | None = None
) -> RootBinding | str:
    """The prefix that starts a command in a private mount namespace with
    ``world_root`` at ``recorded_root`` (and ``real_data`` covered), or why
    it cannot be done here. ``stage``: a directory of the world, made when
    the recorded root's nearest existing parent is ``/`` (the new root is
    made there)."""
    command = namespace_command()
    if command is None:
        return (
            f"{_refused()}: processes tools start in the directory world see the "
            "recorded root mapped in their arguments only"
        )
    recorded = posixpath.normpath(recorded_root)
    if is_beneath(world_root, [recorded]) or is_beneath(recorded, [world_root]):
        return f"the recorded root {recorded} holds the world or lies in it: not mounted"
    if os.path.isdir(recorded):
        return RootBinding(command, world_root, recorded, recorded, "", real_data)
    if os.path.lexists(recorded):
        return f"the recorded root {recorded} is not a directory on this machine: not mounted"
    top = posixpath.dirname(recorded)
    while not os.path.isdir(top):
        if os.path.lexists(top) or top == "/":
            break
        top = posixpath.dirname(top)
    if not os.path.isdir(top):
        return f"the recorded root {recorded} lies beneath {top}, not a directory: not mounted"
    if top == "/":
        os.makedirs(stage, exist_ok=True)
        return RootBinding(command, world_root, recorded, top, stage, real_data)
    return RootBinding(command, world_root, recorded, top, "", real_data)
