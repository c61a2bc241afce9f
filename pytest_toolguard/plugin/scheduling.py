"""pytest-xdist's ``--dist loadgroup``, mended for fault matrices.

The plugin hands xdist this scheduler for ``--dist loadgroup``
(``pytest_xdist_make_scheduler``). It is xdist's ``LoadGroupScheduling``
with four faults of pytest-xdist 3.8 (the latest release) worked around:

- **No grouping under pytest 9.2** (pytest-xdist#1386): a worker marks a
  grouped item by appending ``@<group>`` to ``item._nodeid``, which pytest
  9.2's structured node ids no longer read, so every item was its own
  unit. Here an item of a cassette or case file (its node id's file part is
  ``*.yaml``/``*.yml``: the replay item, the variants and every fault cell)
  is grouped by that file, as its ``xdist_group`` mark says; an ``@`` suffix,
  where xdist's own works, is read as before.
- **A crashed worker's finished units queued again** (pytest-xdist#1323):
  ``remove_node`` put back every unit the worker had ever run; a unit with
  nothing left was sent as an empty list, the worker never answered it, no
  report came to reschedule on, and the run hung.
  ``test_a_worker_killed_mid_matrix_loses_no_other_cell`` hung so. Here
  only units with items left are queued again.
- **The crashed item run again** (pytest-xdist#1371): it stayed pending in
  its unit, so the replacement worker ran it again (and a cell that kills
  its worker killed each replacement until the restarts ran out). xdist has
  already reported it as failed; here it is marked done, as ``--dist load``
  does.
- **A replacement worker given its last unit waits** (pytest-xdist#1327):
  a worker runs an item once it holds the next one or is told to shut
  down; a replacement given the last unit of one item got neither. Here the
  nodes are told to shut down once nothing is left to hand out, as the
  first distribution does.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

from .outcomes import YAML_SUFFIXES


class CellGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
    """``--dist loadgroup``: a cassette file's items on one worker, and a
    worker's crash costing only the item it ran."""

    def _split_scope(self, nodeid: str) -> str:
        scope: str = super()._split_scope(nodeid)
        if scope != nodeid:  # xdist's own "@group" suffix
            return scope
        path = nodeid.split("::", 1)[0]
        if "::" in nodeid and path.endswith(YAML_SUFFIXES):
            return path
        return nodeid

    def remove_node(self, node: WorkerController) -> str | None:
        workload = self.assigned_work.pop(node)
        pending: list[tuple[str, str]] = [
            (scope, nodeid)
            for scope, unit in workload.items()
            for nodeid, done in unit.items()
            if not done
        ]
        if not pending:
            return None
        scope, crashitem = pending[0]
        workload[scope][crashitem] = True  # reported failed by xdist: never run again
        for scope, unit in workload.items():
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def schedule(self) -> None:
        rescheduling = self.collection is not None
        super().schedule()
        if rescheduling and not self.workqueue:
            for node in self.nodes:
                if not node.shutting_down:
                    node.shutdown()
