"""A cassette the Claude Code hook writes one event at a time.

Claude Code runs its own tools, and ``toolguard hook`` sees each call twice,
in two processes: PreToolUse before the tool runs, PostToolUse after. With
``cassette:`` in the hook's configuration the session is recorded as
``record_session`` records one, spread over those events:

- **Before a call runs** (``before_call``, at PreToolUse) the files it
  declares that the cassette does not know yet join its starting state as
  they are now: its tool's ``PathAccess`` filled from its arguments and
  resolved in the session's ``cwd`` (``Recorder.declared_paths``); a
  directory means every file beneath it. A path that does not exist is
  known as absent (``final_files: null`` until a call creates it). A symlink
  on the way is kept as a link, so replay resolves it again.
- **Each call** is appended (``append``) with what ``Recorder.interaction``
  keeps (the arguments redacted, the result, the audit row's summary, the
  approval that let it through): a call our policy refused at PreToolUse
  with its refusal; an admitted call at PostToolUse with the outcome
  Claude Code reports (ok, or EXECUTION_ERROR), Claude Code's
  ``tool_response`` kept as ``transcript_result`` (for the reader, never
  compared). Then every file the cassette knows is read again: the final
  state is the files after the last call.

Each change is a read, change and write of the whole cassette under an
exclusive lock (``.<name>.lock`` beside it: the hooks of parallel tool calls
queue; created 0600, never opened through a link planted at its name, and
anything there but a regular file is a ``HookCassetteError``), written
atomically (``cassette.dump``: a temporary file, then a rename). So the
cassette on disk always replays with ``pytest --toolguard-replay`` and the
hook's registry: each call is checked
on ok, code and state (not on data: Claude Code's own Read answers in
another shape than ours), its audit row on state, decision and rule, and
every known file at the end.

What it cannot hold, by design: a call of a tool toolguard does not run
(Bash, WebFetch, WebSearch: ``definitions.claude_code.NOT_RUN_HERE``), or
one the registry does not hold, is audited but not appended, since replay could not
run it. A file such a call created joins the starting state of the first
later call that declares it; a change it made to a file the cassette knew
already shows in the final state, and replay reports the difference. Files
a tool writes beyond its declared paths are not in the cassette. Beneath a
declared directory, ``.git`` and toolguard's own files (the cassette, its
lock, the audit database) are skipped. A cassette holds one session in one
root: another session's cassette, or another ``cwd``, is a
``HookCassetteError`` (put ``{session_id}`` in the configured path).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import posixpath
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...contract import ToolCall, ToolResult
from ...file_writes import PRIVATE_MODE
from ...hooks import Approval
from ...replay.cassette import (
    Cassette,
    CassetteError,
    FileState,
    Interaction,
    Session,
    WorkspaceState,
    dump,
    load,
)
from ...replay.recorder import Recorder
from ...replay.redacting import redact_file, redact_path, tool_redactor
from ...runtime import ToolRuntime
from ...sandbox import SandboxError
from ..errors import BridgeError
from ..transcripts.into_cassette import kept_interaction, kept_result
from ..transcripts.transcript import TranscriptResult

LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""How the lock file is opened: never through a link at its name, never
waiting on a FIFO planted there (``O_NONBLOCK`` applies to the open only:
``flock`` still waits for the lock)."""

SKIPPED_DIRECTORIES = frozenset({".git"})
"""Directory names never expanded beneath a declared directory."""

RECORDED_BY = (
    "toolguard hook (re-run the Claude Code session with `cassette:` in the hook's configuration)"
)


class HookCassetteError(BridgeError):
    """The configured cassette cannot take this event: unreadable, or of
    another session or root. The message says which and what to do."""


def session_cassette(template: Any, cwd: str, session_id: str) -> str | None:
    """The configured cassette (``cassette:`` in the hook's configuration)
    for this session: ``{session_id}`` filled in (unsafe characters
    replaced), relative to the event's ``cwd``; None when none is
    configured. ``HookCassetteError`` for a template that is not a path
    or names another field."""
    if template is None:
        return None
    if not isinstance(template, str) or not template.strip():
        raise HookCassetteError("cassette must be a path, e.g. cassettes/{session_id}.yaml")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session_id).lstrip(".") or "default"
    try:
        path = template.format(session_id=safe)
    except (KeyError, IndexError, ValueError) as exc:
        raise HookCassetteError(
            f"cassette: {template!r} may name only {{session_id}} ({exc})"
        ) from None
    return os.path.join(cwd, path)


