"""``python -m pytest_toolguard``: the ``toolguard`` command."""

from __future__ import annotations

import os
import sys

# `python -m` put the current directory first on sys.path: a file there
# (an agent may write one) would stand in for the standard library or an
# installed package in everything imported from here on. The command finds
# a registry beside the project after those (``cli.main``). What was
# imported before this line could have come from there: the hook forbids
# those names in the directory (``registry_loading.IMPORTED_FROM_CWD_FIRST``).
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]
    _EARLY = sorted({name.partition(".")[0] for name in sys.modules})
else:
    _EARLY = []

from .cli import main  # noqa: E402 - after the path is made safe
from .replay import registry_loading  # noqa: E402

registry_loading.IMPORTED_FROM_CWD_FIRST += _EARLY
raise SystemExit(main())
