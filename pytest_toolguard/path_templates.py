"""Path templates: which strings of a call's arguments a ``PathAccess`` names.

A template is text with ``{field}``s (``str.format``'s braces, ``{{`` for
a literal one). A field is an argument's (or a runtime variable's) name,
then steps: ``.key`` takes a key of an object, ``[*]`` each element of an
array. So ``{path}``, ``{options.target}``, ``{paths[*]}`` and
``{files[*].file_path}``. A field must reach a string: anything else is
refused (``PathValueError``), never turned into text, because the text of
a list or a number says nothing about where a handler goes. At most one
field of a template may use ``[*]``; indexes (``[0]``), conversions
(``!r``) and format specs (``:.3``, which could cut a path) are refused
when the template is declared.

Which arguments hold a path when a tool does not say (the harness's name
heuristic, ``looks_like_path`` and ``path_arguments``): those named like a
path by their head word, unless their schema or value says they are a time
zone, a hash, a URL, ...
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ToolguardError

PATH_ARGUMENT = re.compile(
    r"(?:^|_)(?:path|paths|file|files|filename|filepath|dir|dirs|directory|folder"
    r"|dest|destination|target|source|src|dst)(?:$|_)",
    re.IGNORECASE,
)
"""Argument names that may hold a path (``path``, ``src_dir``,
``target_file``, ...): the first, loose sieve. ``looks_like_path`` is the
judgement the harness uses: this, then the name's head word and the
argument's schema and values."""


class PathValueError(ToolguardError, ValueError):
    """A path template's field reached a value that is not a string (a
    list, an object, a number, a boolean, null), or a ``[*]`` / ``.key`` step
    met a value of the wrong kind. Such a value is never turned into a path:
    its text (``"['../x']"``) says nothing about where a handler goes.

    ``selector`` is the field as the template spells it, ``where`` the place
    in the arguments that broke it (``files[2].file_path``), ``found`` the
    JSON type found there. The message names no value."""

    def __init__(self, selector: str, where: str, found: str, wanted: str) -> None:
        self.selector, self.where, self.found = selector, where, found
        super().__init__(
            f"path template field {{{selector}}}: {where} is {found}, not {wanted}; "
            "a path template names strings only (each element of an array with "
            "[*], a field of an object with .name)"
        )


class PathKeyMisread(PathValueError):
    """A template field whose key is absent from an object that holds a key
    with ``.``, ``[`` or ``]``: the field may have been meant for that key
    (``{file.path}`` reads ``{"file.path": ...}`` as ``file``, then
    ``path``), so the access is refused, never taken for an absent
    optional field. The message names no key and no value."""

    def __init__(self, selector: str, where: str) -> None:
        ValueError.__init__(
            self,
            f"path template field {{{selector}}}: {where} is absent while its object "
            "holds a key with '.', '[' or ']', which a template cannot name: refused, "
            "not taken for an absent optional field",
        )
        self.selector, self.where, self.found = selector, where, "absent"


WILDCARD = "[*]"
"""The template step that takes each element of an array: ``{paths[*]}``,
``{files[*].file_path}``."""

MAX_TEMPLATE_DEPTH = 8
"""Steps a template field may take (``.key`` and ``[*]`` together)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One ``{...}`` field of a template: its text, its argument (or
    variable) name, then its steps: a key, or None for ``[*]``."""

    text: str
    name: str
    steps: tuple[str | None, ...]

    @property
    def many(self) -> bool:
        return None in self.steps


_SELECTOR = re.compile(r"([^.\[\]]+)((?:\.[^.\[\]]+|\[\*\])*)")
_STEP = re.compile(r"\.([^.\[\]]+)|\[\*\]")


def _parse_selector(text: str, template: str) -> Field:
    match = _SELECTOR.fullmatch(text)
    if match is None:
        raise ValueError(
            f"path template {template!r}: field {{{text}}} is not NAME followed by "
            "'.key' or '[*]' steps (an index such as [0] is not supported: use [*])"
        )
    steps = tuple(step.group(1) for step in _STEP.finditer(match.group(2)))
    if len(steps) > MAX_TEMPLATE_DEPTH:
        raise ValueError(
            f"path template {template!r}: field {{{text}}} takes more than "
            f"{MAX_TEMPLATE_DEPTH} steps"
        )
    return Field(text, match.group(1), steps)


