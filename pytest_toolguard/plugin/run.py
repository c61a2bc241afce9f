"""The run: everything run-wide the plugin keeps, and its reports.

One ``ToolguardRun`` per pytest session, in ``config.stash[RUN]``: the
options as read once, the faults selected, the replay directories, what
the items found (replay totals, matrix cells, fuzz reports), the
registries known at collection, and what the items share (the fake
filesystem, the fault matrix's cache of the states before targets), closed
at the end of the session. It is registered as a plugin of its own: it
adds up what the items found as their reports are logged, and reports the
totals, the fuzz summary and the fault matrix at the end.

What an item found rides on its own ``TestReport`` (``outcomes``), so the
run that adds it up is the controller's with xdist, and a worker that
crashes loses only the item it was running; that item, a fault cell, is
reported as a failed cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..options import (
    AMPLIFY,
    AMPLIFY_MAX_INI,
    CASE_DIR_INI,
    CASSETTE_DIR_INI,
    FAULTS,
    FUZZ,
    FUZZ_EXAMPLES,
    FUZZ_NETWORK,
    FUZZ_SEED,
    REAL_PATHS_INI,
    RECORD_MODE_INI,
    REGISTRY_INI,
    REPLAY,
    REPORT,
    WORLD,
    WORLD_CHOICES,
    WORLD_INI,
    dest,
)
from ..replay.record_mode import parse as parse_record_mode
from . import outcomes

if TYPE_CHECKING:
    from ..faults import Fault
    from ..faults.outcome import CellOutcome, MatrixReport
    from ..faults.prefixes import PrefixCache
    from ..fuzz import FuzzReport
    from ..harness.fake_filesystem import FakeFilesystems
    from ..registry import ToolRegistry
    from ..replay.cassette import Cassette
    from ..replay.report import ReplayTotals


class ToolguardRun:
    """The plugin's state for one pytest session (see the module docstring).
    Raises ``pytest.UsageError`` for options that cannot work together."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.amplifying = bool(config.getoption(dest(AMPLIFY)))
        """Cassettes and cases are amplified instead of replayed (``--toolguard-amplify``)."""
        self.replaying = bool(
            config.getoption(dest(REPLAY)) or config.getoption(dest(FAULTS)) or self.amplifying
        )
        """Cassettes and cases are collected (``--toolguard-replay``, faults, amplify)."""
        self.fuzzing = bool(config.getoption(dest(FUZZ)))
        self.fuzz_examples: int = config.getoption(dest(FUZZ_EXAMPLES))
        self.fuzz_seed: int = config.getoption(dest(FUZZ_SEED))
        self.fuzz_network = bool(config.getoption(dest(FUZZ_NETWORK)))
        """Fuzzed handlers may reach the network (``--toolguard-fuzz-network``)."""
        self.report_path: str | None = config.getoption(dest(REPORT)) or None
        self.record_mode_ini = self._ini_record_mode()
        self.world: str = self._world()
        """The world replay runs cassettes in: one of ``WORLD_CHOICES``."""
        self.faults: tuple[Fault, ...] = self._selected_faults()
        """The columns of the fault matrix (empty without ``--toolguard-faults``)."""
        self._check_report_path()
        self._check_ini_registry()
        root = config.rootpath
        self.replay_dirs: tuple[Path, ...] = tuple(
            (root / str(config.getini(name))).resolve() for name in (CASSETTE_DIR_INI, CASE_DIR_INI)
        )
        self.totals: ReplayTotals | None = None
        """What the replay items replayed (made on the first one)."""
        self.cells: list[CellOutcome] = []
        self.fuzzed: list[FuzzReport] = []
        self.variants: dict[str, int] = {}
        """What the variants items replayed: variants, refused, differences, files."""
        self.amplified: list[list[str]] = []
        """Each amplify item's report lines."""
        self.amplify_caps = self._amplify_caps()
        self.registries: dict[int, Any] = {}
        """What ``collection.registry_at_collection`` found for each fixture
        definition (a ``RegistryAtCollection`` or ``RegistryUnavailable``)."""
        self.ini_registry: ToolRegistry | None = None
        """The registry the plugin's own ``toolguard_registry`` fixture loaded."""
        self._fake_filesystems: FakeFilesystems | None = None
        self._prefixes: PrefixCache | None = None
        self._cassettes: dict[tuple[Path, str], tuple[tuple[int, int], Cassette]] = {}

    @property
    def is_worker(self) -> bool:
        """This process is a pytest-xdist worker (the controller adds up)."""
        return hasattr(self.config, "workerinput")

    # -- what the items share ---------------------------------------------------

    def fake_filesystems(self) -> FakeFilesystems:
        """The run's ``FakeFilesystems``, made on first use (it loads pyfakefs)."""
        if self._fake_filesystems is None:
            from ..harness.fake_filesystem import FakeFilesystems

            self._fake_filesystems = FakeFilesystems(real_paths=self.config.getini(REAL_PATHS_INI))
        return self._fake_filesystems

    def cassette(self, path: Path, source: str) -> Cassette:
        """``replay.cassette.load(path, source=source)``, read, validated and
        built once per process (collection and the file's items share it)
        while the file's size and modification time stay the same. Raises
        ``CassetteError`` as ``load`` does (never kept)."""
        from ..replay.cassette import load

        key = (path, source)
        try:
            st = path.stat()
            version = (st.st_mtime_ns, st.st_size)
        except OSError:
            return load(path, source=source)  # load says why it cannot be read
        kept = self._cassettes.get(key)
        if kept is not None and kept[0] == version:
            return kept[1]
        cassette = load(path, source=source)
        self._cassettes[key] = (version, cassette)
        return cassette

    def prefixes(self) -> PrefixCache:
        """The run's cache of the states before targets, made on first use."""
        if self._prefixes is None:
            from ..faults.prefixes import PrefixCache

            self._prefixes = PrefixCache()
        return self._prefixes

    def close(self) -> None:
        """End the fake filesystem the run's items shared (paused between
        them) and drop the states its cells saved."""
        if self._fake_filesystems is not None:
            self._fake_filesystems.close()
        if self._prefixes is not None:
            self._prefixes.clear()
        self._cassettes.clear()

    # -- what the items found -----------------------------------------------------

    def add(self, found: Mapping[str, Any]) -> None:
        """Add what one item found (``outcomes.found_on``)."""
        replayed = found.get("replay")
        if replayed is not None:
            from ..replay.report import ReplayTotals

            self.totals = (self.totals or ReplayTotals()) + ReplayTotals.from_dict(replayed)
        cell = found.get("cell")
        if cell is not None:
            from ..faults.outcome import CellOutcome

            self.cells.append(CellOutcome.from_dict(cell))
        for report in found.get("fuzz", ()):
            from ..fuzz import FuzzReport

            self.fuzzed.append(FuzzReport.from_dict(report))
        for name, count in (found.get("variants") or {}).items():
            self.variants[name] = self.variants.get(name, 0) + count
        if found.get("amplify") is not None:
            self.amplified.append(list(found["amplify"]))

    def matrix(self) -> MatrixReport:
        """The fault matrix of the cells found so far."""
        from ..faults.outcome import MatrixReport

        return MatrixReport.of([fault.name for fault in self.faults], self.cells)

    # -- hooks: adding up and reporting ----------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add what the report's item found (on the controller under xdist:
        a worker's run leaves it to the report)."""
        found = outcomes.found_on(report)
        if found is not None and not self.is_worker:
            self.add(found)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """xdist, on the controller: a fault cell whose worker crashed is a
        failed cell (the others of that worker arrived with their reports)."""
        cell = outcomes.crashed_cell(
            crashitem, [fault.name for fault in self.faults], str(report.longrepr)
        )
        if cell is not None:
            setattr(report, outcomes.ATTRIBUTE, {"cell": cell})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.report_path and not self.is_worker:
            from ..faults.report import write_report

            write_report(self.matrix(), self.report_path)

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
    ) -> None:
        if self.is_worker:
            return
        if self.fuzzing and not config.option.collectonly:
            for line in fuzz_summary(self.fuzzed, self.fuzz_seed):
                terminalreporter.write_line(line)
        if not self.replaying:
            return
        from ..replay.report import ReplayTotals

        if self.amplifying:
            every_drop = config.option.verbose > 0  # else the counts of each reason
            for lines in self.amplified:
                for line in lines:
                    if every_drop or not line.startswith("    "):
                        terminalreporter.write_line(f"toolguard amplify: {line}")
            return
        if self.variants:
            counts = self.variants
            terminalreporter.write_line(
                f"toolguard variants: {counts.get('variants', 0)} replayed "
                f"({counts.get('refused', 0)} refusals) from {counts.get('files', 0)} file(s), "
                f"{counts.get('failed', 0)} differing"
            )
        terminalreporter.write_line((self.totals or ReplayTotals()).summary())
        if self.faults and self.cells:
            from ..faults.report import terminal_grid

            width = max(60, config.get_terminal_writer().fullwidth - 1)
            for line in terminal_grid(self.matrix(), width):
                terminalreporter.write_line(line)
            if self.report_path:
                terminalreporter.write_line(
                    f"toolguard: fault matrix written to {self.report_path}"
                )

    # -- options that need checking ---------------------------------------------------

    def _ini_record_mode(self) -> str:
        """The ini record mode; a usage error when it is unknown."""
        value = str(self.config.getini(RECORD_MODE_INI))
        try:
            parse_record_mode(value, f"ini {RECORD_MODE_INI}")
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        return value

    def _world(self) -> str:
        """``--toolguard-world``, else the ini's; a usage error when unknown."""
        value = self.config.getoption(dest(WORLD))
        if value is not None:
            return str(value)  # argparse checked the choice
        value = str(self.config.getini(WORLD_INI)).strip() or "auto"
        if value not in WORLD_CHOICES:
            choices = ", ".join(WORLD_CHOICES)
            raise pytest.UsageError(
                f"ini {WORLD_INI}: unknown world {value!r}; choose one of {choices}"
            )
        return value

    def _amplify_caps(self) -> Any:
        """The ini's variant caps (a ``VariantCaps``); a usage error when bad."""
        lines = [str(line) for line in self.config.getini(AMPLIFY_MAX_INI)]
        if not lines:
            return None
        from ..amplify.record import VariantCaps

        try:
            return VariantCaps.parse(lines)
        except ValueError as exc:
            raise pytest.UsageError(f"ini {AMPLIFY_MAX_INI}: {exc}") from None

    def _selected_faults(self) -> tuple[Fault, ...]:
        """The faults of ``--toolguard-faults``: the built-in ones plus those
        the ``pytest_toolguard_faults`` hook adds, in that order."""
        spec = self.config.getoption(dest(FAULTS))
        if not spec:
            return ()
        from ..faults import BUILTIN_FAULTS, select_faults
        from ..faults.fault import with_added

        hook = self.config.hook.pytest_toolguard_faults
        added = [fault for faults in hook(config=self.config) for fault in faults or ()]
        try:
            known = with_added(BUILTIN_FAULTS, added)
        except ValueError as exc:
            raise pytest.UsageError(f"pytest_toolguard_faults: {exc}") from None
        try:
            return select_faults(spec, known)
        except ValueError as exc:
            raise pytest.UsageError(f"{FAULTS}: {exc}") from None

    def _check_ini_registry(self) -> None:
        """A run that replays or fuzzes loads the ini ``toolguard_registry``
        for every item: one that cannot be loaded (malformed, module missing
        or raising on import, attribute missing, not a registry, its factory
        raising) is a usage error said once here, not an error per item."""
        spec = str(self.config.getini(REGISTRY_INI))
        if not spec or not (self.replaying or self.fuzzing):
            return
        from ..replay.registry_loading import SpecError, load_registry

        try:
            load_registry(spec)
        except SpecError as exc:
            one_line = " ".join(str(exc).splitlines())
            raise pytest.UsageError(f"ini {REGISTRY_INI}: {one_line}") from None

    def _check_report_path(self) -> None:
        """``--toolguard-report`` needs faults to report and a format it can write."""
        path = self.report_path
        if not path:
            return
        if not self.faults:
            raise pytest.UsageError(f"{REPORT} needs {FAULTS}")
        from ..faults.report import RENDERERS

        if Path(path).suffix.lower() not in RENDERERS:
            raise pytest.UsageError(f"{REPORT}: {path}: use one of {', '.join(RENDERERS)}")


def fuzz_summary(reports: list[FuzzReport], seed: int) -> list[str]:
    """The summary line, then one line per tool that could not be fuzzed."""
    failures = sum(len(report.failures) for report in reports)
    skipped = [report for report in reports if report.skipped]
    first = (
        f"toolguard fuzz: {len(reports)} tools, "
        f"{sum(r.valid_calls for r in reports)} valid and "
        f"{sum(r.invalid_calls for r in reports)} invalid calls, "
        f"{len(skipped)} skipped, {failures} failing examples, seed {seed}"
    )
    if any(report.network for report in reports):
        first += ", network allowed"
    return [first, *(f"  skipped {report.tool}: {report.skipped}" for report in skipped)]


RUN: pytest.StashKey[ToolguardRun] = pytest.StashKey()
"""Where the run lives: ``config.stash[RUN]``."""


def run_of(config: pytest.Config) -> ToolguardRun:
    """The run of ``config``'s session."""
    return config.stash[RUN]
