"""The plugin's fixtures: ``toolguard_registry``, ``toolguard_secrets``,
``toolguard`` (a test's cassette, recorded or played back) and
``toolguard_runtime`` (runtimes on a fresh workspace)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..options import (
    CASSETTE_DIR_INI,
    RECORD_MODE,
    RECORD_MODE_INI,
    REGISTRY_INI,
    SECRETS_INI,
    dest,
)
from ..replay.record_mode import parse as parse_record_mode
from ..replay.registry_loading import DEFAULT_REGISTRY
from .run import run_of

if TYPE_CHECKING:
    from ..capabilities import Capabilities
    from ..registry import ToolRegistry
    from ..replay.cassette import Cassette
    from ..replay.tape import TapeOptions
    from ..runtime import ToolRuntime

RuntimeFactory = Callable[..., "ToolRuntime"]
"""What ``toolguard_runtime`` gives: ``make(registry=None, capabilities=None, **options)``."""

JOIN_SECONDS = 5.0
"""How long a fixture waits at teardown for a handler that overran its deadline."""

PHASES: pytest.StashKey[dict[str, pytest.TestReport]] = pytest.StashKey()
"""The reports of a test using ``toolguard``, by phase (did it pass?)."""


def record_phase(item: pytest.Item, report: pytest.TestReport) -> None:
    """Keep ``report`` for ``toolguard``'s teardown of ``item``."""
    if "toolguard" in getattr(item, "fixturenames", ()):
        item.stash.setdefault(PHASES, {})[report.when] = report


@pytest.fixture(scope="session")
def toolguard_registry(pytestconfig: pytest.Config) -> ToolRegistry:
    """The tools replay and the ``toolguard`` fixture use: the ini
    ``toolguard_registry`` (default: the built-in tools). Override this
    fixture in a conftest.py to build the registry in code."""
    from ..replay.registry_loading import SpecError, load_registry

    spec = str(pytestconfig.getini(REGISTRY_INI)) or DEFAULT_REGISTRY
    try:
        registry = load_registry(spec)
    except SpecError as exc:
        problem = str(exc)
    else:
        run_of(pytestconfig).ini_registry = registry  # so reports can say where tools came from
        return registry
    pytest.fail(f"ini {REGISTRY_INI}: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def toolguard_secrets(pytestconfig: pytest.Config) -> Mapping[str, str]:
    """Real values replay sends in place of placeholders
    (``{"authorization": "Bearer ..."}`` for ``<redacted:authorization>``):
    the ini ``toolguard_secrets``, or none. Override in a conftest.py."""
    spec = str(pytestconfig.getini(SECRETS_INI))
    if not spec:
        return {}
    from ..replay.registry_loading import SpecError, load_secrets

    try:
        return load_secrets(spec)
    except SpecError as exc:
        problem = str(exc)
    pytest.fail(f"ini {SECRETS_INI}: {problem}", pytrace=False)


@pytest.fixture
def toolguard(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    toolguard_registry: ToolRegistry,
    toolguard_secrets: Mapping[str, str],
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
    frozen clock; or a fresh real directory for tools that declare
    ``world="directory"``, or with the marker's ``world=``, which overrides
    ``--toolguard-world`` and the ini's ``toolguard_world`` for this test);
    each call must be the cassette's next one, and differences or
    interactions never replayed fail the test.

    The values of ``toolguard_secrets`` are redacted like any secret, when
    recording and playing back, and never shown in a report.
    """
    from ..replay.naming import cassette_name, explicit_cassette_name
    from ..replay.record_mode import Action, RecordMode, action, choose
    from ..replay.report import format_missing_cassette, record_command
    from ..replay.tape import TapeOptions, tape_options

    config, node = request.config, request.node
    marker = node.get_closest_marker("toolguard")
    options = tape_options(marker.args, marker.kwargs) if marker else TapeOptions()
    option_mode = config.getoption(dest(RECORD_MODE))
    mode = choose(
        None if option_mode is None else RecordMode(option_mode),
        options.record_mode,
        parse_record_mode(str(config.getini(RECORD_MODE_INI)), f"ini {RECORD_MODE_INI}"),
    )
    relative = (
        explicit_cassette_name(options.cassette) if options.cassette else cassette_name(node.nodeid)
    )
    path = config.rootpath / str(config.getini(CASSETTE_DIR_INI)) / relative
    shown = _shown(path, config.rootpath)
    todo = action(mode, path.is_file())
    if todo is Action.MISSING:
        pytest.fail(format_missing_cassette(shown, node.nodeid), pytrace=False)
    rerecord = record_command(node.nodeid)
    if todo is Action.REPLAY:
        yield from _play_back(
            request, path, shown, rerecord, toolguard_registry, options, toolguard_secrets
        )
    else:
        yield from _record(
            request, path, tmp_path, rerecord, toolguard_registry, options, toolguard_secrets
        )


def _play_back(
    request: pytest.FixtureRequest,
    path: Path,
    shown: str,
    rerecord: str,
    registry: ToolRegistry,
    options: TapeOptions,
    secrets: Mapping[str, str],
) -> Iterator[ToolRuntime]:
    from ..replay.cassette import CassetteError, load
    from ..replay.report import format_report
    from ..replay.tape import PlaybackTape

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
        fake_filesystems=run_of(request.config).fake_filesystems(),
        secrets=secrets,
        # The marker's world is this test's; else the option's, the ini's, the tools'.
        world=options.world or run_of(request.config).world,
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
    secrets: Mapping[str, str],
) -> Iterator[ToolRuntime]:
    from ..audit import SQLiteAuditStore
    from ..replay.tape import RecordingTape

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
        secrets=secrets,
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
    call = item.stash.get(PHASES, {}).get("call")
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
    from ..audit import SQLiteAuditStore
    from ..runtime import ToolRuntime
    from ..tools import builtin_registry

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
        problems += runtime.close(join_timeout=JOIN_SECONDS)
    for store in stores:
        store.close()
    if problems:
        pytest.fail("toolguard: " + "; ".join(problems), pytrace=False)
