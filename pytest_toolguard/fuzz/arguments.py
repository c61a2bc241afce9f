"""The arguments a fuzzed tool gets: Hypothesis strategies from its schema
(``strategies``), kept to what the runtime parses, with the path probes
(``world.PATH_PROBES``) mixed into path-like arguments and run first as
explicit examples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from ..jsondata import MAX_JSON_DEPTH, MAX_JSON_INTEGER
from ..path_templates import path_arguments
from ..redaction import Redactor
from ..registry import ToolSpec
from ..schema import SchemaValidator
from .call import is_json
from .workspace import EXISTING_FILE, PATH_PROBES, SECRET_VALUE

_NAMES = Redactor()
"""Reads argument names as the redactor reads keys."""

HEALTH_CHECKS = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
]
"""Health checks that fuzzing by design trips (large, filtered examples)."""


_CONSTRAINING = frozenset(
    {
        "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains",
        "dependentRequired", "dependentSchemas", "enum", "exclusiveMaximum",
        "exclusiveMinimum", "if", "items", "maxContains", "maxItems", "maxLength",
        "maxProperties", "maximum", "minContains", "minItems", "minLength",
        "minProperties", "minimum", "multipleOf", "not", "oneOf", "pattern",
        "patternProperties", "prefixItems", "properties", "propertyNames", "required",
        "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems",
    }
)  # fmt: skip
"""JSON Schema 2020-12 keywords that can refuse a value (the rest annotate)."""


def accepts_every_object(schema: Any) -> bool:
    """Whether ``schema`` plainly accepts every JSON object: only ``type``
    allowing objects, and properties and additionalProperties that accept
    anything. False when unsure."""
    if schema is True:
        return True
    if not isinstance(schema, Mapping):
        return False
    for keyword in _CONSTRAINING.intersection(schema):
        value = schema[keyword]
        if keyword == "type":
            if value != "object" and not (isinstance(value, list) and "object" in value):
                return False
        elif keyword == "properties":
            if not isinstance(value, Mapping) or not all(map(_accepts_anything, value.values())):
                return False
        elif keyword == "additionalProperties":
            if not _accepts_anything(value):
                return False
        else:
            return False
    return True


def _accepts_anything(schema: Any) -> bool:
    return schema is True or (isinstance(schema, Mapping) and not _CONSTRAINING & set(schema))


def _within_runtime_limits(value: Any, depth: int = 0) -> bool:
    """Whether the runtime parses ``value`` at all: JSON text, integers and
    nesting within its limits (beyond them it answers INVALID_REQUEST before
    any schema is asked, which is not what is fuzzed here)."""
    if depth > MAX_JSON_DEPTH:
        return False
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return True
    if isinstance(value, int):
        return -MAX_JSON_INTEGER <= value <= MAX_JSON_INTEGER
    if isinstance(value, dict):
        return all(_within_runtime_limits(child, depth + 1) for child in value.values())
    if isinstance(value, list):
        return all(_within_runtime_limits(child, depth + 1) for child in value)
    return False


def runnable(strategy: SearchStrategy[dict[str, Any]]) -> SearchStrategy[dict[str, Any]]:
    return strategy.filter(lambda value: _within_runtime_limits(value) and is_json(value))


def path_probes(judge: ToolSpec) -> dict[str, list[str]]:
    """For each top-level argument that holds a path, the probes its schema
    accepts: the fields of the tool's ``paths`` templates, and those named
    like a path whose schema does not say they are something else, unless
    the tool declared that none is (``path_templates.path_arguments``)."""
    schema = judge.input_schema
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return {}
    holding = set(path_arguments(schema, judge.path_fields, judge.guesses_path_arguments))
    defs = schema.get("$defs")
    found: dict[str, list[str]] = {}
    for name in sorted(properties):
        subschema = properties[name]
        if name not in holding or subschema is False:
            continue
        if subschema is True:
            accepted = list(PATH_PROBES)
        elif isinstance(subschema, Mapping):
            document = dict(subschema)
            if defs is not None and "$defs" not in document:
                document["$defs"] = defs
            validator = SchemaValidator(document)
            accepted = [probe for probe in PATH_PROBES if validator.is_valid(probe)]
        else:
            continue
        if accepted:
            found[name] = accepted
    return found


def with_probes(
    strategy: SearchStrategy[dict[str, Any]],
    probes: Mapping[str, list[str]],
    validator: SchemaValidator,
) -> SearchStrategy[dict[str, Any]]:
    """``strategy``, and as often its values with one path argument set to a probe."""
    if not probes:
        return strategy
    choice = st.one_of(
        [st.tuples(st.just(name), st.sampled_from(values)) for name, values in probes.items()]
    )
    probed = (
        st.tuples(strategy, choice)
        .map(lambda parts: {**parts[0], parts[1][0]: parts[1][1]})
        .filter(validator.is_valid)
    )
    return st.one_of(strategy, probed)


def explicit_examples(
    strategy: SearchStrategy[dict[str, Any]],
    probes: Mapping[str, list[str]],
    validator: SchemaValidator,
) -> tuple[dict[str, Any], ...]:
    """The simplest valid arguments with each path argument set to each
    probe, the other path arguments set to a file that exists
    (``EXISTING_FILE``, where their schemas accept it: so the handler gets
    as far as the probed one), and arguments named like a secret to
    ``SECRET_VALUE``; then those arguments as they are with the secret
    arguments so set."""
    secret_names = _secret_names(validator)
    if not probes and not secret_names:
        return ()
    try:
        base: dict[str, Any] = find(
            strategy,
            lambda _value: True,
            # Hypothesis tries the simplest choices first: no shrinking needed.
            settings=settings(
                database=None,
                derandomize=True,
                max_examples=1,
                phases=(Phase.generate,),
                suppress_health_check=HEALTH_CHECKS,
            ),
        )
    except (NoSuchExample, Unsatisfiable):
        return ()
    base = _with_secrets(base, secret_names, validator)
    filled = dict(base)
    for name in probes:
        if validator.is_valid({**filled, name: EXISTING_FILE}):
            filled[name] = EXISTING_FILE
    found: list[dict[str, Any]] = [base] if secret_names else []
    for name, values in probes.items():
        for probe in values:
            for start in (filled, base):
                arguments = {**start, name: probe}
                if arguments not in found and validator.is_valid(arguments):
                    found.append(arguments)
    return tuple(found)


def _secret_names(validator: SchemaValidator) -> list[str]:
    """Top-level properties of the schema named like a secret."""
    schema = validator.schema
    properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
    if not isinstance(properties, Mapping):
        return []
    return [name for name in properties if _NAMES.sensitive_keyword(name) is not None]


def _with_secrets(
    arguments: dict[str, Any], names: list[str], validator: SchemaValidator
) -> dict[str, Any]:
    """``arguments`` with each secret-named argument set to ``SECRET_VALUE``
    where the schema accepts it."""
    for name in names:
        candidate = {**arguments, name: SECRET_VALUE}
        if validator.is_valid(candidate):
            arguments = candidate
    return arguments
