"""Faults in the paths a call names: a component swapped for a symlink to
outside (``symlink_escape``), and swapped between two of the handler's own
operations (``symlink_race``), escaping payloads in every path argument
(``path_traversal``)."""

from __future__ import annotations

import inspect
import json
import os
import posixpath
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from ..contract import ErrorCode, ToolResult
from ..harness.accesses import is_ancestor, is_within
from ..harness.directory_world import DirectoryWorld
from ..harness.world import DECOY_MARKER, FORBIDDEN_SPELLINGS
from .cell import Cell, CleanRun
from .fault import Fault
from .outcome import NOTHING_TO_INJECT
from .target import Target

MAX_SWAPS = 64
"""At most this many swap points per link point for ``symlink_race``: more
are thinned evenly, the first and the last kept."""

_REFUSED = (
    ErrorCode.PATH_OUTSIDE_WORKSPACE,
    ErrorCode.FORBIDDEN_PATH,
    ErrorCode.INVALID_ARGUMENT,
    ErrorCode.PERMISSION_DENIED,
)

_KIND_ERRORS = ("NotADirectoryError", "FileExistsError", "IsADirectoryError")
"""Errors an entry of the wrong kind raises: where the decoy is of another
kind than what a clean run found there, the harness caused them."""


class SymlinkEscapeFault(Fault):
    name = "symlink_escape"
    applies_to = "successful calls with a path argument inside the workspace"
    injection = (
        "the path's first component replaced by a symlink to a decoy outside (a directory "
        "where a clean run had or made one): before the call, and again swapped in after "
        "the policy check, as the handler starts"
    )
    expected = "refused (PATH_OUTSIDE_WORKSPACE or a refused open); nothing outside read or changed"

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and bool(_link_points(target))

    def inject(self, cell: Cell) -> None:
        points = _link_points(cell.target)
        clean = _clean_run(cell)
        decoys = {first: _plant_mirror(cell, first, clean) for first in points}
        cell.outside_planted()  # once, before any call: an escape must not be absorbed
        for first, decoy in decoys.items():
            with _Swapped(cell, first, decoy):
                result = cell.execute(cell.call())
            _refused(
                cell, clean, first, result, f"{first} was a symlink to outside before the call"
            )

            original = cell.replace_handler(_swapping_first(cell, first, decoy))
            result = cell.execute(cell.call())
            _refused(
                cell, clean, first, result, f"{first} became a symlink to outside during the call"
            )
            cell.restore_handler(original)


def _clean_run(cell: Cell) -> CleanRun:
    """A clean run, before any decoy of these faults is planted: what it
    changed outside is a problem now (the planting re-takes the picture)."""
    clean = cell.clean_run()
    cell.check_outside()
    return clean


def _refused(cell: Cell, clean: CleanRun, first: str, result: ToolResult, when: str) -> None:
    """The call under a swapped link read nothing outside (when it
    succeeded) or was refused. A failure counts as a refusal only where
    the harness did not cause it: the call succeeds with nothing injected,
    and its error is not one of an entry of the wrong kind where the decoy
    is of another kind than what the clean run found."""
    if result.ok:
        # A listing or search may succeed by skipping the link; it must
        # not have gone through it (the decoy marker check sees that).
        cell.check(
            DECOY_MARKER not in json.dumps(result.data, default=str),
            f"{when}: the call read through it",
        )
        return
    if result.code in _REFUSED:
        return
    if result.code is not ErrorCode.EXECUTION_ERROR:
        cell.check(False, f"{when}: expected a refusal, got {result.code.value}")
    elif not clean.result.ok:
        cell.check(
            False,
            f"{when}: inconclusive, the call fails with nothing injected too "
            f"({clean.result.code.value}): its failure here is no refusal",
        )
    elif _is_dir_decoy(cell, first) != _was_dir(cell, clean, first) and any(
        error in result.message for error in _KIND_ERRORS
    ):
        cell.check(
            False,
            f"{when}: inconclusive, the call failed on the decoy's kind "
            f"({result.message[:160]}), not on the link",
        )


