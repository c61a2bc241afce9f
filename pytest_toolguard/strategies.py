"""Hypothesis strategies from the JSON Schema (2020-12) subset tool schemas use.

``from_schema(schema)`` generates values the schema accepts;
``from_schema(schema, valid=False)`` generates values it refuses.
``arguments_for(spec)`` does the same for a tool's arguments, always as
objects, so they can be handed to the executor.

Guarantee: every value a strategy yields has been checked with the real
validator (``SchemaValidator``, the one the executor uses): a valid strategy
only yields values it accepts, an invalid one only values it refuses. The
translation is a guide for where to look, never the judge, so a gap in it
shows up as filtered examples (Hypothesis' ``filter_too_much`` health check
or ``Unsatisfiable``), never as a wrongly labelled example.

Supported: ``type`` (one or a list), ``const``, ``enum``, ``minLength``,
``maxLength``, ``pattern`` (Python ``re`` syntax), ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``, ``items``,
``prefixItems``, ``minItems``, ``maxItems``, ``uniqueItems``, ``properties``,
``required``, ``additionalProperties``, ``minProperties``,
``maxProperties``, ``anyOf``, ``oneOf``, ``allOf`` and ``not`` (the last two
by filtering, best effort), local ``$ref`` to ``#/$defs/<name>`` (not
recursive), ``true``/``{}`` (any JSON value) and ``false`` (nothing), plus
annotations (``title``, ``description``, ``default``, ``examples``,
``format``, ...), which constrain nothing. Any other keyword, a recursive or
non-local ``$ref``, or a pattern Python cannot compile raises
``UnsupportedSchema`` when the strategy is built, naming the keyword and
where it is.

Not guaranteed: that every valid value can be generated (``allOf`` with
conflicting members, ``oneOf`` with overlapping branches and narrow
``multipleOf`` on floats rely on filtering), or that every way of being
invalid is tried: invalid values come from a fixed set of mutations (wrong
type, missing required field, unknown field, out-of-range number,
too-short or too-long string or array, too few or too many properties,
value outside ``enum``, repeated items, one bad nested value) plus
arbitrary JSON values.

Large bounds. Hypothesis draws a value choice by choice from a bounded
buffer and refuses ``min_size`` above it, so a string, array or object
that must be longer than ``_MAX_DRAWN`` (100) elements is a drawn head
padded to a length at or just past the bound (``minLength: 10000``,
``maxLength: 10000`` for the too-long mutation, ``minItems``,
``minProperties``, ``maxProperties``). Not generated at all (the
strategy is empty): such values longer than ``_MAX_BUILT`` (one million),
and arrays with ``uniqueItems`` longer than ``_MAX_DRAWN``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from .errors import ToolguardError
from .registry import ToolSpec
from .schema import SchemaValidator, format_path

Path = tuple[str | int, ...]

_ANNOTATIONS = frozenset(
    {
        "$comment",
        "$id",
        "$schema",
        "contentEncoding",
        "contentMediaType",
        "default",
        "deprecated",
        "description",
        "examples",
        "format",  # an annotation only: SchemaValidator runs no format checker
        "readOnly",
        "title",
        "writeOnly",
    }
)
_KEYWORDS = frozenset(
    {
        "$defs",
        "$ref",
        "additionalProperties",
        "allOf",
        "anyOf",
        "const",
        "enum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "items",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "multipleOf",
        "not",
        "oneOf",
        "pattern",
        "prefixItems",
        "properties",
        "required",
        "type",
        "uniqueItems",
    }
)
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_DEFS_PREFIX = "#/$defs/"
_MAX_EXTRA_FIELDS = 3
_MAX_EXTRA_ITEMS = 5
_MAX_DRAWN = 100
"""The most characters, items or extra fields drawn one by one. A schema
that needs more (``minLength: 10000``) gets values made of a drawn head
padded to length: Hypothesis refuses a ``min_size`` above its buffer (8 *
1024) with ``InvalidArgument``, and long before that most draws overrun it."""
_PAD_SLACK = 8
"""How far past its lower bound a padded value's length may go."""
_MAX_BUILT = 1_000_000
"""The longest string, array or object built at all; a schema that needs a
longer one gets no value of that shape (an empty strategy, never a crash)."""

