"""Regexes of the secret rules: Go's RE2 syntax translated to Python's
``re``, every repeat bounded, and the structure of a pattern read
(alternatives, groups, gaps, widths).

Bounding is what keeps a scan linear: with no open repeat, one match
attempt looks at a bounded window of the text, whatever the rule
(``bounded_repeats``, ``compile_bounded``). It happens when a rule is
compiled, so rules from a future refresh are bounded too.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ToolguardError

# The regex parser, for the width of a pattern: ``re._parser`` on Python
# 3.11+, ``sre_parse`` before (neither has type stubs).
_sre_parse: Any


try:
    _sre_parse = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")


_FLAGS = re.ASCII


"""Go's ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII-only; so are these."""


_POSIX_CLASSES: Mapping[str, str] = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}


_INLINE_FLAGS = frozenset("is")


# Characters Python reads, or warns it will read, as set syntax inside a
# class (nested sets, set operations): written escaped there, as literals.
_CLASS_SPECIAL = frozenset("[]\\^-&|~")


_FLAG_GROUP = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")


_NAMED_GROUP = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")


class UnsupportedRegex(ToolguardError, ValueError):
    """A Go regex uses syntax ``translate_go_regex`` has no translation for."""


def translate_go_regex(pattern: str) -> str:
    """``pattern`` (Go RE2 syntax) as a Python ``re`` pattern that matches the
    same texts when compiled with ``re.ASCII``.

    Translated: flag groups in mid-pattern (``ab(?i)cd``, scoped in Go to the
    end of the enclosing group, across its ``|``) become scoped groups
    (``ab(?i:cd)``); ``\\z`` and ``$`` (the end of the text in Go) become
    ``\\Z``; POSIX classes (``[[:alnum:]]``) become ranges; ``\\x{...}``,
    ``\\Q...\\E`` and ``(?<name>...)`` get Python's spelling; ``{,n}`` (text in
    Go) is escaped; in classes, ``[``, ``&``, ``|``, ``~`` and stray ``-`` are
    escaped. Raises ``UnsupportedRegex`` for what has no translation here:
    Unicode classes (``\\p{...}``), ``\\C``, the ``m`` and ``U`` flags.
    """
    out: list[str] = []
    # Per open group, the flags opened inside it by a mid-pattern "(?i)":
    # closed with it, and reopened after each "|".
    frames: list[list[str]] = [[]]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            text, i = _translate_escape(pattern, i, in_class=False)
            out.append(text)
        elif char == "[":
            text, i = _translate_class(pattern, i)
            out.append(text)
        elif char == "(":
            i = _translate_group_start(pattern, i, out, frames)
        elif char == ")":
            if len(frames) == 1:
                raise UnsupportedRegex(f"unbalanced ')' at {i}")
            out.append(")" * len(frames.pop()) + ")")
            i += 1
        elif char == "|":
            opened = frames[-1]
            out.append(")" * len(opened) + "|" + "".join(f"(?{spec}:" for spec in opened))
            i += 1
        elif char == "{" and re.match(r"\{,\d*\}", pattern[i:]):
            out.append("\\{")
            i += 1
        elif char == "$":
            out.append("\\Z")
            i += 1
        else:
            out.append(char)
            i += 1
    if len(frames) != 1:
        raise UnsupportedRegex("unbalanced '('")
    out.append(")" * len(frames[0]))
    return "".join(out)


def _translate_group_start(pattern: str, i: int, out: list[str], frames: list[list[str]]) -> int:
    flags = _FLAG_GROUP.match(pattern, i)
    if flags:
        on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
        unknown = set(on + off) - _INLINE_FLAGS
        if unknown:
            raise UnsupportedRegex(f"flag {''.join(sorted(unknown))!r} at {i}")
        spec = on + (f"-{off}" if off else "")
        if end == ":":
            out.append(f"(?{spec}:")
            frames.append([])
        elif i == 0 and not off:
            out.append(f"(?{on})")  # leading: global in both
        else:
            out.append(f"(?{spec}:")
            frames[-1].append(spec)
        return flags.end()
    named = _NAMED_GROUP.match(pattern, i)
    if named:
        out.append(f"(?P<{named.group(1)}>")
        frames.append([])
        return named.end()
    if pattern.startswith("(?", i):
        raise UnsupportedRegex(f"group syntax at {i}")
    out.append("(")
    frames.append([])
    return i + 1


def _translate_escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    if i + 1 >= len(pattern):
        raise UnsupportedRegex("trailing backslash")
    char = pattern[i + 1]
    if char == "z" and not in_class:
        return "\\Z", i + 2
    if char == "x":
        braced = re.compile(r"\\x\{([0-9A-Fa-f]{1,6})\}").match(pattern, i)
        if braced:
            return f"\\U{int(braced.group(1), 16):08x}", braced.end()
        if re.compile(r"\\x[0-9A-Fa-f]{2}").match(pattern, i):
            return pattern[i : i + 4], i + 4
        raise UnsupportedRegex(f"\\x at {i}")
    if char == "Q":
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
        return re.escape(literal), len(pattern) if end < 0 else end + 2
    if char in "pPCZ" or (char.isdigit() and char != "0"):
        raise UnsupportedRegex(f"\\{char} at {i}")
    return "\\" + char, i + 2


