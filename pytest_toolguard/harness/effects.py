"""What a call changed in its workspace, against what its tool declared.

A tool declares the paths it writes (``PathAccess.write`` templates over
its arguments and the runtime's variables); the executor checks those
against the session's write roots before the handler runs. What the
handler then actually changed must agree, or the declaration (and so the
check) was about other files:

- a ``Risk.READ`` tool changes nothing;
- any other tool changes only files at or beneath the paths its declared
  writes resolved to (through the workspace's own symlinks, as the write
  would land), and only inside the session's write roots.

``undeclared_changes`` says which changed files break that. It catches an
undeclared side write (a cache file, a log), and a path the handler
transforms after the check (decoding, normalising, joining): the write
lands elsewhere than the path that was checked. Pure string work but for
``resolve``, which the caller gives (inside a fake world:
``FakeWorld.resolve_inside``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..capabilities import Risk
from ..documents import parse_json
from ..registry import ToolSpec


def changed_files(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> list[str]:
    """Files created, removed or modified between two ``read_tree`` results."""
    return sorted(
        path for path in before.keys() | after.keys() if before.get(path) != after.get(path)
    )


def call_arguments(arguments: Any) -> dict[str, Any]:
    """A call's arguments as an object ({} when they are not one)."""
    if isinstance(arguments, str):
        try:
            arguments = parse_json(arguments)  # a cassette's: bounded
        except ValueError:
            return {}
    return dict(arguments) if isinstance(arguments, Mapping) else {}


def _clean(path: str) -> str:
    path = posixpath.normpath(path.replace("\\", "/"))
    return "" if path == "." else path


def declared_writes(
    spec: ToolSpec, arguments: Mapping[str, Any], variables: Mapping[str, str]
) -> list[str]:
    """The paths of the tool's ``write`` accesses for these arguments, as
    the executor fills them (variables first; one per element of a ``[*]``
    field), normalized; an access whose field is missing and has no
    default is skipped, and so is one on a value that is not a string (the
    executor refuses such a call). An absolute path stays absolute:
    ``undeclared_changes``' ``resolve`` says where it lands."""
    paths = []
    for access in spec.paths:
        if access.mode != "write":
            continue
        try:
            paths += [_clean(path) for path in access.expand(arguments, variables)]
        except (KeyError, ValueError):
            continue
    return paths


def _beneath(path: str, directory: str) -> bool:
    return directory == "" or path == directory or path.startswith(directory + "/")


def undeclared_changes(
    spec: ToolSpec,
    arguments: Any,
    variables: Mapping[str, str],
    write_roots: Sequence[str],
    changed: Sequence[str],
    resolve: Callable[[str], str | None] | None = None,
) -> list[str]:
    """For each changed file the declarations do not allow, one line: a
    READ tool's change, a file beneath no declared write path, a file
    outside every write root. ``resolve(relative)`` gives where a declared
    path leads inside the workspace (None: outside or unknown)."""
    if not changed:
        return []
    if spec.risk is Risk.READ:
        shown = ", ".join(changed[:5])
        return [f"{spec.name} is declared read-only, but the call changed {shown}"]
    declared = declared_writes(spec, call_arguments(arguments), variables)
    allowed = set(declared)
    if resolve is not None:
        for path in declared:
            landed = resolve(path)
            if landed is not None:
                allowed.add(_clean(landed))
    roots = [_clean(root) for root in write_roots]
    problems = []
    for path in changed:
        if not any(_beneath(path, place) for place in allowed):
            wanted = ", ".join(sorted(allowed)) or "no path"
            problems.append(f"{path} changed, but the call declared writes to {wanted}")
        elif not any(_beneath(path, root) for root in roots):
            problems.append(f"{path} changed outside the write roots {', '.join(roots) or '()'}")
    return problems