@functools.lru_cache(maxsize=1024)
def parse_template(template: str) -> tuple[tuple[str, Field | None], ...]:
    """The template as (literal text, field or None) pairs. Raises
    ValueError for anything but plain ``{field}``s: no conversion (``!r``),
    no format spec (``:>10``, which could cut or pad a path), no positional
    ``{}``, at most one field with ``[*]``."""
    if not isinstance(template, str):
        raise TypeError(f"a path template is a str, not {type(template).__name__}")
    parts: list[tuple[str, Field | None]] = []
    for literal, text, spec, conversion in string.Formatter().parse(template):
        if text is None:
            parts.append((literal, None))
            continue
        if not text:
            raise ValueError(f"path template {template!r}: a field must name an argument")
        if spec or conversion:
            raise ValueError(
                f"path template {template!r}: field {{{text}}} may not have a "
                "conversion (!r) or a format spec (:...)"
            )
        parts.append((literal, _parse_selector(text, template)))
    if sum(1 for _, selector in parts if selector is not None and selector.many) > 1:
        raise ValueError(
            f"path template {template!r}: at most one field may use [*] "
            "(declare one PathAccess per array)"
        )
    return tuple(parts)


_ABSENT = object()


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def _select(selector: Field, root: object) -> list[Any]:
    """Every value ``selector``'s steps reach from ``root`` (the argument
    or variable): one without ``[*]``, one per element with it. A key an
    object lacks reaches ``_ABSENT`` (an optional field). Raises
    PathValueError for a non-string value or a step on the wrong kind."""
    reached: list[tuple[str, object]] = [(selector.name, root)]
    for step in selector.steps:
        following: list[tuple[str, object]] = []
        for where, value in reached:
            if value is _ABSENT:
                following.append((where, value))
            elif step is None:
                if not isinstance(value, (list, tuple)):
                    raise PathValueError(selector.text, where, _json_type(value), "an array")
                following += [(f"{where}[{i}]", item) for i, item in enumerate(value)]
            elif isinstance(value, Mapping):
                found = value.get(step, _ABSENT)
                if found is _ABSENT and _holds_unreadable(value):
                    raise PathKeyMisread(selector.text, f"{where}.{step}")
                following.append((f"{where}.{step}", found))
            else:
                raise PathValueError(selector.text, where, _json_type(value), "an object")
        reached = following
    for where, value in reached:
        if value is not _ABSENT and not isinstance(value, str):
            raise PathValueError(selector.text, where, _json_type(value), "a string")
    return [value for _, value in reached]


def _holds_unreadable(value: Mapping[Any, Any]) -> bool:
    """Whether an object holds a key with ``.``, ``[`` or ``]``: a field
    that finds its own key absent there may have been meant for it (the
    template ``{file.path}`` reads ``{"file.path": ...}`` as ``file``, then
    ``path``), so it is refused, never taken for an absent optional one."""
    return any(isinstance(key, str) and _UNREADABLE.intersection(key) for key in value)


def expand_template(
    template: str,
    arguments: Mapping[str, Any],
    variables: Mapping[str, str],
    default: str | None = None,
) -> list[str]:
    """Every path ``template`` names for a call: one, or one per element
    of its ``[*]`` field (none for an empty array). A field is filled from
    ``variables`` first, then ``arguments``; an absent one (or a key an
    object lacks) gives ``default``, or no path when it is the template's
    only field. Raises KeyError naming an absent field of a template of
    several fields (it has no path without it), and PathValueError for a
    field on anything but a string, or absent from an object that holds a
    key with ``.``, ``[`` or ``]`` (``_holds_unreadable``)."""
    parts = parse_template(template)
    chosen: dict[str, list[object]] = {}
    for _, field in parts:
        if field is None or field.text in chosen:
            continue
        if field.name in variables:
            root: object = str(variables[field.name])
        else:
            root = arguments.get(field.name, _ABSENT)
            if root is _ABSENT and _holds_unreadable(arguments):
                raise PathKeyMisread(field.text, field.name)
        chosen[field.text] = _select(field, root)
    if any(not values for values in chosen.values()):
        return []  # an empty array: the access names no path
    rounds = max((len(values) for values in chosen.values()), default=1)
    paths: list[str] = []
    for index in range(rounds):
        text: list[str] = []
        for literal, field in parts:
            text.append(literal)
            if field is None:
                continue
            values = chosen[field.text]
            value = values[index] if len(values) > 1 else values[0]
            if value is _ABSENT:
                break
            text.append(str.__str__(value))  # a str subclass's own __str__ is not its text
        else:
            paths.append("".join(text))
            continue
        if default is not None:
            paths.append(default)
        elif len(chosen) > 1:
            raise KeyError(next(name for name, values in chosen.items() if _ABSENT in values))
    return paths