@dataclass(slots=True)
class _Draft:
    """A cassette being changed: its parts, mutable, until written."""

    cassette: Cassette
    files: dict[str, bytes] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    directories: list[str] = field(default_factory=list)
    final: dict[str, FileState | None] = field(default_factory=dict)

    @classmethod
    def of(cls, cassette: Cassette) -> _Draft:
        workspace = cassette.workspace
        return cls(
            cassette,
            dict(workspace.files),
            dict(workspace.symlinks),
            list(workspace.directories),
            dict(cassette.final_files),
        )

    def knows(self, path: str) -> bool:
        return (
            path in self.files
            or path in self.final
            or path in self.symlinks
            or path in self.directories
        )

    def built(self) -> Cassette:
        workspace = replace(
            self.cassette.workspace,
            files=self.files,
            symlinks=self.symlinks,
            directories=tuple(sorted(self.directories)),
        )
        return replace(self.cassette, workspace=workspace, final_files=self.final)


class HookCassette:
    """The cassette at ``path`` for one Claude Code session, recorded
    through ``runtime`` (the hook's: its workspace is the session's
    ``cwd``, its audit store holds the rows). ``own_files`` are paths
    never recorded (the audit database); the cassette and its lock are
    never recorded either."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        runtime: ToolRuntime,
        *,
        session_id: str,
        own_files: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.runtime = runtime
        self.session_id = session_id
        self._lock_path = self.path.with_name(f".{self.path.name}.lock")
        self._recorder = Recorder(runtime, name=self.path.stem, record_http=False)
        root = runtime.workspace.root
        own = [self.path, self._lock_path, *(Path(os.fspath(p)) for p in own_files)]
        self._own = {
            relative
            for file in own
            for suffix in ("", "-wal", "-shm", "-journal")
            if (relative := _inside(root, f"{os.path.abspath(file)}{suffix}")) is not None
        }
        self._own_directory = _inside(root, str(self.path.parent))
        self._temporary_prefix = f".{self.path.name}."

    # -- the two events -------------------------------------------------------

    def before_call(self, call: ToolCall) -> None:
        """Add the files ``call`` declares that the cassette does not know
        yet to its starting state, as they are now (PreToolUse)."""
        paths = self._recorder.declared_paths(call)
        with self._editing() as draft:
            for path in paths:
                self._take(draft, path)

    def append_refusal(self, call: ToolCall, result: ToolResult) -> None:
        """Append a call our policy refused at PreToolUse, with its refusal
        and audit row: replay refuses it again."""
        self._append(kept_interaction(self._recorder.interaction(call, result), self.runtime))

    def append_outcome(
        self,
        call: ToolCall,
        result: ToolResult,
        *,
        approval: Approval | None = None,
        response: Any = None,
    ) -> None:
        """Append a call Claude Code ran, with the outcome it reported as
        ``result`` (``post_tool_use``'s), the summary of its audit row and
        ``approval`` (the user's, at the prompt). Its data is not compared
        on replay; Claude Code's ``response`` is kept, redacted, as
        ``transcript_result`` (redacted as an import keeps a transcript's)."""
        kept = kept_interaction(
            self._recorder.interaction(call, result, approval=approval), self.runtime
        )
        redactor = tool_redactor(self.runtime.registry, call.tool_name, self.runtime.redactor)
        self._append(
            replace(
                kept,
                result=replace(kept.result, data=None, check_data=False),
                transcript_result=kept_result(TranscriptResult(result.ok, response), redactor),
            )
        )

    def _append(self, interaction: Interaction) -> None:
        """Append ``interaction``, then read every known file again."""
        with self._editing() as draft:
            draft.cassette = replace(
                draft.cassette, interactions=(*draft.cassette.interactions, interaction)
            )
            for path in sorted(set(draft.files) | set(draft.final)):
                draft.final[path] = self._state(path)

    # -- reading and writing the cassette -------------------------------------

    @contextlib.contextmanager
    def _editing(self) -> Iterator[_Draft]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
            draft = _Draft.of(self._load())
            yield draft
            dump(draft.built(), self.path)
        finally:
            os.close(fd)

    def _open_lock(self) -> int:
        """The lock file, opened (created 0600 when missing) without
        following a link: a link planted at its name would make the hook
        create a file wherever it points. Nothing is ever written to it."""
        try:
            fd = os.open(self._lock_path, LOCK_FLAGS, PRIVATE_MODE)
        except OSError as exc:
            raise HookCassetteError(
                f"cannot open its lock file {self._lock_path} ({_reason(exc)}): "
                "remove whatever is at that name"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise HookCassetteError(
                f"its lock file {self._lock_path} is not a regular file: remove it"
            )
        return fd

    def _load(self) -> Cassette:
        runtime = self.runtime
        if not self.path.exists():
            return Cassette(
                kind="cassette",
                name=self.path.stem,
                description="recorded by the Claude Code hook (toolguard hook)",
                recorded_at=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
                recorded_by=RECORDED_BY,
                session=Session(
                    actor="claude-code",
                    session_id=self.session_id,
                    capabilities=runtime.capabilities,
                    variables=dict(runtime.variables),
                    idempotency_scope=runtime.idempotency_scope,
                    timeouts=dict(runtime.timeouts),
                ),
                workspace=WorkspaceState(root=runtime.workspace.root),
                interactions=(),
            )
        try:
            cassette = load(self.path)
        except CassetteError as exc:
            raise HookCassetteError(f"cannot record into it: {exc}") from None
        if cassette.session.session_id != self.session_id:
            raise HookCassetteError(
                f"{self.path} holds session {cassette.session.session_id!r}, not "
                f"{self.session_id!r}: put {{session_id}} in the cassette's path, or move it"
            )
        if cassette.workspace.root != runtime.workspace.root:
            raise HookCassetteError(
                f"{self.path} was recorded in {cassette.workspace.root}, and this event's "
                f"cwd is {runtime.workspace.root}: one cassette holds one root"
            )
        return cassette

    # -- files ----------------------------------------------------------------

    def _own_file(self, path: str) -> bool:
        if path in self._own:
            return True
        directory, name = posixpath.split(path)
        return (directory or ".") == self._own_directory and name.startswith(self._temporary_prefix)

    def _shown(self, path: str) -> str:
        return redact_path(self.runtime.redactor, path)

    def _take(self, draft: _Draft, path: str) -> None:
        """Add ``path`` (workspace-relative, normalized) as it is now,
        unless known or toolguard's own; a directory with what is beneath."""
        if self._own_file(path):
            return
        kind, where = _entry(self.runtime.workspace.root, path)
        shown = self._shown(where)
        if kind == "directory":
            self._take_directory(draft, path)
        elif draft.knows(shown):
            return
        elif kind == "missing":
            draft.final[shown] = None
        elif kind == "link":
            draft.symlinks[shown] = self._shown(
                os.readlink(os.path.join(self.runtime.workspace.root, where))
            )
        elif kind == "file":
            self._take_file(draft, path)

    def _take_file(self, draft: _Draft, path: str) -> None:
        content = self._read(path)
        if content is None:
            return
        data = redact_file(self.runtime.redactor, content)
        draft.files[self._shown(path)] = data
        draft.final[self._shown(path)] = FileState.of(data)

    def _take_directory(self, draft: _Draft, path: str) -> None:
        root = self.runtime.workspace.root
        top = os.path.join(root, path) if path != "." else root
        if path != "." and not draft.knows(self._shown(path)):
            draft.directories.append(self._shown(path))
        for directory, subdirectories, names in os.walk(top):
            subdirectories[:] = sorted(
                name for name in subdirectories if name not in SKIPPED_DIRECTORIES
            )
            for name in subdirectories + sorted(names):
                full = os.path.join(directory, name)
                relative = os.path.relpath(full, root).replace(os.sep, "/")
                if self._own_file(relative) or not self._allowed(relative):
                    continue
                shown = self._shown(relative)
                if draft.knows(shown):
                    continue
                if os.path.islink(full):
                    draft.symlinks[shown] = self._shown(os.readlink(full))
                elif os.path.isdir(full):
                    draft.directories.append(shown)
                elif os.path.isfile(full):
                    self._take_file(draft, relative)

    def _allowed(self, path: str) -> bool:
        """Not a name no tool may touch (``.env``): those never enter a cassette."""
        try:
            self.runtime.workspace.normalize(path)
        except SandboxError:
            return False
        return True

    def _read(self, path: str) -> bytes | None:
        try:
            return self.runtime.workspace.read_bytes(path)
        except (SandboxError, OSError, ValueError):
            return None  # hard-linked, special, gone: not kept

    def _state(self, shown: str) -> FileState | None:
        """A known file as it is now (None: absent, or no longer a file)."""
        kind, _ = _entry(self.runtime.workspace.root, shown)
        content = self._read(shown) if kind == "file" else None
        return (
            None if content is None else FileState.of(redact_file(self.runtime.redactor, content))
        )


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link"
    return exc.strerror or type(exc).__name__


def _inside(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` (POSIX), or None when outside it."""
    relative = os.path.relpath(path, root)
    if relative == os.curdir:
        return "."
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return relative.replace(os.sep, "/")


def _entry(root: str, path: str) -> tuple[str, str]:
    """What ``path`` names beneath ``root``, never following a link:
    ``("file" | "directory" | "missing" | "other", path)``, or ``("link",
    the first component that is a symlink)``."""
    if path == ".":
        return "directory", "."
    current = root
    parts = path.split("/")
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return "missing", path
        if stat.S_ISLNK(mode):
            return "link", "/".join(parts[: index + 1])
        if index < len(parts) - 1 and not stat.S_ISDIR(mode):
            return "missing", path
    if stat.S_ISDIR(mode):
        return "directory", path
    return ("file" if stat.S_ISREG(mode) else "other"), path
