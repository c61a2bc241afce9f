"""``environment`` runs the call again with the time zone, the terminal
width, the locale and the working directory each set to another value:
a tool whose result or files silently depend on one of them fails it,
naming the input; the correct twin (which may read them, but does not let
them change what it answers) passes, and so does a broken tool that
declares the input (``depends_on_environment``).

==========================  ==============================================================
broken tool (its bug)       problem the ``environment`` cell reports
==========================  ==============================================================
stamp_local                 with another TZ (TZ=<+0545>-05:45) the result's data.at differs
(datetime.now().astimezone())
log_local_time              with another TZ (...) the files it left differ: notes/log.txt
(time.strftime into a file)
wrap_to_terminal            with another COLUMNS (COLUMNS=37) the result's data.text differs
(shutil.get_terminal_size)
rule_to_terminal (a rule    with another COLUMNS (...) the files it left differ: notes/title.md
line as wide as $COLUMNS)
format_total (locale.       with another locale (locale de_DE.UTF-8) the result's data.total
format_string, grouping)    differs
sort_names (locale.strxfrm) with another locale (...) the result's data.names differs
greet_in_lang ($LANG)       with another locale (...) the result's data.greeting differs
read_relative (open()       with another cwd (cwd .../toolguard-elsewhere) the result's ok
against the cwd)            differs (fake and directory world)
write_relative              with another cwd (...) the files it left differ: notes/out.txt
report_cwd (answers         with another cwd (...) the result's data.where differs
os.getcwd())
==========================  ==============================================================
"""

from __future__ import annotations

import locale
import os
import shutil
import textwrap
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from test_faults_catch_bugs import one_call_case, reported

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.faults import run_cell, select_faults, targets
from pytest_toolguard.faults.outcome import CellOutcome
from pytest_toolguard.harness.process_environment import (
    GENERATED_LOCALE,
    generated_locales,
    other_locale,
)
from pytest_toolguard.registry import ENVIRONMENT_INPUTS, PathAccess, ToolRegistry, ToolSpec, tool

FILES = {"notes/todo.md": "- old\n", "notes/names.txt": "b\nA\na\nB\n"}
TEXT = "an ordinary sentence, long enough to be wrapped at a narrow terminal's width"


def run(spec: ToolSpec, arguments: Mapping[str, Any], tmp_path: Path | None = None) -> CellOutcome:
    """The ``environment`` fault against the one call of ``spec``; in the
    directory world when the tool declares it (made in ``tmp_path``)."""
    registry = ToolRegistry([spec])
    cassette = one_call_case(spec.name, arguments, FILES)
    (fault,) = select_faults("environment")
    target = targets(cassette, registry, cassette.source)[0]
    if spec.world == "directory":
        assert tmp_path is not None
        outcome = run_cell(fault, target, registry, world="directory", parent=str(tmp_path))
        assert os.listdir(tmp_path) == []
        return outcome
    return run_cell(fault, target, registry)


# -- the time zone


@tool(name="stamp_local", input_schema={"type": "object"})
def stamp_local(ctx: ToolContext) -> dict[str, Any]:
    """The time now, in the machine's local time."""
    return {"at": datetime.now().astimezone().isoformat()}


@tool(risk=Risk.WRITE, paths=[PathAccess.write("notes/log.txt")], input_schema={"type": "object"})
def log_local_time(ctx: ToolContext) -> dict[str, Any]:
    """Logs the local hour into a file."""
    ctx.workspace.write_text("notes/log.txt", time.strftime("%H:%M") + " checked\n")
    return {"logged": True}


@tool(name="stamp_utc", input_schema={"type": "object"})
def stamp_utc(ctx: ToolContext) -> dict[str, Any]:
    """The time now, in UTC, whatever TZ says (it reads it, for a label)."""
    zone = os.environ.get("TZ")
    return {"at": datetime.now(timezone.utc).isoformat(), "labelled": zone is not None or True}


# -- the terminal width


