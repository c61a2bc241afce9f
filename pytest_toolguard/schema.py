"""Compiled JSON Schema (2020-12) validators with precise error paths.

A validator is built once per tool, at registration: ``jsonschema.validate``
re-checks the schema on every call and costs ~50x more. Errors read
``arguments.content: field is required`` so a model can fix exactly the
field that was wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

MAX_REPORTED_ERRORS = 20
"""A call with more errors gets the first ones and a count of the rest."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class InvalidSchema(ValueError):
    """A tool was declared with a schema that is not valid JSON Schema 2020-12."""


def format_path(root: str, parts: Iterable[str | int]) -> str:
    """``arguments`` + ``["items", 0, "name"]`` -> ``arguments.items[0].name``."""
    text = root
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}"
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text


class SchemaValidator:
    """One compiled validator. ``errors(value)`` never raises for any value."""

    __slots__ = ("schema", "root", "_validator")

    def __init__(self, schema: Mapping[str, Any], *, root: str = "arguments") -> None:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise InvalidSchema(
                f"invalid JSON Schema at {format_path('schema', exc.path)}: {exc.message}"
            ) from None
        self.schema = schema
        self.root = root
        self._validator = Draft202012Validator(schema)

    def is_valid(self, value: Any) -> bool:
        try:
            return bool(self._validator.is_valid(value))
        except Exception:  # a pathological value (deep recursion) is simply invalid
            return False

    def errors(self, value: Any) -> list[str]:
        """Every error as ``<root>.<path>: <message>``, sorted by path."""
        try:
            raw = list(self._validator.iter_errors(value))
        except Exception as exc:  # RecursionError on absurdly deep values
            return [f"{self.root}: cannot be validated ({type(exc).__name__})"]
        messages: list[str] = []
        for error in sorted(raw, key=lambda e: [str(p) for p in e.absolute_path]):
            messages.extend(self._describe(error))
        unique = list(dict.fromkeys(messages))
        if len(unique) > MAX_REPORTED_ERRORS:
            rest = len(unique) - MAX_REPORTED_ERRORS
            unique = unique[:MAX_REPORTED_ERRORS] + [f"... and {rest} more errors"]
        return unique

    def _describe(self, error: ValidationError) -> list[str]:
        path = list(error.absolute_path)
        instance = error.instance
        if error.validator == "required" and isinstance(instance, dict):
            required = error.validator_value or []
            return [
                f"{format_path(self.root, [*path, name])}: field is required"
                for name in required
                if name not in instance
            ]
        if error.validator == "additionalProperties" and isinstance(instance, dict):
            schema = error.schema if isinstance(error.schema, dict) else {}
            known = set(schema.get("properties", {}))
            patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
            extras = [
                key
                for key in instance
                if key not in known and not any(p.search(key) for p in patterns)
            ]
            if extras:
                allowed = ", ".join(sorted(known)) or "none"
                return [
                    f"{format_path(self.root, [*path, key])}: unexpected field (allowed: {allowed})"
                    for key in sorted(extras)
                ]
        return [f"{format_path(self.root, path)}: {_short(error.message)}"]


def _short(message: str, limit: int = 300) -> str:
    """jsonschema quotes the whole offending value; a 2 MB string must not
    end up in an error message."""
    return message if len(message) <= limit else message[: limit - 3] + "..."
