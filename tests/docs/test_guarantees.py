"""The guarantees page states each guarantee with the test that shows it,
and every test a page names exists (read with ``ast``, no collection)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_pages import DOCS, README, every_block, named_tests, names_a_test, pages

GUARANTEES = DOCS / "guarantees.md"


def _statements() -> list[str]:
    """The page's bullets, each with its continuation lines."""
    text = GUARANTEES.read_text(encoding="utf-8")
    return [item.strip() for item in re.split(r"^- ", text, flags=re.M)[1:]]


def test_every_guarantee_names_exactly_one_test() -> None:
    statements = _statements()
    assert len(statements) >= 40
    assert [s.split("\n", 1)[0] for s in statements if len(named_tests(s)) != 1] == []


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_every_test_a_page_names_exists(page: Path) -> None:
    named = named_tests(page.read_text(encoding="utf-8"))
    assert [node for node in named if not names_a_test(node)] == []


def test_a_test_that_is_not_there_is_not_found() -> None:
    here = "tests/docs/test_guarantees.py"
    assert names_a_test(f"{here}::test_every_guarantee_names_exactly_one_test")
    assert not names_a_test(f"{here}::test_no_such_test")
    assert not names_a_test("tests/docs/no_such_file.py::test_x")


def test_every_toolguard_option_a_page_names_is_one_the_plugin_adds(
    pytester: pytest.Pytester,
) -> None:
    named = {
        option
        for page in pages()
        for option in re.findall(r"--toolguard-[a-z-]*[a-z]", page.read_text(encoding="utf-8"))
    }
    assert named, "the pages name options"
    help_text = pytester.runpytest("--help", "-p", "no:xdist").stdout.str()
    assert sorted(option for option in named if option not in help_text) == []


def test_every_toolguard_command_a_page_names_is_one(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_toolguard.cli import main

    named = set()
    for page in pages():
        named |= set(re.findall(r"`toolguard ([a-z][a-z-]*)", page.read_text(encoding="utf-8")))
    for block in every_block():
        if block.lang in ("sh", ""):
            named |= set(re.findall(r"(?:^|# or: )toolguard ([a-z][a-z-]*)", block.code, re.M))
    assert named, "the pages name commands"
    with pytest.raises(SystemExit):
        main(["--help"])
    commands = capsys.readouterr().out
    assert sorted(name for name in named if f"    {name} " not in commands) == []


def test_every_relative_link_of_the_readme_leads_to_a_file() -> None:
    """The site's own links are checked by ``make docs``; the README is not
    part of the site."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links to the pages"
    assert [link for link in relative if not (README.parent / link).exists()] == []
