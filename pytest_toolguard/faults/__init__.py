"""Fault matrices: every recorded call against every fault.

See ``base`` (what a fault is, the cell world), ``builtin`` (the catalogue),
``outcome`` and ``report`` (the matrix and its reports).
"""

from . import builtin as _builtin  # registers the built-in faults, in order
from .base import (
    DECOY_MARKER,
    Cell,
    Fault,
    Target,
    catalogue,
    iter_cells,
    register_fault,
    run_cell,
    select_faults,
    targets,
    unregister_fault,
)
from .builtin import FAKE_SECRET, InjectedFault, secret_forms, traversal_payloads

__all__ = [
    "DECOY_MARKER",
    "FAKE_SECRET",
    "Cell",
    "Fault",
    "InjectedFault",
    "Target",
    "catalogue",
    "iter_cells",
    "register_fault",
    "run_cell",
    "secret_forms",
    "select_faults",
    "targets",
    "traversal_payloads",
    "unregister_fault",
]

del _builtin
