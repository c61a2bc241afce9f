"""The pytest plugin's command-line options and ini values, named once.

The plugin declares them from here (``plugin.options``), and everything
pytest-free that tells a person which command to run (the fault matrix's
rerun commands, replay's re-record command, the ``toolguard`` CLI) spells
them from here too, so a renamed option cannot leave a stale command
behind. Data only: importing it costs nothing.
"""

from __future__ import annotations

REPLAY = "--toolguard-replay"
"""Collect cassettes and cases as items and replay them."""
RECORD_MODE = "--toolguard-record-mode"
"""When the ``toolguard`` fixture records."""
FAULTS = "--toolguard-faults"
"""The fault matrix: ``all`` or fault names."""
REPORT = "--toolguard-report"
"""Where the fault matrix is written (``.md``, ``.json``, ``.html``)."""
AMPLIFY = "--toolguard-amplify"
"""Amplify the cassettes and cases collected: record variants of their calls."""
FUZZ = "--toolguard-fuzz"
"""One fuzz item per tool."""
FUZZ_EXAMPLES = "--toolguard-fuzz-examples"
"""Generated examples per tool and kind."""
FUZZ_SEED = "--toolguard-fuzz-seed"
"""The fuzzer's seed."""
FUZZ_NETWORK = "--toolguard-fuzz-network"
"""Let fuzzed handlers reach the network (refused by default)."""
WORLD = "--toolguard-world"
"""Which world replay runs a cassette in: one of ``WORLD_CHOICES``."""

CASSETTE_DIR_INI = "toolguard_cassette_dir"
CASE_DIR_INI = "toolguard_case_dir"
REGISTRY_INI = "toolguard_registry"
SECRETS_INI = "toolguard_secrets"
RECORD_MODE_INI = "toolguard_record_mode"
AMPLIFY_MAX_INI = "toolguard_amplify_max_variants"
"""Variants kept per call: ``N`` (every tool) and ``TOOL=N`` lines."""
WORLD_INI = "toolguard_world"
"""The default of ``--toolguard-world``."""

WORLD_CHOICES = ("auto", "fake", "directory")
"""``auto``: the directory world for a cassette that calls a tool declaring
``world="directory"`` (itself or through its registry), the fake world
otherwise; ``fake`` or ``directory``: that world for every cassette."""
REAL_PATHS_INI = "toolguard_real_paths"
"""Real directories the fake world maps in read-only, one a line (beside
the time-zone database and installed packages, always mapped)."""

FUZZ_NODE = "toolguard-fuzz"
"""The collector of the fuzz items (``toolguard-fuzz::<tool>``)."""


def dest(option: str) -> str:
    """The attribute pytest keeps an option under (``--toolguard-fuzz-seed``
    -> ``toolguard_fuzz_seed``)."""
    return option.lstrip("-").replace("-", "_")
