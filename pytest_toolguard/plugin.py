"""pytest glue: options, ini values, the marker, fixtures, items and hooks.

All record and replay logic lives in ``pytest_toolguard.replay``; this
module only connects it to pytest.

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
  (``FuzzTools`` says how the tools are named at collection); its summary
  line follows the run.
- After a run with ``--toolguard-replay``, one summary line; under xdist the
  workers' counts travel through ``workeroutput`` and the controller prints
  the totals.

Start-up cost: every pytest run of a project that installs this package
imports this module, so at module level it imports only pytest and
``hookspecs``. The library (jsonschema, yaml, pyfakefs, hypothesis behind
it) is imported inside the hook, item or fixture that uses it, so a run that
never replays, fuzzes or asks for a toolguard fixture does not pay for it.
``tests/test_plugin_import.py`` checks that.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import hookspecs
from .errors import ToolguardError
from .replay.record_mode import CHOICES as RECORD_MODES
from .replay.record_mode import parse as parse_record_mode
from .replay.registry_loading import DEFAULT_REGISTRY

if TYPE_CHECKING:
    from .capabilities import Capabilities
    from .faults import Fault, PrefixCache, Target
    from .faults.outcome import CellOutcome, MatrixReport
    from .fuzz import FuzzReport
    from .harness.fake_filesystem import FakeWorld
    from .registry import ToolRegistry
    from .replay.cassette import Cassette
    from .replay.report import ReplayTotals
    from .replay.tape import TapeOptions
    from .runtime import ToolRuntime

RuntimeFactory = Callable[..., "ToolRuntime"]


YAML_SUFFIXES = (".yaml", ".yml")
WORKER_OUTPUT_KEY = "toolguard_totals"
WORKER_CELLS_KEY = "toolguard_cells"
WORKER_FUZZ_KEY = "toolguard_fuzz"
FUZZ_EXAMPLES = 100
JOIN_SECONDS = 5.0

# Typed by their annotations (which name the library's types without importing them).
_TOTALS: pytest.StashKey[ReplayTotals] = pytest.StashKey()
_REPLAY_DIRS: pytest.StashKey[tuple[Path, ...]] = pytest.StashKey()
_PHASES: pytest.StashKey[dict[str, pytest.TestReport]] = pytest.StashKey()
_FAULTS: pytest.StashKey[tuple[Fault, ...]] = pytest.StashKey()
_CELLS: pytest.StashKey[list[CellOutcome]] = pytest.StashKey()
_COLLECTION_REGISTRIES: pytest.StashKey[dict[int, RegistryAtCollection | RegistryUnavailable]] = (
    pytest.StashKey()
)
_FUZZED: pytest.StashKey[list[FuzzReport]] = pytest.StashKey()
_INI_REGISTRY: pytest.StashKey[ToolRegistry] = pytest.StashKey()
_FAKE_WORLD: pytest.StashKey[FakeWorld] = pytest.StashKey()
_PREFIX_CACHE: pytest.StashKey[PrefixCache] = pytest.StashKey()


# -- options, ini values, marker ------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("toolguard", "toolguard")
    group.addoption(
        "--toolguard-replay",
        action="store_true",
        default=False,
        help="collect every cassette and case (*.yaml, *.yml under toolguard_cassette_dir "
        "and toolguard_case_dir) as a test item and replay it through the real executor; "
        "with no paths given, both directories are added to the run",
    )
    group.addoption(
        "--toolguard-record-mode",
        choices=RECORD_MODES,
        default=None,
        help="when the toolguard fixture records: none (never; a missing cassette is an "
        "error), once (when the cassette is missing), rewrite (always, kept only if the test "
        "passed). Precedence: this option, then @pytest.mark.toolguard(record_mode=...), "
        "then the ini toolguard_record_mode (default none)",
    )
    group.addoption(
        "--toolguard-faults",
        default=None,
        metavar="all|NAME,...",
        help="with --toolguard-replay (implied): also collect, for every interaction of "
        "every cassette and case, one item per applicable fault (all, or comma-separated "
        "fault names), e.g. cassettes/x.yaml::3-write_file::partial_write",
    )
    group.addoption(
        "--toolguard-report",
        default=None,
        metavar="PATH",
        help="write the fault matrix to PATH: Markdown (.md), JSON (.json) or HTML (.html)",
    )
    group.addoption(
        "--toolguard-fuzz",
        action="store_true",
        default=False,
        help="add one item per tool of the toolguard_registry fixture (toolguard-fuzz::<tool>) "
        "that runs it through the executor with arguments generated from its input schema, "
        "valid and invalid",
    )
    group.addoption(
        "--toolguard-fuzz-examples",
        type=int,
        default=FUZZ_EXAMPLES,
        metavar="N",
        help=f"generated examples per tool, for valid and for invalid arguments each "
        f"(default {FUZZ_EXAMPLES})",
    )
    group.addoption(
        "--toolguard-fuzz-seed",
        type=int,
        default=0,
        metavar="N",
        help="the fuzzer's seed (default 0: the same examples on every run and xdist worker)",
    )
    parser.addini(
        "toolguard_cassette_dir",
        "directory of cassettes, relative to the rootdir (default: cassettes)",
        default="cassettes",
    )
    parser.addini(
        "toolguard_case_dir",
        "directory of hand-written cases, relative to the rootdir (default: cases)",
        default="cases",
    )
    parser.addini(
        "toolguard_registry",
        "the tools replay and recording use: package.module:attribute naming a ToolRegistry "
        f"or a function returning one (default: {DEFAULT_REGISTRY})",
        default=DEFAULT_REGISTRY,
    )
    parser.addini(
        "toolguard_secrets",
        "package.module:attribute naming a mapping (or a function returning one) from "
        "placeholder keyword to the real value replay sends (default: none)",
        default="",
    )
    parser.addini(
        "toolguard_record_mode",
        f"default record mode of the toolguard fixture: {', '.join(RECORD_MODES)} (default: none)",
        default="none",
    )


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _replaying(config: pytest.Config) -> bool:
    return bool(config.getoption("toolguard_replay") or config.getoption("toolguard_faults"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "toolguard(cassette=None, capabilities=None, volatile=(), record_mode=None, "
        "variables=None, hooks=()): the cassette of the toolguard fixture, the session's "
        "capabilities, fields never compared, the record mode, the runtime's variables and "
        "the hooks it records with (an Approver; playback grants the recorded approvals)",
    )
    _check_ini_record_mode(config)
    if _replaying(config):
        from .replay.report import ReplayTotals

        config.stash[_TOTALS] = ReplayTotals()
    config.stash[_CELLS] = []
    config.stash[_FUZZED] = []
    config.stash[_FAULTS] = _selected_faults(config)
    _check_report_path(config)
    root = config.rootpath
    config.stash[_REPLAY_DIRS] = tuple(
        (root / str(config.getini(name))).resolve()
        for name in ("toolguard_cassette_dir", "toolguard_case_dir")
    )
    if _replaying(config) and config.args_source is not (pytest.Config.ArgsSource.ARGS):
        _add_replay_dirs(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the fake filesystem this run's replays, cells and fuzzed calls
    shared (paused between them), and the states its cells saved."""
    world = config.stash.get(_FAKE_WORLD, None)
    if world is not None:
        world.close()
    prefixes = config.stash.get(_PREFIX_CACHE, None)
    if prefixes is not None:
        prefixes.clear()