def _types(schema: Mapping[str, Any]) -> frozenset[str] | None:
    """The JSON types a schema's ``type`` allows (None: it does not say)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return frozenset(declared)
    return None


def template_schema_problem(template: str, input_schema: Mapping[str, Any]) -> str | None:
    """Why ``template`` can never name a string under ``input_schema``, or
    None. The schema is followed where it speaks plainly (``type``,
    ``properties``, ``items``, ``additionalProperties: false``, local
    ``$ref``s); what it leaves open (``anyOf``, ...) is checked at the call.
    A top-level name the schema does not list, with no steps, is taken for
    a runtime variable. Any other name an object's declared ``properties``
    do not list is refused, open schema or not: a key that holds a step
    (``"file.path"``) reads as other steps, and the field would name nothing."""
    for selector in (s for _, s in parse_template(template) if s is not None):
        node = _deref(input_schema, input_schema)
        steps: tuple[str | None, ...] = (selector.name, *selector.steps)
        for depth, step in enumerate(steps):
            types = _types(node)
            if step is None:
                if types is not None and "array" not in types:
                    return f"{{{selector.text}}} takes [*] of a value typed {sorted(types)}"
                node = _deref(node.get("items"), input_schema)
                continue
            if types is not None and "object" not in types:
                return f"{{{selector.text}}} takes .{step} of a value typed {sorted(types)}"
            properties = node.get("properties")
            if isinstance(properties, Mapping) and isinstance(properties.get(step), Mapping):
                node = _deref(properties[step], input_schema)
            elif depth == 0 and not selector.steps and step not in (properties or {}):
                break  # a variable the runtime fills (a variable is a string: no steps)
            elif node.get("additionalProperties") is False:
                return f"{{{selector.text}}} names {step!r}, which the schema does not allow"
            elif isinstance(properties, Mapping) and properties:
                # An object whose keys are declared: a key it does not list is
                # a name the template misreads (a key "file.path" is no steps).
                unreadable = _unreadable_keys(properties)
                return f"{{{selector.text}}} names {step!r}, which the schema does not declare" + (
                    f" (a key holding '.', '[' or ']', such as {unreadable[0]!r}, cannot be "
                    "named by a template)"
                    if unreadable
                    else ""
                )
            else:
                node = {}
        else:
            types = _types(node)
            if types is not None and "string" not in types:
                hint = _selector_hint(selector.text, node, input_schema)
                return (
                    f"{{{selector.text}}} names a value typed {sorted(types)}, not a string{hint}"
                )
    return None


def _unreadable_keys(properties: Mapping[str, Any]) -> list[str]:
    """The declared keys a template field cannot spell (they hold a step)."""
    return [key for key in properties if isinstance(key, str) and _UNREADABLE.intersection(key)]


_UNREADABLE = frozenset(".[]")


def _deref(node: Any, document: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with its local ``$ref``s (``#/$defs/X``) followed; ``{}``
    (anything) for a schema that is not an object or a reference that
    leads nowhere or too far."""
    for _ in range(MAX_TEMPLATE_DEPTH):
        if not isinstance(node, Mapping):
            return {}
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        if not ref.startswith("#"):
            return {}
        target: Any = document
        for part in ref[1:].split("/")[1:]:
            key = part.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, Mapping) else None
        node = target
    return {}


def _selector_hint(text: str, node: Mapping[str, Any], document: Mapping[str, Any]) -> str:
    found = path_selectors(node, prefix=text, document=document) or path_selectors(
        node, prefix=text, like=None, document=document
    )
    return f"; name its strings, e.g. {{{found[0]}}}" if found else ""