_SCALARS: SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
_ANY_JSON: SearchStrategy[Any] = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    max_leaves=8,
)
"""Any JSON value: what ``true`` and ``{}`` accept."""

_OF_TYPE: dict[str, SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.integers(),
    "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()),
    "string": st.text(),
    "array": st.lists(_SCALARS, max_size=3),
    "object": st.dictionaries(st.text(max_size=8), _SCALARS, max_size=3),
}
"""One arbitrary value of each JSON type, for "wrong type" mutations."""


class UnsupportedSchema(ToolguardError, ValueError):
    """The schema uses something this translation cannot generate values for.

    ``keyword`` is the offending keyword and ``path`` where it is, such as
    ``schema.properties.items.patternProperties``. Rewrite the schema with
    the supported subset (see the module docstring) or generate the values
    for that tool by hand."""

    def __init__(self, keyword: str, path: str, reason: str) -> None:
        self.keyword = keyword
        self.path = path
        super().__init__(f"{path}: cannot generate values for {keyword!r}: {reason}")


def from_schema(schema: Mapping[str, Any] | bool, *, valid: bool = True) -> SearchStrategy[Any]:
    """Values that ``SchemaValidator(schema)`` accepts (``valid=True``) or
    refuses (``valid=False``); every one is checked with it.

    Raises ``UnsupportedSchema`` for a keyword outside the supported subset,
    ``InvalidSchema`` for a schema that is not JSON Schema 2020-12, and
    ``ValueError`` when ``valid=False`` and the schema accepts every value
    (``{}``, ``true``), so that no invalid example exists."""
    validator = SchemaValidator(_as_document(schema))
    translator = _Translator(schema)
    if valid:
        return translator.valid(schema, ()).filter(validator.is_valid)
    strategy = translator.invalid(schema, ())
    if strategy.is_empty:
        raise ValueError("the schema accepts every JSON value: there is no invalid example")
    return strategy.filter(lambda value: not validator.is_valid(value))


def arguments_for(spec: ToolSpec, valid: bool = True) -> SearchStrategy[dict[str, Any]]:
    """Argument objects for ``spec`` that ``spec.input_validator`` accepts
    (``valid=True``) or refuses (``valid=False``); every one is checked with
    it, so valid ones must pass the executor's argument check and invalid
    ones must be answered with INVALID_ARGUMENT.

    Invalid arguments are still JSON objects (what a model can send): a
    required field dropped, an unknown field added, one field of the wrong
    type or out of range, or arbitrary objects the schema refuses.
    Raises ``UnsupportedSchema`` as ``from_schema`` does."""
    schema = spec.input_schema
    is_valid = spec.input_validator.is_valid
    translator = _Translator(schema)
    if valid:
        return translator.valid(schema, ()).filter(
            lambda value: isinstance(value, dict) and is_valid(value)
        )
    candidates = [
        *translator.object_mutations(schema, ()),
        st.dictionaries(st.text(max_size=8), _ANY_JSON, max_size=3),
    ]
    return st.one_of(candidates).filter(
        lambda value: isinstance(value, dict) and not is_valid(value)
    )


def _as_document(schema: Mapping[str, Any] | bool) -> Any:
    return schema if isinstance(schema, bool) else dict(schema)


