"""The plugin's collectors and items: replay, fault cells, fuzzing.

- a ``CassetteFile`` (a cassette or case under the replay directories, or
  named on the command line) holds one ``ReplayItem``, then with
  ``--toolguard-faults`` one ``InteractionCells`` per interaction, each
  holding one ``FaultCell`` per applicable fault;
- ``FuzzTools`` (added after the paths with ``--toolguard-fuzz``) holds one
  ``FuzzItem`` per tool.

Every item is a ``ToolguardItem``: a ``pytest.Function`` (so it gets
fixtures: the tools come from ``toolguard_registry``, placeholder values
from ``toolguard_secrets``) whose failures of ours (a ``ToolguardError``:
a replay's differences, a broken oracle, a fuzz failure, an unusable file)
are reported as their text, without a traceback. Its body calls the
library and leaves what it found for its report (``outcomes.leave``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import ToolguardError
from ..options import (
    AMPLIFY,
    FUZZ,
    FUZZ_EXAMPLES,
    FUZZ_NETWORK,
    FUZZ_NODE,
    FUZZ_SEED,
    REGISTRY_INI,
)
from ..replay.registry_loading import DEFAULT_REGISTRY
from . import outcomes
from .collection import RegistryAtCollection, RegistryUnavailable, registry_at_collection
from .run import run_of

if TYPE_CHECKING:
    from _pytest.fixtures import FuncFixtureInfo

    from ..faults import Fault, Target
    from ..fuzz import FuzzReport
    from ..registry import ToolRegistry, ToolSpec

EVERY_TOOL = "every-tool"
"""The one fuzz item's name when the registry is known only at run time."""


