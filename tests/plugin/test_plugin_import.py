"""Start-up cost: every pytest run of a project that installs pytest-toolguard
imports its plugin, so importing it, and a run that uses none of its
features, must not load the heavy libraries behind it.

What is loaded is checked in a fresh interpreter: in this one, the other
tests have imported everything already.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_toolguard

HEAVY = (
    "jsonschema",
    "jsonschema_rs",
    "yaml",
    "hypothesis",
    "pyfakefs",
    "freezegun",
    "time_machine",
)

# An expression, for the code run by the fresh interpreters: the heavy modules loaded.
LOADED_HEAVY = f"sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})"


def fresh_python(code: str) -> object:
    """The value of the last line of ``code`` (a Python literal it prints),
    run in a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_importing_the_plugin_loads_no_heavy_library():
    loaded = fresh_python(f"import pytest_toolguard.plugin, sys; print({LOADED_HEAVY})")

    assert loaded == []


def test_the_heavy_library_check_sees_a_heavy_library():
    # the control of the test above: the same probe, after importing yaml
    loaded = fresh_python(f"import pytest_toolguard.plugin, sys, yaml; print({LOADED_HEAVY})")

    assert "yaml" in loaded


def test_a_run_that_uses_no_toolguard_feature_loads_no_heavy_library(pytester, monkeypatch):
    # Only this plugin is loaded (pyfakefs' and hypothesis' own pytest
    # plugins import their libraries); the conftest notes what is loaded
    # once every hook of the run, unconfigure included, has run.
    pytester.makeconftest(
        f"""
        import sys
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(config):
            with open("loaded.txt", "w") as out:
                out.write(repr({LOADED_HEAVY}))
        """
    )
    pytester.makepyfile("def test_plain():\n    assert True\n")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

    result = pytester.runpytest_subprocess("-p", "pytest_toolguard.plugin")

    result.assert_outcomes(passed=1)
    assert ast.literal_eval((pytester.path / "loaded.txt").read_text()) == []


def test_every_name_in_all_resolves():
    missing = fresh_python(
        "import pytest_toolguard as package\n"
        "print([n for n in package.__all__ if not hasattr(package, n)])"
    )

    assert missing == []


def test_dir_lists_every_name_in_all_before_any_is_used():
    unlisted = fresh_python(
        "import pytest_toolguard as package\n"
        "print(sorted(set(package.__all__) - set(dir(package))))"
    )

    assert unlisted == []


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = pytest_toolguard.no_such_name


def test_the_public_api_is_what_the_docs_teach():
    table = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    public = [name for name in pytest_toolguard.__all__ if name != "__version__"]
    assert [name for name in public if f"`{name}`" not in table] == []
    assert 15 <= len(public) <= 25
