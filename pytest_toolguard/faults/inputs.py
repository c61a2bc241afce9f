"""Faults in what a handler is given to read: far more of it than was
recorded (``large_input``).

Every workspace a recording makes is small, so a bug that shows only with
size never does. ``large_input`` runs the target's call once clean to see
what its handler opened (``harness.accesses``), grows exactly those files
(each a thousand times longer, up to ``MAX_GROWN_BYTES``, ending in lines
longer than ``LONG_LINE`` characters), and gives the directories they are
in more files than any limit argument asks for and a chain of
``DEEP_DIRECTORIES`` nested directories. Then the call runs again, and:

- its output still passes its output schema (no OUTPUT_INVALID);
- an integer argument named like a limit (``max_*``, ``limit``, ``top_k``,
  ``*_limit``, but not a depth, level, size or time) bounds every list of
  results in the handler's output that grew with the input (not a table's
  columns, not the lists its items hold), and one named ``*_chars`` every string of it made
  from a grown file;
- the runtime's limits hold: data within the tool's ``result_limit`` or
  flagged truncated with its full size, audit previews bounded.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..contract import ErrorCode
from ..runtime.limits import PREVIEW_LIMIT
from .cell import Cell
from .fault import AfterSuccess
from .target import Target

GROWTH = 1000
"""How many times longer each file the call read is made."""

MAX_GROWN_BYTES = 256 * 1024
"""A grown file is cut back to about this size (the runtime's read limit is
far above it, and the cell stays quick)."""

LONG_LINE = 600
"""The length of the long lines a grown file ends with."""

DEEP_DIRECTORIES = 12
"""How deep the chain of directories added beside a read file goes."""

EXTRA_FILES = 30
"""At least this many files added beside a read file (more when a limit
argument asks for more)."""

_LIMIT = re.compile(r"^(max_\w+|limit|\w+_limit|top_k|top_n|count|n_results)$")
_NOT_A_COUNT = re.compile(r"depth|level|size|bytes|seconds|timeout|wait|retries|age")


def limit_arguments(arguments: Mapping[str, Any] | None) -> dict[str, int]:
    """Integer arguments named like a bound on how much is returned."""
    return {
        name: value
        for name, value in (arguments or {}).items()
        if isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 0
        and _LIMIT.match(name)
        and not _NOT_A_COUNT.search(name)
    }


def _lists(value: Any, where: str = "") -> Iterator[tuple[str, list[Any]]]:
    """The output's collections of results, by where they are: itself when
    a list, else its fields (and their fields) holding lists; not what an
    item holds (a CSV row's cells are not rows)."""
    if isinstance(value, list):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, (list, Mapping)):
                yield from _lists(item, f"{where}.{key}")


def grown_lists(clean: Any, large: Any) -> dict[str, int]:
    """The lists of ``large`` longer than in ``clean`` (they grew with the
    input: a limit bounds those, not a table's columns), with their lengths."""
    before = {where: len(items) for where, items in _lists(clean)}
    return {
        where or "output": len(items)
        for where, items in _lists(large)
        if len(items) > before.get(where, 0)
    }


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)


