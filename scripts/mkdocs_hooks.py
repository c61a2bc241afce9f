"""MkDocs hooks (``hooks:`` in mkdocs.yml): pages that show what the code
defines get it from the code when the site is built, so that no table is
written twice.

``<!-- built-in faults -->`` on a page becomes the table of the built-in
faults, one row per fault of ``BUILTIN_FAULTS`` in catalogue order, from
its class attributes (``name``, ``applies_to``, ``injection``,
``expected``). A new fault needs no row written by hand.
"""

from __future__ import annotations

from typing import Any

from pytest_toolguard.faults import BUILTIN_FAULTS

FAULT_TABLE_MARK = "<!-- built-in faults -->"


def fault_table() -> str:
    """The built-in faults as a Markdown table."""
    rows = [
        f"| `{fault.name}` | {fault.applies_to} | {fault.injection} | {fault.expected} |"
        for fault in BUILTIN_FAULTS
    ]
    return "\n".join(
        ["| fault | applies to | injection | expected outcome |", "|---|---|---|---|", *rows]
    )


def on_page_markdown(markdown: str, **_: Any) -> str:
    if FAULT_TABLE_MARK not in markdown:
        return markdown
    return markdown.replace(FAULT_TABLE_MARK, fault_table())
