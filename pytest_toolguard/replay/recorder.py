"""Recording a session into a cassette, in pytest or in a real agent run.

    with record_session(runtime, "cassettes/feedback.yaml"):
        runtime.execute(call)          # every call is recorded as it runs

The recorder snapshots the workspace when recording starts, watches every
``runtime.execute``, and when the block ends without an exception writes
the cassette atomically (temporary file, then rename). It keeps the files
the calls touched, as they were before the first call, and the same files
after the last call: the paths their tools declare (``PathAccess``) and
every path a handler actually asked ``ctx.workspace`` about (read, listed,
checked, written), declared or not; a directory means everything beneath
it. The directories those paths go through are kept too, empty ones
included: a tool writing ``outbox/{id}.md`` found ``outbox/`` there. A
session that called a tool running in the directory world
(``world="directory"``, which may reach any file through C code or another
process) keeps the whole workspace instead: every file (up to
``MAX_WORKSPACE_BYTES``), directory, link and unusual permission bits, as
they were when recording started. Arguments sent as JSON text, as model
APIs send them, are read the way the runtime reads them. Arguments,
results and previews are redacted with the runtime's redactor before
anything is written: a cassette never holds a secret the redactor knows.
The call's ids (call id, tool name, actor, session id, idempotency key) are
kept as its audit row keeps them (``runtime.storable_id``: redacted, a lone
surrogate escaped, cut). The cassette names the workspace's root as the
runtime has it, with its realpath as another spelling of it
(``WorkspaceState.aliases``): the file stores both as the root placeholder
(see ``cassette``), so a tool that resolved its paths replays too.

Each interaction also keeps the approval that let its call through (the
PreToolUse hook that answered ``allow``: replay grants it again, see
``approvals``) and the HTTP exchanges its handler made when its tool is
external or dangerous (recorded with vcrpy, redacted: see ``http``; while
recording, ``runtime.registry`` is a copy whose network tools are wrapped).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ..audit import AuditRecord, AuditUnavailable
from ..capabilities import under_root
from ..contract import ToolCall, ToolResult
from ..documents import parse_json
from ..errors import ToolguardError
from ..harness.files import read_tree
from ..hooks import Approval
from ..plan import PlanProgress
from ..runtime import ToolRuntime
from ..runtime.admission import storable_id
from ..sandbox import SandboxError
from .cassette import (
    AuditExpectation,
    Cassette,
    Expectation,
    FileState,
    HttpExchange,
    Interaction,
    Session,
    WorkspaceState,
    binary_naming_root,
    dump,
)
from .http import HttpRecording
from .redacting import redact_file, redact_path, tool_redactor

MAX_WORKSPACE_BYTES = 64 * 1024 * 1024
"""The most bytes of files a cassette keeps as the starting workspace of
a session of directory-world tools, which keeps all of it."""


class RootInBinary(UserWarning):
    """A cassette just written holds binary content (a database, an image,
    a compressed body) naming the recorded root: it is kept as it is, so a
    replay in a world with another root sees the recorded path there."""

    def __init__(self, path: str, where: Sequence[str]) -> None:
        self.path = path
        self.where = tuple(where)
        shown = ", ".join(self.where[:5]) + (
            f" and {len(where) - 5} more" if len(where) > 5 else ""
        )
        super().__init__(
            f"{path}: binary content names the recorded root and is kept as it is "
            f"(a path of another length would corrupt it): {shown}"
        )


class WorkspaceTooLarge(ToolguardError, ValueError):
    """A session of directory-world tools started in a workspace larger
    than the recorder keeps; the message says how large and what to do."""


@dataclass(frozen=True, slots=True)
class _Recorded:
    call: ToolCall
    result: ToolResult
    stored_data: Any
    """The data as the runtime would store it: redacted, then cut."""
    touched: tuple[str, ...]
    approval: Approval | None = None
    http: Sequence[HttpExchange] = ()
    """Live: a handler that overran its deadline may still add to it."""
    row: AuditRecord | None = None
    """The call's audit row, taken as the call ended: bound to this call,
    not to its id (models repeat ids; an empty one gets a generated id)."""


class Recorder:
    """Records every call a runtime executes, from ``start()`` on.
    ``record_http=False`` leaves the HTTP of network tools unrecorded (a
    recorder inside a world that already serves it). ``max_workspace_bytes``
    bounds the whole-workspace snapshot a session of directory-world tools
    keeps (see ``WorkspaceTooLarge``)."""

    def __init__(
        self,
        runtime: ToolRuntime,
        *,
        name: str,
        recorded_by: str | None = None,
        description: str = "",
        record_http: bool = True,
        max_workspace_bytes: int = MAX_WORKSPACE_BYTES,
    ) -> None:
        self.runtime = runtime
        self.max_workspace_bytes = max_workspace_bytes
        self.name = name
        self.recorded_by = recorded_by
        self.description = description
        self.record_http = record_http
        self._http: HttpRecording | None = None
        self._calls: list[_Recorded] = []
        self._before: dict[str, bytes] = {}
        self._symlinks: dict[str, str] = {}
        self._directories: list[str] = []
        self._modes: dict[str, int] = {}
        self._started_at = ""
        self._aliases: tuple[str, ...] = ()
        self._remove_listener: Callable[[], None] | None = None
        self._remove_watcher: Callable[[], None] | None = None
        self._accessed: dict[str, list[str]] = {}
        """Paths each call's handler asked the workspace about, by call id,
        until the call's listener takes them."""
        self._accessed_lock = threading.Lock()

    def start(self) -> None:
        """Snapshot the workspace and start listening to ``runtime.execute``."""
        root = self.runtime.workspace.root
        real = os.path.realpath(root)
        self._aliases = () if real == root else (real,)
        self._started_at = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
        self._before = read_tree(root)
        self._symlinks, self._directories, self._modes = _links_and_directories(root)
        if self.record_http:
            self._http = HttpRecording.attach(self.runtime)
        self._remove_watcher = self.runtime.watch_files(self._watch)
        self._remove_listener = self.runtime.add_listener(self._record)

    def stop(self) -> None:
        """Stop watching the runtime."""
        for remove in (self._remove_listener, self._remove_watcher):
            if remove is not None:
                remove()
        self._remove_listener = self._remove_watcher = None
        if self._http is not None:
            self._http.detach()
            self._http = None

    def _watch(self, call_id: str, paths: Sequence[str]) -> None:
        with self._accessed_lock:
            self._accessed.setdefault(call_id, []).extend(paths)

    def _record(
        self, call: ToolCall, result: ToolResult, stored_data: Any, approval: Approval | None
    ) -> None:
        with self._accessed_lock:
            accessed = self._accessed.pop(result.call_id, [])
        touched = self._touched(call) + self._located(accessed)
        http = self._http.take(result.call_id) if self._http is not None else ()
        # The latest row of the result's id, now that the call ended: its own
        # (the result's id is the generated one for a call without an id).
        row = None
        with contextlib.suppress(AuditUnavailable):  # the store is down: asked again later
            row = self.runtime.audit.get(result.call_id)
        self._calls.append(
            _Recorded(call, result, stored_data, tuple(dict.fromkeys(touched)), approval, http, row)
        )

    def cassette(self) -> Cassette:
        """The cassette of everything recorded so far."""
        runtime = self.runtime
        touched = [path for item in self._calls for path in item.touched]
        after = read_tree(runtime.workspace.root)
        # A directory-world tool may reach any file through C code or another
        # process, unseen: its session keeps the whole workspace.
        whole = runtime.registry.world_for(item.call.tool_name for item in self._calls)
        if whole == "directory":
            self._check_size()

        def kept(path: str) -> bool:
            # Files no tool may read (.env) never enter a cassette.
            return (
                whole == "directory" or any(under_root(path, root) for root in touched)
            ) and not _forbidden(runtime, path)

        redact = self.runtime.redactor

        def shown(path: str) -> str:
            return redact_path(redact, path)

        before = {
            path: redact_file(redact, data) for path, data in self._before.items() if kept(path)
        }
        changed = {
            path
            for path in set(after) | set(self._before)
            if after.get(path) != self._before.get(path) and not _forbidden(runtime, path)
        }
        final: dict[str, FileState | None] = {
            path: FileState.of(redact_file(redact, after[path]))
            for path in sorted(set(before) | changed)
            if path in after
        }
        first = self._calls[0].call if self._calls else None
        plan = next((hook.steps for hook in runtime.hooks if isinstance(hook, PlanProgress)), None)
        return Cassette(
            kind="cassette",
            name=self.name,
            description=self.description,
            recorded_at=self._started_at,
            recorded_by=self.recorded_by,
            session=Session(
                actor=self._stored(first.actor) if first else "agent",
                session_id=self._stored(first.session_id) if first else "default",
                capabilities=runtime.capabilities,
                variables=dict(runtime.variables),
                idempotency_scope=runtime.idempotency_scope,
                plan=plan,
                timeouts=dict(runtime.timeouts),
            ),
            workspace=WorkspaceState(
                root=runtime.workspace.root,
                files={shown(path): data for path, data in before.items()},
                directories=tuple(
                    shown(d)
                    for d in self._directories
                    if kept(d) or any(under_root(path, d) for path in touched)
                ),
                symlinks={
                    shown(link): shown(target)
                    for link, target in self._symlinks.items()
                    if kept(link)
                },
                modes={shown(path): bits for path, bits in self._modes.items() if kept(path)},
                aliases=self._aliases,
            ),
            interactions=tuple(self._interaction(item) for item in self._calls),
            final_files={shown(path): state for path, state in final.items()},
        )

    def _check_size(self) -> None:
        """``WorkspaceTooLarge`` when the workspace snapshot is over the bound."""
        size = sum(len(data) for data in self._before.values())
        if size > self.max_workspace_bytes:
            raise WorkspaceTooLarge(
                f"the workspace {self.runtime.workspace.root} held {size:,} bytes in "
                f"{len(self._before):,} files when recording started, over the "
                f"{self.max_workspace_bytes:,} bytes a cassette keeps for tools that run in "
                'the directory world (world="directory" keeps the whole workspace): record '
                "in a smaller workspace, or pass a larger max_workspace_bytes to the recorder"
            )

    def interaction(
        self,
        call: ToolCall,
        result: ToolResult,
        *,
        stored_data: Any = None,
        approval: Approval | None = None,
    ) -> Interaction:
        """The interaction a cassette keeps for one call, as ``cassette()``
        builds it: the arguments redacted as in the audit row, the result
        (with ``stored_data``, already redacted), and the summary of the
        call's audit row as the store holds it now. For a call whose outcome
        another program reports (a Claude Code hook), which ``execute``
        never saw."""
        return self._interaction(_Recorded(call, result, stored_data, (), approval))

    def declared_paths(self, call: ToolCall) -> tuple[str, ...]:
        """The workspace paths ``call``'s tool declares (``PathAccess``)
        filled from its arguments, each as spelt (normalized) and where it
        resolves now; paths refused by their spelling are left out. What a
        recorder keeps for a call whose handler it cannot watch."""
        return self._touched(call)

    def _interaction(self, item: _Recorded) -> Interaction:
        call, result = item.call, item.result
        # The tool's own redactor when it has one, as in the audit row.
        redactor = tool_redactor(self.runtime.registry, call.tool_name, self.runtime.redactor)
        arguments = call.arguments
        shown = (
            redactor.redact_text(arguments)
            if isinstance(arguments, str)
            else redactor.redact(arguments)
        )
        row = self._row(item)
        stored = self._stored
        return Interaction(
            call=replace(
                call,
                call_id=stored(call.call_id),
                tool_name=stored(call.tool_name),
                actor=stored(call.actor),
                session_id=stored(call.session_id),
                idempotency_key=stored(call.idempotency_key),
                arguments=shown,
                metadata={},
            ),
            result=Expectation(
                ok=result.ok,
                code=result.code.value,
                retryable=result.retryable,
                state=result.state.value,
                truncated=result.truncated,
                data=item.stored_data,
                check_data=True,
                message=result.message,
            ),
            audit=AuditExpectation.from_row(row),
            approval=item.approval,
            http=tuple(item.http),
        )

    def _stored(self, value: Any) -> Any:
        """An id of the call as its audit row stores it (``storable_id``):
        a token a model put in an id is as secret as one in the arguments,
        and replay then finds the row under the id the cassette holds."""
        return storable_id(self.runtime.redactor, value) if isinstance(value, str) else value

    def _row(self, item: _Recorded) -> AuditRecord | None:
        """The call's audit row as the store holds it now."""
        row = item.row
        if row is None:  # a call execute never saw (``interaction()``), or the store was down
            return self.runtime.audit.get(item.result.call_id)
        if not row.state.finished:  # its finishing write was queued, maybe stored since
            current = self.runtime.audit.rows(row.session_id)
            return next((other for other in current if other.audit_id == row.audit_id), row)
        return row

    def _touched(self, call: ToolCall) -> tuple[str, ...]:
        """The workspace paths a call's tool declares (``PathAccess``)."""
        spec = (
            self.runtime.registry.get(call.tool_name) if isinstance(call.tool_name, str) else None
        )
        arguments = _arguments(call)
        if spec is None or not spec.paths or arguments is None:
            return ()
        given: list[str] = []
        for access in spec.paths:
            try:
                given += access.expand(arguments, self.runtime.variables)
            except (KeyError, SandboxError, ValueError):
                continue  # refused by its spelling too: it touched nothing
        return self._located(given)

    def _located(self, given: Sequence[str]) -> tuple[str, ...]:
        """Each path as spelt (normalized: a link entry replay must rebuild)
        and where it resolves now; paths refused by their spelling (``..``
        out, forbidden names) touched nothing and are left out."""
        workspace = self.runtime.workspace
        located: list[str] = []
        for path in given:
            try:
                located.append(workspace.normalize(path))
            except (SandboxError, TypeError, ValueError):
                continue
            # An escaping link does not resolve: replay refuses it again from the kept link.
            with contextlib.suppress(SandboxError, OSError, ValueError):
                located.append(workspace.resolve(path))
        return tuple(located)


