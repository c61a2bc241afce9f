"""The wheel carries every file the package needs at run time.

An editable install reads files from the checkout, so a data file missing
from ``package-data`` only shows in an installed wheel: every cassette then
failed to load (``cassette.schema.json``). ``.ci/run`` installs the real
wheel; this test catches the same mistake in a second, from pyproject.toml.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_toolguard"


def _package_data_globs() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data: dict[str, list[str]] = config["tool"]["setuptools"]["package-data"]
    return data["pytest_toolguard"]


def _data_files() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    )


def test_the_package_has_data_files_to_check() -> None:
    names = [path.name for path in _data_files()]
    assert "cassette.schema.json" in names
    assert "py.typed" in names


@pytest.mark.parametrize("path", _data_files(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_data_file_is_declared_as_package_data(path: Path) -> None:
    declared = {match for pattern in _package_data_globs() for match in PACKAGE.glob(pattern)}
    assert path in declared, (
        f"{path.relative_to(ROOT)} is not matched by [tool.setuptools.package-data]: "
        "an installed wheel would lack it"
    )
