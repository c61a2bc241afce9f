"""The documentation's pages and their code blocks, read the way the tests
under ``tests/docs`` need them.

A block's marker is an HTML comment on the line just before its fence (the
built site does not show it):

- ``<!-- not run: why -->``: the block is not executed (a fragment of a
  larger program, a command for another machine);
- ``<!-- run by tests/x.py::test_y -->``: a named test runs the block and
  checks more than that it runs.

A Python block whose first line is ``# name.py`` (or ``# pytest.ini``) is a
file of its page's project, written into one temporary directory in page
order; a shell block after such a file runs its ``pytest`` and
``toolguard`` lines there.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<text>.*?)\s*-->\s*$")
FILE_HEADER = re.compile(r"^#\s+(?P<name>[\w./-]+\.(?:py|ini|toml|cfg|yaml))\s*$")
NODE_ID = re.compile(r"`(?P<id>tests/[\w/]+\.py::[\w:\[\]-]+)`")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The project file this block is, from its first line, or None."""
        first = self.code.split("\n", 1)[0]
        match = FILE_HEADER.match(first)
        return match.group("name") if match else None

    @property
    def not_run(self) -> bool:
        return self.marker is not None and self.marker.startswith("not run:")

    @property
    def run_by(self) -> str | None:
        if self.marker is not None and self.marker.startswith("run by "):
            return self.marker.removeprefix("run by ").strip()
        return None


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent = len(opening.group("indent"))
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        before = index - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = MARKER.match(lines[before]) if before >= 0 else None
        found.append(
            Block(page, index + 1, opening.group("lang"), code, marker and marker.group("text"))
        )
        index = end + 1
    return found


def every_block() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def named_tests(text: str) -> list[str]:
    """The test node ids a page names in backticks."""
    return [match.group("id") for match in NODE_ID.finditer(text)]


def names_a_test(node_id: str) -> bool:
    """Whether the node id names a test function (or a class's method) in
    its file, read with ``ast`` (no import, no collection)."""
    path, _, rest = node_id.partition("::")
    file = ROOT / path
    if not file.is_file():
        return False
    names = rest.split("[", 1)[0].split("::")
    scope: list[ast.stmt] = ast.parse(file.read_text(encoding="utf-8")).body
    for name in names:
        match = next(
            (
                node
                for node in scope
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name == name
            ),
            None,
        )
        if match is None:
            return False
        scope = match.body if isinstance(match, ast.ClassDef) else []
    return True
