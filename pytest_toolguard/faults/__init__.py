"""Fault matrices: every recorded call against every fault.

A fault (``fault.Fault``) applies to a recorded interaction (``Target``)
and is injected into one ``Cell`` (``cell``: the world, the session's
runtime, the oracles); ``run.run_cell`` runs one, ``iter_cells`` lists the
cells of a cassette. ``BUILTIN_FAULTS`` is the catalogue (one module per
theme: ``handler``, ``paths``, ``repeats``, ``refusals``, ``storage``,
``network``); ``outcome`` and ``report`` hold the matrix and its reports.
A cell runs in the world replay would choose (the fake filesystem, or a
fresh real directory: ``run``); ``directory`` holds what faults use on
real files.
"""

from .builtin import BUILTIN_FAULTS, select_faults
from .cell import Cell
from .fault import Fault, iter_cells
from .run import run_cell
from .target import Target, targets

__toolguard_owned__ = False  # tools' code: an inline deadline may interrupt it (runtime/inline.py)

__all__ = [
    "BUILTIN_FAULTS",
    "Cell",
    "Fault",
    "Target",
    "iter_cells",
    "run_cell",
    "select_faults",
    "targets",
]
