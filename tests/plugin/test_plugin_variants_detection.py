"""``--toolguard-replay`` gives a cassette holding variants its ``variants``
item whatever syntax the file is in: YAML as ``dumps`` writes it, JSON
(``dumps`` writes one, still named ``.yaml``, above ``JSON_ABOVE``
interactions), and the other
spellings of the key a person or another tool may write. A file without
variants gets none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.amplify import amplify_file
from pytest_toolguard.replay import dumps, load, record_session
from pytest_toolguard.tools import builtin_registry

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest")


@pytest.fixture(scope="module")
def amplified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("recorded")
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    runtime = ToolRuntime(
        builtin_registry(),
        str(workspace),
        Capabilities(allowed_risks=frozenset({Risk.READ})),
        SQLiteAuditStore(":memory:"),
    )
    path = base / "notes.yaml"
    with record_session(runtime, path):
        runtime.execute(ToolCall("call-1", "read_text", {"path": "notes.txt"}))
    runtime.close()
    report = amplify_file(path, builtin_registry())
    assert report.written and report.kept > 0
    return path


def as_json(path: Path) -> str:
    return dumps(load(path), syntax="json")


def json_compact(path: Path) -> str:
    return json.dumps(json.loads(as_json(path)), separators=(",", ":"), ensure_ascii=False)


def json_spaced(path: Path) -> str:
    return json.dumps(json.loads(as_json(path)), separators=(" , ", " : "), indent=None)


def json_key_on_its_own_line(path: Path) -> str:
    return as_json(path).replace('"variants":', '"variants"\n  :')


def yaml_variants_first(path: Path) -> str:
    raw = yaml.safe_load(path.read_text())
    raw["interactions"] = [
        {"variants": item.pop("variants"), **item} for item in raw["interactions"]
    ]
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def yaml_quoted_key(path: Path) -> str:
    return path.read_text().replace("  variants:", "  'variants':")


def yaml_as_dumped(path: Path) -> str:
    return path.read_text()


SPELLINGS = {
    "yaml as dumped": (yaml_as_dumped, ".yaml"),
    "json as dumped": (as_json, ".yaml"),
    "json as dumped, .yml name": (as_json, ".yml"),
    "json on one line": (json_compact, ".yaml"),
    "json spaced": (json_spaced, ".yaml"),
    "json key on its own line": (json_key_on_its_own_line, ".yaml"),
    "yaml, variants first": (yaml_variants_first, ".yaml"),
    "yaml, quoted key": (yaml_quoted_key, ".yaml"),
}


def put(pytester: pytest.Pytester, text: str, suffix: str) -> None:
    pytester.mkdir("cassettes")
    (pytester.path / "cassettes" / f"notes{suffix}").write_text(text)


@pytest.mark.parametrize(("spell", "suffix"), list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_a_cassette_with_variants_gets_its_variants_item_in_every_spelling(
    pytester: pytest.Pytester, amplified: Path, spell: object, suffix: str
) -> None:
    text = spell(amplified)  # type: ignore[operator]
    assert load_text_variants(text) > 0  # the spelling still loads, variants and all
    put(pytester, text, suffix)
    result = pytester.runpytest("--toolguard-replay", "--collect-only", "-q", *NO_XDIST)
    result.stdout.fnmatch_lines([f"*notes{suffix}::replay", f"*notes{suffix}::variants"])


def test_a_json_cassette_s_variants_are_replayed(
    pytester: pytest.Pytester, amplified: Path
) -> None:
    put(pytester, as_json(amplified), ".yaml")
    result = pytester.runpytest("--toolguard-replay", "-v", *NO_XDIST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*notes.yaml::variants PASSED*", "toolguard variants: *replayed*"])


@pytest.mark.parametrize("syntax", ["yaml", "json"])
def test_a_cassette_without_variants_gets_no_variants_item(
    pytester: pytest.Pytester, amplified: Path, syntax: str
) -> None:
    from dataclasses import replace

    cassette = load(amplified)
    plain = replace(
        cassette, interactions=tuple(replace(i, variants=()) for i in cassette.interactions)
    )
    put(pytester, dumps(plain, syntax=syntax), ".yaml")  # type: ignore[arg-type]
    result = pytester.runpytest("--toolguard-replay", "--collect-only", "-q", *NO_XDIST)
    result.stdout.fnmatch_lines(["*notes.yaml::replay"])
    assert "::variants" not in result.stdout.str()


def load_text_variants(text: str) -> int:
    from pytest_toolguard.replay import loads

    return sum(len(i.variants) for i in loads(text).interactions)
