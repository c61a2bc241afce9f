"""The shape of the package, checked: what ARCHITECTURE.md promises."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest_toolguard
from pytest_toolguard.errors import ToolguardError


def _modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(pytest_toolguard.__path__, "pytest_toolguard.")
        if not info.name.endswith("__main__")
    )


NOT_CATCHABLE_AS_EXCEPTION = {"pytest_toolguard.runtime.inline.DeadlinePassed"}
"""BaseExceptions on purpose: a handler's ``except Exception`` must not catch
the inline deadline (``except ToolguardError`` would be ``except Exception``)."""


def test_every_exception_of_ours_derives_from_toolguard_error() -> None:
    outside = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ != name or not issubclass(value, BaseException):
                continue
            if issubclass(value, Warning):
                continue
            if f"{name}.{value.__qualname__}" in NOT_CATCHABLE_AS_EXCEPTION:
                assert not issubclass(value, Exception)
                continue
            if not issubclass(value, ToolguardError):
                outside.append(f"{name}.{value.__qualname__}")
    assert outside == []


def test_the_exception_check_sees_every_module() -> None:
    # the control of the test above: it walks the subpackages too
    names = _modules()
    assert "pytest_toolguard.sandbox" in names
    assert "pytest_toolguard.replay.cassette" in names
    assert "pytest_toolguard.bridges.guards.mcp_server" in names


ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_toolguard"
LIMIT = 600


def _sources() -> dict[str, Path]:
    return {
        path.relative_to(ROOT).as_posix(): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, name: str | None = None) -> list[tuple[str, str, int]]:
    """(module imported from, name imported, line) for every import of ours
    in ``path`` (the module ``name``), relative ones resolved."""
    here = (name or _module_name(path)).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "pytest_toolguard":
                found += [(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pytest_toolguard":
                    found.append((alias.name, "", node.lineno))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_a_private_name_from_another_module() -> None:
    private = []
    for shown, path in _sources().items():
        for module, name, line in _imports(path):
            if any(_private(part) for part in module.split(".")) or _private(name):
                private.append(f"{shown}:{line}: {module} {name}".strip())
    assert private == []


def test_the_private_name_check_sees_a_private_import(tmp_path: Path) -> None:
    # the control of the test above: the same reading finds each kind
    module = tmp_path / "cell.py"
    module.write_text(
        "from .prefixes import _Saved\n"
        "def f():\n    from ..replay import _lazy\n"
        "import pytest_toolguard._secret\n"
    )
    found = _imports(module, "pytest_toolguard.faults.cell")
    flagged = [
        (imported, name)
        for imported, name, _ in found
        if any(_private(part) for part in imported.split(".")) or _private(name)
    ]
    assert sorted(flagged) == [
        ("pytest_toolguard._secret", ""),
        ("pytest_toolguard.faults.prefixes", "_Saved"),
        ("pytest_toolguard.replay", "_lazy"),
    ]


def test_architecture_md_lists_every_module_once() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    listed = re.findall(r"^\| `(pytest_toolguard/[^`]+\.py)` \|", text, re.MULTILINE)
    assert sorted(listed) == sorted(_sources())


def test_no_module_outside_the_runtime_is_over_600_lines_without_a_reason() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    reasons = text[text.index("## Over 600 lines, and why") :]
    long = [
        shown
        for shown, path in _sources().items()
        if not shown.startswith("pytest_toolguard/runtime/")
        and len(path.read_text().splitlines()) > LIMIT
    ]
    assert [shown for shown in long if f"`{shown}`" not in reasons] == []


def test_every_test_path_the_ci_scripts_and_makefile_name_exists() -> None:
    # A test file moved to its layer's directory must be followed by the
    # scripts that run it by name (.ci/mcp-v1-check once ran a path that
    # no longer existed, and only a fresh-clone CI run saw it).
    scripts = [*sorted((ROOT / ".ci").iterdir()), ROOT / "Makefile"]
    named = {
        (script.name, path)
        for script in scripts
        for path in re.findall(r"\btests/[\w/.-]+\.py\b", script.read_text())
    }
    assert named, "the check found no test paths at all"
    assert sorted((name, path) for name, path in named if not (ROOT / path).exists()) == []


ISSUE_CITATION = re.compile(r"\bissue\s+#?\d+|\bfindings?\s+\d+", re.IGNORECASE)


def test_no_comment_or_page_cites_an_issue_number() -> None:
    # A reader cannot look an issue number up: the text says the reason.
    places = [
        *ROOT.glob("pytest_toolguard/**/*.py"),
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("benchmarks/*.py"),
        *ROOT.glob("scripts/*.py"),
        *ROOT.glob("examples/**/*.py"),
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("*.md"),
        ROOT / "benchmarks" / "README.md",
    ]
    assert len(places) > 100, "the check found too few files"
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in places
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ISSUE_CITATION.search(line)
    ]
    assert cited == []
