"""``execute`` never raises on a mapping whose keys (or values) are hostile
``str`` subclasses.

A key that cannot be ordered made ``execute`` raise ``TypeError`` (sorting
keys for the canonical JSON) with no audit row written. Keys and values are
now copied to plain ``str`` before anything else.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from conftest import spy_tool

from pytest_toolguard import ErrorCode, ToolCall


def _raise(*args: Any) -> Any:
    raise TypeError("hostile")


class Unorderable(str):
    __lt__ = __gt__ = __le__ = __ge__ = _raise


class AlwaysEqual(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class BadHash(str):
    __hash__ = _raise  # type: ignore[assignment]


class BadText(str):
    __str__ = __repr__ = __format__ = _raise  # type: ignore[assignment]


class BadEncode(str):
    encode = _raise  # type: ignore[assignment]


class BadLength(str):
    __len__ = __iter__ = __getitem__ = _raise  # type: ignore[assignment]


class Flag(str, enum.Enum):
    TEXT = "text"


HOSTILE = [Unorderable, AlwaysEqual, BadHash, BadText, BadEncode, BadLength]


class KeysOf(dict):  # type: ignore[type-arg]
    """A mapping holding keys that a plain dict could not (a raising hash)."""

    def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
        super().__init__()
        self.pairs = pairs

    def items(self) -> Any:
        return iter(self.pairs)

    def keys(self) -> Any:
        return iter(key for key, _ in self.pairs)

    def __iter__(self) -> Any:
        return self.keys()

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: Any) -> Any:
        return dict(self.pairs)[key]


SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}, "data": {"type": "object"}}}


@pytest.fixture
def runtime(toolguard_runtime, registry_of, spy):
    def echo(ctx: Any, **arguments: Any) -> Any:
        assert all(type(key) is str for key in arguments)
        return {"keys": sorted(arguments), "data_keys": sorted(arguments.get("data", {}))}

    return toolguard_runtime(registry_of(spy_tool(spy, result=echo, schema=SCHEMA)))


def one_finished_row(runtime: Any, call_id: str) -> None:
    rows = [row for row in runtime.audit.rows() if row.call_id == call_id]
    assert len(rows) == 1 and rows[0].finished_at is not None


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_hostile_keys_run_as_their_plain_text(runtime, kind: type[str]) -> None:
    arguments = KeysOf(
        [(kind("text"), "a"), (kind("data"), KeysOf([(kind("z"), 1), (kind("y"), 2)]))]
    )
    result = runtime.execute(ToolCall("c1", "spy", arguments))
    assert result.code is ErrorCode.OK, result.message
    assert result.data == {"keys": ["data", "text"], "data_keys": ["y", "z"]}
    one_finished_row(runtime, "c1")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_hostile_values_run_as_their_plain_text(runtime, kind: type[str]) -> None:
    result = runtime.execute(ToolCall("c1", "spy", {"text": kind("value")}))
    assert result.code is ErrorCode.OK, result.message
    one_finished_row(runtime, "c1")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
@pytest.mark.parametrize("field", ["call_id", "tool_name", "session_id", "idempotency_key"])
def test_hostile_ids_never_make_execute_raise(runtime, kind: type[str], field: str) -> None:
    fields: dict[str, Any] = {"call_id": "c1", "tool_name": "spy", "arguments": {}}
    fields[field] = kind(fields.get(field) or "k1")
    result = runtime.execute(ToolCall(**fields))
    assert result.code in (ErrorCode.OK, ErrorCode.INVALID_REQUEST)
    assert runtime.audit.count() == 1


def test_an_enum_key_is_its_value(runtime) -> None:
    result = runtime.execute(ToolCall("c1", "spy", {Flag.TEXT: "a"}))
    assert result.code is ErrorCode.OK
    assert result.data["keys"] == ["text"]
