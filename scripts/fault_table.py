"""Print the fault table of docs/faults.md from the built-in faults' class
attributes (name, applies_to, injection, expected), in catalogue order.

The page is written by hand and may word a row otherwise; the suite checks
only that it lists every built-in fault by name
(``tests/plugin/test_plugin_faults.py``). Paste a new fault's row from here.

Usage: python scripts/fault_table.py [NAME ...]   (default: every fault)
"""

from __future__ import annotations

import sys

from pytest_toolguard.faults import BUILTIN_FAULTS


def rows(names: list[str]) -> list[str]:
    wanted = [fault for fault in BUILTIN_FAULTS if not names or fault.name in names]
    return [
        f"| `{fault.name}` | {fault.applies_to} | {fault.injection} | {fault.expected} |"
        for fault in wanted
    ]


if __name__ == "__main__":
    names = sys.argv[1:]
    if not names:
        print("| fault | applies to | injection | expected outcome |\n|---|---|---|---|")
    print("\n".join(rows(names)))