def _translate_class(pattern: str, i: int) -> tuple[str, int]:
    start = i
    i += 1
    out = ["["]
    if pattern.startswith("^", i):
        out.append("^")
        i += 1
    first = True
    single = False  # the last item is one character: a "-" after it makes a range
    while True:
        if i >= len(pattern):
            raise UnsupportedRegex(f"unterminated class at {start}")
        char = pattern[i]
        if char == "]" and not first:
            out.append("]")
            return "".join(out), i + 1
        first = False
        posix = re.compile(r"\[:(\^?)([a-z]+):\]").match(pattern, i) if char == "[" else None
        if posix:
            if posix.group(1) or posix.group(2) not in _POSIX_CLASSES:
                raise UnsupportedRegex(f"class {posix.group(0)} at {i}")
            out.append(_POSIX_CLASSES[posix.group(2)])
            i, single = posix.end(), False
        elif char == "\\":
            text, i = _translate_escape(pattern, i, in_class=True)
            out.append(text)
            single = text[1] not in "dDwWsS"
        elif char == "-" and single and i + 1 < len(pattern) and pattern[i + 1] != "]":
            out.append("-")
            i, single = i + 1, False
            if pattern[i] == "\\":
                text, i = _translate_escape(pattern, i, in_class=True)
            else:
                text, i = _class_literal(pattern[i]), i + 1
            out.append(text)
        else:
            out.append(_class_literal(char))
            i, single = i + 1, True


def _class_literal(char: str) -> str:
    return "\\" + char if char in _CLASS_SPECIAL else char


SCAN_LIMIT = 1024


"""The most times one repeat of a rule's regex (or an allowlist's) runs:
``*``, ``+`` and ``{n,}`` are read as ``{0,SCAN_LIMIT}``, ``{1,SCAN_LIMIT}``
and ``{n,max(n,SCAN_LIMIT)}``. A backtracking engine tried at every place
of a text, with a repeat that can run to the end of it, costs the square
of the text's length; bounded, each try looks at a bounded window, so a
scan is linear. A secret a rule finds is therefore at most about this long
(longer ones are found in part, or by another rule, or not at all)."""


_OPEN_REPEAT = re.compile(r"\{(\d+),\}")


_CLOSED_REPEAT = re.compile(r"\{\d*(?:,\d*)?\}")


def bounded_repeats(pattern: str, limit: int = SCAN_LIMIT) -> str:
    """``pattern`` (Python ``re`` syntax) with every open repeat bounded by
    ``limit`` (see ``SCAN_LIMIT``); lazy and possessive marks are kept, and
    everything else is copied as it is."""
    out: list[str] = []
    i = 0
    quantifiable = False  # the text just copied can take a repeat
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i, quantifiable = i + 2, True
        elif char == "[":
            end = _class_end(pattern, i)
            out.append(pattern[i:end])
            i, quantifiable = end, True
        elif char in "*+" and quantifiable:
            out.append(f"{{{0 if char == '*' else 1},{limit}}}")
            i, quantifiable = i + 1, False
        elif char == "{" and quantifiable and (found := _OPEN_REPEAT.match(pattern, i)):
            low = int(found.group(1))
            out.append(f"{{{low},{max(low, limit)}}}")
            i, quantifiable = found.end(), False
        elif char == "{" and quantifiable and (found := _CLOSED_REPEAT.match(pattern, i)):
            out.append(found.group(0))
            i, quantifiable = found.end(), False
        else:
            out.append(char)
            # After "(", "|", "^" or a repeat ("?", or a lazy or possessive mark
            # after one), a "*" or "+" is no repeat of ours to bound.
            quantifiable = char not in "(|^?*+"
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Where the character class opening at ``start`` ends (after its "]")."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1  # a "]" first is a literal
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
        elif pattern[i] == "]":
            return i + 1
        else:
            i += 1
    return len(pattern)


@functools.cache
def compile_bounded(pattern: str) -> re.Pattern[str]:
    return re.compile(bounded_repeats(pattern), _FLAGS)


# A gap written as gitleaks writes "anything on this line or the next n":
# ``(?:.*?|.*?(?:[\r\n]{1,2}.*?){1,n})`` (or greedy). Tried from every place
# of its head, it costs the square of the line; such a rule is run the
# other way (see ``SecretRule.matches``).
_LINE_GAP = re.compile(r"\(\?:\.\*(\??)\|\.\*\1\(\?:\[\\r\\n\]\{1,2\}\.\*\1\)\{1,(\d+)\}\)")


@dataclass(frozen=True, slots=True)
class LineGap:
    """A rule's regex as ``head``, a gap of at most ``breaks`` line-break
    characters, then ``tail``."""

    head: str
    tail: str
    breaks: int


@functools.cache
def split_gap(pattern: str) -> LineGap | None:
    found = _LINE_GAP.search(pattern)
    if found is None:
        return None
    head, tail = pattern[: found.start()], pattern[found.end() :]
    flags = LEADING_FLAGS.match(head)
    if flags:
        tail = flags.group(0) + tail
    # Up to two per line crossed, and one the tail may start with.
    return LineGap(head, tail, 2 * int(found.group(2)) + 1)


