"""The shape of the package, checked: what ARCHITECTURE.md promises."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

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


# -- the public surface: ARCHITECTURE.md's table, and nothing else ------------------


def _surface(text: str) -> dict[str, list[str]]:
    """Each public package of the table under "The public surface", with
    its names."""
    section = text[text.index("## The public surface") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(pytest_toolguard[\w.]*)` \| (.*) \|$", section, re.MULTILINE)
    return {package: re.findall(r"`(\w+)`", names) for package, names in rows}


SURFACE = _surface((ROOT / "ARCHITECTURE.md").read_text())


def _init(package: str) -> Path:
    return ROOT.joinpath(*package.split("."), "__init__.py")


def _defines_all(path: Path) -> bool:
    return any(
        isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(target, ast.Name) and target.id == "__all__"
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for node in ast.parse(path.read_text()).body
    )


def test_the_surface_table_lists_the_top_level_and_the_documented_packages() -> None:
    # the control of the tests below: they read a table, not nothing
    assert {
        "pytest_toolguard",
        "pytest_toolguard.replay",
        "pytest_toolguard.faults",
        "pytest_toolguard.fuzz",
        "pytest_toolguard.bridges",
    } <= set(SURFACE)
    assert "ToolRuntime" in SURFACE["pytest_toolguard"]
    assert all(names for names in SURFACE.values())


def test_each_public_package_exports_the_names_of_its_row() -> None:
    for package, names in SURFACE.items():
        module = importlib.import_module(package)
        assert sorted(module.__all__) == sorted(names), package
        assert [name for name in names if not hasattr(module, name)] == [], package
        assert set(names) <= set(dir(module)), package


def _typed_and_loaded(path: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]] | None:
    """For an ``__init__`` that calls ``lazy_exports``: the (module, name)
    pairs its ``TYPE_CHECKING`` block imports, and those of the table it
    gives ``lazy_exports``; None for a package that imports plainly."""
    tree = ast.parse(path.read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "lazy_exports"
    ]
    if not calls:
        return None
    table = ast.literal_eval(calls[0].args[1])
    loaded = {(module, name) for module, names in table.items() for name in names}
    typed = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom) and imported.level == 1
                for alias in imported.names:
                    # ``X as X``: what a type checker takes as a re-export
                    assert alias.asname == alias.name, ast.unparse(imported)
                    typed.add((imported.module or "", alias.name))
    return typed, loaded


def test_a_package_loading_its_names_on_first_use_types_the_same_names() -> None:
    lazy = 0
    for package in SURFACE:
        found = _typed_and_loaded(_init(package))
        if found is not None:
            typed, loaded = found
            assert typed == loaded, package
            lazy += 1
    assert lazy >= 2  # the top level and replay at least


def test_only_the_public_packages_define_all() -> None:
    public = {_init(package).relative_to(ROOT).as_posix() for package in SURFACE}
    listing = {shown for shown, path in _sources().items() if _defines_all(path)}
    assert sorted(listing - public) == []


def test_the_all_check_sees_an_all(tmp_path: Path) -> None:
    # the control of the test above
    module = tmp_path / "helpers.py"
    module.write_text("__all__ = ['shared']\nshared = 1\n")
    assert _defines_all(module)
    module.write_text("shared = 1\n")
    assert not _defines_all(module)


def _defined(path: Path) -> set[str]:
    """The names a module binds at its top level (in ``if``/``try`` blocks too)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(
                    found.id
                    for target in targets
                    for found in ast.walk(target)
                    if isinstance(found, ast.Name)
                )
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return names


RE_EXPORTS_LEFT_FOR_THE_BRIDGES_SPLIT = {
    ("pytest_toolguard/bridges/__init__.py", "schema_from_signature"),
    ("pytest_toolguard/bridges/mcp_http.py", "MCPServerDied"),
    ("pytest_toolguard/bridges/mcp_http.py", "StdioServer"),
    ("pytest_toolguard/cli_mcp.py", "from_mcp_http"),
}
"""Imports through a bridges module that only passes the name on: the
bridges' new layout imports each from where it is defined."""


def _through_internal_modules(files: dict[str, tuple[str, Path]]) -> list[tuple[str, str, str]]:
    """(importing file, name, module) for every import of a name from an
    internal module of ours that does not define it (it re-exports it);
    ``files`` maps each file shown to its module name and path."""
    by_module = {_module_name(path): path for path in _sources().values()}
    public = set(SURFACE)
    found = []
    for shown, (name_of_module, path) in files.items():
        for module, name, _ in _imports(path, name_of_module):
            if not name or module in public or module not in by_module:
                continue
            if f"{module}.{name}" in by_module or name in _defined(by_module[module]):
                continue
            found.append((shown, name, module))
    return found


@pytest.mark.slow
def test_internal_code_imports_a_name_from_where_it_is_defined_or_a_public_package() -> None:
    # A module can then move by rewriting the import lines that name it.
    files = {shown: (_module_name(path), path) for shown, path in _sources().items()}
    found = _through_internal_modules(files)
    assert [f for f in found if f[:2] not in RE_EXPORTS_LEFT_FOR_THE_BRIDGES_SPLIT] == []


def test_the_re_export_check_sees_a_re_export(tmp_path: Path) -> None:
    # the control of the test above: the runtime imports CANCELLED_MESSAGE
    # from runtime/limits for its own use, and defines ToolRuntime
    module = tmp_path / "probe.py"
    module.write_text("from ..runtime import CANCELLED_MESSAGE, ToolRuntime\n")
    found = _through_internal_modules({"probe.py": ("pytest_toolguard.faults.probe", module)})
    assert found == [("probe.py", "CANCELLED_MESSAGE", "pytest_toolguard.runtime")]


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
