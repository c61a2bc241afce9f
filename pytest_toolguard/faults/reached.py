"""Arguments off the recorded path, for the confinement faults
(``path_traversal``, ``symlink_escape``, ``symlink_race``).

Which arguments are paths: those a tool declares or names like one
(``Target.path_arguments``), and any other string argument whose value
reached a filesystem operation of a clean run (``reached_arguments``):
the value, or a path built from it, in what an operation named or
reached (``CleanRun.paths``). A ``name`` joined into ``notes/{name}.md``,
a ``prefix`` of ``out/{prefix}-1.txt``, a glob ``pattern`` whose
directory part is listed all count, whatever their names. A value that
is all glob pattern (``*.txt``: only its directory is listed, the
pattern never shows in a path) is told by one more run with the value
made a plain name (``PROBE``): a glob of a plain name looks that very
path up. At most ``MAX_PROBES`` such runs per cell.

Which arguments the faults run with: the recorded ones, and a few other
sets (``alternative_arguments``, at most ``MAX_ALTERNATIVES``), so that a
branch other arguments take (an ``open()`` of a host path only when
``start > 0``, a walk only when ``recursive``) meets the fault too: every
boolean of the schema flipped and every integer moved (to 1, or a bound)
at once, the amplified variants' arguments, then each of those changes
alone. Each set is valid against the tool's schema.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from ..schema import SchemaValidator
from .cell import Cell, CleanRun
from .target import Target

MAX_ALTERNATIVES = 2
"""Other argument sets a confinement cell tries, besides the recorded one."""

MAX_PROBES = 2
"""Runs a cell makes to tell whether an all-pattern value is a path."""

PROBE = "toolguard-probe"
"""The plain name an all-pattern value is replaced by in a probe run."""

_MAGIC = re.compile(r"[*?\[]")
_NOT_PATHS = ("enum", "const", "format")
"""Schema keywords that say a string names something else than a path."""


def candidate_arguments(target: Target) -> tuple[str, ...]:
    """The call's string arguments that are not path arguments already and
    could name one: short, one line, not an ``enum``, ``const`` or
    ``format`` of the schema."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None:
        return ()
    known = set(target.path_arguments)
    properties = _properties(spec.input_schema)
    found = []
    for name, value in arguments.items():
        if name in known or not isinstance(value, str) or not value.strip():
            continue
        if len(value) > 255 or any(character in value for character in "\n\r\x00"):
            continue
        schema = properties.get(name)
        if isinstance(schema, Mapping) and any(key in schema for key in _NOT_PATHS):
            continue
        found.append(name)
    return tuple(found)


def could_reach(target: Target) -> bool:
    """Whether a clean run could show an argument to be a path that the
    declarations and names do not (the faults' ``applies``, which runs
    nothing): a candidate argument holds a glob pattern or a ``/``, or
    names from the start of a component what the recorded workspace holds
    (``T1`` of ``notes/T1.md``). The clean run decides; this keeps calls
    whose strings name nothing there (a contact's name, a message) out of
    the matrix."""
    if not target.handler_can_run:
        return False
    arguments = target.arguments or {}
    workspace = target.cassette.workspace
    held = [*workspace.files, *workspace.directories, *workspace.symlinks]
    for name in candidate_arguments(target):
        value = arguments[name]
        if _MAGIC.search(value) or "/" in value.strip("/"):
            return True
        fixed = _fixed_part(value)
        if fixed and any(("/" + fixed) in ("/" + path) for path in held):
            return True
    return False


def reached_arguments(cell: Cell, clean: CleanRun) -> dict[str, tuple[str, ...]]:
    """The candidate arguments (``candidate_arguments``) whose value
    reached a filesystem operation of ``clean``, each with the paths
    (absolute, as the world spells them) it reached. An all-pattern value
    is told by a probe run (see the module docstring): its paths are not
    kept, they name nothing that is there."""
    arguments = cell.target.arguments or {}
    paths = _absolute_paths(cell, clean)
    found: dict[str, tuple[str, ...]] = {}
    probed = 0
    for name in candidate_arguments(cell.target):
        value = arguments[name]
        fixed = _fixed_part(value)
        if fixed:
            reached = tuple(path for path in paths if _holds(path, fixed, cell.root))
            if reached:
                found[name] = reached
            continue
        if probed >= MAX_PROBES:
            continue
        probed += 1
        marker = f"{PROBE}-{probed}"
        probe = cell.clean_run({**arguments, name: marker})
        if any(_holds(path, marker, cell.root) for path in _absolute_paths(cell, probe)):
            found[name] = ()
    return found