def _fake_world(config: pytest.Config) -> FakeWorld:
    """The run's ``FakeWorld``, made on first use (it loads pyfakefs)."""
    world = config.stash.get(_FAKE_WORLD, None)
    if world is None:
        from .harness.fake_filesystem import FakeWorld

        world = config.stash[_FAKE_WORLD] = FakeWorld()
    return world


def _prefix_cache(config: pytest.Config) -> PrefixCache:
    """The run's cache of the states before targets, made on first use."""
    cache = config.stash.get(_PREFIX_CACHE, None)
    if cache is None:
        from .faults import PrefixCache

        cache = config.stash[_PREFIX_CACHE] = PrefixCache()
    return cache


def _check_ini_record_mode(config: pytest.Config) -> None:
    """A usage error for an unknown ini ``toolguard_record_mode``."""
    try:
        parse_record_mode(str(config.getini("toolguard_record_mode")), "ini toolguard_record_mode")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _check_report_path(config: pytest.Config) -> None:
    """``--toolguard-report`` needs faults to report and a format it can write."""
    path = config.getoption("toolguard_report")
    if not path:
        return
    if not config.stash[_FAULTS]:
        raise pytest.UsageError("--toolguard-report needs --toolguard-faults")
    from .faults.report import RENDERERS

    if Path(path).suffix.lower() not in RENDERERS:
        raise pytest.UsageError(f"--toolguard-report: {path}: use one of {', '.join(RENDERERS)}")


