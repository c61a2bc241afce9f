"""Record and replay: cassettes and cases through the real executor.

The names below load on first use (see ``pytest_toolguard._lazy``): the
plugin imports small modules of this package in every pytest run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .cassette import (
        FORMAT_VERSION,
        AuditExpectation,
        Cassette,
        CassetteError,
        Expectation,
        FileState,
        Interaction,
        Session,
        WorkspaceState,
        dump,
        dumps,
        load,
        loads,
    )
    from .checks import Difference, ReplayReport
    from .player import replay
    from .recorder import Recorder, record_session

__all__ = [
    "FORMAT_VERSION",
    "AuditExpectation",
    "Cassette",
    "CassetteError",
    "Difference",
    "Expectation",
    "FileState",
    "Interaction",
    "Recorder",
    "ReplayReport",
    "Session",
    "WorkspaceState",
    "dump",
    "dumps",
    "load",
    "loads",
    "record_session",
    "replay",
]

_EXPORTED_FROM = {
    "cassette": (
        "FORMAT_VERSION",
        "AuditExpectation",
        "Cassette",
        "CassetteError",
        "Expectation",
        "FileState",
        "Interaction",
        "Session",
        "WorkspaceState",
        "dump",
        "dumps",
        "load",
        "loads",
    ),
    "checks": ("Difference", "ReplayReport"),
    "player": ("replay",),
    "recorder": ("Recorder", "record_session"),
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTED_FROM)
