"""pytest-xdist's workers share one hash seed: a set's order is the same
on every worker, so two workers never disagree by luck (``hash_seed``
varies the seed on purpose, in interpreters of its own)."""

from __future__ import annotations

import os

import pytest

from pytest_toolguard.plugin import WORKERS_HASH_SEED

WRITES_ITS_HASH = """
import os
import pytest

@pytest.mark.parametrize("n", range(4))
def test_hash(n):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
    with open(os.path.join(os.environ["HASHES"], worker), "w") as out:
        out.write(f"{hash('toolguard')} {os.environ.get('PYTHONHASHSEED')}")
"""


def test_xdist_workers_share_one_hash_seed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    pytester.makepyfile(WRITES_ITS_HASH)

    monkeypatch.setenv("HASHES", str(pytester.mkdir("hashes")))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly")

    result.assert_outcomes(passed=4)
    written = {path.name: path.read_text() for path in (pytester.path / "hashes").iterdir()}
    assert sorted(written) == ["gw0", "gw1"], written
    assert len(set(written.values())) == 1, written
    assert next(iter(written.values())).endswith(f" {WORKERS_HASH_SEED}")


def test_a_seed_the_run_set_is_kept(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "17")
    pytester.makepyfile(WRITES_ITS_HASH)

    monkeypatch.setenv("HASHES", str(pytester.mkdir("hashes")))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly")

    result.assert_outcomes(passed=4)
    written = {path.name: path.read_text() for path in (pytester.path / "hashes").iterdir()}
    assert {text.split()[1] for text in written.values()} == {"17"}, written


def test_a_run_inside_the_process_gives_the_environment_back(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed is the workers' only: a run made in this process (pytester's
    inline run) leaves PYTHONHASHSEED unset as it found it."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("-n", "1", "-p", "no:randomly")

    result.assert_outcomes(passed=1)
    assert "PYTHONHASHSEED" not in os.environ