def _selected_faults(config: pytest.Config) -> tuple[Fault, ...]:
    """The faults of ``--toolguard-faults``: the catalogue plus those the
    ``pytest_toolguard_faults`` hook adds, in that order."""
    spec = config.getoption("toolguard_faults")
    if not spec:
        return ()
    from .faults import BUILTIN_FAULTS, select_faults
    from .faults.fault import with_added

    added = [
        fault
        for faults in config.hook.pytest_toolguard_faults(config=config)
        for fault in faults or ()
    ]
    try:
        known = with_added(BUILTIN_FAULTS, added)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest_toolguard_faults: {exc}") from None
    try:
        return select_faults(spec, known)
    except ValueError as exc:
        raise pytest.UsageError(f"--toolguard-faults: {exc}") from None


def _add_replay_dirs(config: pytest.Config) -> None:
    """Add the cassette and case directories to a run whose paths came from
    ``testpaths`` or the current directory, unless already inside them."""
    given = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    for directory in config.stash[_REPLAY_DIRS]:
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
    from .replay.tape import tape_options

    for mark in marks:
        try:
            tape_options(mark.args, mark.kwargs)
        except ValueError as exc:
            problem = str(exc)
        else:
            continue
        pytest.fail(f"@pytest.mark.toolguard: {problem}", pytrace=False)


# -- replay items ----------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if not _replaying(config) or file_path.suffix not in YAML_SUFFIXES:
        return None
    resolved = file_path.resolve()
    if any(resolved.is_relative_to(directory) for directory in config.stash[_REPLAY_DIRS]):
        return CassetteFile.from_parent(parent, path=file_path)
    # A cassette named on the command line is replayed wherever it is, as
    # pytest collects a test file named there whatever its name.
    given = (config.invocation_params.dir / arg.split("::")[0] for arg in config.args)
    if any(resolved == path.resolve() for path in given):
        return CassetteFile.from_parent(parent, path=file_path)
    return None


class CassetteFile(pytest.File):
    """A cassette or case file: one ``replay`` item, then with
    ``--toolguard-faults`` one collector per interaction holding its cells."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        yield ReplayItem.from_parent(self, name="replay", callobj=_replay_file)
        faults = self.config.stash[_FAULTS]
        if not faults:
            return
        from .faults import Target
        from .replay.cassette import CassetteError, load

        try:
            cassette = load(self.path, source=self.shown)
        except CassetteError:
            return  # the replay item reports it
        try:
            found = registry_at_collection(self)
        except RegistryUnavailable as exc:
            found = RegistryAtCollection(None, str(exc))
        registry = found.registry
        unknown: set[str] = set()
        for index, interaction in enumerate(cassette.interactions):
            spec = registry.get(interaction.call.tool_name) if registry else None
            if spec is None and interaction.result.code != "TOOL_NOT_FOUND":
                unknown.add(str(interaction.call.tool_name))
            target = Target(self.shown, cassette, index, spec)
            applicable = tuple(fault for fault in faults if fault.applies(target))
            if applicable:
                yield InteractionCells.from_parent(
                    self, name=target.label, target=target, faults=applicable
                )
        if unknown:
            why = (
                f"its tools are known only at run time ({found.deferred})"
                if found.deferred
                else f"{found.source} has no tool {', '.join(sorted(unknown))}"
            )
            self.warn(
                pytest.PytestWarning(
                    f"{self.shown}: {why}, so most faults of its calls were not collected"
                )
            )

    @property
    def shown(self) -> str:
        """The file's path as its node id shows it."""
        return self.nodeid.split("::")[0]