def reached_link_points(cell: Cell, reached: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The first components beneath the root of the paths the arguments
    reached: where ``symlink_escape`` and ``symlink_race`` put a link."""
    root = posixpath.normpath(cell.root).rstrip("/") + "/"
    points: list[str] = []
    for paths in reached.values():
        for path in paths:
            if path.startswith(root) and len(path) > len(root):
                first = path[len(root) :].split("/")[0]
                if first not in points and not first.endswith(".toolguard-aside"):
                    points.append(first)
    return tuple(points)


def alternative_arguments(target: Target, limit: int = MAX_ALTERNATIVES) -> list[dict[str, Any]]:
    """Other argument sets for the call (see the module docstring), valid
    against the tool's schema, none equal to the recorded one, at most
    ``limit``."""
    spec, arguments = target.spec, target.arguments
    if spec is None or arguments is None or limit <= 0:
        return []
    changes: dict[str, Any] = {}
    for name, schema in _properties(spec.input_schema).items():
        if not isinstance(schema, Mapping):
            continue
        kind = schema.get("type")
        current = arguments.get(name, schema.get("default"))
        if kind == "boolean":
            changes[name] = not bool(current)
        elif kind == "integer":
            moved = _moved(schema, current)
            if moved is not None:
                changes[name] = moved
    sets: list[dict[str, Any]] = []
    if changes:
        sets.append({**arguments, **changes})
    for variant in target.interaction.variants:
        if not variant.refused and isinstance(variant.arguments, Mapping):
            sets.append(dict(variant.arguments))
    if len(changes) > 1:
        sets += [{**arguments, name: value} for name, value in changes.items()]
    validator = SchemaValidator(spec.input_schema)
    seen = {_key(arguments)}
    chosen = []
    for candidate in sets:
        key = _key(candidate)
        if key in seen or not validator.is_valid(candidate):
            continue
        seen.add(key)
        chosen.append(candidate)
        if len(chosen) == limit:
            break
    return chosen


def beneath(root: str, path: str) -> str | None:
    """``path`` (absolute, normalised) relative to ``root`` when it lies
    beneath it; None for the root itself or anything else."""
    top = root.rstrip("/") + "/"
    return path[len(top) :] if path.startswith(top) and len(path) > len(top) else None


def _properties(schema: Any) -> Mapping[str, Any]:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _moved(schema: Mapping[str, Any], current: Any) -> int | None:
    """Another integer the schema accepts: 1 (non-zero), else a bound."""
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int):
        low = schema["exclusiveMinimum"] + 1
    if isinstance(schema.get("exclusiveMaximum"), int):
        high = schema["exclusiveMaximum"] - 1
    for value in (1, high, low, current + 1 if isinstance(current, int) else None):
        if not isinstance(value, int) or isinstance(value, bool) or value == current:
            continue
        if (low is None or value >= low) and (high is None or value <= high):
            return value
    return None


def _key(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, default=str)


def _fixed_part(value: str) -> str:
    """The part of ``value`` before its first glob character, without a
    leading ``./`` or trailing separators: what a path built from it holds."""
    fixed = _MAGIC.split(value, 1)[0].replace("\\", "/")
    while fixed.startswith("./"):
        fixed = fixed[2:]
    return fixed.strip("/")


def _absolute_paths(cell: Cell, clean: CleanRun) -> list[str]:
    """Every path the run's operations named or reached, normalised and
    made absolute against the root."""
    paths: dict[str, None] = {}
    for named in clean.paths:
        for path in named:
            if not path:
                continue
            if not path.startswith("/"):
                path = posixpath.join(cell.root, path)
            paths[posixpath.normpath(path)] = None
    return list(paths)


def _holds(path: str, fixed: str, root: str) -> bool:
    """Whether ``path``, beneath ``root``, holds ``fixed`` from the start
    of one of its components (``notes/T1.md`` holds ``T1`` and ``notes/T``)."""
    top = posixpath.normpath(root).rstrip("/") + "/"
    if not path.startswith(top):
        return False
    return ("/" + fixed) in ("/" + path[len(top) :])
