"""The suite's own guard (tests/suite_guard.py, loaded by tests/conftest.py):
a run that writes a decoy, leaves a directory world or changes the
project's tree fails, naming what it changed; a clean run passes; the
temporary directory and ``TMPDIR`` are put back either way."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NO_XDIST = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "suite_guard")

WRITES = {
    "a decoy written": (
        "open(os.path.join(tempfile.gettempdir(), 'decoys', 'secret.txt'), 'a').write('x')",
        "decoy changed decoys/secret.txt",
    ),
    "a decoy made writable": (
        "os.chmod(os.path.join(tempfile.gettempdir(), 'decoys', 'crm.db'), 0o666)",
        "decoy changed decoys/crm.db",
    ),
    "a file added beside a decoy": (
        "open(os.path.join(tempfile.gettempdir(), 'proj2', 'new.txt'), 'w').write('x')",
        "decoy added proj2/new.txt",
    ),
    "a decoy removed": (
        "os.remove(os.path.join(tempfile.gettempdir(), 'secret-above.txt'))",
        "decoy removed secret-above.txt",
    ),
    "a world left": (
        "os.mkdir(os.path.join(tempfile.gettempdir(), 'toolguard-world-left'))",
        "a directory world left behind: toolguard-world-left",
    ),
    "the project changed": (
        "open(os.path.join(str(request.config.rootpath), 'cassettes', 'new.yaml'), 'w').write('x')",
        "the project tree: added cassettes/new.yaml",
    ),
}


@pytest.fixture
def shared_tempdir() -> str:
    """The temporary directory other processes of the suite share."""
    return tempfile.gettempdir()


@pytest.fixture(autouse=True)
def private_tempdir(
    shared_tempdir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The inner run's temporary directory is this test's own (``TMPDIR`` and
    ``tempfile.tempdir``, which the guard reads and xdist's workers inherit):
    what another process makes in the shared one is never seen here, and
    what this run leaves is."""
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setenv("TMPDIR", str(private))
    yield private


def _project(pytester: pytest.Pytester, body: str) -> None:
    (pytester.path / "cassettes").mkdir()
    (pytester.path / "cassettes" / "kept.yaml").write_text("kept\n")
    pytester.makepyfile(
        test_it=f"""
import os, tempfile

def test_it(request):
    {body}
"""
    )


@pytest.mark.parametrize("case", list(WRITES))
def test_a_run_writing_outside_its_worlds_fails_naming_it(
    pytester: pytest.Pytester, case: str
) -> None:
    body, line = WRITES[case]
    _project(pytester, body)
    environment, tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    result = pytester.runpytest(*NO_XDIST)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*written outside the worlds*", line])
    assert (os.environ.get("TMPDIR"), tempfile.tempdir) == (environment, tempdir)
    assert os.listdir(tempdir) == []


def test_a_clean_run_passes_and_leaves_nothing(
    pytester: pytest.Pytester, private_tempdir: Path, shared_tempdir: str
) -> None:
    # While it runs, another process's run starts in the shared directory
    # (an xdist worker's): none of this run's business.
    _project(
        pytester,
        f"assert os.path.dirname(tempfile.gettempdir()) == {str(private_tempdir)!r}; "
        "assert os.path.basename(tempfile.gettempdir()).startswith('toolguard-suite-'); "
        "open(os.path.join(tempfile.mkdtemp(), 'x'), 'w').write('x'); "
        f"open(os.path.join({shared_tempdir!r}, 'elsewhere'), 'w').write("
        f"tempfile.mkdtemp(prefix='toolguard-suite-', dir={shared_tempdir!r}))",
    )
    try:
        result = pytester.runpytest(*NO_XDIST)
    finally:
        elsewhere = Path(shared_tempdir, "elsewhere")
        if elsewhere.exists():
            os.rmdir(elsewhere.read_text())
            elsewhere.unlink()
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    assert "written outside the worlds" not in result.stdout.str()
    assert os.listdir(private_tempdir) == []
    assert (os.environ.get("TMPDIR"), tempfile.tempdir) == (str(private_tempdir),) * 2


def test_under_xdist_the_controller_catches_what_a_worker_wrote(
    pytester: pytest.Pytester, private_tempdir: Path
) -> None:
    """The workers inherit the suite's TMPDIR from the controller, which
    alone plants the decoys and judges them after every worker is done."""
    # The workers import the plugin from the project, as a project would have it.
    shutil.copy(Path(__file__).parent.parent / "suite_guard.py", pytester.path)
    pytester.makeconftest('pytest_plugins = ["suite_guard"]')
    _project(pytester, WRITES["a decoy written"][0])
    result = pytester.runpytest("-p", "xdist", "-n", "2", "-p", "no:hypothesispytest")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*written outside the worlds*", WRITES["a decoy written"][1]])
    assert os.listdir(private_tempdir) == []