@tool(input_schema={"type": "object", "properties": {"text": {"type": "string"}}})
def wrap_to_terminal(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Wraps the text to the terminal."""
    return {"text": textwrap.fill(text, shutil.get_terminal_size().columns)}


@tool(
    risk=Risk.WRITE,
    paths=[PathAccess.write("notes/title.md")],
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
)
def rule_to_terminal(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Writes a title underlined as wide as the terminal."""
    width = int(os.environ.get("COLUMNS", "80"))
    ctx.workspace.write_text("notes/title.md", f"{text[:20]}\n{'=' * width}\n")
    return {"written": True}


@tool(input_schema={"type": "object", "properties": {"text": {"type": "string"}}})
def wrap_to_sixty(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Wraps the text to 60 columns (it asks the terminal's size, to log it)."""
    shutil.get_terminal_size()
    return {"text": textwrap.fill(text, 60)}


# -- the locale


@tool(input_schema={"type": "object", "properties": {"amount": {"type": "number"}}})
def format_total(ctx: ToolContext, amount: float) -> dict[str, Any]:
    """The total, formatted by the locale its environment names (it adopts
    that locale, as a command-line program does)."""
    locale.setlocale(locale.LC_NUMERIC, "")
    return {"total": locale.format_string("%.2f", amount * 1000, grouping=True)}


@tool(input_schema={"type": "object"})
def sort_names(ctx: ToolContext) -> dict[str, Any]:
    """The names of a file, sorted by the collation of the locale its
    environment names."""
    locale.setlocale(locale.LC_COLLATE, "")
    names = ctx.workspace.read_text("notes/names.txt").split()
    return {"names": sorted(names, key=locale.strxfrm)}


@tool(input_schema={"type": "object"})
def greet_in_lang(ctx: ToolContext) -> dict[str, Any]:
    """A greeting in the language $LANG names."""
    language = (os.environ.get("LC_ALL") or os.environ.get("LANG") or "en")[:2]
    return {"greeting": {"de": "Hallo", "fr": "Bonjour"}.get(language, "Hello")}


@tool(input_schema={"type": "object", "properties": {"amount": {"type": "number"}}})
def format_total_fixed(ctx: ToolContext, amount: float) -> dict[str, Any]:
    """The total with a fixed format, the names sorted without the locale."""
    names = ctx.workspace.read_text("notes/names.txt").split()
    locale.localeconv()  # read, never used for the answer
    return {"total": f"{amount * 1000:,.2f}", "names": sorted(names, key=str.casefold)}


@tool(input_schema={"type": "object"})
def weekday_by_strftime(ctx: ToolContext) -> dict[str, Any]:
    """The day's name by ``strftime("%A")``: the C locale's, since nothing in
    the process set ``LC_TIME`` from the environment."""
    return {"day": datetime(2024, 5, 1).strftime("%A")}


# -- the working directory


def _read_relative(ctx: ToolContext, path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return {"content": handle.read()}


READ_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
read_relative = tool(name="read_relative", input_schema=READ_SCHEMA)(_read_relative)
read_relative_directory = tool(
    name="read_relative_directory", input_schema=READ_SCHEMA, world="directory"
)(_read_relative)


@tool(risk=Risk.WRITE, paths=[PathAccess.write("notes/out.txt")], input_schema={"type": "object"})
def write_relative(ctx: ToolContext) -> dict[str, Any]:
    """Writes its file relative to the working directory."""
    with open("notes/out.txt", "w", encoding="utf-8") as handle:
        handle.write("done\n")
    return {"written": True}


@tool(input_schema={"type": "object"})
def report_cwd(ctx: ToolContext) -> dict[str, Any]:
    """Where it runs."""
    return {"where": os.getcwd()}


def _read_in_workspace(ctx: ToolContext, path: str) -> dict[str, Any]:
    os.getcwd()  # read, never used for the answer
    return {"content": ctx.workspace.read_text(path)}


read_in_workspace = tool(name="read_in_workspace", input_schema=READ_SCHEMA)(_read_in_workspace)
read_in_workspace_directory = tool(
    name="read_in_workspace_directory", input_schema=READ_SCHEMA, world="directory"
)(_read_in_workspace)


# -- the catch table

AMOUNT = {"amount": 1234.5}
NOTE = {"path": "notes/todo.md"}
WRAP = {"text": TEXT}

CAUGHT = [
    (stamp_local, {}, "TZ", ("the result's data.at differs",)),
    (log_local_time, {}, "TZ", ("the files it left differ: notes/log.txt",)),
    (wrap_to_terminal, WRAP, "COLUMNS", ("the result's data.text differs",)),
    (rule_to_terminal, WRAP, "COLUMNS", ("the files it left differ: notes/title.md",)),
    (greet_in_lang, {}, "locale", ("the result's data.greeting differs",)),
    (read_relative, NOTE, "cwd", ("the result's code differs", "toolguard-elsewhere")),
    (read_relative_directory, NOTE, "cwd", ("the result's code differs",)),
    (write_relative, {}, "cwd", ("the files it left differ: notes/out.txt",)),
    (report_cwd, {}, "cwd", ("the result's data.where differs",)),
]

CORRECT = [
    (stamp_utc, {}),
    (wrap_to_sixty, WRAP),
    (format_total_fixed, AMOUNT),
    (weekday_by_strftime, {}),
    (read_in_workspace, NOTE),
    (read_in_workspace_directory, NOTE),
]


def _other_locale_groups() -> bool:
    """Whether the locale the fault varies to groups thousands (one besides
    C is installed, or ``localedef`` can make one)."""
    name = other_locale()
    # Not generated_locales(): the first cell makes it, inside a world.
    return (name is not None and not name.startswith("C")) or shutil.which("localedef") is not None


needs_a_real_locale = pytest.mark.skipif(
    not _other_locale_groups(),
    reason=f"no locale but C here, and no localedef to make {GENERATED_LOCALE}",
)


@pytest.mark.parametrize(
    ("spec", "arguments", "name", "problem"), CAUGHT, ids=[c[0].name for c in CAUGHT]
)
def test_tool_depending_on_its_environment_fails_naming_the_input(
    spec: ToolSpec, arguments: Any, name: str, problem: tuple[str, ...], tmp_path: Path
) -> None:
    outcome = run(spec, arguments, tmp_path)

    assert outcome.status == "fail", outcome
    assert reported(outcome, f"with another {name} (", *problem), outcome.problems
    assert reported(outcome, f"depends_on_environment=({name!r},)"), outcome.problems


@needs_a_real_locale
@pytest.mark.parametrize(
    ("spec", "arguments", "field"),
    [(format_total, AMOUNT, "data.total"), (sort_names, {}, "data.names")],
    ids=["format_total", "sort_names"],
)
def test_tool_formatting_or_sorting_by_the_locale_fails(
    spec: ToolSpec, arguments: Any, field: str
) -> None:
    outcome = run(spec, arguments)

    assert outcome.status == "fail", outcome
    assert reported(outcome, "with another locale (locale ", f"the result's {field}")


@pytest.mark.parametrize(("spec", "arguments"), CORRECT, ids=[c[0].name for c in CORRECT])
def test_tool_reading_its_environment_without_depending_on_it_passes(
    spec: ToolSpec, arguments: Any, tmp_path: Path
) -> None:
    outcome = run(spec, arguments, tmp_path)

    assert outcome.status == "pass", outcome.problems


@pytest.mark.parametrize(
    ("spec", "arguments", "name", "problem"), CAUGHT, ids=[c[0].name for c in CAUGHT]
)
def test_declaring_the_input_accepts_the_dependency(
    spec: ToolSpec, arguments: Any, name: str, problem: tuple[str, ...], tmp_path: Path
) -> None:
    declared = ToolSpec(
        **{
            field: getattr(spec, field)
            for field in ("name", "description", "input_schema", "handler", "risk", "world")
        },
        paths=spec.paths,
        paths_declared=spec.paths_declared,
        depends_on_environment=(name,),
    )

    outcome = run(declared, arguments, tmp_path)

    assert outcome.status != "fail" or not reported(outcome, f"with another {name} ("), outcome


def test_a_tool_declaring_every_input_has_nothing_to_vary() -> None:
    declared = tool(name="all_declared", depends_on_environment=ENVIRONMENT_INPUTS)(
        stamp_local.handler
    )

    outcome = run(declared, {})

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "nothing to inject", "declares it depends on")


@tool(input_schema={"type": "object"})
def random_id(ctx: ToolContext) -> dict[str, Any]:
    """A fresh id each run (no input of the environment involved)."""
    return {"id": os.urandom(8).hex()}


def test_a_call_differing_in_its_own_environment_blames_no_input() -> None:
    outcome = run(random_id, {})

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "nothing to inject: two runs in the process's own environment")
    assert not reported(outcome, "with another"), outcome


def test_an_unknown_input_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: TZ, COLUMNS"):
        tool(name="bad", depends_on_environment=("TIMEZONE",))(stamp_local.handler)


def test_the_environment_is_put_back_after_the_cell(tmp_path: Path) -> None:
    before = (
        {name: os.environ.get(name) for name in ("TZ", "COLUMNS", "LINES", "LC_ALL", "LANG")},
        locale.setlocale(locale.LC_ALL),
        time.localtime(0).tm_gmtoff,
        os.getcwd(),
    )

    run(stamp_local, {})
    run(read_relative_directory, NOTE, tmp_path)

    after = (
        {name: os.environ.get(name) for name in ("TZ", "COLUMNS", "LINES", "LC_ALL", "LANG")},
        locale.setlocale(locale.LC_ALL),
        time.localtime(0).tm_gmtoff,
        os.getcwd(),
    )
    assert after == before


@pytest.fixture
def fresh_locales(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``generated_locales`` asked anew, in a temporary directory of its own."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    generated_locales.cache_clear()
    yield tmp_path / f"toolguard-locales-{os.getuid()}"
    generated_locales.cache_clear()


@pytest.mark.skipif(shutil.which("localedef") is None, reason="no localedef here")
def test_the_made_locale_is_kept_for_the_next_process(fresh_locales: Path) -> None:
    made = generated_locales()
    assert made == str(fresh_locales) and (fresh_locales / GENERATED_LOCALE).is_dir()
    stamp = (fresh_locales / GENERATED_LOCALE).stat().st_mtime_ns
    generated_locales.cache_clear()  # as another process asks
    assert generated_locales() == made
    assert (fresh_locales / GENERATED_LOCALE).stat().st_mtime_ns == stamp  # not made again
    assert not [
        p for p in fresh_locales.parent.iterdir() if p.name.startswith(fresh_locales.name + "-")
    ]


def test_a_locale_directory_others_may_write_is_never_used(fresh_locales: Path) -> None:
    (fresh_locales / GENERATED_LOCALE).mkdir(parents=True)
    fresh_locales.chmod(0o777)
    assert generated_locales() is None
    assert sorted(p.name for p in fresh_locales.iterdir()) == [GENERATED_LOCALE]