def path_selectors(
    schema: Mapping[str, Any],
    *,
    prefix: str = "",
    like: re.Pattern[str] | None = PATH_ARGUMENT,
    document: Mapping[str, Any] | None = None,
    accept: Callable[[str, Mapping[str, Any]], bool] | None = None,
) -> list[str]:
    """The template fields (``path``, ``paths[*]``, ``files[*].file_path``,
    ``options.target``) that reach a string under ``schema``: object
    properties, array items, ``anyOf`` / ``oneOf`` alternatives and local
    ``$ref``s (into ``document``, default ``schema``) followed, to
    ``MAX_TEMPLATE_DEPTH`` steps and 10,000 schema nodes. With ``like``,
    only the strings whose own name, or the name of the array holding
    them, matches it; with ``accept``, only those for which
    ``accept(name, schema)`` holds (``looks_like_path``). ``prefix`` is the
    field ``schema`` is the value of."""
    found: list[str] = []
    root = schema if document is None else document
    budget = [_SCHEMA_NODES]  # a schema of $refs to itself grows exponentially with depth

    def walk(raw: Any, text: str, named: str, depth: int) -> None:
        budget[0] -= 1
        if depth > MAX_TEMPLATE_DEPTH or budget[0] < 0:
            return
        node = _deref(raw, root)
        types = _types(node)
        properties = node.get("properties")
        items = node.get("items")
        alternatives = [
            branch
            for keyword in ("anyOf", "oneOf")
            if isinstance(node.get(keyword), list)
            for branch in node[keyword]
        ]
        for branch in alternatives:
            walk(branch, text, named, depth + 1)
        if isinstance(properties, Mapping) and (types is None or "object" in types):
            for key, sub in properties.items():
                if isinstance(key, str) and key and not _STEP_BREAKERS.intersection(key):
                    walk(sub, f"{text}.{key}" if text else key, key, depth + 1)
        if types is not None and "array" in types:
            # Elements of no declared schema may be strings.
            walk(items if isinstance(items, Mapping) else {}, f"{text}{WILDCARD}", named, depth + 1)
        elif isinstance(items, Mapping) and types is None:
            walk(items, f"{text}{WILDCARD}", named, depth + 1)
        leaf = not (properties or items or alternatives)
        string_leaf = text and (types is None or "string" in types) and leaf
        named_so = like is None or like.search(named)
        accepted = accept is None or accept(named, node)
        if string_leaf and named_so and accepted and text not in found:
            found.append(text)

    walk(schema, prefix, prefix.rsplit(".", 1)[-1].split("[", 1)[0], 0)
    return found


_STEP_BREAKERS = frozenset(".[]{}!:")
_SCHEMA_NODES = 10_000


# -- which arguments hold a path, for a tool that does not say -------------------------

_STRONG_WORDS = frozenset(
    [
        "path",
        "paths",
        "pathname",
        "filepath",
        "filepaths",
        "filename",
        "filenames",
        "dir",
        "dirs",
        "directory",
        "directories",
        "folder",
        "folders",
    ]
)
"""Words that make a name a path's wherever they stand (``path_prefix``)."""

_HEAD_WORDS = frozenset(
    [
        "file",
        "files",
        "source",
        "sources",
        "src",
        "target",
        "targets",
        "dest",
        "destination",
        "destinations",
        "dst",
    ]
)
"""Words that make a name a path's only as its last word: ``target_file``,
``source``; not ``file_hash``, ``source_timezone``, ``target_language``."""

_NAMED_WORDS = frozenset(["file", "files", "dir", "directory", "folder"])
"""Before ``name`` (``file_name``, ``dir_name``), a path's name."""

_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")

NON_PATH_FORMATS = frozenset(
    [
        "date",
        "date-time",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "iri",
        "uri-template",
        "uuid",
        "regex",
        "json-pointer",
        "relative-json-pointer",
    ]
)
"""JSON Schema ``format``s of values that are not paths."""

_NON_PATH_WORDS = re.compile(
    r"\b(?:time ?zones?|iana|tz|hash(?:es)?|checksums?|digests?|sha-?\d*|md5|languages?|"
    r"locales?|currenc(?:y|ies)|e-?mails?|urls?|uris?|uuids?|host ?names?|colou?rs?)\b",
    re.IGNORECASE,
)
_PATH_WORDS = re.compile(r"\b(?:paths?|director(?:y|ies)|folders?|file ?names?)\b", re.IGNORECASE)

