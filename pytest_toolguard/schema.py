"""Compiled JSON Schema (2020-12) validators with precise error paths.

A validator is built once per tool, at registration: ``jsonschema.validate``
re-checks the schema on every call and costs ~50x more. Errors read
``arguments.content: field is required`` so a model can fix exactly the
field that was wrong.

When the optional ``jsonschema-rs`` is installed (``pip install
pytest-toolguard[fast]``), it answers "valid?" first (~0.3 us instead of
~17 us) and ``jsonschema`` only explains invalid values, so messages are the
same either way. It is not used for schemas with ``pattern``,
``patternProperties`` or ``format``, where a Rust regex or format checker
could disagree with Python's; a value it cannot take (a non-string key, a
huge integer) falls back to ``jsonschema``, and so does a value nested
deeper than ``FAST_PATH_MAX_DEPTH`` (jsonschema-rs recurses on the native
stack: a 100,000-deep list crashes the process instead of raising).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from .errors import ToolguardError

_rs: Any
try:
    import jsonschema_rs as _rs
except ImportError:  # the optional fast path
    _rs = None

FAST_PATH_MAX_DEPTH = 64

MAX_REPORTED_ERRORS = 20
"""A call with more errors gets the first ones and a count of the rest."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class InvalidSchema(ToolguardError, ValueError):
    """A tool was declared with a schema that is not valid JSON Schema 2020-12."""


def format_path(
    root: str, parts: Iterable[str | int], show: Callable[[str], str] | None = None
) -> str:
    """``arguments`` + ``["items", 0, "name"]`` -> ``arguments.items[0].name``.
    ``show`` rewrites each key first (a redactor's ``redact_text``)."""
    text = root
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        if show is not None:
            part = show(part)
        if _IDENTIFIER.match(part):
            text += f".{part}"
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text


class SchemaValidator:
    """One compiled validator. ``errors(value)`` never raises for any value."""

    __slots__ = ("schema", "root", "_validator", "_fast", "_depth_bounded")

    def __init__(
        self,
        schema: Mapping[str, Any],
        *,
        root: str = "arguments",
        fast: bool = True,
        regexes_agree: bool = False,
        depth_bounded: bool = False,
        checked: bool = False,
    ) -> None:
        """``regexes_agree``: the schema's ``pattern``s are known to mean the
        same to Rust's regex and Python's ``re`` (or Rust's to be stricter,
        so that jsonschema decides), so jsonschema-rs may answer for it.
        ``depth_bounded``: the schema has no recursive ``$ref`` and no keyword
        that compares whole values (``uniqueItems``, ``const``, an ``enum`` of
        containers), so jsonschema-rs never descends deeper than the schema
        itself, however deep a value is: the depth walk before it (a pass
        over every node, a tenth of a second on a 6 MB document) is skipped.
        ``checked``: the schema is one this package ships, held to the
        metaschema by its tests, so it is not checked again in every process
        (a tenth of a second of each pytest start that loads a cassette)."""
        key = _canonical(schema)
        if key is None:
            validator, quick = _compile(schema, fast, regexes_agree, checked)
        else:
            validator, quick = _compile_once(key, fast, regexes_agree, checked)
        self.schema = schema
        self.root = root
        self._validator = validator
        self._fast = quick
        self._depth_bounded = depth_bounded

    @property
    def accelerated(self) -> bool:
        """Whether ``jsonschema-rs`` answers "valid?" for this schema."""
        return self._fast is not None

    def is_valid(self, value: Any) -> bool:
        if self._fast is not None and (self._depth_bounded or _shallow(value)):
            try:
                return bool(self._fast.is_valid(value))
            except Exception:
                pass  # a value it cannot take: ask jsonschema
        try:
            return bool(self._validator.is_valid(value))
        except Exception:  # a pathological value (deep recursion) is simply invalid
            return False

    def errors(self, value: Any, *, show_key: Callable[[str], str] | None = None) -> list[str]:
        """Every error as ``<root>.<path>: <message>``, sorted by path.

        Messages never hold the offending value (keywords without a message
        of ours get a generic one); keys are the caller's, so
        ``show_key`` may redact them (a misspelt field can be a token)."""
        if self._fast is not None and (self._depth_bounded or _shallow(value)):
            try:
                if self._fast.is_valid(value):
                    return []
            except Exception:
                pass  # a value it cannot take: jsonschema decides
        try:
            raw = list(self._validator.iter_errors(value))
        except Exception as exc:  # RecursionError on absurdly deep values
            return [f"{self.root}: cannot be validated ({type(exc).__name__})"]
        messages: list[str] = []
        for error in sorted(raw, key=lambda e: [str(p) for p in e.absolute_path]):
            messages.extend(self._describe(error, show_key))
        unique = list(dict.fromkeys(messages))
        if len(unique) > MAX_REPORTED_ERRORS:
            rest = len(unique) - MAX_REPORTED_ERRORS
            unique = unique[:MAX_REPORTED_ERRORS] + [f"... and {rest} more errors"]
        return unique

    def _describe(self, error: ValidationError, show: Callable[[str], str] | None) -> list[str]:
        path = list(error.absolute_path)
        instance = error.instance
        if error.validator == "required" and isinstance(instance, dict):
            required = error.validator_value or []
            return [
                f"{format_path(self.root, [*path, name], show)}: field is required"
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
                    f"{format_path(self.root, [*path, key], show)}: "
                    f"unexpected field (allowed: {allowed})"
                    for key in sorted(extras)
                ]
        return [f"{format_path(self.root, path, show)}: {_without_value(error)}"]


