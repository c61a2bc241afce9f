"""The fuzzer's ``secret-leaked`` property: a secret-named argument's value
is leaked only where no non-secret value of the call that holds it
explains it, and only when it is long and varied enough to mean
something."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_toolguard.fuzz import check_call, fuzz_tool
from pytest_toolguard.fuzz.report import Problem
from pytest_toolguard.registry import ToolSpec, tool

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "secret_key": {"type": "string", "minLength": 1},
        "options": {
            "type": "object",
            "properties": {"label": {"type": "string"}},
            "additionalProperties": False,
        },
    },
    "required": ["path", "secret_key"],
    "additionalProperties": False,
}


@tool(name="lookup", input_schema=SCHEMA)
def echoing_the_path(ctx: Any, path: str, secret_key: str, options: Any = None) -> Any:
    """Uses the key, answers with the path and label it was given."""
    return {"path": path, "label": (options or {}).get("label"), "authorized": bool(secret_key)}


@tool(name="lookup", input_schema=SCHEMA)
def echoing_the_key(ctx: Any, path: str, secret_key: str, options: Any = None) -> Any:
    """Answers with the path, and with the key it was given."""
    return {"path": path, "auth": f"Bearer {secret_key}"}


def leaked(spec: ToolSpec, arguments: dict[str, Any]) -> list[str]:
    return [f.detail for f in check_call(spec, arguments) if f.problem is Problem.SECRET_LEAKED]


SAME_AS_PLAIN = [
    {"path": "00000000", "secret_key": "00000000"},
    {"path": "aB3xZ9qLk2", "secret_key": "aB3xZ9qLk2"},
    {"path": "notes/aB3xZ9qLk2.md", "secret_key": "aB3xZ9qLk2"},
    {"path": "x", "secret_key": "q7Rw2mZ0pL", "options": {"label": "tag q7Rw2mZ0pL"}},
    {"path": 'quo"te\\é-7Rw2mZ0', "secret_key": 'quo"te\\é-7Rw2mZ0'},
]


@pytest.mark.parametrize("arguments", SAME_AS_PLAIN)
def test_a_secret_explained_by_an_echoed_plain_value_is_not_leaked(arguments: Any) -> None:
    assert leaked(echoing_the_path, arguments) == []


LEAKS = [
    {"path": "notes/a.md", "secret_key": "aB3xZ9qLk2"},
    {"path": "notes/aB3xZ9qLk2.md", "secret_key": "aB3xZ9qLk2"},
    {"path": "aB3xZ9qL", "secret_key": "aB3xZ9qLk2"},
    {"path": "x", "secret_key": 'quo"te\\é-7Rw2mZ0'},
]


@pytest.mark.parametrize("arguments", LEAKS)
def test_a_secret_shown_apart_from_any_plain_value_is_leaked(arguments: Any) -> None:
    assert any(
        "secret_key's value is in the result" in d for d in leaked(echoing_the_key, arguments)
    )


@pytest.mark.parametrize("secret", ["00000000", "abababab", "0000001a", "short7"])
def test_a_secret_too_short_or_too_regular_is_not_looked_for(secret: str) -> None:
    assert leaked(echoing_the_key, {"path": "notes/a.md", "secret_key": secret}) == []


def test_the_fuzzer_catches_the_leak_and_passes_the_echo_of_the_path() -> None:
    found = {f.problem for f in fuzz_tool(echoing_the_key, examples=12).failures}
    clean = {f.problem for f in fuzz_tool(echoing_the_path, examples=12).failures}

    assert Problem.SECRET_LEAKED in found
    assert Problem.SECRET_LEAKED not in clean, clean
