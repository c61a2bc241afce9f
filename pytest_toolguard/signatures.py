"""A tool's input schema from its handler's signature and type hints.

``schema_from_signature(function)`` reads the parameters and their type
hints (``str``, ``int``, ``float``, ``bool``, ``None``, ``list[X]``,
``tuple[X, Y]``, ``dict[str, X]``, ``Literal[...]``, ``Optional[X]`` and
``X | Y``, ``Enum`` subclasses, ``TypedDict`` and dataclasses, nested,
``Annotated[X, "description"]``, ``Any``) and returns the JSON Schema
2020-12 object a call's arguments must match: a parameter with a default is
optional and its default is shown, every other one is required, and no
other argument is accepted. That is what lets ``@tool`` go without an
``input_schema``::

    @tool(risk="write", paths=[PathAccess.write("{path}", content="text")])
    def save(ctx, path: str, text: str, mode: Literal["replace", "append"] = "replace"):
        ...

A dataclass parameter arrives as the dataclass (built from the JSON
object); a ``TypedDict`` one as a dict. ``TypeError`` names the parameter
whose type has no JSON form (a ``*args`` parameter, an arbitrary class).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

Handler = Callable[..., Any]  # as registry.Handler, which is built on this module

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    bytes: {"type": "string"},
}


def schema_from_signature(
    function: Callable[..., Any], *, skip_context: bool = True
) -> dict[str, Any]:
    """The JSON Schema of ``function``'s keyword arguments. With
    ``skip_context`` (the default, as for ``@tool`` handlers) the first
    parameter is the ``ToolContext`` and is left out."""
    hints = _hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    additional = False
    for parameter in _parameters(function, skip_context):
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            additional = True
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise TypeError(
                f"{_name(function)}: parameter {parameter.name!r} cannot be given by name; "
                "a tool's arguments are keyword arguments"
            )
        hint = hints.get(parameter.name, Any)
        try:
            schema = json_schema(hint)
        except TypeError as exc:
            raise TypeError(f"{_name(function)}: parameter {parameter.name!r}: {exc}") from None
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif _jsonable(parameter.default):
            schema = {**schema, "default": _plain_default(parameter.default)}
        properties[parameter.name] = schema
    body: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        body["required"] = required
    body["additionalProperties"] = additional
    return body


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one type hint. ``TypeError`` for a type with no
    JSON form."""
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return {}
    if hint in _SIMPLE:
        return dict(_SIMPLE[hint])
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        inner = json_schema(arguments[0])
        described = [text for text in arguments[1:] if isinstance(text, str)]
        return {**inner, "description": described[0]} if described else inner
    if origin is Literal:
        values = list(arguments)
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if origin is Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        options = [json_schema(argument) for argument in arguments]
        return {"anyOf": options}
    if origin in (list, Sequence, set, frozenset) or hint in (list, set, frozenset):
        schema: dict[str, Any] = {"type": "array"}
        if arguments:
            schema["items"] = json_schema(arguments[0])
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple:
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return {"type": "array", "items": json_schema(arguments[0])}
        items = [json_schema(argument) for argument in arguments]
        return {
            "type": "array",
            "prefixItems": items,
            "items": False,
            "minItems": len(items),
        }
    if origin in (dict, Mapping) or hint is dict:
        schema = {"type": "object"}
        if len(arguments) == 2:
            if arguments[0] is not str:
                raise TypeError(f"{hint!r}: JSON object keys are strings")
            schema["additionalProperties"] = json_schema(arguments[1])
        return schema
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    if _is_typeddict(hint):
        return _typeddict_schema(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass_schema(hint)
    pydantic_schema = getattr(hint, "model_json_schema", None)
    if callable(pydantic_schema):
        return dict(pydantic_schema())
    raise TypeError(f"type {hint!r} has no JSON Schema form")


def with_dataclass_arguments(function: Handler, *, skip_context: bool = True) -> Handler:
    """``function`` unchanged when no parameter is a dataclass; otherwise a
    wrapper that builds each dataclass argument from its JSON object (async
    stays async)."""
    hints = _hints(function)
    builders = {
        parameter.name: found
        for parameter in _parameters(function, skip_context)
        if (found := _dataclass_in(hints.get(parameter.name))) is not None
    }
    if not builders:
        return function

    def convert(arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            name: _build(builders[name], value) if name in builders else value
            for name, value in arguments.items()
        }

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def async_wrapper(*args: Any, **arguments: Any) -> Any:
            return await function(*args, **convert(arguments))

        return async_wrapper

    @functools.wraps(function)
    def wrapper(*args: Any, **arguments: Any) -> Any:
        return function(*args, **convert(arguments))

    return wrapper


# -- details ------------------------------------------------------------------


def _name(function: Callable[..., Any]) -> str:
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return str(name or repr(function))


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    target = function.__call__ if not inspect.isroutine(function) else function  # type: ignore[operator]
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # a hint naming something not importable
        raise TypeError(f"{_name(function)}: cannot read its type hints: {exc}") from None


def _parameters(function: Callable[..., Any], skip_context: bool) -> list[inspect.Parameter]:
    parameters = list(inspect.signature(function).parameters.values())
    if (
        skip_context
        and parameters
        and parameters[0].kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        parameters = parameters[1:]
    return parameters


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


def _typeddict_schema(hint: Any) -> dict[str, Any]:
    fields = typing.get_type_hints(hint, include_extras=True)
    properties = {}
    for name, field_hint in fields.items():
        # NotRequired[X] / Required[X] already decided __required_keys__.
        if typing.get_origin(field_hint) in _REQUIREDNESS:
            field_hint = typing.get_args(field_hint)[0]
        properties[name] = json_schema(field_hint)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [name for name in fields if name in hint.__required_keys__]
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


_REQUIREDNESS = tuple(
    marker
    for marker in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None))
    if marker is not None
)


def _dataclass_schema(hint: type) -> dict[str, Any]:
    hints = typing.get_type_hints(hint, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for item in dataclasses.fields(hint):
        if not item.init:
            continue
        schema = json_schema(hints.get(item.name, Any))
        if item.default is not dataclasses.MISSING:
            if _jsonable(item.default):
                schema = {**schema, "default": _plain_default(item.default)}
        elif item.default_factory is dataclasses.MISSING:
            required.append(item.name)
        properties[item.name] = schema
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass a hint is, or is an Optional/Union member of."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _dataclass_in(typing.get_args(hint)[0])
    if origin is Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        found = [kind for kind in map(_dataclass_in, typing.get_args(hint)) if kind is not None]
        return found[0] if len(found) == 1 else None
    return None


def _build(hint: Any, value: Any) -> Any:
    kind = _dataclass_in(hint)
    if kind is None or not isinstance(value, Mapping):
        return value
    hints = typing.get_type_hints(kind)
    return kind(**{key: _build(hints.get(key), item) for key, item in value.items()})


def _jsonable(value: Any) -> bool:
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_jsonable(item) for item in value)
    if isinstance(value, Mapping):
        return all(isinstance(key, str) and _jsonable(item) for key, item in value.items())
    return False


def _plain_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain_default(item) for item in value]
    return value