def grown(content: bytes) -> bytes | None:
    """``content`` a thousand times over (cut to whole copies under
    ``MAX_GROWN_BYTES``), then long lines; None for a file that is not text."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text or "\0" in text:
        return None
    if not text.endswith("\n"):
        text += "\n"
    copies = max(2, min(GROWTH, MAX_GROWN_BYTES // len(text)))
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    long_line = (last + " ") * (LONG_LINE // max(len(last) + 1, 1) + 1)
    return (text * copies + long_line + "\n" + "x" * LONG_LINE + "\n").encode()


def _opened(cell: Cell) -> Callable[[], list[str]]:
    """What gives the paths the handler opened so far: the accesses of the
    world's oracle that opened a file (the fake world's ``AccessLog``, or
    the directory world's when one observes it); else, in the directory
    world, the paths of the handler's Python-level ``open`` events (not a
    C library's own opens, a started process's, or a name opened relative
    to a directory descriptor: ``_named`` adds the files the call names)."""
    log = cell.files.access_log
    if log is not None and hasattr(log, "accesses"):
        return lambda: [access.path for access in log.accesses if access.opens]
    operations = cell.operations
    if operations is not None:
        return lambda: list(operations.opened)
    return list


def _named(cell: Cell) -> set[str]:
    """The workspace files the call's path arguments name (relative, or
    absolute beneath the root), in the directory world; none in the fake
    world, whose oracle sees every open."""
    if not cell.directory:
        return set()
    arguments = cell.target.arguments or {}
    root = cell.root.rstrip("/")
    named = set()
    for name in cell.target.path_arguments:
        path = posixpath.normpath(posixpath.join(root, arguments[name]))
        if path.startswith(root + "/"):
            named.add(path[len(root) + 1 :])
    return named


class LargeInputFault(AfterSuccess):
    name = "large_input"
    applies_to = "successful calls with a path argument"
    injection = (
        f"the files the call read made {GROWTH} times longer (up to "
        f"{MAX_GROWN_BYTES // 1024} KB) ending in lines over {LONG_LINE} characters; their "
        f"directories given {EXTRA_FILES}+ more files and {DEEP_DIRECTORIES} nested directories"
    )
    expected = (
        "the output still passes its schema; limit-like integer arguments (max_*, limit, "
        "top_k) bound every list that grew, *_chars every string read; data within the "
        "result limit or truncated with its full size; audit previews bounded"
    )

    def applies(self, target: Target) -> bool:
        return super().applies(target) and bool(
            target.path_arguments or (target.spec and target.spec.paths)
        )

    def inject(self, cell: Cell) -> None:
        opened = _opened(cell)
        start = len(opened())
        clean = cell.clean_run()
        if not clean.result.ok:
            return
        outputs = cell.handler_outputs()
        clean_output = outputs[-1] if outputs else None
        root = cell.root.rstrip("/")
        tree = cell.tree()
        read = sorted(
            (
                {path[len(root) + 1 :] for path in opened()[start:] if path.startswith(root + "/")}
                | _named(cell)
            )
            & set(tree)
        )
        if not read:
            return
        limits = limit_arguments(cell.target.arguments)
        sources = self._grow(cell, tree, read, max(limits.values(), default=0))
        result = cell.execute(cell.call(), cell.make_runtime(hooks=[]))
        self._judge(cell, result, limits, sources, clean_output)

    @staticmethod
    def _grow(cell: Cell, tree: Mapping[str, bytes], read: list[str], limit: int) -> list[str]:
        """Grow the files read and crowd their directories; the grown texts."""
        root = cell.root.rstrip("/")
        texts: list[str] = []
        extra = max(EXTRA_FILES, limit + 5)
        for relative in read:
            data = grown(tree[relative])
            if data is None:
                continue
            cell.files.write_file(posixpath.join(root, relative), data)
            texts.append(data.decode())
        for directory in sorted({posixpath.dirname(relative) for relative in read}):
            base = posixpath.join(root, directory) if directory else root
            sample = next((tree[r] for r in read if posixpath.dirname(r) == directory), b"line\n")
            files = {
                posixpath.join(base, f"toolguard-many-{index:03d}.txt"): sample
                for index in range(extra)
            }
            deep = posixpath.join(base, *(["toolguard-deep"] * DEEP_DIRECTORIES), "leaf.txt")
            files[deep] = sample
            for path, content in files.items():
                if not cell.files.exists(path):
                    cell.files.write_file(path, content)
        return texts

    @staticmethod
    def _judge(
        cell: Cell, result: Any, limits: Mapping[str, int], sources: list[str], clean: Any
    ) -> None:
        cell.check(
            result.code is not ErrorCode.OUTPUT_INVALID,
            f"with large inputs the output breaks its schema: {result.message[:200]}",
        )
        if not result.ok:
            return
        probe_outputs = cell.handler_outputs()
        output = probe_outputs[-1] if probe_outputs else result.data
        for name, bound in limits.items():
            if name.endswith("_chars"):
                long = [
                    text
                    for text in _strings(output)
                    if len(text) > bound and any(text[:200] in source for source in sources)
                ]
                cell.check(
                    not long,
                    f"{name}={bound}, but the output holds {len(long[0]) if long else 0} "
                    "characters of a file",
                )
            else:
                over = {w: n for w, n in grown_lists(clean, output).items() if n > bound}
                cell.check(
                    not over,
                    f"{name}={bound}, but the output holds a list of "
                    + ", ".join(f"{n} items ({w})" for w, n in sorted(over.items())),
                )
        spec = cell.spec
        if spec is not None and not result.truncated:
            size = len(json.dumps(result.data, ensure_ascii=False, sort_keys=True))
            cell.check(
                size <= spec.result_limit,
                f"{size} characters of data, past the result limit {spec.result_limit}, "
                "not flagged truncated",
            )
        for row in cell.audit_rows():
            cell.check(
                len(row.result_preview or "") <= PREVIEW_LIMIT,
                f"audit preview of {len(row.result_preview or '')} characters",
            )