_REGEX_KEYWORDS = ("pattern", "patternProperties", "format")


def _shallow(value: Any) -> bool:
    """True when ``value`` nests at most ``FAST_PATH_MAX_DEPTH`` containers deep."""
    # Level by level: each level's children gathered by ``extend``, in C,
    # rather than a (child, depth) pair pushed per child.
    level = [value]
    depth = 0
    while level:
        inner: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                children: Iterable[Any] = item.values()
            elif isinstance(item, (list, tuple)):
                children = item
            else:
                continue
            if depth >= FAST_PATH_MAX_DEPTH:
                return False
            inner.extend(children)
        level = inner
        depth += 1
    return True


def _compile(
    schema: Mapping[str, Any], fast: bool, regexes_agree: bool, checked: bool = False
) -> tuple[Any, Any]:
    """The checked schema's validator, and jsonschema-rs's when it may answer."""
    if not checked:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise InvalidSchema(
                f"invalid JSON Schema at {format_path('schema', exc.path)}: {exc.message}"
            ) from None
    return Draft202012Validator(schema), _fast_validator(schema, regexes_agree) if fast else None


@functools.lru_cache(maxsize=1024)
def _compile_once(key: str, fast: bool, regexes_agree: bool, checked: bool) -> tuple[Any, Any]:
    """``_compile`` for a schema spelt as canonical JSON: the harness copies
    tools (each fault cell, each fuzzed tool) and checking a schema against
    the metaschema costs milliseconds, the same every time. An invalid
    schema raises and is never cached."""
    return _compile(json.loads(key), fast, regexes_agree, checked)


def _canonical(schema: Mapping[str, Any]) -> str | None:
    """``schema`` as sorted JSON, when reading that back gives an equal
    schema (plain JSON data: no tuples, no non-string keys); else None."""
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return key if json.loads(key) == schema else None
    except (TypeError, ValueError, RecursionError):
        return None


def _fast_validator(schema: Mapping[str, Any], regexes_agree: bool = False) -> Any:
    if _rs is None or (not regexes_agree and _mentions(schema, _REGEX_KEYWORDS)):
        return None
    try:
        return _rs.Draft202012Validator(dict(schema))
    except Exception:  # a schema it does not support: jsonschema alone
        return None


def _mentions(schema: Any, keywords: tuple[str, ...]) -> bool:
    if isinstance(schema, Mapping):
        return any(k in schema for k in keywords) or any(
            _mentions(v, keywords) for v in schema.values()
        )
    if isinstance(schema, list):
        return any(_mentions(item, keywords) for item in schema)
    return False


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def json_type(value: Any) -> str:
    """The JSON Schema type name of a Python value."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _without_value(error: ValidationError) -> str:
    """The error without the offending value: the model knows what it sent,
    and the value may be a 2 MB string or a secret under a harmless name."""
    expected = error.validator_value
    kind = error.validator
    if kind == "type":
        names = expected if isinstance(expected, list) else [expected]
        return f"expected {' or '.join(map(str, names))}, got {json_type(error.instance)}"
    if kind == "enum":
        return _short(f"must be one of {json.dumps(expected, ensure_ascii=False)}")
    if kind == "const":
        return _short(f"must be {json.dumps(expected, ensure_ascii=False)}")
    if kind == "pattern":
        return _short(f"must match the pattern {expected}")
    if kind in ("minLength", "maxLength") and isinstance(error.instance, str):
        bound = "at least" if kind == "minLength" else "at most"
        return f"must be {bound} {expected} characters long (got {len(error.instance)})"
    if kind == "oneOf" and not error.context:  # no branch failed: several matched
        return "must match exactly one of the allowed forms, matches several"
    if kind in ("anyOf", "oneOf"):
        return "does not match any of the allowed forms"
    if kind is None:  # a `false` subschema
        return "is not allowed by the schema"
    rule = _RULES.get(str(kind))
    if rule is not None:
        return _short(rule.format(expected=expected))
    # Other keywords (and a `false` subschema): jsonschema's own text may
    # quote the value anywhere, or an unexpected key, so it is never shown.
    return _short(f"does not satisfy the schema's {kind!r} rule")


_RULES = {
    "minimum": "must be >= {expected}",
    "maximum": "must be <= {expected}",
    "exclusiveMinimum": "must be > {expected}",
    "exclusiveMaximum": "must be < {expected}",
    "multipleOf": "must be a multiple of {expected}",
    "minItems": "must have at least {expected} items",
    "maxItems": "must have at most {expected} items",
    "uniqueItems": "must not repeat items",
    "minProperties": "must have at least {expected} fields",
    "maxProperties": "must have at most {expected} fields",
    "not": "matches a form that is not allowed",
    "format": "is not a valid {expected}",
}


def _short(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
