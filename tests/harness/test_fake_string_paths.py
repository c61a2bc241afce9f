"""The fake filesystem's faster ``make_string_path`` gives pyfakefs's value."""

from __future__ import annotations

import pathlib

import pytest
from pyfakefs import fake_filesystem, fake_os, fake_path, fake_scandir
from pyfakefs import helpers as fake_helpers
from pyfakefs.fake_filesystem_unittest import Patcher

from pytest_toolguard.harness import fake_filesystem as toolguard_fake_filesystem

PYFAKEFS_MODULES = (fake_filesystem, fake_os, fake_path, fake_scandir)


class _StrSubclass(str):
    pass


@pytest.mark.parametrize(
    "path",
    ["/ws/a.txt", b"/ws/a.txt", "", _StrSubclass("/ws/a"), pathlib.PurePosixPath("/ws/a")],
    ids=["str", "bytes", "empty", "str-subclass", "pathlike"],
)
def test_pyfakefs_modules_make_string_path_gives_pyfakefs_value(path: object) -> None:
    assert toolguard_fake_filesystem.__name__  # imported: the fast function is installed
    for module in PYFAKEFS_MODULES:
        got = module.make_string_path(path)  # type: ignore[attr-defined]
        want = fake_helpers.make_string_path(path)  # type: ignore[call-overload]
        assert (type(got), got) == (type(want), want)


def test_pyfakefs_modules_make_string_path_refuses_what_pyfakefs_refuses() -> None:
    for module in PYFAKEFS_MODULES:
        with pytest.raises(TypeError):
            module.make_string_path(3)  # type: ignore[attr-defined]


def test_pyfakefs_modules_make_string_path_converts_a_fake_path() -> None:
    with Patcher():
        fake = pathlib.Path("/ws/a.txt")  # pyfakefs's FakePath while patched
        for module in PYFAKEFS_MODULES:
            assert module.make_string_path(fake) == "/ws/a.txt"  # type: ignore[attr-defined]
