"""The ``path_traversal`` fault: escaping payloads in every path argument
(declared, named like a path, or whose value reached a filesystem
operation of a clean run: ``reached``), with the recorded arguments and
a few other argument sets, so that a branch other arguments take meets
them too."""

from __future__ import annotations

import posixpath
import unicodedata
from typing import Any
from urllib.parse import unquote

from ..harness.accesses import is_within
from ..harness.directory_world import DirectoryWorld
from ..harness.world import FORBIDDEN_SPELLINGS
from .cell import Cell
from .fault import Fault
from .outcome import NOTHING_TO_INJECT
from .reached import (
    MAX_ALTERNATIVES,
    alternative_arguments,
    beneath,
    could_reach,
    reached_arguments,
)
from .target import Target

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


_PLAIN = (
    "{up}etc/passwd",
    "/etc/passwd",
    "../toolguard-outside/secret.txt",
    "../toolguard-outside",
)
"""The payloads tried with the other argument sets: one of each way out
(climbing past the root, absolute, a file and a directory beside the
workspace)."""


def traversal_payloads(
    root: str = _DEFAULT_ROOT, *, within: str | None = None, templates: tuple[str, ...] = _PAYLOADS
) -> tuple[str, ...]:
    """Every payload of ``templates`` for a workspace at ``root``, raw and
    decoded (URL-unquoted up to three times, NFKC-normalised, backslashes
    made slashes), without repeats. With ``within`` (a directory world's
    own directory, above ``root``) every payload lands inside it: dot-dots
    climb exactly to it, absolute paths begin with it, the system files
    aimed at are its decoy beside the workspace, and the home-directory
    payloads are left out."""
    if within is not None:
        templates = tuple(
            found for found in (_within(p, within, root) for p in templates) if found is not None
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
    applies_to = (
        "calls with a path argument (declared, named like one, or a string a clean run "
        "joined into a path)"
    )
    injection = (
        f"each path argument replaced by {len(traversal_payloads())} payloads "
        "(traversal corpus styles, raw and decoded; dot-dots climbing past the root "
        "whatever its depth; siblings sharing the root's prefix; ~, $HOME and /tmp), "
        "then by payloads climbing out of its own directory but not the workspace, "
        "spelt so that only a decoding or normalising handler climbs; "
        f"then {len(_PLAIN)} of them with up to {MAX_ALTERNATIVES} other argument sets (booleans "
        "flipped, integers moved, amplified variants)"
    )
    expected = (
        "every path that a payload makes (the tool's template filled) and that leads "
        "outside refused (in a declared path argument); nothing outside read, looked at "
        "or changed; nothing changed beyond what the call declared, or outside the write roots"
    )

    def applies(self, target: Target) -> bool:
        return target.spec is not None and (bool(target.path_arguments) or could_reach(target))

    def inject(self, cell: Cell) -> None:
        arguments = cell.target.arguments or {}
        names = list(cell.target.path_arguments)
        if could_reach(cell.target):
            reached = reached_arguments(cell, cell.clean_run())
            names += [name for name in reached if name not in names]
        if not names:
            cell.problems.append(
                f"{NOTHING_TO_INJECT}: no argument is a path (declared, named like one, "
                "or a string a clean run joined into one)"
            )
            return
        within = cell.world.around if isinstance(cell.world, DirectoryWorld) else None
        payloads = traversal_payloads(cell.root, within=within)
        for name in names:
            value = arguments.get(name)
            inside = inside_payloads(
                value if isinstance(value, str) else "",
                _depth(cell, arguments, name),
                writes=cell.target.writes,
            )
            for payload in payloads + inside:
                _try(cell, {**arguments, name: payload}, name, payload)
        plain = traversal_payloads(cell.root, within=within, templates=_PLAIN)
        free = cell.make_runtime(hooks=[])  # a plan allows the recorded arguments only
        for other in alternative_arguments(cell.target):
            for name in names:
                for payload in plain:
                    _try(cell, {**other, name: payload}, name, payload, free)


def _try(cell: Cell, called: dict[str, Any], name: str, payload: str, runtime: Any = None) -> None:
    """One call with a payload; in a declared path argument, a success
    must not have made a path outside. An argument only named like a path
    (a language's "source"), or one a clean run joined into a path, is
    judged by the decoy and outside checks alone."""
    result = cell.execute(cell.call(called), runtime)
    if name not in cell.target.declared_path_arguments or not result.ok:
        return
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
            normal = beneath(root, normal) or "."
        if escapes(normal) or normal == ".":
            continue
        depths.append(normal.count("/"))
    return max(depths)
