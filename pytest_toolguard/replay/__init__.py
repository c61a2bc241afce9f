"""Record and replay: cassettes and cases through the real executor."""

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
from .player import Difference, ReplayReport, replay
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
