"""Every code example in README.md and docs/ runs as written.

A Python block runs alone in an empty temporary directory (the
``/srv/agent-workspace`` it may name is made there). A page whose blocks
are project files (``# mytools.py``, ``# test_x.py``) builds that project
in one directory, in page order: a script runs when written, a test file
runs with pytest unless a later shell line of the page runs it, and each
``pytest`` or ``toolguard`` line of a later shell block runs there and must
succeed. A YAML case is replayed; JSON is parsed. A block marked
``run by`` is run by the named test; ``not run`` blocks are few and say why.
"""

from __future__ import annotations

import json
import runpy
import shlex
import sys
from pathlib import Path

import pytest
from doc_pages import Block, blocks, every_block, names_a_test, pages

# Shell lines the fuzzer runs get fewer examples: the command is the same,
# its 200 default examples a tool would cost seconds each.
FAST = {"--toolguard-fuzz": ["--toolguard-fuzz-examples=10"]}
NO_XDIST = ("-p", "no:xdist")
PROJECT_LANGS = {"python", "ini", "sh", "toml", "yaml"}


def _is_project_page(page: Path) -> bool:
    return any(block.file_name for block in blocks(page))


def _standalone() -> list[Block]:
    return [
        block
        for block in every_block()
        if not _is_project_page(block.page)
        and block.lang in ("python", "yaml", "json")
        and not block.not_run
        and block.run_by is None
    ]


@pytest.mark.parametrize("block", _standalone(), ids=lambda block: block.where)
def test_the_example_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester
) -> None:
    if block.lang == "json":
        json.loads(block.code)
        return
    if block.lang == "yaml":
        _replay_case(block, pytester)
        return
    workspace = tmp_path / "agent-workspace"
    workspace.mkdir()
    monkeypatch.chdir(tmp_path)
    code = block.code.replace("/srv/agent-workspace", str(workspace))
    try:
        exec(compile(code, block.where, "exec"), {"__name__": "example"})
    except ModuleNotFoundError as error:
        if (error.name or "").startswith("pytest_toolguard"):
            raise
        pytest.skip(f"{block.where} needs {error.name}, an optional extra's package")


def _replay_case(block: Block, pytester: pytest.Pytester) -> None:
    assert "kind: case" in block.code, f"{block.where}: a YAML block is a case"
    pytester.makefile(".yaml", **{"cases/example": block.code})
    result = pytester.runpytest("--toolguard-replay", "cases", *NO_XDIST)
    result.assert_outcomes(passed=1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [page for page in pages() if _is_project_page(page)],
    ids=lambda page: page.name,
)
def test_the_page_s_project_runs_in_order(page: Path, pytester: pytest.Pytester) -> None:
    project = [block for block in blocks(page) if block.lang in PROJECT_LANGS]
    pytester.syspathinsert()
    for index, block in enumerate(project):
        if block.not_run or block.run_by is not None:
            continue
        if block.file_name:
            _write_and_run(block, project[index + 1 :], pytester)
        elif block.lang == "sh" and any(earlier.file_name for earlier in project[:index]):
            for line in _commands(block):
                _run_command(block, line, pytester)
        elif block.lang == "python":
            workspace = pytester.path / "agent-workspace"
            workspace.mkdir(exist_ok=True)
            code = block.code.replace("/srv/agent-workspace", str(workspace))
            exec(compile(code, block.where, "exec"), {"__name__": "example"})


def _write_and_run(block: Block, later: list[Block], pytester: pytest.Pytester) -> None:
    name = block.file_name
    assert name is not None
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.code, encoding="utf-8")
    if name == "conftest.py" or not name.endswith(".py"):
        return
    if Path(name).name.startswith("test_"):
        if not any(
            name in line for other in later if other.lang == "sh" for line in _commands(other)
        ):
            result = pytester.runpytest(name, *NO_XDIST)
            assert result.ret == 0, f"{block.where}: pytest {name}\n{result.stdout.str()}"
        return
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        for module in [m for m, v in sys.modules.items() if _is_from(v, pytester.path)]:
            del sys.modules[module]


def _is_from(module: object, directory: Path) -> bool:
    file = getattr(module, "__file__", None)
    return bool(file) and Path(file).resolve().is_relative_to(directory.resolve())


def _commands(block: Block) -> list[str]:
    lines = []
    for raw in block.code.splitlines():
        line = raw.split("  #", 1)[0].strip()
        if line.startswith(("pytest ", "toolguard ")) or line in ("pytest", "toolguard"):
            lines.append(line)
    return lines


def _run_command(block: Block, line: str, pytester: pytest.Pytester) -> None:
    words = shlex.split(line)
    arguments = words[1:]
    for option, extra in FAST.items():
        if option in arguments:
            arguments += extra
    if words[0] == "pytest":
        result = pytester.runpytest(*arguments, *NO_XDIST)
        assert result.ret == 0, f"{block.where}: {line}\n{result.stdout.str()}"
    else:
        from pytest_toolguard.cli import main

        assert main(arguments) == 0, f"{block.where}: {line}"


def test_every_block_named_as_run_by_a_test_names_one_that_exists() -> None:
    named = [block for block in every_block() if block.run_by is not None]
    assert named, "some blocks are run by their own tests"
    assert [block.where for block in named if not names_a_test(block.run_by or "")] == []


def test_blocks_not_run_say_why() -> None:
    for block in every_block():
        if block.marker is not None:
            assert block.not_run or block.run_by, f"{block.where}: unknown marker {block.marker!r}"
        if block.not_run:
            assert block.marker and len(block.marker) > len("not run: ") + 10, block.where
