"""The built-in faults, in the order the matrix shows them, and selecting
faults by name.

``BUILTIN_FAULTS`` is the whole catalogue: nothing registers itself on
import. A project's own faults come in through the
``pytest_toolguard_faults`` hook (the plugin adds them after these), or,
outside pytest, by passing them to ``select_faults`` and ``run_cell``. The
fault table of ``docs/faults.md`` lists every one by name; its rows are
what ``scripts/fault_table.py`` prints from each fault's class attributes.
"""

from __future__ import annotations

from collections.abc import Sequence

from .asynchronous import AsyncLoopFault
from .concurrency import ConcurrentCallsFault
from .disk import DiskFailureFault, PartialWriteFault
from .environment import EnvironmentFault
from .fault import Fault
from .handler import HandlerExceptionFault, OversizedOutputFault, TimeoutFault
from .hash_seed import HashSeedFault
from .inputs import LargeInputFault
from .leaks import ResourceLeakFault
from .network import HttpErrorFault, HttpRedirectFault, LateResponseFault, NetworkErrorFault
from .paths import SymlinkEscapeFault, SymlinkRaceFault
from .processes import ProcessKilledFault
from .refusals import (
    CapabilityRevokedFault,
    PlanViolationFault,
    SchemaDriftFault,
    UnknownToolFault,
)
from .repeats import DuplicateSubmissionFault, ResponseLostFault
from .shell import ShellInjectionFault
from .slow import SlowWorldFault
from .storage import AuditUnavailableFault, SecretByNameFault, SecretInPayloadFault
from .traversal import PathTraversalFault

BUILTIN_FAULTS: tuple[Fault, ...] = (
    TimeoutFault(),
    SymlinkEscapeFault(),
    SymlinkRaceFault(),
    PathTraversalFault(),
    DuplicateSubmissionFault(),
    PartialWriteFault(),
    DiskFailureFault(),
    HandlerExceptionFault(),
    AuditUnavailableFault(),
    OversizedOutputFault(),
    LargeInputFault(),
    ResponseLostFault(),
    SchemaDriftFault(),
    CapabilityRevokedFault(),
    UnknownToolFault(),
    PlanViolationFault(),
    SecretInPayloadFault(),
    SecretByNameFault(),
    NetworkErrorFault(),
    HttpErrorFault(),
    LateResponseFault(),
    ProcessKilledFault(),
    HttpRedirectFault(),
    EnvironmentFault(),
    HashSeedFault(),
    SlowWorldFault(),
    AsyncLoopFault(),
    ShellInjectionFault(),
    ConcurrentCallsFault(),
    ResourceLeakFault(),
)
"""Every built-in fault, in catalogue order."""


def select_faults(spec: str, known: Sequence[Fault] | None = None) -> tuple[Fault, ...]:
    """Comma-separated names, where ``all`` stands for every fault, ->
    faults of ``known`` (default: ``BUILTIN_FAULTS``), in its order
    (``all,timeout`` is every fault). ``ValueError`` names any unknown fault
    and lists the known ones."""
    known = tuple(BUILTIN_FAULTS if known is None else known)
    wanted = [part.strip() for part in spec.split(",") if part.strip()]
    if "all" in wanted:
        wanted = [fault.name for fault in known] + [name for name in wanted if name != "all"]
    names = {fault.name for fault in known}
    unknown = [name for name in wanted if name not in names]
    if unknown or not wanted:
        raise ValueError(
            f"unknown fault {', '.join(unknown) or repr(spec)}; "
            f"known: all, {', '.join(sorted(names))}"
        )
    return tuple(fault for fault in known if fault.name in wanted)
