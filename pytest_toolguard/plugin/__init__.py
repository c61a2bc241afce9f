"""pytest glue: options, ini values, the marker, fixtures, items and hooks.

All record, replay, fault and fuzz logic lives in the library (``replay``,
``faults``, ``fuzz``, over ``harness``); this package only connects it to
pytest. The hooks are here; ``options`` declares the options and ini
values, ``run`` holds the one run object, ``items`` the collectors and
items, ``fixtures`` the fixtures, ``outcomes`` what an item's report
carries, ``collection`` the registry known at collection.

- ``pytest --toolguard-replay`` collects every ``*.yaml``/``*.yml`` under
  the ini ``toolguard_cassette_dir`` (default ``cassettes``) and
  ``toolguard_case_dir`` (default ``cases``), relative to the rootdir, as one
  item each (``cassettes/feedback.yaml::replay``). When no paths are given on
  the command line, both directories are added to the run (as
  ``--doctest-modules`` adds doctests). Without the flag these files are
  never collected.
- The replay items are ``pytest.Function``s, so they get fixtures: the tools
  come from the ``toolguard_registry`` fixture and placeholder values from
  ``toolguard_secrets``. Their defaults read the ini values
  ``toolguard_registry`` / ``toolguard_secrets`` (``package.module:attribute``);
  override either fixture in a ``conftest.py`` (the rootdir's, or the
  cassette directory's) to supply them in code.
- The ``toolguard`` fixture records or plays back a test's cassette (see
  ``pytest_toolguard.replay.tape`` and ``record_mode``).
- ``@pytest.mark.toolguard(cassette=, capabilities=, volatile=, record_mode=,
  variables=, hooks=)``: any other argument, or a wrong value, fails that test at
  setup with a message naming it (on every marked test, fixture or not).
- ``pytest --toolguard-fuzz`` collects, after the paths, a ``toolguard-fuzz``
  collector with one item per tool of the ``toolguard_registry`` fixture
  (``items.FuzzTools`` says how the tools are named at collection); its
  summary line follows the run.
- After a run with ``--toolguard-replay``, one summary line. What each item
  found rides on its report (``outcomes``), so under xdist the controller
  adds up as reports arrive, and a crashed worker loses no other item.

Start-up cost: every pytest run of a project that installs this package
imports this package, so at module level it imports only pytest and small
modules of ours. The library (jsonschema, yaml, pyfakefs, hypothesis behind
it) is imported inside the hook, item or fixture that uses it, so a run that
never replays, fuzzes or asks for a toolguard fixture does not pay for it.
``tests/plugin/test_plugin_import.py`` checks that.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

from ..options import FUZZ_NODE
from . import hookspecs, outcomes
from .fixtures import record_phase

# The fixtures, imported so that pytest finds them in this plugin.
from .fixtures import toolguard as toolguard
from .fixtures import toolguard_registry as toolguard_registry
from .fixtures import toolguard_runtime as toolguard_runtime
from .fixtures import toolguard_secrets as toolguard_secrets
from .items import CassetteFile, FuzzTools
from .options import add_options
from .outcomes import YAML_SUFFIXES
from .run import RUN, ToolguardRun, run_of

RUN_PLUGIN = "toolguard-run"
"""The name the run is registered under: it adds up and reports (see ``run``)."""

MARKER = (
    "toolguard(cassette=None, capabilities=None, volatile=(), record_mode=None, "
    "variables=None, hooks=(), world=None): the cassette of the toolguard fixture, the "
    "session's capabilities, fields never compared, the record mode, the runtime's "
    "variables, the hooks it records with (an Approver; playback grants the recorded "
    "approvals) and the world it plays back in (fake or directory; over "
    "--toolguard-world and the ini's toolguard_world)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    # Fault cells carry it (items.InteractionCells); xdist registers it too.
    config.addinivalue_line(
        "markers", "xdist_group(name): the group pytest-xdist's --dist loadgroup keeps together"
    )
    _share_hash_seed(config)
    run = config.stash[RUN] = ToolguardRun(config)
    config.pluginmanager.register(run, RUN_PLUGIN)
    if run.replaying and config.args_source is not pytest.Config.ArgsSource.ARGS:
        _add_replay_dirs(config, run)


WORKERS_HASH_SEED = "0"
"""The ``PYTHONHASHSEED`` pytest-xdist workers get when none was set."""


def _share_hash_seed(config: pytest.Config) -> None:
    """pytest-xdist's workers (started after this hook, with this
    environment) share one hash seed, unless the run set one: a set's order
    is then the same on every worker and every run, so two workers never
    disagree about a cassette by luck (``hash_seed`` varies it on purpose)."""
    distributed = config.getoption("dist", "no") != "no" or config.getoption("numprocesses", None)
    if distributed and not hasattr(config, "workerinput") and "PYTHONHASHSEED" not in os.environ:
        os.environ["PYTHONHASHSEED"] = WORKERS_HASH_SEED
        config.stash[_SET_HASH_SEED] = True


_SET_HASH_SEED: pytest.StashKey[bool] = pytest.StashKey()
"""Whether this run set ``PYTHONHASHSEED`` (taken back when it ends: a run
inside another process, pytester's, leaves its environment as it was)."""


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_SET_HASH_SEED, False):
        os.environ.pop("PYTHONHASHSEED", None)
    run = config.stash.get(RUN, None)
    if run is not None:
        run.close()
        config.pluginmanager.unregister(run, RUN_PLUGIN)