class _Translator:
    """Builds strategies for the subschemas of one root schema (the root is
    where ``#/$defs/...`` references resolve)."""

    def __init__(self, root: Mapping[str, Any] | bool) -> None:
        defs = root.get("$defs", {}) if isinstance(root, Mapping) else {}
        self._defs: Mapping[str, Any] = defs if isinstance(defs, Mapping) else {}
        self._expanding: list[str] = []

    # -- checks -------------------------------------------------------------

    def _accepts(self, schema: Any) -> Callable[[Any], bool]:
        """The real validator for a subschema, with the root's ``$defs``."""
        if isinstance(schema, bool):
            return (lambda _value: True) if schema else (lambda _value: False)
        document = dict(schema)
        if self._defs and "$defs" not in document:
            document["$defs"] = self._defs
        return SchemaValidator(document).is_valid

    def _check(self, schema: Any, path: Path) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, Mapping):
            raise UnsupportedSchema(
                "schema", _where(path), "a schema must be an object or true/false"
            )
        for keyword in sorted(schema):
            if keyword not in _KEYWORDS and keyword not in _ANNOTATIONS:
                raise UnsupportedSchema(
                    keyword, _where(path), "not in the supported JSON Schema subset"
                )
        types = _types(schema)
        for name in types:
            if name not in _TYPES:
                raise UnsupportedSchema("type", _where(path), f"unknown type {name!r}")
        if "pattern" in schema:
            try:
                re.compile(schema["pattern"])
            except (re.error, TypeError) as exc:
                raise UnsupportedSchema(
                    "pattern", _where(path), f"not a Python regular expression ({exc})"
                ) from None

    @contextmanager
    def _resolving(self, schema: Mapping[str, Any], path: Path) -> Iterator[tuple[Any, Path]]:
        ref = schema["$ref"]
        where = _where((*path, "$ref"))
        if not isinstance(ref, str) or not ref.startswith(_DEFS_PREFIX):
            raise UnsupportedSchema("$ref", where, f"only {_DEFS_PREFIX}<name> is supported")
        name = ref[len(_DEFS_PREFIX) :]
        if "/" in name or name not in self._defs:
            raise UnsupportedSchema("$ref", where, f"{ref} is not a definition of the root")
        if ref in self._expanding:
            chain = " -> ".join([*self._expanding, ref])
            raise UnsupportedSchema("$ref", where, f"recursive reference ({chain})")
        self._expanding.append(ref)
        try:
            yield self._defs[name], ("$defs", name)
        finally:
            self._expanding.pop()

    # -- valid values -------------------------------------------------------

    def valid(self, schema: Any, path: Path) -> SearchStrategy[Any]:
        """Values ``schema`` accepts, each checked with the real validator."""
        self._check(schema, path)
        if schema is True:
            return _ANY_JSON
        if schema is False:
            return st.nothing()
        return self._candidates(schema, path).filter(self._accepts(schema))

    def _candidates(self, schema: Mapping[str, Any], path: Path) -> SearchStrategy[Any]:
        """Likely-valid values; the caller filters them."""
        self._check(schema, path)
        if "$ref" in schema:
            # Sibling keywords are left to the caller's filter.
            with self._resolving(schema, path) as (target, target_path):
                return self.valid(target, target_path)
        if "allOf" in schema:
            merged = _without(schema, "allOf")
            for index, member in enumerate(schema["allOf"]):
                self._check(member, (*path, "allOf", index))
                if member is False:
                    return st.nothing()
                if isinstance(member, Mapping):
                    merged = _conjoin(merged, member)
            return self._candidates(merged, path)
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                siblings = _without(schema, combinator)
                branches = []
                for index, branch in enumerate(schema[combinator]):
                    branch_path = (*path, combinator, index)
                    self._check(branch, branch_path)
                    if branch is True:
                        branches.append(self._candidates(siblings, path))
                    elif isinstance(branch, Mapping):
                        branches.append(self._candidates(_merge(branch, siblings), branch_path))
                return st.one_of(branches)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(list(schema["enum"])) if schema["enum"] else st.nothing()
        return st.one_of([self._of_type(name, schema, path) for name in _types(schema)])

    def _of_type(self, name: str, schema: Mapping[str, Any], path: Path) -> SearchStrategy[Any]:
        if name == "null":
            return st.none()
        if name == "boolean":
            return st.booleans()
        if name == "integer":
            return _integers(schema)
        if name == "number":
            return st.one_of(_integers(schema), _floats(schema))
        if name == "string":
            return _strings(schema)
        if name == "array":
            return self._arrays(schema, path)
        return self._objects(schema, path)

    def _arrays(self, schema: Mapping[str, Any], path: Path) -> SearchStrategy[list[Any]]:
        prefix = [
            self.valid(item, (*path, "prefixItems", index))
            for index, item in enumerate(schema.get("prefixItems", []))
        ]
        rest = self.valid(schema.get("items", True), (*path, "items"))
        min_items = int(schema.get("minItems", 0))
        max_items = schema.get("maxItems")
        unique = bool(schema.get("uniqueItems", False))
        longest = len(prefix) if max_items is None else min(len(prefix), int(max_items))

        def build(count: int) -> SearchStrategy[list[Any]]:
            head = st.tuples(*prefix[:count]).map(list)
            if count < len(prefix):
                return head
            extra_min = max(0, min_items - count)
            extra_max = (
                max(extra_min, _MAX_EXTRA_ITEMS) if max_items is None else int(max_items) - count
            )
            tail = _lists(rest, extra_min, extra_max, unique=unique)
            return st.tuples(head, tail).map(lambda parts: parts[0] + parts[1])

        return _int_range(min(min_items, longest), longest).flatmap(build)

    def _objects(self, schema: Mapping[str, Any], path: Path) -> SearchStrategy[dict[str, Any]]:
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = list(dict.fromkeys(schema.get("required", [])))
        additional = schema.get("additionalProperties", True)
        extra_values = (
            None if additional is False else self.valid(additional, (*path, "additionalProperties"))
        )
        fields = {
            name: self.valid(sub, (*path, "properties", name)) for name, sub in properties.items()
        }
        must = {
            name: fields.get(name, extra_values if extra_values is not None else st.nothing())
            for name in required
        }
        may = {name: value for name, value in fields.items() if name not in must}
        known = st.fixed_dictionaries(must, optional=may)
        if extra_values is None or extra_values.is_empty:
            return known
        extra_min = max(0, int(schema.get("minProperties", 0)) - len(properties))
        extras = _extra_fields(properties, extra_values, extra_min)
        return st.tuples(extras, known).map(lambda parts: {**parts[0], **parts[1]})

    # -- invalid values -----------------------------------------------------

    def invalid(self, schema: Any, path: Path) -> SearchStrategy[Any]:
        """Values ``schema`` refuses, each checked with the real validator.
        Empty (``st.nothing()``) when the schema accepts everything."""
        self._check(schema, path)
        if schema is True:
            return st.nothing()
        if schema is False:
            return _ANY_JSON
        accepts = self._accepts(schema)
        candidates = self._mutations(schema, path)
        if not candidates and not _constrains(schema):
            return st.nothing()  # `{}` or annotations only: nothing is invalid
        candidates.append(_ANY_JSON)
        return st.one_of(candidates).filter(lambda value: not accepts(value))

    def _mutations(self, schema: Mapping[str, Any], path: Path) -> list[SearchStrategy[Any]]:
        found: list[SearchStrategy[Any]] = []
        if "$ref" in schema:
            with self._resolving(schema, path) as (target, target_path):
                found.append(self.invalid(target, target_path))
        for index, member in enumerate(schema.get("allOf", [])):
            found.append(self.invalid(member, (*path, "allOf", index)))
        if "not" in schema:
            found.append(self.valid(schema["not"], (*path, "not")))
        if "const" in schema or "enum" in schema:
            allowed = [schema["const"]] if "const" in schema else list(schema["enum"])
            found.extend(_OF_TYPE[name] for name in dict.fromkeys(map(_json_type, allowed)))
        declared = _types(schema) if "type" in schema else []
        found.extend(_OF_TYPE[name] for name in _TYPES if name not in declared and declared)
        if "integer" in declared and "number" not in declared:
            found.append(_OF_TYPE["number"])
        applies = set(declared or _TYPES)
        if applies & {"integer", "number"}:
            found.extend(_numbers_out_of_range(schema))
        if "string" in applies:
            found.extend(_strings_out_of_range(schema))
        if "array" in applies:
            found.extend(self._array_mutations(schema, path))
        if "object" in applies:
            found.extend(self.object_mutations(schema, path))
        return found

    def _array_mutations(self, schema: Mapping[str, Any], path: Path) -> list[SearchStrategy[Any]]:
        keywords = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")
        if not any(key in schema for key in keywords):
            return []
        found: list[SearchStrategy[Any]] = []
        item = self.valid(schema.get("items", True), (*path, "items"))
        if schema.get("minItems", 0) > 0:
            found.append(_lists(item, 0, int(schema["minItems"]) - 1))
        if "maxItems" in schema:
            low = int(schema["maxItems"]) + 1
            found.append(_lists(item, low, low + 2))
        base = self._candidates({**schema, "type": "array"}, path).filter(
            lambda value: isinstance(value, list) and len(value) > 0
        )
        if schema.get("uniqueItems"):
            found.append(base.map(lambda items: [*items, items[0]]))
        replacements = [
            (index, self.invalid(sub, (*path, "prefixItems", index)))
            for index, sub in enumerate(schema.get("prefixItems", []))
        ]
        if "items" in schema:
            rest = self.invalid(schema["items"], (*path, "items"))
            found.append(
                st.tuples(base, rest).map(lambda parts: [*parts[0], parts[1]]),
            )
        for index, bad in replacements:
            long_enough = base.filter(_longer_than(index))
            found.append(st.tuples(long_enough, bad).map(_replace_item(index)))
        return found

    def object_mutations(
        self, schema: Mapping[str, Any] | bool, path: Path
    ) -> list[SearchStrategy[dict[str, Any]]]:
        """Objects that break one rule of ``schema``: a required field
        dropped, an unknown field added, one field given a bad value."""
        if isinstance(schema, bool):
            return []
        self._check(schema, path)
        if "$ref" in schema:
            with self._resolving(schema, path) as (target, target_path):
                return self.object_mutations(target, target_path)
        base = self.valid(schema, path).filter(lambda value: isinstance(value, dict))
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = sorted(set(schema.get("required", [])))
        found: list[SearchStrategy[dict[str, Any]]] = []
        if required:
            found.append(
                base.flatmap(
                    lambda obj: st.sampled_from(required).map(
                        lambda name: {k: v for k, v in obj.items() if k != name}
                    )
                )
            )
        additional = schema.get("additionalProperties", True)
        if additional is not True:
            unknown = st.text(min_size=1, max_size=12).filter(lambda key: key not in properties)
            values = (
                _ANY_JSON
                if additional is False
                else self.invalid(additional, (*path, "additionalProperties"))
            )
            found.append(
                st.tuples(base, unknown, values).map(lambda p: {**p[0], p[1]: p[2]}),
            )
        for name in sorted(properties):
            bad = self.invalid(properties[name], (*path, "properties", name))
            found.append(
                st.tuples(base, bad).map(_set_field(name)),
            )
        if _is_count(schema.get("maxProperties")):
            most = int(schema["maxProperties"])
            if most < _MAX_BUILT:
                found.append(base.map(_grown_past(most, properties)))
        if _is_count(schema.get("minProperties")) and schema["minProperties"] > 0:
            fewest = int(schema["minProperties"])
            found.append(
                base.flatmap(
                    lambda obj: st.integers(0, min(len(obj), fewest - 1)).map(_first_fields(obj))
                )
            )
        return found


