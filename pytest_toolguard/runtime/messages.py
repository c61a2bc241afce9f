"""Text the runtime says: exception texts, bounded messages, warnings."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable

from ..sandbox import SandboxError
from .limits import MESSAGE_LIMIT


def text(exc: BaseException) -> str:
    """``str(exc)``, or its type's name when that raises."""
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__


def describe(exc: BaseException, redact: Callable[[str], str]) -> str:
    """``exc``'s text with the values it quotes (a sandbox path, an OS
    error's file names) redacted before they were quoted: ``repr`` escapes a
    tab to ``\\t``, after which a Bearer pattern no longer matches."""
    if isinstance(exc, SandboxError):
        return exc.describe(redact)
    said = text(exc)
    if isinstance(exc, OSError):
        for name in (exc.filename, exc.filename2):
            if isinstance(name, str) and repr(name) in said:
                said = said.replace(repr(name), repr(redact(name)))
    return said


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text, at most 300 characters."""
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def json_type(value: object) -> str:
    """What JSON calls ``value``'s type (``an array``, ``a number``, ...)."""
    names = {
        list: "an array",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


def bounded(message: str) -> str:
    """``message`` cut to ``MESSAGE_LIMIT`` characters."""
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."


def warn(message: str) -> None:
    """A RuntimeWarning that never raises: under ``-W error`` a warning is
    an exception, and these are said on paths that must not raise."""
    with contextlib.suppress(Exception):
        warnings.warn(message, RuntimeWarning, stacklevel=3)
