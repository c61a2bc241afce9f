"""Amplified cassettes, with tools and cassettes of these tests only: the
variants come from schemas and recorded data, never from knowing a tool.

Each bug below is one a plain replay misses (no recorded call sits on its
edge); the variants recorded with the right tool catch it, and the report
names the variant.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolRuntime
from pytest_toolguard.amplify import amplify, amplify_file
from pytest_toolguard.amplify.derive import CallFacts, candidates
from pytest_toolguard.amplify.record import VariantCaps
from pytest_toolguard.amplify.write import with_variants
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette, CassetteError, dumps, loads, syntax_of
from pytest_toolguard.replay.variants import replay_variants

HEAD_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 100},
        "max_lines": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _head(truncated_at_limit: bool) -> ToolSpec:
    @tool(name="head", input_schema=HEAD_SCHEMA, paths=[PathAccess.read("{path}")])
    def head(ctx: Any, path: str, max_lines: int = 10) -> dict[str, Any]:
        """The first lines of a text file."""
        lines = ctx.workspace.read_text(path).splitlines()
        cut = len(lines) >= max_lines if truncated_at_limit else len(lines) > max_lines
        return {"lines": lines[:max_lines], "line_count": len(lines), "truncated": cut}

    return head


SAVE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "text": {"type": "string"},
    },
    "required": ["name", "text"],
    "additionalProperties": False,
}


def _save(ends_lines: bool) -> ToolSpec:
    @tool(
        name="save",
        input_schema=SAVE_SCHEMA,
        risk=Risk.WRITE,
        paths=[PathAccess.write("{name}", content="text")],
    )
    def save(ctx: Any, name: str, text: str) -> dict[str, Any]:
        """Save a text file, ending its last line."""
        ending = "" if text.endswith("\n") or not ends_lines else "\n"
        ctx.workspace.write_text(name, text + ending)
        return {"saved": name}

    return save


@tool(input_schema={"type": "object", "properties": {"label": {"type": "string"}}})
def stamp(ctx: Any, label: str) -> dict[str, Any]:
    """A label with the time and a random number: neither is reproducible."""
    return {
        "label": label,
        "at": datetime.now(timezone.utc).isoformat(),
        "nonce": random.random(),
    }


CAPS = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}), write_roots=(".",))
RIGHT = ToolRegistry([_head(False), _save(True), stamp])


def _record(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]]) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    runtime = ToolRuntime(RIGHT, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        for number, (name, arguments) in enumerate(calls, 1):
            from pytest_toolguard import ToolCall

            runtime.execute(ToolCall(f"call-{number}", name, arguments))
    return path


def _amplified(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], **options: Any) -> Cassette:
    cassette, report = amplify(load(_record(tmp_path, calls)), RIGHT, **options)
    assert report.ok
    return cassette


def test_a_truncation_flag_wrong_at_exactly_the_limit_is_caught_by_a_data_size_variant(
    tmp_path: Path,
) -> None:
    cassette = _amplified(tmp_path, [("head", {"path": "notes.txt"})])
    assert replay_variants(cassette, RIGHT).ok
    report = replay_variants(cassette, ToolRegistry([_head(True), _save(True), stamp]))
    wheres = {difference.where for difference in report.differences}
    assert "interaction 1 (head), variant `max_lines = len(data.lines)`" in wheres


def test_a_writer_that_breaks_on_text_without_a_trailing_newline_is_caught_by_a_text_variant(
    tmp_path: Path,
) -> None:
    cassette = _amplified(tmp_path, [("save", {"name": "a.md", "text": "# A\n"})])
    report = replay_variants(cassette, ToolRegistry([_head(False), _save(False), stamp]))
    found = {(d.where, d.field) for d in report.differences}
    assert (
        "interaction 1 (save), variant `text: no trailing newline`",
        "changed file a.md",
    ) in found


def test_a_plain_replay_of_the_same_cassette_misses_both_bugs(tmp_path: Path) -> None:
    from pytest_toolguard.replay import replay

    path = _record(
        tmp_path, [("head", {"path": "notes.txt"}), ("save", {"name": "a", "text": "x\n"})]
    )
    assert replay(load(path), ToolRegistry([_head(True), _save(False), stamp])).ok


def test_variants_per_call_are_capped_and_each_one_over_the_cap_is_dropped_with_why(
    tmp_path: Path,
) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt"})])
    cassette, report = amplify(load(path), RIGHT, caps=VariantCaps(default=3))
    variants = cassette.interactions[0].variants
    assert sum(not v.refused for v in variants) == 3
    over = [item for item in report.dropped if item.reason.startswith("over the cap of 3 variant")]
    assert over and report.kept == len(variants)


def test_refusals_are_capped_apart_from_the_other_variants(tmp_path: Path) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt"})])
    cassette, report = amplify(load(path), RIGHT, caps=VariantCaps(default=2))
    assert sum(v.refused for v in cassette.interactions[0].variants) == 2 == report.refused
    assert any(item.reason.startswith("over the cap of 2 refusal") for item in report.dropped)


def test_a_tool_s_own_cap_overrides_the_default(tmp_path: Path) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt"})])
    cassette, _ = amplify(load(path), RIGHT, caps=VariantCaps(default=2, per_tool={"head": 5}))
    assert sum(not v.refused for v in cassette.interactions[0].variants) == 5


def test_variant_caps_are_parsed_from_n_and_tool_equals_n() -> None:
    caps = VariantCaps.parse(["7", "head=3"])
    assert (caps.of("head"), caps.of("other")) == (3, 7)
    with pytest.raises(ValueError, match="TOOL=N"):
        VariantCaps.parse(["=3"])


def test_a_variant_failing_the_input_schema_is_kept_as_its_refusal_and_counted_apart(
    tmp_path: Path,
) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt"})])
    cassette, report = amplify(load(path), RIGHT, caps=VariantCaps(default=100))
    refused = [v for v in cassette.interactions[0].variants if v.refused]
    names = {v.name for v in refused}
    assert "max_lines = maximum + 1 (51)" in names
    assert all(v.result.code == "INVALID_ARGUMENT" for v in refused)
    assert report.refused == len(refused) and report.kept > len(refused)


def test_a_result_that_depends_on_time_or_randomness_is_marked_volatile_not_dropped(
    tmp_path: Path,
) -> None:
    path = _record(tmp_path, [("stamp", {"label": "build"})])
    text = path.read_text().replace(
        "interactions:", "volatile:\n- data.at\n- data.nonce\ninteractions:"
    )
    path.write_text(text)
    cassette, report = amplify(load(path), RIGHT)
    variants = cassette.interactions[0].variants
    assert variants and all({"data.at", "data.nonce"} <= set(v.volatile) for v in variants)
    assert report.volatile == len(variants)
    assert replay_variants(cassette, RIGHT).ok


def test_amplify_writes_nothing_when_the_recording_run_differs(tmp_path: Path) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt", "max_lines": 3})])
    before = path.read_bytes()
    report = amplify_file(path, ToolRegistry([_head(True), _save(True), stamp]))
    assert not report.ok and report.replay_differences
    assert path.read_bytes() == before


def test_re_amplifying_with_an_unchanged_tool_leaves_the_file_byte_for_byte(tmp_path: Path) -> None:
    path = _record(
        tmp_path, [("head", {"path": "notes.txt"}), ("save", {"name": "a", "text": "x"})]
    )
    assert amplify_file(path, RIGHT).written
    once = path.read_bytes()
    again = amplify_file(path, RIGHT)
    assert not again.written and path.read_bytes() == once


def test_a_call_refused_when_recorded_is_not_amplified_and_the_report_says_why(
    tmp_path: Path,
) -> None:
    cassette, report = amplify(load(_record(tmp_path, [("head", {"path": "../x"})])), RIGHT)
    assert cassette.interactions[0].variants == ()
    assert report.skipped and "did not succeed" in report.skipped[0]


def test_variants_are_written_into_a_case_s_own_text_keeping_its_comments(tmp_path: Path) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt"})])
    text = "# written by hand\n" + path.read_text()
    cassette, _ = amplify(loads(text), RIGHT)
    written = with_variants(text, [i.variants for i in cassette.interactions])
    assert written.startswith("# written by hand\n")
    assert with_variants(written, [()]) == text


def test_variants_are_written_into_a_json_cassette_as_json(tmp_path: Path) -> None:
    path = _record(tmp_path, [("head", {"path": "notes.txt"})])
    text = dumps(load(path), syntax="json")
    cassette, _ = amplify(loads(text), RIGHT)
    written = with_variants(text, [i.variants for i in cassette.interactions])
    assert syntax_of(written) == "json"
    assert loads(written).interactions[0].variants == cassette.interactions[0].variants
    assert with_variants(written, [i.variants for i in cassette.interactions]) == written
    assert with_variants(written, [()]) == text


def test_variants_load_back_as_dumped(tmp_path: Path) -> None:
    cassette = _amplified(tmp_path, [("head", {"path": "notes.txt"})])
    assert loads(dumps(cassette)).interactions[0].variants == cassette.interactions[0].variants


def test_the_schema_refuses_a_variant_of_an_unknown_kind(tmp_path: Path) -> None:
    cassette = _amplified(tmp_path, [("head", {"path": "notes.txt"})])
    text = dumps(cassette).replace("kind: boundary", "kind: guesswork", 1)
    with pytest.raises(CassetteError, match="variants"):
        loads(text)


def test_text_variants_leave_path_arguments_alone() -> None:
    facts = CallFacts(
        arguments={"name": "a.md", "text": "hi\n"},
        schema=SAVE_SCHEMA,
        fixed=frozenset({"name"}),
    )
    texts = [c for c in candidates(facts) if c.kind == "text"]
    assert texts and all(c.arguments["name"] == "a.md" for c in texts)


def test_files_are_sized_around_every_limit_like_number_of_the_call_and_schema() -> None:
    facts = CallFacts(
        arguments={"path": "n.txt", "max_lines": 4},
        schema=HEAD_SCHEMA,
        files_read={"n.txt": b"a\nb\n"},
    )
    names = {c.name for c in candidates(facts) if c.kind == "size"}
    assert {"n.txt with 3 lines after its first", "n.txt with 5 lines after its first"} <= names
    assert "n.txt of 51 characters" in names  # the schema's maximum, one more


# -- tools the amplifier has never seen, each with its one-change mutants ---------------

FIND_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 40},
        "path": {"type": "string", "minLength": 1, "maxLength": 100, "default": "."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
        "case_sensitive": {"type": "boolean", "default": True},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _find(
    *, limit: int = 5, case_sensitive: bool = True, cut: int = 30, least_searched: int = 0
) -> ToolSpec:
    """A search tool like a user writes one; the keywords make its mutants."""

    @tool(
        name="find",
        input_schema=FIND_SCHEMA,
        output_schema={
            "type": "object",
            "properties": {"searched": {"type": "integer", "minimum": least_searched}},
        },
        paths=[PathAccess.read("{path}", default=".")],
    )
    def find(
        ctx: Any,
        query: str,
        path: str = ".",
        limit: int = limit,
        case_sensitive: bool = case_sensitive,
    ) -> dict[str, Any]:
        """Lines holding query in the text files beneath path."""
        needle = query if case_sensitive else query.lower()
        found: list[dict[str, Any]] = []
        searched = 0
        for name, content in ctx.workspace.read_tree(path):
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError:
                continue
            searched += 1
            for number, line in enumerate(text.splitlines(), 1):
                if needle in (line if case_sensitive else line.lower()):
                    if len(found) == limit:
                        return {"found": found, "searched": searched, "truncated": True}
                    found.append({"path": name, "line": number, "text": line[:cut]})
        return {"found": found, "searched": searched, "truncated": False}

    return find


TABLE_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 100},
        "max_rows": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _table(truncated_at_limit: bool, *, rows: int = 100, result_limit: int = 8000) -> ToolSpec:
    @tool(
        name="table",
        input_schema=TABLE_SCHEMA,
        paths=[PathAccess.read("{path}")],
        result_limit=result_limit,
    )
    def table(ctx: Any, path: str, max_rows: int = rows) -> dict[str, Any]:
        """The rows of a CSV file with a header line."""
        rows = ctx.workspace.read_text(path).splitlines()[1:]
        cut = len(rows) >= max_rows if truncated_at_limit else len(rows) > max_rows
        return {"rows": rows[:max_rows], "truncated": cut}

    return table


def _recorded(
    tmp_path: Path, spec: ToolSpec, files: dict[str, str], arguments: dict[str, Any]
) -> Cassette:
    """One call of ``spec`` recorded over ``files``, amplified with the default caps."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name, text in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    registry = ToolRegistry([spec])
    runtime = ToolRuntime(registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "session.yaml"
    with record_session(runtime, path):
        from pytest_toolguard import ToolCall

        runtime.execute(ToolCall("call-1", spec.name, arguments))
    cassette, report = amplify(load(path), registry)
    assert report.ok and replay_variants(cassette, registry).ok
    return cassette


NOTES = {
    "docs/a.txt": "alpha\nthe Needle here\nomega\n",
    "docs/b.txt": "one needle\ntwo\n",
    "docs/c.txt": "nothing\n",
}
FIND_MUTANTS = {
    "the handler's default limit one lower": {"limit": 4},
    "the handler's default limit one higher": {"limit": 6},
    "case-insensitive by default": {"case_sensitive": False},
    "lines cut one character shorter": {"cut": 29},
    "lines cut one character longer": {"cut": 31},
    "an output minimum that no empty search meets": {"least_searched": 1},
}


@pytest.mark.parametrize("mutant", FIND_MUTANTS)
def test_each_one_change_mutant_of_a_search_tool_is_caught_under_the_default_cap(
    tmp_path: Path, mutant: str
) -> None:
    cassette = _recorded(tmp_path, _find(), NOTES, {"query": "needle", "path": "docs"})
    report = replay_variants(cassette, ToolRegistry([_find(**FIND_MUTANTS[mutant])]))
    assert not report.ok


def test_a_truncation_flag_off_by_one_is_caught_by_a_row_count_one_over_the_limit(
    tmp_path: Path,
) -> None:
    files = {"t.csv": "id,name\n1,a\n2,b\n3,c\n"}  # 3 rows; the call shows 2 of them
    cassette = _recorded(tmp_path, _table(False), files, {"path": "t.csv", "max_rows": 2})
    report = replay_variants(cassette, ToolRegistry([_table(True)]))
    wheres = {difference.where for difference in report.differences}
    assert "interaction 1 (table), variant `max_rows = len(data.rows) + 1`" in wheres


def test_every_group_of_candidates_is_tried_before_any_group_gets_a_second() -> None:
    from pytest_toolguard.amplify.derive import GROUPS

    facts = CallFacts(
        arguments={"query": "needle", "path": "docs", "limit": 3},
        schema=FIND_SCHEMA,
        fixed=frozenset({"path"}),
        files_read={"docs/a.txt": NOTES["docs/a.txt"].encode()},
        data={"found": [{"path": "docs/a.txt", "line": 2, "text": "the Needle here"}]},
    )
    first = [GROUPS[c.family] for c in candidates(facts)[:4]]
    assert sorted(first) == ["boundary", "data size", "size", "text"]


def test_a_search_key_is_first_varied_in_the_other_case() -> None:
    facts = CallFacts(
        arguments={"query": "needle"},
        schema=FIND_SCHEMA,
        files_read={"docs/b.txt": NOTES["docs/b.txt"].encode()},
        data={"found": [{"path": "docs/b.txt", "line": 1, "text": "one needle"}]},
    )
    texts = [c for c in candidates(facts) if c.family == "argument text"]
    assert texts[0].arguments["query"] == "NEEDLE"


def test_files_sized_for_a_limit_count_the_items_other_files_gave() -> None:
    facts = CallFacts(
        arguments={"query": "needle", "limit": 5},
        schema=FIND_SCHEMA,
        files_read={"docs/b.txt": b"one needle\ntwo\n", "docs/a.txt": b"a needle\n"},
        data={"found": [{"text": "one needle"}, {"text": "a needle"}]},
    )
    recipes = [c.files["docs/b.txt"] for c in candidates(facts) if "docs/b.txt" in c.files]
    sized = [r for r in recipes if not isinstance(r, bytes) and r.repeat == "one needle\n"]
    assert [r.times for r in sized[:3]] == [4, 5, 3]  # 5, 6 and 4 items with a.txt's one


def test_a_change_past_the_cut_of_a_long_result_is_caught_by_its_size_before_the_cut(
    tmp_path: Path,
) -> None:
    files = {"t.csv": "id,name\n1,a\n2,b\n"}
    right = _table(False, result_limit=300)
    cassette = _recorded(tmp_path, right, files, {"path": "t.csv"})
    report = replay_variants(cassette, ToolRegistry([_table(False, rows=99, result_limit=300)]))
    found = {(d.where, d.field) for d in report.differences}
    assert (
        "interaction 1 (table), variant `t.csv with 100 lines after its first`",
        "result.message",
    ) in found


CAT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 100},
        "max_chars": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _cat(result_limit: int) -> ToolSpec:
    @tool(
        name="cat",
        input_schema=CAT_SCHEMA,
        paths=[PathAccess.read("{path}")],
        result_limit=result_limit,
    )
    def cat(ctx: Any, path: str, max_chars: int = 100) -> dict[str, Any]:
        """A text file's first characters."""
        return {"text": ctx.workspace.read_text(path)[:max_chars]}

    return cat