def _add_replay_dirs(config: pytest.Config, run: ToolguardRun) -> None:
    """Add the cassette and case directories to a run whose paths came from
    ``testpaths`` or the current directory, unless already inside them."""
    given = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    for directory in run.replay_dirs:
        if directory.is_dir() and not any(directory.is_relative_to(path) for path in given):
            config.args.append(str(directory))
            given.append(directory)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A bad marker fails its own test at setup, before any fixture runs
    (a usage error at collection would crash xdist workers)."""
    marks = list(item.iter_markers("toolguard"))
    if not marks:
        return
    from ..replay.tape import tape_options

    for mark in marks:
        try:
            tape_options(mark.args, mark.kwargs)
        except ValueError as exc:
            problem = str(exc)
        else:
            continue
        pytest.fail(f"@pytest.mark.toolguard: {problem}", pytrace=False)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` gets ``scheduling.CellGroupScheduling``: a
    cassette file's items on one worker, and a crashed worker's units
    queued again without hanging the run (pytest-xdist 3.8's faults)."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from .scheduling import CellGroupScheduling

    return CellGroupScheduling(config, log)


# -- collection ------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    run = run_of(config)
    if not run.replaying or file_path.suffix not in YAML_SUFFIXES:
        return None
    resolved = file_path.resolve()
    if any(resolved.is_relative_to(directory) for directory in run.replay_dirs):
        return CassetteFile.from_parent(parent, path=file_path)
    # A cassette named on the command line is replayed wherever it is, as
    # pytest collects a test file named there whatever its name.
    given = (config.invocation_params.dir / arg.split("::")[0] for arg in config.args)
    if any(resolved == path.resolve() for path in given):
        return CassetteFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """With ``--toolguard-fuzz`` the session collects one more node after the
    paths: ``FuzzTools``. Collected like any other, its items are counted
    ("N selected") and -k, -m and --deselect apply to them. The outermost
    wrapper (tryfirst), so it comes last whatever other plugins reorder."""
    report = yield
    if isinstance(collector, pytest.Session) and report.passed and run_of(collector.config).fuzzing:
        report.result.append(FuzzTools.from_parent(collector, name=FUZZ_NODE, nodeid=FUZZ_NODE))
    return report


# -- reports, with or without xdist ---------------------------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """The outermost wrapper: the report is scrubbed of the item's secrets
    after every other plugin made its part, before any logs it."""
    report = yield
    record_phase(item, report)
    outcomes.attach(item, report)
    outcomes.scrub(item, report)
    return report
