"""Text the runtime says: exception texts, bounded messages, warnings."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..redaction import Redactor, placeholder
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


def secret_arguments(redactor: Redactor, arguments: Any) -> dict[str, str]:
    """The string values of ``arguments`` under a key ``redactor`` reads as
    secret (``password``, ``api_key``, ... at any depth), each with its
    placeholder: secret by their name alone, whatever their shape, where no
    pattern of ``redact_text`` may know them."""
    found: dict[str, str] = {}
    if not isinstance(arguments, Mapping):
        return found
    stack: list[tuple[str | None, Any]] = [(None, arguments)]
    while stack:
        keyword, item = stack.pop()
        if isinstance(item, str):
            if keyword is not None and item:
                found.setdefault(item, placeholder(keyword))
        elif isinstance(item, Mapping):
            for key, child in item.items():
                named = redactor.sensitive_keyword(key) if isinstance(key, str) else None
                stack.append((keyword or named, child))
        elif isinstance(item, (list, tuple)):
            stack.extend((keyword, child) for child in item)
    return found


SHORTEST_UNQUOTED = 4
"""A secret argument's value shorter than this is hidden only where a
message quotes it (replacing ``ab`` wherever it occurs would garble the
text around it)."""


def hide_secret_arguments(message: str, redactor: Redactor, arguments: Any) -> str:
    """``message`` with every value of ``secret_arguments`` replaced by its
    placeholder: as it is, and as ``repr`` and JSON quote it."""
    secrets = secret_arguments(redactor, arguments)
    for value in sorted(secrets, key=len, reverse=True):  # a longer one may hold a shorter
        hidden = secrets[value]
        quoted = {repr(value), json.dumps(value), json.dumps(value, ensure_ascii=False)}
        for form in sorted(quoted, key=len, reverse=True):
            message = message.replace(form, f'"{hidden}"')
        if len(value) >= SHORTEST_UNQUOTED:
            escaped = {form[1:-1] for form in quoted} | {value}
            for form in sorted(escaped, key=len, reverse=True):
                message = message.replace(form, hidden)
    return message


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