class InteractionCells(pytest.Collector):
    """One interaction of a cassette: one ``FaultCell`` per applicable fault."""

    def __init__(self, *, target: Target, faults: tuple[Fault, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.faults = faults

    def collect(self) -> Iterator[pytest.Item]:
        for fault in self.faults:
            yield FaultCell.from_parent(self, name=fault.name, callobj=_run_fault_cell)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class FaultCell(pytest.Function):
    """One fault against one interaction; a broken oracle is reported as
    text with the command that reruns the cell."""

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.nodeid.split("::", 1)[1]

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> Any:
        if isinstance(excinfo.value, FaultCellFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class FaultCellFailed(ToolguardError, AssertionError):
    """A fault cell whose oracle did not hold."""


class RegistryUnavailable(ToolguardError):
    """The registry items would get cannot be had at collection (a broken
    ini value, a fixture returning no ``ToolRegistry``); says which and why."""


@dataclass(frozen=True)
class RegistryAtCollection:
    """The tools a node's items will get from ``toolguard_registry``, as far
    as collection can know them."""

    registry: ToolRegistry | None
    """None when the fixture can only give them at run time."""
    source: str
    """Where they come from, for messages."""
    deferred: str = ""
    """Why they are known only at run time ('' when they are known)."""


def registry_at_collection(node: pytest.Collector) -> RegistryAtCollection:
    """The registry the ``toolguard_registry`` fixture visible from ``node``
    gives: the ini ``toolguard_registry`` when the fixture is this plugin's,
    else the overriding fixture called now (``fixture_at_collection``), once
    per definition. ``RegistryUnavailable`` when it cannot be had; a
    fixture that can only run at run time gives ``registry=None``."""
    from .fixture_at_collection import (
        NotAtCollection,
        describe,
        value_at_collection,
        visible_definition,
    )
    from .registry import ToolRegistry
    from .replay.registry_loading import SpecError, load_registry

    config = node.config
    definition = visible_definition(node, "toolguard_registry")
    key = 0 if definition is None or _is_plugin_fixture(definition.func) else id(definition)
    known = config.stash.setdefault(_COLLECTION_REGISTRIES, {})
    if key in known:
        found = known[key]
        if isinstance(found, RegistryUnavailable):
            raise found
        return found
    try:
        if definition is None or key == 0:
            spec = str(config.getini("toolguard_registry")) or DEFAULT_REGISTRY
            source = f"the ini toolguard_registry = {spec!r}"
            try:
                found = RegistryAtCollection(load_registry(spec), source)
            except SpecError as exc:
                raise RegistryUnavailable(f"ini toolguard_registry: {exc}") from None
        else:
            source = f"the toolguard_registry fixture ({describe(definition, config.rootpath)})"
            try:
                value = value_at_collection(node, definition)
            except NotAtCollection as exc:
                found = RegistryAtCollection(None, source, str(exc))
            else:
                if not isinstance(value, ToolRegistry):
                    raise RegistryUnavailable(
                        f"{source} returned a {type(value).__name__}, not a ToolRegistry"
                    )
                found = RegistryAtCollection(value, source)
    except RegistryUnavailable as exc:
        known[key] = exc
        raise
    known[key] = found
    return found


def _run_fault_cell(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every FaultCell."""
    from .faults import Target, run_cell
    from .faults.report import rerun_command

    item, config = request.node, request.config
    parent: InteractionCells = item.parent
    fault = next(f for f in parent.faults if f.name == item.name)
    planned = parent.target
    target = Target(
        planned.source,
        planned.cassette,
        planned.index,
        toolguard_registry.get(planned.call.tool_name),
    )
    outcome = run_cell(
        fault,
        target,
        toolguard_registry,
        secrets=toolguard_secrets,
        nodeid=item.nodeid,
        prefixes=_prefix_cache(config),
        fake_world=_fake_world(config),
    )
    config.stash[_CELLS].append(outcome)
    if outcome.status == "n/a":
        pytest.skip(f"{fault.name} does not apply to this call with the fixture's registry")
    if outcome.status == "fail":
        lines = [f"{item.nodeid}: {fault.expected}, but:"]
        lines += [f"  - {problem}" for problem in outcome.problems]
        lines.append(f"rerun: {rerun_command(outcome)}")
        raise FaultCellFailed("\n".join(lines))


class ReplayItem(pytest.Function):
    """Replays one cassette or case; a difference or an unusable file is
    reported as text, without a traceback."""

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> Any:
        from .replay.cassette import CassetteError
        from .replay.report import ReplayFailed

        if isinstance(excinfo.value, (CassetteError, ReplayFailed)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def _replay_file(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every ReplayItem (its fixtures are its parameters)."""
    from .replay.cassette import CassetteError, load
    from .replay.player import replay
    from .replay.report import (
        ReplayFailed,
        ReplayTotals,
        format_report,
        how_to_rerecord,
        missing_tools_note,
    )

    item, config = request.node, request.config
    shown = item.nodeid.split("::")[0]
    try:
        cassette = load(item.path, source=shown)
    except CassetteError:
        config.stash[_TOTALS] += ReplayTotals(unreadable=1)
        raise
    report = replay(
        cassette, toolguard_registry, secrets=toolguard_secrets, fake_world=_fake_world(config)
    )
    config.stash[_TOTALS] += ReplayTotals.of(report)
    if not report.ok:
        note = missing_tools_note(
            report, toolguard_registry.names(), _registry_origin(config, toolguard_registry)
        )
        raise ReplayFailed(
            format_report(
                report, cassette_path=shown, rerecord=how_to_rerecord(cassette), note=note
            )
        )


def _registry_origin(config: pytest.Config, registry: ToolRegistry) -> str:
    """Where the ``toolguard_registry`` fixture's registry came from."""
    if config.stash.get(_INI_REGISTRY, None) is registry:
        return f"ini toolguard_registry = {config.getini('toolguard_registry') or DEFAULT_REGISTRY}"
    return "a toolguard_registry fixture of a conftest.py"


# -- fuzz items ------------------------------------------------------------------

FUZZ_NODE = "toolguard-fuzz"
EVERY_TOOL = "every-tool"
"""The one fuzz item's name when the registry is known only at run time."""


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """With ``--toolguard-fuzz`` the session collects one more node after the
    paths: ``FuzzTools``. Collected like any other, its items are counted
    ("N selected") and -k, -m and --deselect apply to them. The outermost
    wrapper (tryfirst), so it comes last whatever other plugins reorder."""
    report = yield
    if (
        isinstance(collector, pytest.Session)
        and report.passed
        and collector.config.getoption("toolguard_fuzz")
    ):
        report.result.append(FuzzTools.from_parent(collector, name=FUZZ_NODE, nodeid=FUZZ_NODE))
    return report


class FuzzTools(pytest.Collector):
    """The parent of the fuzz items: one ``toolguard-fuzz::<tool>`` per tool
    of the registry the ``toolguard_registry`` fixture gives them.

    The tools are named at collection: from the ini ``toolguard_registry``
    when the fixture is this plugin's, else by calling the overriding
    fixture now (``fixture_at_collection``). When that fixture cannot be
    called at collection (a ``yield`` fixture, one that needs ``request``),
    a single item ``toolguard-fuzz::every-tool`` fuzzes each of its tools at
    run time. A broken ini value, a fixture that returns no ``ToolRegistry``
    and a registry without tools are collection errors naming the source."""

    source = "the toolguard_registry fixture"
    """Where the registry comes from, for messages."""
    deferred = ""
    """Why the tools are named only at run time ('' when they were at collection)."""

    def collect(self) -> list[pytest.Item]:
        names = self._tool_names()
        if names is None:
            return [FuzzItem.from_parent(self, name=EVERY_TOOL, callobj=_fuzz_every_tool)]
        return [FuzzItem.from_parent(self, name=name, callobj=_fuzz_one_tool) for name in names]

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name

    def _tool_names(self) -> list[str] | None:
        self._warn_unseen_fixtures()
        try:
            found = registry_at_collection(self)
        except RegistryUnavailable as exc:
            raise self.CollectError(f"--toolguard-fuzz: {exc}") from None
        self.source = found.source
        if found.registry is None:
            self.deferred = found.deferred
            return None
        if not len(found.registry):
            raise self.CollectError(
                f"--toolguard-fuzz: nothing to fuzz: {self.source} has no tools"
            )
        return found.registry.names()

    def _warn_unseen_fixtures(self) -> None:
        """Fuzz items belong to no directory: a ``toolguard_registry``
        fixture in a conftest.py below the rootdir never reaches them."""
        root = self.config.rootpath
        for plugin in self.config.pluginmanager.get_plugins():
            where = getattr(plugin, "__file__", None)
            if not where or Path(where).name != "conftest.py":
                continue
            directory = Path(where).resolve().parent
            below_root = directory != root and directory.is_relative_to(root)
            if below_root and getattr(plugin, "toolguard_registry", None) is not None:
                self.warn(
                    pytest.PytestWarning(
                        f"{directory.relative_to(root).as_posix()}/conftest.py defines a "
                        "toolguard_registry fixture that --toolguard-fuzz does not see "
                        "(fuzz items belong to no directory): define it in the rootdir's "
                        "conftest.py"
                    )
                )


def _is_plugin_fixture(function: Callable[..., Any]) -> bool:
    """Whether a fixture definition's function is this plugin's own."""
    return getattr(function, "__module__", None) == __name__


class FuzzItem(pytest.Function):
    """Fuzzes one tool (or, as ``every-tool``, each tool of the fixture's
    registry); failing examples are reported as text."""

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.nodeid

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> Any:
        if isinstance(excinfo.value, FuzzFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class FuzzFailed(ToolguardError, AssertionError):
    """A tool the fuzzer found a failing example for."""


def _fuzz_one_tool(request: pytest.FixtureRequest, toolguard_registry: ToolRegistry) -> None:
    """The body of every per-tool FuzzItem: the fixture's registry at run
    time is the truth; the item's name only says which tool."""
    item, config = request.node, request.config
    registry = _checked_registry(toolguard_registry)
    spec = registry.get(item.name)
    if spec is None:
        pytest.fail(
            f"the toolguard_registry fixture has no tool {item.name!r} at run time "
            f"(its tools: {', '.join(registry.names()) or 'none'}); the item was named at "
            f"collection from {_parent(item).source}",
            pytrace=False,
        )
    report = _fuzz(spec, registry, config)
    if report.skipped:
        pytest.skip(f"cannot fuzz {spec.name}: {report.skipped}")
    if not report.ok:
        raise FuzzFailed(f"{report.format()}\n{_rerun_fuzz(config, spec.name)}")


def _fuzz_every_tool(request: pytest.FixtureRequest, toolguard_registry: ToolRegistry) -> None:
    """The body of the single ``every-tool`` FuzzItem: each tool in name
    order, one report per tool."""
    config, parent = request.config, _parent(request.node)
    registry = _checked_registry(toolguard_registry)
    why = f"one item for every tool: {parent.source} is called only at run time ({parent.deferred})"
    if not len(registry):
        pytest.fail(
            f"--toolguard-fuzz: nothing to fuzz: {parent.source} has no tools", pytrace=False
        )
    reports = [_fuzz(spec, registry, config) for spec in registry]
    failed = [report for report in reports if not report.ok]
    if failed:
        lines = [why, *(report.format() for report in failed)]
        lines += [_rerun_fuzz(config, report.tool) for report in failed]
        raise FuzzFailed("\n".join(lines))
    if all(report.skipped for report in reports):
        pytest.skip("; ".join(f"cannot fuzz {report.tool}: {report.skipped}" for report in reports))


def _parent(item: pytest.Item) -> FuzzTools:
    parent = item.parent
    assert isinstance(parent, FuzzTools)
    return parent


def _checked_registry(value: Any) -> ToolRegistry:
    from .registry import ToolRegistry

    if not isinstance(value, ToolRegistry):
        pytest.fail(
            f"the toolguard_registry fixture returned a {type(value).__name__}, not a ToolRegistry",
            pytrace=False,
        )
    return value


def _fuzz(spec: Any, registry: ToolRegistry, config: pytest.Config) -> FuzzReport:
    """Fuzz one tool with the run's options; its report joins the summary."""
    from .fuzz import fuzz_tool

    report = fuzz_tool(
        spec,
        registry=registry,
        examples=config.getoption("toolguard_fuzz_examples"),
        seed=config.getoption("toolguard_fuzz_seed"),
        fake_world=_fake_world(config),
    )
    config.stash[_FUZZED].append(report)
    return report


def _rerun_fuzz(config: pytest.Config, tool: str) -> str:
    """The command that fuzzes ``tool`` again with the same examples."""
    seed = config.getoption("toolguard_fuzz_seed")
    examples = config.getoption("toolguard_fuzz_examples")
    return (
        f"rerun: pytest --toolguard-fuzz --toolguard-fuzz-seed={seed} "
        f"--toolguard-fuzz-examples={examples} -k '{FUZZ_NODE} and {tool}'"
    )


def _fuzz_summary(reports: list[FuzzReport], seed: int) -> list[str]:
    """The summary line, then one line per tool that could not be fuzzed."""
    failures = sum(len(report.failures) for report in reports)
    skipped = [report for report in reports if report.skipped]
    first = (
        f"toolguard fuzz: {len(reports)} tools, "
        f"{sum(r.valid_calls for r in reports)} valid and "
        f"{sum(r.invalid_calls for r in reports)} invalid calls, "
        f"{len(skipped)} skipped, {failures} failing examples, seed {seed}"
    )
    return [first, *(f"  skipped {report.tool}: {report.skipped}" for report in skipped)]


# -- summary, and xdist ------------------------------------------------------------


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        if config.getoption("toolguard_fuzz"):
            workeroutput[WORKER_FUZZ_KEY] = [r.as_dict() for r in config.stash[_FUZZED]]
        if _replaying(config):
            workeroutput[WORKER_OUTPUT_KEY] = config.stash[_TOTALS].as_dict()
            workeroutput[WORKER_CELLS_KEY] = [cell.as_dict() for cell in config.stash[_CELLS]]
        return
    path = config.getoption("toolguard_report")
    if path and workeroutput is None:
        from .faults.report import write_report

        write_report(_matrix(config), path)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist, on the controller: add a finished worker's counts and cells."""
    output = getattr(node, "workeroutput", {})
    data = output.get(WORKER_OUTPUT_KEY)
    if data is not None:
        from .replay.report import ReplayTotals

        node.config.stash[_TOTALS] += ReplayTotals.from_dict(data)
    cells = output.get(WORKER_CELLS_KEY)
    if cells:
        from .faults.outcome import CellOutcome

        node.config.stash[_CELLS].extend(CellOutcome.from_dict(cell) for cell in cells)
    fuzzed = output.get(WORKER_FUZZ_KEY)
    if fuzzed:
        from .fuzz import FuzzReport

        node.config.stash[_FUZZED].extend(FuzzReport.from_dict(report) for report in fuzzed)


def _matrix(config: pytest.Config) -> MatrixReport:
    from .faults.outcome import MatrixReport

    faults: tuple[Fault, ...] = config.stash[_FAULTS]
    cells: list[CellOutcome] = config.stash[_CELLS]
    return MatrixReport.of([fault.name for fault in faults], cells)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if hasattr(config, "workerinput"):
        return
    if config.getoption("toolguard_fuzz") and not config.option.collectonly:
        for line in _fuzz_summary(config.stash[_FUZZED], config.getoption("toolguard_fuzz_seed")):
            terminalreporter.write_line(line)
    if not _replaying(config):
        return
    terminalreporter.write_line(config.stash[_TOTALS].summary())
    cells: list[CellOutcome] = config.stash[_CELLS]
    if config.stash[_FAULTS] and cells:
        from .faults.report import terminal_grid

        width = max(60, terminalreporter._tw.fullwidth - 1)
        for line in terminal_grid(_matrix(config), width):
            terminalreporter.write_line(line)
        path = config.getoption("toolguard_report")
        if path:
            terminalreporter.write_line(f"toolguard: fault matrix written to {path}")


# -- fixtures ---------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if "toolguard" in getattr(item, "fixturenames", ()):
        item.stash.setdefault(_PHASES, {})[report.when] = report
    return report


@pytest.fixture(scope="session")
def toolguard_registry(pytestconfig: pytest.Config) -> ToolRegistry:
    """The tools replay and the ``toolguard`` fixture use: the ini
    ``toolguard_registry`` (default: the built-in tools). Override this
    fixture in a conftest.py to build the registry in code."""
    from .replay.registry_loading import SpecError, load_registry

    spec = str(pytestconfig.getini("toolguard_registry")) or DEFAULT_REGISTRY
    try:
        registry = load_registry(spec)
    except SpecError as exc:
        problem = str(exc)
    else:
        pytestconfig.stash[_INI_REGISTRY] = registry  # so reports can say where tools came from
        return registry
    pytest.fail(f"ini toolguard_registry: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def toolguard_secrets(pytestconfig: pytest.Config) -> Mapping[str, str]:
    """Real values replay sends in place of placeholders
    (``{"authorization": "Bearer ..."}`` for ``<redacted:authorization>``):
    the ini ``toolguard_secrets``, or none. Override in a conftest.py."""
    spec = str(pytestconfig.getini("toolguard_secrets"))
    if not spec:
        return {}
    from .replay.registry_loading import SpecError, load_secrets

    try:
        return load_secrets(spec)
    except SpecError as exc:
        problem = str(exc)
    pytest.fail(f"ini toolguard_secrets: {problem}", pytrace=False)


@pytest.fixture
def toolguard(
    request: pytest.FixtureRequest, tmp_path: Path, toolguard_registry: ToolRegistry
) -> Iterator[ToolRuntime]:
    """A ``ToolRuntime`` bound to this test's cassette
    (``<toolguard_cassette_dir>/<module path>/<test name>.yaml``, or the
    marker's ``cassette=``).

    Recording (mode ``once`` with no cassette, or ``rewrite``): a real
    runtime on a fresh workspace in ``tmp_path``; recording starts at the
    first call, so files the test writes under ``runtime.workspace.root``
    first are recorded as the starting state; the cassette is written only
    if the test passed. Replaying (mode ``none`` or ``once`` with a
    cassette): the test runs in the cassette's world (fake filesystem,
    frozen clock); each call must be the cassette's next one, and
    differences or interactions never replayed fail the test.
    """
    from .replay.naming import cassette_name, explicit_cassette_name
    from .replay.record_mode import Action, RecordMode, action, choose
    from .replay.report import format_missing_cassette, record_command
    from .replay.tape import TapeOptions, tape_options

    config, node = request.config, request.node
    marker = node.get_closest_marker("toolguard")
    options = tape_options(marker.args, marker.kwargs) if marker else TapeOptions()
    option_mode = config.getoption("toolguard_record_mode")
    mode = choose(
        None if option_mode is None else RecordMode(option_mode),
        options.record_mode,
        parse_record_mode(str(config.getini("toolguard_record_mode")), "ini toolguard_record_mode"),
    )
    relative = (
        explicit_cassette_name(options.cassette) if options.cassette else cassette_name(node.nodeid)
    )
    path = config.rootpath / str(config.getini("toolguard_cassette_dir")) / relative
    shown = _shown(path, config.rootpath)
    todo = action(mode, path.is_file())
    if todo is Action.MISSING:
        pytest.fail(format_missing_cassette(shown, node.nodeid), pytrace=False)
    rerecord = record_command(node.nodeid)
    if todo is Action.REPLAY:
        yield from _play_back(request, path, shown, rerecord, toolguard_registry, options)
    else:
        yield from _record(request, path, tmp_path, rerecord, toolguard_registry, options)


def _play_back(
    request: pytest.FixtureRequest,
    path: Path,
    shown: str,
    rerecord: str,
    registry: ToolRegistry,
    options: TapeOptions,
) -> Iterator[ToolRuntime]:
    from .replay.cassette import CassetteError, load
    from .replay.report import format_report
    from .replay.tape import PlaybackTape

    cassette: Cassette | None = None
    try:
        cassette = load(path, source=shown)
    except CassetteError as exc:
        problem = str(exc)
    if cassette is None:
        pytest.fail(f"{problem}\nto re-record it: {rerecord}", pytrace=False)
    # What recorded it re-records it: a script, or the test that recorded it.
    rerecord = cassette.recorded_by or rerecord
    tape = PlaybackTape(
        cassette,
        registry,
        cassette_path=shown,
        rerecord=rerecord,
        volatile=options.volatile,
        capabilities=options.capabilities,
        variables=options.variables or None,
        fake_world=_fake_world(request.config),
    )
    try:
        yield tape.start()
    finally:
        report = tape.finish(test_completed=_passed(request.node))
    if not report.ok:
        pytest.fail(format_report(report, cassette_path=shown, rerecord=rerecord), pytrace=False)


def _record(
    request: pytest.FixtureRequest,
    path: Path,
    tmp_path: Path,
    rerecord: str,
    registry: ToolRegistry,
    options: TapeOptions,
) -> Iterator[ToolRuntime]:
    from .audit import SQLiteAuditStore
    from .replay.tape import RecordingTape

    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    store = SQLiteAuditStore(":memory:")
    tape = RecordingTape(
        registry,
        str(workspace),
        store,
        name=path.stem,
        recorded_by=rerecord,
        capabilities=options.capabilities,
        variables=options.variables,
        hooks=options.hooks,
    )
    runtime = tape.runtime
    try:
        yield runtime
    finally:
        problems = runtime.close(join_timeout=JOIN_SECONDS)
    try:
        if problems:
            pytest.fail("toolguard: not recorded: " + "; ".join(problems), pytrace=False)
        if _passed(request.node):
            tape.write(path)
    finally:
        store.close()


def _passed(item: pytest.Item) -> bool:
    """Whether the test passed, read in its teardown (no call phase when
    the setup failed)."""
    call = item.stash.get(_PHASES, {}).get("call")
    return call is not None and call.passed


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


@pytest.fixture
def toolguard_runtime(tmp_path: Path) -> Iterator[RuntimeFactory]:
    """A factory of ``ToolRuntime``s on a fresh workspace (``tmp_path /
    "workspace"``) with an audit database on real disk. Built-in tools unless
    ``registry=`` is given. At teardown every runtime is closed, and the test
    fails if a handler that overran its deadline is still running."""
    from .audit import SQLiteAuditStore
    from .runtime import ToolRuntime
    from .tools import builtin_registry

    made: list[ToolRuntime] = []
    stores: list[SQLiteAuditStore] = []

    def make(
        registry: ToolRegistry | None = None,
        capabilities: Capabilities | None = None,
        **options: Any,
    ) -> ToolRuntime:
        workspace = tmp_path / "workspace"
        workspace.mkdir(exist_ok=True)
        audit = options.pop("audit", None)
        if audit is None:
            audit = SQLiteAuditStore(tmp_path / f"audit-{len(made)}.db")
            stores.append(audit)
        runtime = ToolRuntime(
            registry or builtin_registry(), str(workspace), capabilities, audit, **options
        )
        made.append(runtime)
        return runtime

    yield make
    problems: list[str] = []
    for runtime in made:
        problems += runtime.close(join_timeout=5.0)
    for store in stores:
        store.close()
    if problems:
        pytest.fail("toolguard: " + "; ".join(problems), pytrace=False)