# A leading lazy run, as most keyword rules start: ``(?i)[\w.-]{0,50}?``, or two
# of them with a flag group between. Cut off, the match starts at the keyword
# that follows (see ``SecretRule.matches``).
_LAZY_RUN = re.compile(r"(\[(?:\\.|[^\]\\])+\])\{0,(\d+)\}\?")


LEADING_FLAGS = re.compile(r"\(\?[a-z]+\)")


_SCOPED_FLAGS = re.compile(r"\(\?[a-z]+(?:-[a-z]+)?:")


@functools.cache
def split_lazy_prefix(pattern: str) -> tuple[str, str, int]:
    """``(rest, prefix, longest)``: ``pattern`` without its leading lazy runs
    of one class, that class (with the pattern's leading flags) and the most
    characters the runs take; ``(pattern, "", 0)`` when it has none."""
    flags = LEADING_FLAGS.match(pattern)
    head = flags.group(0) if flags else ""
    rest = pattern[len(head) :]
    kept, total, char_class = head, 0, ""
    while True:
        run = _LAZY_RUN.match(rest)
        if run and char_class in ("", run.group(1)):
            char_class, total, rest = run.group(1), total + int(run.group(2)), rest[run.end() :]
            continue
        group = _SCOPED_FLAGS.match(rest)
        inner = _LAZY_RUN.match(rest, group.end()) if group else None
        if group and inner and char_class in ("", inner.group(1)):
            kept += group.group(0)
            rest = rest[group.end() :]
            continue
        break
    if not total:
        return pattern, "", 0
    return kept + rest, head + char_class, total


def group_depth_at(body: str, index: int) -> int:
    """How many groups are open at ``body[index]``."""
    depth = 0
    for i, _, after in _parentheses(body):
        if i >= index:
            break
        depth = after
    return depth


def widest_match(pattern: str) -> int | None:
    """The most characters ``pattern`` (Python syntax) can match, or None
    when there is no bound."""
    widest = int(_sre_parse.parse(pattern, _FLAGS).getwidth()[1])
    return None if widest >= _sre_parse.MAXREPEAT else widest


_CONTEXT_OPS = frozenset({"AT", "ASSERT", "ASSERT_NOT"})


def reads_around(pattern: str) -> bool:
    """True when ``pattern`` (Python syntax) holds an anchor, a word boundary
    or a lookaround: what it finds in a part of a text then depends on what
    surrounds that part. A pattern without any is found in a text whenever
    it is found in a part of it."""
    return _reads_around(_sre_parse.parse(pattern, _FLAGS))


def _reads_around(items: Any) -> bool:
    for op, value in items:
        if str(op) in _CONTEXT_OPS:
            return True
        for part in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(part, _sre_parse.SubPattern) and _reads_around(part):
                return True
            if isinstance(part, list) and any(
                isinstance(branch, _sre_parse.SubPattern) and _reads_around(branch)
                for branch in part
            ):
                return True
    return False


def alternatives_of(pattern: str) -> list[str]:
    """The top-level alternatives of ``pattern``, each with its leading
    flags; a plain group around the whole pattern, or around a whole
    alternative, is opened. Whether a text holds a match of ``a|b`` is
    whether it holds one of ``a`` or of ``b``. A pattern that refers back to
    a group is kept whole (opening a group would renumber it)."""
    flags = LEADING_FLAGS.match(pattern)
    head = flags.group(0) if flags else ""
    body = pattern[len(head) :]
    if _BACK_REFERENCE.search(body):
        return [pattern]
    found: list[str] = []
    for part in top_level_split(body):
        inner = group_contents(part)
        if inner is None:
            found.append(head + part)
        else:
            found.extend(alternatives_of(head + inner))
    return found


_BACK_REFERENCE = re.compile(r"\\[1-9]|\(\?P=")


def _parentheses(pattern: str) -> Iterator[tuple[int, str, int]]:
    """Each ``(``, ``)`` and ``|`` of ``pattern`` outside escapes and
    character classes: its index, itself, and the group depth after it."""
    depth, i = 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
            continue
        if char in "()|":
            depth += {"(": 1, ")": -1, "|": 0}[char]
            yield i, char, depth
        i += 1


def top_level_split(body: str) -> list[str]:
    """``body`` cut at each ``|`` outside groups and classes."""
    parts: list[str] = []
    start = 0
    for i, char, depth in _parentheses(body):
        if char == "|" and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts


def group_contents(part: str) -> str | None:
    """What a plain group (``(?:...)`` or ``(...)``) around the whole of
    ``part`` holds, or None when ``part`` is not one such group."""
    if part.startswith("(?:"):
        opening = 3
    elif part.startswith("(") and not part.startswith("(?"):
        opening = 1
    else:
        return None
    for i, char, depth in _parentheses(part):
        if char == ")" and depth == 0:
            return part[opening:i] if i == len(part) - 1 else None
    return None