_TIME_ZONE = re.compile(
    r"(?:UTC|GMT|Z|(?:Etc/)?(?:UTC|GMT)(?:[+-]\d{1,2})?|"
    r"(?:Africa|America|Antarctica|Arctic|Asia|Atlantic|Australia|Europe|Indian|Pacific|"
    r"US|Canada|Brazil|Chile|Mexico)/[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z][A-Za-z0-9_+-]*)?)"
)
_DIGEST = re.compile(r"(?:(?:sha\d*|md5|blake2\w*)[:-])?[0-9a-fA-F]{32,128}")
_NON_FILE_URL = re.compile(r"(?!file:)[A-Za-z][A-Za-z0-9+.-]*://")
_EMAIL = re.compile(r"[^@/\s]+@[^@/\s]+\.[A-Za-z]{2,}")


def named_like_path(name: str) -> bool:
    """Whether an argument's name says it holds a path: one of its words
    (snake_case, kebab-case or camelCase) is ``path``, ``dir``, ``folder``,
    ``filename``, ...; or its last word is ``file``, ``source``, ``target``,
    ``dest``, ...; or it ends in ``file_name`` / ``dir_name``. The last word
    of a name is what it names: ``source_timezone`` is a time zone."""
    words = [word.lower() for word in _WORD.findall(name)]
    if not words:
        return False
    if _STRONG_WORDS.intersection(words) or words[-1] in _HEAD_WORDS:
        return True
    return words[-1] in ("name", "names") and len(words) > 1 and words[-2] in _NAMED_WORDS


def names_another_thing(value: str) -> bool:
    """Whether a string is plainly not a path: a time zone
    (``Europe/Warsaw``, ``UTC``), a hex digest, a URL other than
    ``file:``, an e-mail address."""
    return any(pattern.fullmatch(value) for pattern in (_TIME_ZONE, _DIGEST, _EMAIL)) or bool(
        _NON_FILE_URL.match(value)
    )


def schema_says_not_path(schema: Any) -> bool:
    """Whether an argument's schema says its strings are something else
    than paths: a ``format`` of ``NON_PATH_FORMATS``, a
    ``contentEncoding``, a description or title naming a time zone, a
    hash, a language, a URL, ... (and no path, directory or folder), or
    ``examples`` / ``default`` / ``enum`` / ``const`` values that all name
    another thing (``names_another_thing``)."""
    if not isinstance(schema, Mapping):
        return False
    if schema.get("format") in NON_PATH_FORMATS or "contentEncoding" in schema:
        return True
    text = " ".join(str(schema.get(key) or "") for key in ("title", "description"))
    if _NON_PATH_WORDS.search(text) and not _PATH_WORDS.search(text):
        return True
    values = [schema.get("default"), schema.get("const")]
    for key in ("examples", "enum"):
        if isinstance(schema.get(key), list):
            values += schema[key]
    strings = [value for value in values if isinstance(value, str)]
    return bool(strings) and all(names_another_thing(value) for value in strings)


def looks_like_path(name: str, schema: Any = None, value: Any = None) -> bool:
    """The name heuristic for a tool that does not declare its paths:
    whether the argument ``name`` (of ``schema``, given ``value`` in a
    call, when known) holds a path. Named so (``named_like_path``), and
    neither its schema (``schema_says_not_path``) nor its value
    (``names_another_thing``) says otherwise."""
    if not named_like_path(name) or schema_says_not_path(schema):
        return False
    return not (isinstance(value, str) and names_another_thing(value))


def path_arguments(
    schema: Mapping[str, Any],
    declared: Sequence[str],
    guess: bool,
    arguments: Mapping[str, Any] | None = None,
) -> list[str]:
    """The top-level arguments that hold a path: ``declared`` first (the
    fields a tool's ``PathAccess`` templates read), then, with ``guess``,
    the other arguments of its schema (or of ``arguments``, the call's)
    that ``looks_like_path`` judges paths, their values in ``arguments``
    included. A guessed argument is only ever tried with escapes and judged
    by what the call did, never expected to be refused."""
    found = list(dict.fromkeys(declared))
    if not guess:
        return found
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    values = arguments or {}
    names = [name for name in properties if isinstance(name, str)]
    names += [name for name in values if isinstance(name, str) and name not in properties]
    found += [
        name
        for name in names
        if name not in found and looks_like_path(name, properties.get(name), values.get(name))
    ]
    return found