@pytest.mark.parametrize("mutant", [499, 501])
def test_a_result_limit_one_off_is_caught_by_results_sized_to_the_limit(
    tmp_path: Path, mutant: int
) -> None:
    cassette = _recorded(tmp_path, _cat(500), {"notes.txt": "one\ntwo\n"}, {"path": "notes.txt"})
    names = {v.name for v in cassette.interactions[0].variants}
    assert "notes.txt sized to a result of 500 characters (the result limit)" in names
    assert not replay_variants(cassette, ToolRegistry([_cat(mutant)])).ok


def test_a_result_that_never_reaches_the_limit_gets_no_limit_variant(tmp_path: Path) -> None:
    cassette = _recorded(tmp_path, _cat(5000), {"notes.txt": "one\ntwo\n"}, {"path": "notes.txt"})
    assert not [v for v in cassette.interactions[0].variants if "result limit" in v.name]


def test_a_string_resized_for_a_length_bound_still_matches_its_schema_pattern() -> None:
    schema = {
        "type": "object",
        "properties": {"url": {"type": "string", "pattern": "^https?://", "maxLength": 40}},
    }
    facts = CallFacts(arguments={"url": "http://a.example/status"}, schema=schema)
    resized = {c.name: c.arguments["url"] for c in candidates(facts)}
    for name in ("len(url) = maxLength (40)", "len(url) = maxLength + 1 (41)"):
        assert resized[name].startswith("http://")
    assert len(resized["len(url) = maxLength + 1 (41)"]) == 41


def _named(min_length: int) -> ToolSpec:
    schema = {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "minLength": min_length,
                "maxLength": 40,
                "pattern": r"^[a-z][a-z_]*\.md$",
            }
        },
        "required": ["name"],
        "additionalProperties": False,
    }

    @tool(name="named", input_schema=schema)
    def named(ctx: Any, name: str) -> dict[str, Any]:
        """An artifact's name, checked."""
        return {"name": name}

    return named


def test_a_bound_that_changes_only_a_refusal_s_message_is_caught_by_the_message(
    tmp_path: Path,
) -> None:
    cassette = _recorded(tmp_path, _named(4), {}, {"name": "report.md"})
    report = replay_variants(cassette, ToolRegistry([_named(3)]))
    found = {(d.where, d.field) for d in report.differences}
    where = "interaction 1 (named), variant `len(name) = minLength - 1 (3)`"
    assert (where, "result.message") in found