class SymlinkRaceFault(Fault):
    name = "symlink_race"
    applies_to = "successful calls with a path argument inside the workspace"
    injection = (
        "the path's first component swapped for a symlink to a decoy outside (a directory "
        "where a clean run had or made one) between two of the handler's filesystem "
        "operations, whichever API made them (open, stat, exists, realpath, lstat, "
        "readlink, listdir, ...): before each operation of a clean run that names a path "
        f"at, beneath or above it (at most {MAX_SWAPS}, thinned evenly)"
    )
    expected = (
        "refused or done inside: nothing outside read, opened or changed (a handler's own "
        "check-then-use race)"
    )

    def applies(self, target: Target) -> bool:
        return target.handler_can_run and bool(_link_points(target))

    def inject(self, cell: Cell) -> None:
        clean = _clean_run(cell)
        decoys = {first: _plant_mirror(cell, first, clean) for first in _link_points(cell.target)}
        cell.outside_planted()
        saved = cell.world.save_workspace()
        runtime = cell.make_runtime(hooks=[])  # the plan has moved on by now
        points = {first: swap_points(cell, clean, first) for first in decoys}
        if cell.directory and not any(points.values()):
            cell.problems.append(
                f"{NOTHING_TO_INJECT}: the handler made no file operation in this process "
                "for a swap to land between (a server in another process makes its own)"
            )
        for first, decoy in decoys.items():
            for k in points[first]:
                cell.world.restore_workspace(saved)
                swap = _Swapped(cell, first, decoy)
                try:
                    with _swap_at(cell, k, swap):
                        # The swap changes the tree: not the call's doing.
                        result = cell.execute(cell.call(), runtime, judge_effects=False)
                finally:
                    if os.path.islink(swap.path) or swap.moved:
                        swap.__exit__()
                where = f"before operation {k}" if cell.directory else f"after operation {k}"
                _refused(cell, clean, first, result, f"{first} became a symlink to outside {where}")
        cell.world.restore_workspace(saved)


def swap_points(cell: Cell, clean: CleanRun, first: str) -> list[int]:
    """The k at which ``symlink_race`` swaps ``first`` in: before the k-th
    operation in the directory world, after it in the fake world. Every
    gap before an operation of the clean run that names a path at,
    beneath or above the link point (or a relative one: a ``dir_fd``'s,
    unknown), whichever API made it; at most ``MAX_SWAPS``, thinned evenly.
    Without the clean run's paths, every operation."""
    link = posixpath.join(cell.root, first)
    if len(clean.paths) != clean.accesses:
        touching = list(range(1, clean.accesses + 1))
    else:
        touching = [
            index
            for index, paths in enumerate(clean.paths, 1)
            if not paths or any(_touches(path, link) for path in paths)
        ]
    if not cell.directory:  # after the operation before it
        touching = [index - 1 for index in touching if index > 1]
    if len(touching) <= MAX_SWAPS:
        return touching
    last = len(touching) - 1
    picked = {touching[round(step * last / (MAX_SWAPS - 1))] for step in range(MAX_SWAPS)}
    return sorted(picked)


def _touches(path: str, link: str) -> bool:
    if not path.startswith("/"):
        return True
    path = posixpath.normpath(path)
    return is_within(path, link) or is_ancestor(path, link)


@contextmanager
def _swap_at(cell: Cell, k: int, swap: _Swapped) -> Iterator[None]:
    """Within the block, ``swap`` happens at the handler's k-th filesystem
    operation: after the k-th path it resolves in the fake world
    (``AccessLog.after_access``); before its k-th Python-level operation in
    the directory world (``Operations.before``, which counts a ``stat`` or
    ``realpath`` too)."""
    log: Any = cell.operations if cell.directory else cell.files.access_log
    at = log.count + k

    def swap_at(index: int, *_where: str) -> None:
        if index == at:
            swap.__enter__()

    if cell.directory:
        log.before = swap_at
    else:
        log.after_access = swap_at
    try:
        yield
    finally:
        if cell.directory:
            log.before = None
        else:
            log.after_access = None


