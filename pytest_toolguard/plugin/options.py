"""The plugin's options and ini values, declared from ``pytest_toolguard.options``."""

from __future__ import annotations

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
    RECORD_MODE,
    RECORD_MODE_INI,
    REGISTRY_INI,
    REPLAY,
    REPORT,
    SECRETS_INI,
    WORLD,
    WORLD_CHOICES,
    WORLD_INI,
    dest,
)
from ..replay.record_mode import CHOICES as RECORD_MODES
from ..replay.registry_loading import DEFAULT_REGISTRY

DEFAULT_FUZZ_EXAMPLES = 100


def add_options(parser: pytest.Parser) -> None:
    """Every option and ini value of the plugin."""
    group = parser.getgroup("toolguard", "toolguard")
    group.addoption(
        REPLAY,
        dest=dest(REPLAY),
        action="store_true",
        default=False,
        help=f"collect every cassette and case (*.yaml, *.yml under {CASSETTE_DIR_INI} "
        f"and {CASE_DIR_INI}) as a test item and replay it through the real executor; "
        "with no paths given, both directories are added to the run",
    )
    group.addoption(
        RECORD_MODE,
        dest=dest(RECORD_MODE),
        choices=RECORD_MODES,
        default=None,
        help="when the toolguard fixture records: none (never; a missing cassette is an "
        "error), once (when the cassette is missing), rewrite (always, kept only if the test "
        "passed). Precedence: this option, then @pytest.mark.toolguard(record_mode=...), "
        f"then the ini {RECORD_MODE_INI} (default none)",
    )
    group.addoption(
        FAULTS,
        dest=dest(FAULTS),
        default=None,
        metavar="all|NAME,...",
        help=f"with {REPLAY} (implied): also collect, for every interaction of "
        "every cassette and case, one item per applicable fault (all, or comma-separated "
        "fault names), e.g. cassettes/x.yaml::3-write_file::partial_write",
    )
    group.addoption(
        REPORT,
        dest=dest(REPORT),
        default=None,
        metavar="PATH",
        help="write the fault matrix to PATH: Markdown (.md), JSON (.json) or HTML (.html)",
    )
    group.addoption(
        AMPLIFY,
        dest=dest(AMPLIFY),
        action="store_true",
        default=False,
        help=f"instead of replaying them, amplify the cassettes and cases collected (as "
        f"{REPLAY} collects them): each call that succeeded gets boundary, text and size "
        "variants recorded with the tools in use, written into its file (only when the "
        f"recorded calls replay the same); at most {AMPLIFY_MAX_INI} a call",
    )
    group.addoption(
        FUZZ,
        dest=dest(FUZZ),
        action="store_true",
        default=False,
        help=f"add one item per tool of the {REGISTRY_INI} fixture (toolguard-fuzz::<tool>) "
        "that runs it through the executor with arguments generated from its input schema, "
        "valid and invalid",
    )
    group.addoption(
        FUZZ_EXAMPLES,
        dest=dest(FUZZ_EXAMPLES),
        type=int,
        default=DEFAULT_FUZZ_EXAMPLES,
        metavar="N",
        help=f"generated examples per tool, for valid and for invalid arguments each "
        f"(default {DEFAULT_FUZZ_EXAMPLES})",
    )
    group.addoption(
        FUZZ_SEED,
        dest=dest(FUZZ_SEED),
        type=int,
        default=0,
        metavar="N",
        help="the fuzzer's seed (default 0: the same examples on every run and xdist worker)",
    )
    group.addoption(
        FUZZ_NETWORK,
        dest=dest(FUZZ_NETWORK),
        action="store_true",
        help="let fuzzed handlers reach the network (by default every socket they connect, "
        "loopback included, is refused): the fuzz report says so",
    )
    group.addoption(
        WORLD,
        dest=dest(WORLD),
        choices=WORLD_CHOICES,
        default=None,
        help="the world replay runs each cassette and case in: auto (the directory world when "
        'a tool it calls declares world="directory", the fake world otherwise), fake (a '
        "fake filesystem in this process) or directory (a fresh real directory, removed "
        f"afterwards). Default: the ini {WORLD_INI}, else auto",
    )
    parser.addini(
        WORLD_INI,
        f"the default of {WORLD}: {', '.join(WORLD_CHOICES)} (default: auto)",
        default="auto",
    )
    parser.addini(
        CASSETTE_DIR_INI,
        "directory of cassettes, relative to the rootdir (default: cassettes)",
        default="cassettes",
    )
    parser.addini(
        CASE_DIR_INI,
        "directory of hand-written cases, relative to the rootdir (default: cases)",
        default="cases",
    )
    parser.addini(
        REGISTRY_INI,
        "the tools replay and recording use: package.module:attribute naming a ToolRegistry "
        f"or a function returning one (default: {DEFAULT_REGISTRY})",
        default=DEFAULT_REGISTRY,
    )
    parser.addini(
        SECRETS_INI,
        "package.module:attribute naming a mapping (or a function returning one) from "
        "placeholder keyword to the real value replay sends (default: none)",
        default="",
    )
    parser.addini(
        AMPLIFY_MAX_INI,
        f"variants {AMPLIFY} keeps per call: a line N (default 15) and lines TOOL=N",
        type="linelist",
        default=[],
    )
    parser.addini(
        REAL_PATHS_INI,
        "real directories the fake world maps in read-only, one a line, relative to the "
        "ini file (the time-zone database and installed packages are always mapped): a tool "
        "reads them, a write there is refused and reported",
        type="paths",
        default=[],
    )
    parser.addini(
        RECORD_MODE_INI,
        f"default record mode of the toolguard fixture: {', '.join(RECORD_MODES)} (default: none)",
        default="none",
    )