class ToolguardItem(pytest.Function):
    """An item of this plugin: a failure of ours is shown as its text."""

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.nodeid.split("::", 1)[-1]

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> Any:
        if isinstance(excinfo.value, ToolguardError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class FaultCellFailed(ToolguardError, AssertionError):
    """A fault cell whose oracle did not hold."""


class FuzzFailed(ToolguardError, AssertionError):
    """A tool the fuzzer found a failing example for."""


# -- replay and fault cells ---------------------------------------------------------


class CassetteFile(pytest.File):
    """A cassette or case file: one ``replay`` item, then with
    ``--toolguard-faults`` one collector per interaction holding its cells."""

    cell_fixtures: FuncFixtureInfo | None = None
    """The fixtures of this file's fault cells, once the first is made."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        if run_of(self.config).amplifying:
            yield AmplifyItem.from_parent(self, name="amplify", callobj=amplify_one_file)
            return
        yield ReplayItem.from_parent(self, name="replay", callobj=replay_file)
        if _mentions_variants(self.path):
            yield VariantsItem.from_parent(self, name="variants", callobj=replay_file_variants)
        faults = run_of(self.config).faults
        if not faults:
            return
        from ..faults import Target
        from ..harness.branching import walked_world
        from ..replay.cassette import CassetteError

        try:
            cassette = run_of(self.config).cassette(self.path, self.shown)
        except CassetteError:
            return  # the replay item reports it
        try:
            found = registry_at_collection(self, run_of(self.config).registries)
        except RegistryUnavailable as exc:
            found = RegistryAtCollection(None, str(exc))
        registry = found.registry
        unknown: set[str] = set()
        world = walked_world(cassette, registry, run_of(self.config).world) if registry else "fake"
        for index, interaction in enumerate(cassette.interactions):
            spec = registry.get(interaction.call.tool_name) if registry else None
            if spec is None and interaction.result.code != "TOOL_NOT_FOUND":
                unknown.add(str(interaction.call.tool_name))
            target = Target(self.shown, cassette, index, spec, world)
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


class ReplayItem(ToolguardItem):
    """Replays one cassette or case; a difference or an unusable file is
    reported as text."""


class VariantsItem(ToolguardItem):
    """Replays the amplified variants of one cassette or case."""


class AmplifyItem(ToolguardItem):
    """Amplifies one cassette or case (``--toolguard-amplify``)."""


_VARIANTS_KEY = re.compile(rb"""(?:^|[\s{,])["']?variants["']?\s*:""", re.MULTILINE)
"""A file that may hold variants (loading tells for sure): a ``variants``
key as YAML writes it (block, ``- variants:``, flow, quoted) or as JSON
does (``"variants":``, with any spacing, on one line or many)."""


def _mentions_variants(path: Path) -> bool:
    """Whether the file may hold variants: read within the limits of
    ``documents`` (the replay item says why a file cannot be used)."""
    from ..documents import DocumentRefused, read_bytes

    try:
        return _VARIANTS_KEY.search(read_bytes(path)) is not None
    except (DocumentRefused, OSError):
        return False


class InteractionCells(pytest.Collector):
    """One interaction of a cassette: one ``FaultCell`` per applicable fault."""

    def __init__(self, *, target: Target, faults: tuple[Fault, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.faults = faults

    def collect(self) -> Iterator[pytest.Item]:
        file = self.parent
        assert isinstance(file, CassetteFile)
        for fault in self.faults:
            # Every cell of a file asks for the same fixtures from the same
            # place, so they share one closure, as pytest's own parametrized
            # functions do: computing it per cell costs a sixth of collecting
            # the matrix.
            cell = FaultCell.from_parent(
                self, name=fault.name, callobj=run_fault_cell, fixtureinfo=file.cell_fixtures
            )
            file.cell_fixtures = cell._fixtureinfo
            # With pytest-xdist's --dist loadgroup, one worker runs the cells of
            # one file, so the state before each target is replayed once per run
            # (the prefix cache is per process; plugin/scheduling.py groups by
            # file where xdist's mark no longer does). Ignored otherwise; not the
            # default: --dist load measured as fast or faster (CHANGELOG.md).
            cell.add_marker(pytest.mark.xdist_group(self.target.source))
            yield cell

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class FaultCell(ToolguardItem):
    """One fault against one interaction; a broken oracle is reported as
    text with the command that reruns the cell."""


def replay_file(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every ReplayItem (its fixtures are its parameters)."""
    from ..replay.cassette import CassetteError
    from ..replay.player import replay
    from ..replay.report import (
        ReplayFailed,
        ReplayTotals,
        format_report,
        how_to_rerecord,
        missing_tools_note,
    )

    item, run = request.node, run_of(request.config)
    shown = item.nodeid.split("::")[0]
    try:
        cassette = run.cassette(item.path, shown)
    except CassetteError:
        outcomes.leave(item, replay=ReplayTotals(unreadable=1).as_dict())
        raise
    report = replay(
        cassette,
        toolguard_registry,
        secrets=toolguard_secrets,
        fake_filesystems=run.fake_filesystems(),
        world=run.world,
    )
    outcomes.leave(item, replay=ReplayTotals.of(report).as_dict())
    if not report.ok:
        note = missing_tools_note(
            report, toolguard_registry.names(), _registry_origin(request.config, toolguard_registry)
        )
        raise ReplayFailed(
            format_report(
                report, cassette_path=shown, rerecord=how_to_rerecord(cassette), note=note
            )
        )


def replay_file_variants(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every VariantsItem."""
    from ..replay.report import ReplayFailed, format_differences, how_to_rerecord
    from ..replay.variants import replay_variants

    item, run = request.node, run_of(request.config)
    shown = item.nodeid.split("::")[0]
    cassette = run.cassette(item.path, shown)  # the file's replay item read it
    report = replay_variants(
        cassette,
        toolguard_registry,
        secrets=toolguard_secrets,
        fake_filesystems=run.fake_filesystems(),
        world=run.world,
    )
    outcomes.leave(
        item,
        variants={
            "variants": report.variants,
            "refused": report.refused,
            "failed": len(report.differences),
            "files": 1,
        },
    )
    if not report.ok:
        count = len(report.differences)
        lines = [
            f"{cassette.kind} {shown}: {count} difference{'s' if count != 1 else ''} in its "
            f"variants (out of {report.checks} checks of {report.variants} variants)",
            *format_differences(report.differences),
            f"the tools no longer do what they did when amplified: fix them, or re-amplify "
            f"({AMPLIFY} {shown}) if the change is meant; to re-record it: "
            f"{how_to_rerecord(cassette)}",
        ]
        raise ReplayFailed("\n".join(lines))


def amplify_one_file(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every AmplifyItem: writes the file's variants when its
    recorded calls replay the same."""
    from ..amplify import amplify_file
    from ..replay.report import ReplayFailed, format_differences, how_to_rerecord

    item, run = request.node, run_of(request.config)
    shown = item.nodeid.split("::")[0]
    report = amplify_file(
        item.path,
        toolguard_registry,
        source=shown,
        caps=run.amplify_caps,
        secrets=toolguard_secrets,
        fake_filesystems=run.fake_filesystems(),
        world=run.world,
    )
    outcomes.leave(item, amplify=report.lines())
    if not report.ok:
        from ..replay.cassette import load

        lines = [
            *report.lines(),
            *format_differences(report.replay_differences),
            f"to re-record it: {how_to_rerecord(load(item.path, source=shown))}",
        ]
        raise ReplayFailed("\n".join(lines))


def _registry_origin(config: pytest.Config, registry: ToolRegistry) -> str:
    """Where the ``toolguard_registry`` fixture's registry came from."""
    if run_of(config).ini_registry is registry:
        return f"ini {REGISTRY_INI} = {config.getini(REGISTRY_INI) or DEFAULT_REGISTRY}"
    return "a toolguard_registry fixture of a conftest.py"


def run_fault_cell(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every FaultCell."""
    from ..faults import Target, run_cell
    from ..faults.outcome import NOT_APPLICABLE
    from ..faults.report import rerun_command
    from ..harness.branching import walked_world

    item, run = request.node, run_of(request.config)
    parent: InteractionCells = item.parent
    fault = next(f for f in parent.faults if f.name == item.name)
    planned = parent.target
    target = Target(
        planned.source,
        planned.cassette,
        planned.index,
        toolguard_registry.get(planned.call.tool_name),
        walked_world(planned.cassette, toolguard_registry, run.world),
    )
    outcome = run_cell(
        fault,
        target,
        toolguard_registry,
        secrets=toolguard_secrets,
        nodeid=item.nodeid,
        prefixes=run.prefixes(),
        fake_filesystems=run.fake_filesystems(),
        world=run.world,  # chosen as replay chooses it (faults/run.py)
    )
    outcomes.leave(item, cell=outcome.as_dict())
    if outcome.status == "n/a" and not outcome.problems[0].startswith(NOT_APPLICABLE):
        pytest.skip(f"{fault.name}: {outcome.problems[0]}")  # could not run in its world
    if outcome.status == "n/a":
        pytest.skip(f"{fault.name} does not apply to this call with the fixture's registry")
    if outcome.status == "fail":
        lines = [f"{item.nodeid}: {fault.expected}, but:"]
        lines += [f"  - {problem}" for problem in outcome.problems]
        lines.append(f"rerun: {rerun_command(outcome)}")
        raise FaultCellFailed("\n".join(lines))


# -- fuzzing ------------------------------------------------------------------------


class FuzzTools(pytest.Collector):
    """The parent of the fuzz items: one ``toolguard-fuzz::<tool>`` per tool
    of the registry the ``toolguard_registry`` fixture gives them.

    The tools are named at collection (``collection.registry_at_collection``).
    When that fixture cannot be called at collection (a ``yield`` fixture,
    one that needs ``request``), a single item ``toolguard-fuzz::every-tool``
    fuzzes each of its tools at run time. A broken ini value, a fixture that
    returns no ``ToolRegistry`` and a registry without tools are collection
    errors naming the source."""

    source = "the toolguard_registry fixture"
    """Where the registry comes from, for messages."""
    deferred = ""
    """Why the tools are named only at run time ('' when they were at collection)."""

    def collect(self) -> list[pytest.Item]:
        names = self._tool_names()
        if names is None:
            return [FuzzItem.from_parent(self, name=EVERY_TOOL, callobj=fuzz_every_tool)]
        return [FuzzItem.from_parent(self, name=name, callobj=fuzz_one_tool) for name in names]

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name

    def _tool_names(self) -> list[str] | None:
        self._warn_unseen_fixtures()
        try:
            found = registry_at_collection(self, run_of(self.config).registries)
        except RegistryUnavailable as exc:
            raise self.CollectError(f"{FUZZ}: {exc}") from None
        self.source = found.source
        if found.registry is None:
            self.deferred = found.deferred
            return None
        if not len(found.registry):
            raise self.CollectError(f"{FUZZ}: nothing to fuzz: {self.source} has no tools")
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
                        f"toolguard_registry fixture that {FUZZ} does not see "
                        "(fuzz items belong to no directory): define it in the rootdir's "
                        "conftest.py"
                    )
                )


class FuzzItem(ToolguardItem):
    """Fuzzes one tool (or, as ``every-tool``, each tool of the fixture's
    registry); failing examples are reported as text."""

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.nodeid


def fuzz_one_tool(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of every per-tool FuzzItem: the fixture's registry at run
    time is the truth; the item's name only says which tool. (It asks for
    ``toolguard_secrets`` so its report is scrubbed of them.)"""
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
    outcomes.leave(item, fuzz=[report.as_dict()])
    if report.skipped:
        pytest.skip(f"cannot fuzz {spec.name}: {report.skipped}")
    if not report.ok:
        raise FuzzFailed(f"{report.format()}\n{_rerun_fuzz(config, spec.name)}")


def fuzz_every_tool(
    request: pytest.FixtureRequest,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
) -> None:
    """The body of the single ``every-tool`` FuzzItem: each tool in name
    order, one report per tool."""
    item, config = request.node, request.config
    parent = _parent(item)
    registry = _checked_registry(toolguard_registry)
    why = f"one item for every tool: {parent.source} is called only at run time ({parent.deferred})"
    if not len(registry):
        pytest.fail(f"{FUZZ}: nothing to fuzz: {parent.source} has no tools", pytrace=False)
    reports = [_fuzz(spec, registry, config) for spec in registry]
    outcomes.leave(item, fuzz=[report.as_dict() for report in reports])
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
    from ..registry import ToolRegistry

    if not isinstance(value, ToolRegistry):
        pytest.fail(
            f"the toolguard_registry fixture returned a {type(value).__name__}, not a ToolRegistry",
            pytrace=False,
        )
    return value


def _fuzz(spec: ToolSpec, registry: ToolRegistry, config: pytest.Config) -> FuzzReport:
    """Fuzz one tool with the run's options."""
    from ..fuzz import fuzz_tool

    run = run_of(config)
    return fuzz_tool(
        spec,
        registry=registry,
        examples=run.fuzz_examples,
        seed=run.fuzz_seed,
        fake_filesystems=run.fake_filesystems(),
        world=run.world,
        network=run.fuzz_network,
    )


def _rerun_fuzz(config: pytest.Config, tool: str) -> str:
    """The command that fuzzes ``tool`` again with the same examples."""
    run = run_of(config)
    return (
        f"rerun: pytest {FUZZ} {FUZZ_SEED}={run.fuzz_seed} "
        f"{FUZZ_EXAMPLES}={run.fuzz_examples}{' ' + FUZZ_NETWORK if run.fuzz_network else ''} "
        f"-k '{FUZZ_NODE} and {tool}'"
    )