def _arguments(call: ToolCall) -> Mapping[str, Any] | None:
    """The call's arguments as the runtime reads them: a mapping, or JSON
    text holding one (as model APIs send them); None otherwise."""
    arguments: Any = call.arguments
    if isinstance(arguments, (str, bytes, bytearray)):
        try:
            arguments = parse_json(arguments)  # a model's or a cassette's: bounded
        except ValueError:
            return None
    return arguments if isinstance(arguments, Mapping) else None


def _forbidden(runtime: ToolRuntime, path: str) -> bool:
    try:
        runtime.workspace.normalize(path)
    except SandboxError:
        return True
    return False


def _links_and_directories(root: str) -> tuple[dict[str, str], list[str], dict[str, int]]:
    """The links, the directories and the unusual permission bits (see
    ``WorkspaceState.modes``) beneath ``root``."""
    links: dict[str, str] = {}
    directories: list[str] = []
    modes: dict[str, int] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in sorted(subdirs + names):
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                links[relative] = os.readlink(path)
                continue
            if stat.S_ISDIR(mode):
                directories.append(relative)
            usual = 0o755 if stat.S_ISDIR(mode) else 0o644
            if (stat.S_ISDIR(mode) or stat.S_ISREG(mode)) and stat.S_IMODE(mode) != usual:
                modes[relative] = stat.S_IMODE(mode)
    return links, directories, modes


@contextmanager
def record_session(
    runtime: ToolRuntime,
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    recorded_by: str | None = None,
    description: str = "",
    max_workspace_bytes: int = MAX_WORKSPACE_BYTES,
) -> Iterator[Recorder]:
    """Record every call ``runtime`` executes in the block into the cassette
    at ``path``, written (atomically) only when the block ends normally.
    ``WorkspaceTooLarge`` (nothing written) when a session of
    directory-world tools started in a workspace larger than
    ``max_workspace_bytes``."""
    recorder = Recorder(
        runtime,
        name=name or os.path.splitext(os.path.basename(os.fspath(path)))[0],
        recorded_by=recorded_by,
        description=description,
        max_workspace_bytes=max_workspace_bytes,
    )
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()
    cassette = recorder.cassette()
    dump(cassette, path)
    left = binary_naming_root(cassette)
    if left:
        warnings.warn(RootInBinary(os.fspath(path), left), stacklevel=3)
