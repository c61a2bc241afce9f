"""Cassette file names from pytest node ids.

A test's cassette lives at ``<cassette dir>/<module path>/<test name>.yaml``:
``tests/test_agent.py::TestEdits::test_write[big]`` becomes
``tests/test_agent/TestEdits.test_write_big_.yaml``. The module's path
(relative to the rootdir, without ``.py``) keeps two ``test_x.py`` in
different folders apart.

Guarantees: the same node id always gives the same name, on every machine
and every xdist worker; every path component holds only ``A-Z a-z 0-9 . _
-`` (anything else becomes ``_``), never starts with a dot and is at most
``MAX_NAME_LENGTH`` characters (a longer one keeps its start and ends with a
hash of the whole original text, so two long names stay apart).

Not guaranteed: two node ids that differ only in replaced characters
(``test_a[x]`` and ``test_a_x_``) share a name; give one of them
``@pytest.mark.toolguard(cassette=...)``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath

MAX_NAME_LENGTH = 100
"""Longest path component written; longer names end with a hash."""

_HASH_LENGTH = 12
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(text: str, *, limit: int = MAX_NAME_LENGTH) -> str:
    """``text`` as one file name component: unsafe characters replaced by
    ``_``, a leading dot replaced (no hidden files), and shortened to
    ``limit`` characters with a hash suffix when longer."""
    name = _UNSAFE.sub("_", text) or "_"
    if name.startswith("."):
        name = "_" + name[1:]
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:_HASH_LENGTH]
    return f"{name[: limit - _HASH_LENGTH - 1]}-{digest}"


def cassette_name(nodeid: str) -> PurePosixPath:
    """The cassette path of a test, relative to the cassette directory:
    ``<module path>/<test name>.yaml``. ``ValueError`` for a node id without
    a ``::`` part (not a test)."""
    module, separator, rest = nodeid.partition("::")
    if not separator or not rest:
        raise ValueError(f"not a test's node id: {nodeid!r}")
    if module.endswith(".py"):
        module = module[: -len(".py")]
    folders = [safe_name(part) for part in module.split("/") if part not in ("", ".", "..")]
    test = safe_name(rest.replace("::", "."), limit=MAX_NAME_LENGTH - len(".yaml"))
    return PurePosixPath(*folders, f"{test}.yaml")


def explicit_cassette_name(name: str) -> PurePosixPath:
    """A name given with ``@pytest.mark.toolguard(cassette=...)``, relative
    to the cassette directory: ``.yaml`` added when it has no YAML suffix.
    ``ValueError`` for an absolute name or one that climbs out with ``..``."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"cassette={name!r} must be a relative path inside the cassette directory")
    if path.suffix not in (".yaml", ".yml"):
        path = path.with_name(path.name + ".yaml")
    return path