# -- scalars ----------------------------------------------------------------


def _integers(schema: Mapping[str, Any]) -> SearchStrategy[int]:
    low, high = _integer_bounds(schema)
    step = schema.get("multipleOf")
    if isinstance(step, int) and not isinstance(step, bool) and step > 0:
        first = None if low is None else -(-low // step)
        last = None if high is None else high // step
        return _int_range(first, last).map(lambda k: k * step)
    return _int_range(low, high)


def _integer_bounds(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    lows: list[int] = []
    highs: list[int] = []
    if _is_number(schema.get("minimum")):
        lows.append(math.ceil(schema["minimum"]))
    if _is_number(schema.get("exclusiveMinimum")):
        lows.append(math.floor(schema["exclusiveMinimum"]) + 1)
    if _is_number(schema.get("maximum")):
        highs.append(math.floor(schema["maximum"]))
    if _is_number(schema.get("exclusiveMaximum")):
        highs.append(math.ceil(schema["exclusiveMaximum"]) - 1)
    return (max(lows) if lows else None, min(highs) if highs else None)


def _floats(schema: Mapping[str, Any]) -> SearchStrategy[float]:
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
        return _multiples(schema, float(step))
    low, exclude_low = _tightest(schema, "minimum", "exclusiveMinimum", max)
    high, exclude_high = _tightest(schema, "maximum", "exclusiveMaximum", min)
    if low is not None and high is not None and low > high:
        return st.nothing()
    return st.floats(
        min_value=low,
        max_value=high,
        exclude_min=exclude_low,
        exclude_max=exclude_high,
        allow_nan=False,
        allow_infinity=False,
    )


def _multiples(schema: Mapping[str, Any], step: float) -> SearchStrategy[float]:
    # Multiples of a float step; the validator filters rounding misses.
    low, high = _integer_bounds(
        {key: value / step for key, value in schema.items() if _is_bound(key, value)}
    )
    return _int_range(low, high).map(lambda k: k * step)


def _tightest(
    schema: Mapping[str, Any],
    inclusive: str,
    exclusive: str,
    pick: Callable[[float, float], float],
) -> tuple[float | None, bool]:
    closed = schema.get(inclusive) if _is_number(schema.get(inclusive)) else None
    opened = schema.get(exclusive) if _is_number(schema.get(exclusive)) else None
    if opened is None:
        return (None if closed is None else float(closed)), False
    if closed is None or pick(closed, opened) == opened:
        return float(opened), True
    return float(closed), False


def _strings(schema: Mapping[str, Any]) -> SearchStrategy[str]:
    low = int(schema.get("minLength", 0))
    high = schema.get("maxLength")
    if "pattern" in schema:
        # JSON Schema patterns are searched for, not matched whole: "^https?://"
        # accepts any text after the scheme, and so does this strategy.
        # Lengths are left to the validator's filter.
        return st.from_regex(schema["pattern"], fullmatch=False)
    return _text(low, None if high is None else int(high))


def _numbers_out_of_range(schema: Mapping[str, Any]) -> list[SearchStrategy[Any]]:
    found: list[SearchStrategy[Any]] = []
    for key in ("minimum", "exclusiveMinimum"):
        if _is_number(schema.get(key)):
            edge = schema[key]
            found.append(st.integers(max_value=math.floor(edge)))
            found.append(st.floats(max_value=float(edge), allow_nan=False, allow_infinity=False))
    for key in ("maximum", "exclusiveMaximum"):
        if _is_number(schema.get(key)):
            edge = schema[key]
            found.append(st.integers(min_value=math.ceil(edge)))
            found.append(st.floats(min_value=float(edge), allow_nan=False, allow_infinity=False))
    step = schema.get("multipleOf")
    if isinstance(step, int) and not isinstance(step, bool) and step > 1:
        found.append(st.integers().map(lambda k: k * step + 1))
    return found


def _strings_out_of_range(schema: Mapping[str, Any]) -> list[SearchStrategy[Any]]:
    found: list[SearchStrategy[Any]] = []
    if int(schema.get("minLength", 0)) > 0:
        found.append(st.text(max_size=int(schema["minLength"]) - 1))
    if "maxLength" in schema:
        low = int(schema["maxLength"]) + 1
        found.append(_text(low, low + _PAD_SLACK))
    if "pattern" in schema:
        found.append(st.text(max_size=20))
    return found


# -- helpers ----------------------------------------------------------------


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if declared is None:
        return list(_TYPES)
    return [declared] if isinstance(declared, str) else list(declared)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object"


def _constrains(schema: Mapping[str, Any]) -> bool:
    return any(key not in _ANNOTATIONS and key != "$defs" for key in schema)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_bound(key: str, value: Any) -> bool:
    bounds = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
    return key in bounds and _is_number(value)


def _without(schema: Mapping[str, Any], keyword: str) -> dict[str, Any]:
    return {key: value for key, value in schema.items() if key != keyword}


def _merge(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """``first`` plus the keywords of ``second`` it lacks; on a clash the
    first wins and the caller's filter (the real validator) settles it."""
    return {**second, **first}


def _int_range(low: int | None, high: int | None) -> SearchStrategy[int]:
    # An empty range (a schema no integer satisfies) generates nothing.
    if low is not None and high is not None and low > high:
        return st.nothing()
    return st.integers(low, high)


def _longer_than(index: int) -> Callable[[list[Any]], bool]:
    return lambda items: len(items) > index


def _replace_item(index: int) -> Callable[[tuple[list[Any], Any]], list[Any]]:
    return lambda parts: [*parts[0][:index], parts[1], *parts[0][index + 1 :]]


def _set_field(name: str) -> Callable[[tuple[dict[str, Any], Any]], dict[str, Any]]:
    return lambda parts: {**parts[0], name: parts[1]}


def _conjoin(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Both schemas' keywords for ``allOf``: fields and required names are
    pooled, any other clash keeps the first (the real validator settles it)."""
    merged = _merge(first, second)
    if isinstance(first.get("properties"), Mapping) and isinstance(
        second.get("properties"), Mapping
    ):
        merged["properties"] = {**second["properties"], **first["properties"]}
    if "required" in first and "required" in second:
        merged["required"] = list(dict.fromkeys([*first["required"], *second["required"]]))
    return merged


def _lists(
    elements: SearchStrategy[Any], min_size: int, max_size: int, *, unique: bool = False
) -> SearchStrategy[list[Any]]:
    # Hypothesis refuses a non-empty list of an empty strategy (`items: false`).
    if elements.is_empty or max_size < min_size:
        return st.just([]) if min_size == 0 else st.nothing()
    if min_size <= _MAX_DRAWN:
        return st.lists(
            elements,
            min_size=min_size,
            max_size=max_size,
            unique_by=_canonical if unique else None,
        )
    if unique or min_size > _MAX_BUILT:
        return st.nothing()  # a long list of distinct values cannot be padded
    # A drawn head, repeated up to a length from the bounds.
    longest = min(max_size, min_size + _PAD_SLACK)
    return st.builds(
        _repeated,
        st.lists(elements, min_size=1, max_size=_MAX_EXTRA_ITEMS),
        _int_range(min_size, longest),
    )


def _repeated(head: list[Any], length: int) -> list[Any]:
    return [head[index % len(head)] for index in range(length)]


def _text(min_size: int, max_size: int | None) -> SearchStrategy[str]:
    """Strings of ``min_size`` to ``max_size`` characters (code points, as
    JSON Schema counts them). Beyond ``_MAX_DRAWN`` characters: a drawn head
    padded with one drawn character, up to ``_PAD_SLACK`` past the minimum."""
    if max_size is not None and max_size < min_size:
        return st.nothing()
    if min_size <= _MAX_DRAWN:
        return st.text(min_size=min_size, max_size=max_size)
    if min_size > _MAX_BUILT:
        return st.nothing()
    longest = min_size + _PAD_SLACK if max_size is None else min(max_size, min_size + _PAD_SLACK)
    return st.builds(
        _padded,
        st.text(max_size=_MAX_DRAWN),
        st.characters(codec="utf-8"),
        _int_range(min_size, longest),
    )


def _padded(head: str, filler: str, length: int) -> str:
    return head + filler * (length - len(head))


def _extra_fields(
    properties: Mapping[str, Any], values: SearchStrategy[Any], min_size: int
) -> SearchStrategy[dict[str, Any]]:
    """Fields not among ``properties``, at least ``min_size`` of them. Beyond
    ``_MAX_DRAWN``: numbered names (``extra-0``, ...) with drawn values repeated."""
    if min_size <= _MAX_DRAWN:
        return st.dictionaries(
            st.text(max_size=8).filter(lambda key: key not in properties),
            values,
            min_size=min_size,
            max_size=max(min_size, _MAX_EXTRA_FIELDS),
        )
    if min_size > _MAX_BUILT:
        return st.nothing()
    return st.builds(
        lambda drawn, count: dict(
            zip(_new_names(properties, count), _repeated(drawn, count), strict=True)
        ),
        st.lists(values, min_size=1, max_size=_MAX_EXTRA_ITEMS),
        _int_range(min_size, min_size + _PAD_SLACK),
    )


def _new_names(taken: Mapping[str, Any], count: int) -> list[str]:
    """``count`` field names of the form ``extra-N``, none of them in ``taken``."""
    names: list[str] = []
    index = 0
    while len(names) < count:
        name = f"extra-{index}"
        if name not in taken:
            names.append(name)
        index += 1
    return names


def _grown_past(
    most: int, properties: Mapping[str, Any]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Adds fields to an object until it has more than ``most``."""

    def grow(obj: dict[str, Any]) -> dict[str, Any]:
        missing = most + 1 - len(obj)
        if missing <= 0:
            return obj
        names = _new_names({**properties, **obj}, missing)
        return {**obj, **dict.fromkeys(names)}

    return grow


def _first_fields(obj: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    return lambda count: dict(list(obj.items())[:count])


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _where(path: Sequence[str | int]) -> str:
    return format_path("schema", path)