def _swapping_first(
    cell: Cell, first: str, decoy: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A handler wrapper that swaps the link in as the handler starts
    (after the policy check) and back when it ends."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(handler):
            # Held across the await: a coroutine's body runs after the call returns it.
            async def swapping_async(ctx: Any, **arguments: Any) -> Any:
                with _Swapped(cell, first, decoy):
                    return await handler(ctx, **arguments)

            return swapping_async

        def swapping(ctx: Any, **arguments: Any) -> Any:
            with _Swapped(cell, first, decoy):
                return handler(ctx, **arguments)

        return swapping

    return wrap


def _link_points(target: Target) -> tuple[str, ...]:
    """The first components of the call's workspace paths (after filling
    the tool's path templates), where a symlink can be put. An absolute
    path counts by its part beneath the workspace's root (the root the
    cell's world spells: the recorded one in the fake world, the world's
    own in the directory world); one naming anything else does not."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None:
        return ()
    paths: list[str] = []
    for access in spec.paths:
        try:
            paths += access.expand(arguments, target.cassette.session.variables)
        except (KeyError, ValueError):
            continue
    declared = {name for access in spec.paths for name in access.fields}
    paths += [arguments[name] for name in target.path_arguments if name not in declared]
    root = posixpath.normpath(target.cassette.workspace.root)
    points: list[str] = []
    for path in paths:
        normal = posixpath.normpath(path)
        if normal.startswith("/"):
            normal = _beneath(root, normal) or "."
        if normal.startswith("..") or normal == ".":
            continue
        first = normal.split("/")[0]
        if first not in points:
            points.append(first)
    return tuple(points)


def _beneath(root: str, path: str) -> str | None:
    """``path`` (absolute, normalised) relative to ``root`` when it lies
    beneath it; None for the root itself or anything else."""
    top = root.rstrip("/") + "/"
    return path[len(top) :] if path.startswith(top) and len(path) > len(top) else None


def _was_dir(cell: Cell, clean: CleanRun, first: str) -> bool:
    """Whether ``first`` is a directory now or in what the clean run left."""
    return first in clean.directories or cell.files.is_dir(posixpath.join(cell.root, first))


def _is_dir_decoy(cell: Cell, first: str) -> bool:
    return cell.files.is_dir(posixpath.join(cell.outside_dir, "mirror", first))


def _plant_mirror(cell: Cell, first: str, clean: CleanRun) -> str:
    """A decoy copy of ``first`` outside the workspace, of the kind a clean
    run found or made there (a directory the recording left out, empty, is
    still one): every file beneath it now or after the clean run with
    decoy content, plus a file whose name is the marker."""
    decoy = posixpath.join(cell.outside_dir, "mirror", first)
    if _was_dir(cell, clean, first):
        for relative in sorted(set(cell.tree()) | set(clean.tree)):
            if relative.startswith(first + "/"):
                path = posixpath.join(cell.outside_dir, "mirror", relative)
                cell.files.write_file(path, f"{DECOY_MARKER} {relative}\n")
        cell.files.write_file(posixpath.join(decoy, DECOY_MARKER + ".txt"), DECOY_MARKER)
    else:
        cell.files.write_file(decoy, f"{DECOY_MARKER} {first}\n")
    return decoy


class _Swapped:
    """Within the block, ``root/first`` is a symlink to ``decoy``; the real
    entry waits beside it and comes back afterwards."""

    def __init__(self, cell: Cell, first: str, decoy: str) -> None:
        self.path = posixpath.join(cell.root, first)
        self.aside = posixpath.join(cell.root, f"{first}.toolguard-aside")
        self.decoy = decoy
        self.cell = cell
        self.moved = False

    def __enter__(self) -> None:
        with self.cell.files.quiet():  # the harness's doing, not the handler's
            if os.path.lexists(self.path):
                os.rename(self.path, self.aside)
                self.moved = True
            os.symlink(self.decoy, self.path)

    def __exit__(self, *exc: object) -> None:
        with self.cell.files.quiet():
            if os.path.islink(self.path):
                os.unlink(self.path)
            elif os.path.lexists(self.path):  # the tool replaced the link: keep the evidence
                return
            if self.moved:
                os.rename(self.aside, self.path)


# -- path_traversal --------------------------------------------------------------------

_CLIMB = "{up}"
"""Stands for as many ``..`` as it takes to climb past the root and then
some (``traversal_payloads(root)``), in the payload's own spelling."""

_PAYLOADS = (
    "{up}etc/passwd",
    "/etc/passwd",
    "..",
    "../",
    "../toolguard-outside/secret.txt",
    "./../toolguard-outside/secret.txt",
    "a/../../toolguard-outside/secret.txt",
    "../{name}2/keep.txt",
    "../{name}-old/keep.txt",
    "{root}2/keep.txt",
    "{up:..%2f}etc%2fpasswd",
    "{up:%2e%2e/}etc/passwd",
    "{up:%252e%252e%252f}etc%252fpasswd",
    "{up:....//}etc/passwd",
    "{up:..\\}etc\\passwd",
    "{up:\u2025/}etc/passwd",
    "{up:..%c0%af}etc/passwd",
    "//etc/passwd",
    "/./etc/./passwd",
    "etc/passwd\x00.txt",
    "~/.ssh/id_rsa",
    "~/.aws/credentials",
    "~root/.ssh/id_rsa",
    "$HOME/.ssh/id_rsa",
    "${HOME}/.aws/credentials",
    "%HOME%/.ssh/id_rsa",
    "/tmp/toolguard-decoy.txt",
)
"""Raw payloads in the styles of the traversal corpus (tests/corpora):
dot-dot, absolute, encoded once and twice, overlong UTF-8, backslashes, a
Unicode two-dot leader, a NUL, siblings sharing the root's prefix, the
home directory as ``~`` and ``$HOME`` spell it, ``/tmp``. ``{up}`` (or
``{up:STEP}``: that step repeated) climbs past the root whatever its
depth; ``{root}`` is the root, ``{name}`` its last component. Each is
also sent decoded."""

_DEFAULT_ROOT = "/a/b/c/d"


def _expand_up(text: str, root: str) -> str:
    climbs = root.count("/") + 2  # past "/" and then some: "/.." is "/"
    while "{up" in text:
        start = text.index("{up")
        end = text.index("}", start)
        step = text[start + 4 : end] if text[start + 3] == ":" else "../"
        text = text[:start] + step * climbs + text[end + 1 :]
    return text


_TARGETS = (
    ("etc%252fpasswd", "toolguard-outside%252fsecret.txt"),
    ("etc%2fpasswd", "toolguard-outside%2fsecret.txt"),
    ("etc\\passwd", "toolguard-outside\\secret.txt"),
    ("etc/./passwd", "toolguard-outside/./secret.txt"),
    ("etc/passwd", "toolguard-outside/secret.txt"),
)
"""In the directory world, the system file a payload aims at becomes the
world's own decoy beside the workspace (``OUTSIDE_DIR``): a tool without a
check must not write the machine's ``/etc/passwd``."""


def _within(payload: str, top: str, root: str) -> str | None:
    """``payload`` aimed inside ``top`` (the directory world's own
    directory) instead of the machine's files; None for a payload that
    only the machine's home directory could serve (``~``, ``$HOME``)."""
    if "~" in payload or "HOME" in payload:
        return None
    for system, decoy in _TARGETS:
        payload = payload.replace(system, decoy)
    if payload.startswith("/"):
        payload = top.rstrip("/") + payload
    climbs = root.rstrip("/").count("/") - top.rstrip("/").count("/")
    return payload.replace("{up}", "{up:../}").replace("{up:", f"{{climb{climbs}:")


def _expand(payload: str, root: str) -> str:
    root = root.rstrip("/") or "/"
    text = payload.replace("{root}", root).replace("{name}", posixpath.basename(root))
    while "{climb" in text:  # an exact number of steps: to the top of a directory world
        start = text.index("{climb")
        colon, end = text.index(":", start), text.index("}", start)
        text = text[:start] + text[colon + 1 : end] * int(text[start + 6 : colon]) + text[end + 1 :]
    return _expand_up(text, root)


def traversal_payloads(root: str = _DEFAULT_ROOT, *, within: str | None = None) -> tuple[str, ...]:
    """Every payload for a workspace at ``root``, raw and decoded
    (URL-unquoted up to three times, NFKC-normalised, backslashes made
    slashes), without repeats. With ``within`` (a directory world's own
    directory, above ``root``) every payload lands inside it: dot-dots
    climb exactly to it, absolute paths begin with it, the system files
    aimed at are its decoy beside the workspace, and the home-directory
    payloads are left out."""
    templates: tuple[str, ...] = _PAYLOADS
    if within is not None:
        templates = tuple(
            found for found in (_within(p, within, root) for p in _PAYLOADS) if found is not None
        )
    seen: dict[str, None] = {}
    for raw in (_expand(payload, root) for payload in templates):
        seen[raw] = None
        value = raw
        for _ in range(3):
            value = unquote(value)
            seen[value] = None
        for variant in (unicodedata.normalize("NFKC", value), value.replace("\\", "/")):
            seen[variant] = None
            seen[unicodedata.normalize("NFKC", variant.replace("\\", "/"))] = None
    return tuple(seen)


def escapes(path: str) -> bool:
    """Whether ``path`` read lexically as a POSIX path leaves a root: it is
    absolute or climbs above it with ``..``."""
    if path.startswith("/"):
        return True
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


_INSIDE_STEPS = ("..%2f", "%2e%2e%2f", "%252e%252e%252f", "\u2025/")
"""How the inside payloads climb one directory, each in a spelling the
executor reads literally (one odd file name beside the others) and a
handler that decodes or normalises after the check reads as ``../``."""

MOVED_NAME = "toolguard-moved.txt"
"""The file an inside payload aims a writing tool at, climbed out of the
directory its declaration names."""


def inside_payloads(value: str, depth: int, *, writes: bool) -> tuple[str, ...]:
    """Payloads that stay inside the workspace but leave the directory a
    path argument's recorded ``value`` names (``depth`` components below
    the root, the tool's template filled): its last component replaced by
    a climb of one directory, and one all the way to the root, in each of
    ``_INSIDE_STEPS``' spellings, to ``MOVED_NAME`` (a tool that writes)
    or to the forbidden ``.env`` (one that reads). Judged by what the call
    changed against its declarations and write roots, and by the forbidden
    file's marker: never as an escape."""
    target = MOVED_NAME if writes else FORBIDDEN_SPELLINGS[0]
    prefix = value.rsplit("/", 1)[0] + "/" if "/" in value else ""
    climbs = sorted({1, depth}) if depth > 0 else []
    return tuple(prefix + step * climb + target for climb in climbs for step in _INSIDE_STEPS)


class PathTraversalFault(Fault):
    name = "path_traversal"
    applies_to = "calls with a path argument"
    injection = (
        f"each path argument replaced by {len(traversal_payloads())} payloads "
        "(traversal corpus styles, raw and decoded; dot-dots climbing past the root "
        "whatever its depth; siblings sharing the root's prefix; ~, $HOME and /tmp), "
        "then by payloads climbing out of its own directory but not the workspace, "
        "spelt so that only a decoding or normalising handler climbs"
    )
    expected = (
        "every path that a payload makes (the tool's template filled) and that leads "
        "outside refused (in a declared path argument); nothing outside read or changed; "
        "nothing changed beyond what the call declared, or outside the write roots"
    )

    def applies(self, target: Target) -> bool:
        return target.spec is not None and bool(target.path_arguments)

    def inject(self, cell: Cell) -> None:
        arguments = cell.target.arguments or {}
        declared = cell.target.declared_path_arguments
        within = cell.world.around if isinstance(cell.world, DirectoryWorld) else None
        payloads = traversal_payloads(cell.root, within=within)
        for name in cell.target.path_arguments:
            value = arguments.get(name)
            inside = inside_payloads(
                value if isinstance(value, str) else "",
                _depth(cell, arguments, name),
                writes=cell.target.writes,
            )
            for payload in payloads + inside:
                called = {**arguments, name: payload}
                result = cell.execute(cell.call(called))
                # An argument only named like a path may not be one (a
                # language's "source"): there, the decoy and outside checks judge.
                if name not in declared or not result.ok:
                    continue
                outside = _outside_paths(cell, called, name, payload)
                cell.check(
                    not outside,
                    f"{name}={payload!r} escapes the workspace but the call succeeded: "
                    f"it makes {', '.join(map(repr, outside[:2]))}",
                )


def _expanded(cell: Cell, arguments: dict[str, Any], name: str) -> list[str] | None:
    """The paths the tool's templates naming ``name`` make of
    ``arguments``; None when they cannot be filled."""
    spec = cell.target.spec
    if spec is None:
        return None
    variables = cell.target.cassette.session.variables
    paths: list[str] = []
    for access in spec.paths:
        if any(
            field == name or field.startswith((name + ".", name + "[")) for field in access.fields
        ):
            try:
                paths += access.expand(arguments, variables)
            except (KeyError, ValueError):
                return None
    return paths


def _outside_paths(cell: Cell, arguments: dict[str, Any], name: str, payload: str) -> list[str]:
    """The paths a payload made that lead outside the workspace, read as
    POSIX paths: absolute and not beneath the root, or climbing above it.
    Judged on the filled template, never on the payload alone
    (``outbox/{id}.md`` with ``..`` is ``outbox/...md``); the payload
    itself where the templates cannot be filled."""
    paths = _expanded(cell, arguments, name)
    if paths is None:
        paths = [payload]
    root = posixpath.normpath(cell.root)
    outside = []
    for path in paths:
        if path.startswith("/"):
            if not is_within(posixpath.normpath(path), root):
                outside.append(path)
        elif escapes(path):
            outside.append(path)
    return outside


def _depth(cell: Cell, arguments: dict[str, Any], name: str) -> int:
    """How many directories below the root the argument's recorded value
    sits (its deepest filled path's parent), 0 when it cannot be told."""
    paths = _expanded(cell, arguments, name) or [str(arguments.get(name, ""))]
    root = posixpath.normpath(cell.root)
    depths = [0]
    for path in paths:
        normal = posixpath.normpath(path)
        if normal.startswith("/"):
            normal = _beneath(root, normal) or "."
        if escapes(normal) or normal == ".":
            continue
        depths.append(normal.count("/"))
    return max(depths)
