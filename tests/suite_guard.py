"""A pytest plugin for the whole suite: no test, replay, cell or import
writes outside its world.

Before the first test (on the xdist controller only, before workers start,
so they inherit it) the suite gets a temporary directory of its own
(``TMPDIR``): every directory world, every ``tmp_path`` and every
``mkdtemp`` is made there. Beside them it plants a decoy tree: files a
world's tool must never reach, and directories named like the workspaces
the tests record in (``proj``, ``proj2``, ``ws``) holding decoys. After the
last test:

- the decoy tree must be byte for byte what it was (modes too);
- the temporary directory must hold no ``toolguard-world-*`` directory:
  every world was removed;
- the project's own tree (the original workspace: cassettes, cases,
  examples, tests, sources; caches excepted) must be unchanged.

Any difference fails the run, listed in the terminal summary.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_toolguard.harness.directory_world import WORLD_PREFIX, world_directories

SKIPPED = frozenset(
    {
        ".git",
        ".venv",
        "__pycache__",
        ".pytest_cache",
        ".hypothesis",
        ".mypy_cache",
        ".ruff_cache",
        ".import_linter_cache",
        "build",
        "dist",
    }
)
"""What a test run may change in the project: caches and build output."""

DECOYS = {
    "decoys/secret.txt": "decoy: a secret beside the worlds\n",
    "decoys/deep/er/secret.txt": "decoy: deeper\n",
    "decoys/crm.db": "decoy: not a database\n",
    "proj/keep.txt": "decoy: a directory named like a recorded workspace\n",
    "proj2/keep.txt": "decoy: shares a workspace's prefix\n",
    "ws/keep.txt": "decoy: a directory named like a recorded workspace\n",
    "secret-above.txt": "decoy: above every world\n",
}
"""The decoy tree, relative to the suite's temporary directory."""

Tree = dict[str, tuple[int, bytes]]


def snapshot(top: Path, skipped: frozenset[str] = frozenset()) -> Tree:
    """Every entry under ``top`` but those named in ``skipped`` (and
    ``*.egg-info``): mode and bytes (a link's target)."""
    entries: Tree = {}
    for directory, subdirs, names in os.walk(top):
        subdirs[:] = [name for name in subdirs if not _skipped(name, skipped)]
        for name in subdirs + names:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(path))
            elif stat.S_ISREG(st.st_mode) and not _skipped(name, skipped):
                data = Path(path).read_bytes()
            else:
                data = b""
            entries[os.path.relpath(path, top)] = (st.st_mode, data)
    return entries


def _skipped(name: str, skipped: frozenset[str]) -> bool:
    return name in skipped or (bool(skipped) and name.endswith((".egg-info", ".pyc")))


def changes(before: Tree, after: Tree) -> list[str]:
    """``added x``, ``removed x``, ``changed x`` for each entry that differs."""
    found = [f"removed {name}" for name in sorted(before.keys() - after.keys())]
    found += [f"added {name}" for name in sorted(after.keys() - before.keys())]
    found += [
        f"changed {name}"
        for name in sorted(before.keys() & after.keys())
        if before[name] != after[name]
    ]
    return found


@dataclass
class SuiteGuard:
    """The guard of one run (see the module docstring)."""

    project: Path
    temporary: Path = field(init=False)
    _environment: str | None = field(init=False, default=None)
    _tempdir: str | None = field(init=False, default=None)
    _decoys: Tree = field(init=False, default_factory=dict)
    _project: Tree = field(init=False, default_factory=dict)

    def start(self) -> None:
        self.temporary = Path(tempfile.mkdtemp(prefix="toolguard-suite-"))
        # Like the system's /tmp: tests that drop privileges still make their files there.
        os.chmod(self.temporary, 0o1777)
        for name, text in DECOYS.items():
            path = self.temporary / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self._decoys = self.decoys()
        self._project = snapshot(self.project, SKIPPED)
        self._environment = os.environ.get("TMPDIR")
        self._tempdir = tempfile.tempdir
        os.environ["TMPDIR"] = str(self.temporary)
        tempfile.tempdir = None  # asked again: the suite's directory

    def decoys(self) -> Tree:
        """The decoy tree as it is now (and whatever was added inside it)."""
        tree: Tree = {}
        for top in sorted({name.split("/")[0] for name in DECOYS}):
            path = self.temporary / top
            if path.is_dir() and not path.is_symlink():
                tree.update({f"{top}/{name}": entry for name, entry in snapshot(path).items()})
            if path.exists() or path.is_symlink():
                st = os.lstat(path)
                data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
                tree[top] = (st.st_mode, data)
        return tree

    def finish(self) -> list[str]:
        """What the run changed that it must not have; the suite's
        temporary directory removed and the environment put back."""
        if self._environment is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = self._environment
        tempfile.tempdir = self._tempdir
        problems = [f"decoy {change}" for change in changes(self._decoys, self.decoys())]
        problems += [
            f"a directory world left behind: {os.path.basename(path)}"
            for path in world_directories(str(self.temporary))
        ]
        problems += [
            f"the project tree: {change}"
            for change in changes(self._project, snapshot(self.project, SKIPPED))
        ]
        shutil.rmtree(self.temporary, ignore_errors=True)
        return problems


_GUARD = pytest.StashKey[SuiteGuard]()
_PROBLEMS = pytest.StashKey[list[str]]()


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config):
        guard = SuiteGuard(session.config.rootpath)
        guard.start()
        session.config.stash[_GUARD] = guard


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    guard = session.config.stash.get(_GUARD, None)
    if guard is None:
        return
    problems = guard.finish()
    session.config.stash[_PROBLEMS] = problems
    if problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    problems = terminalreporter.config.stash.get(_PROBLEMS, [])
    if problems:
        terminalreporter.section("written outside the worlds", red=True)
        for problem in problems[:50]:
            terminalreporter.line(problem)
        if len(problems) > 50:
            terminalreporter.line(f"and {len(problems) - 50} more")


__all__ = ["DECOYS", "WORLD_PREFIX", "SuiteGuard", "changes", "snapshot"]
