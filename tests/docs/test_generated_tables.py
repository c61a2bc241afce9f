"""Tables the site makes from the code when it is built
(``scripts/mkdocs_hooks.py``): every built-in fault gets its row, from its
own class attributes, on the page that marks where the table goes."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from doc_pages import DOCS, ROOT

from pytest_toolguard.faults import BUILTIN_FAULTS


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_faults_page_marks_where_the_table_goes_once() -> None:
    hooks = _hooks()
    assert (DOCS / "faults.md").read_text().count(hooks.FAULT_TABLE_MARK) == 1
    assert "mkdocs_hooks.py" in (ROOT / "mkdocs.yml").read_text()


def test_the_built_page_has_one_row_per_built_in_fault_in_catalogue_order() -> None:
    hooks = _hooks()
    built = hooks.on_page_markdown((DOCS / "faults.md").read_text())
    assert hooks.FAULT_TABLE_MARK not in built
    rows = [line for line in built.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [fault.name for fault in BUILTIN_FAULTS]
    for fault, row in zip(BUILTIN_FAULTS, rows, strict=True):
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[1:] == [fault.applies_to, fault.injection, fault.expected], fault.name
        assert all(cells), fault.name
