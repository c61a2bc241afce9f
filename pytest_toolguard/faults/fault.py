"""What a fault is: where it applies, how it is injected, what must hold.

A fault is a small object (``Fault``): ``applies(target)`` says whether it
has anything to act on in one recorded interaction, ``inject(cell)`` sets
it up, makes its calls through the cell and states its oracle with
``cell.check``. The built-in faults are ``builtin.BUILTIN_FAULTS``; a
project adds its own through the ``pytest_toolguard_faults`` hook (or,
outside pytest, by passing them to ``select_faults`` and ``run_cell``):
one extension path, as tools have.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry import ToolRegistry, WorldKind
from ..replay.cassette import Cassette
from .target import Target, targets

if TYPE_CHECKING:
    from .cell import Cell


class Fault:
    """A fault: subclass it, set the four documented class attributes, and
    override ``applies`` and ``inject``.

    ``applies(target)`` must depend only on the target (it is asked at
    collection, on every xdist worker alike). ``inject(cell)`` sets the fault
    up, makes its calls through ``cell.execute`` and states its oracle with
    ``cell.check``; the shared invariants are checked after it returns.
    """

    name: ClassVar[str]
    applies_to: ClassVar[str]
    """For the catalogue table: which interactions get this fault."""
    injection: ClassVar[str]
    """How it is injected."""
    expected: ClassVar[str]
    """The oracle: what must hold afterwards."""

    def applies(self, target: Target) -> bool:
        return True

    def inject(self, cell: Cell) -> None:
        raise NotImplementedError

    def cannot_run_in(self, world: WorldKind) -> str | None:
        """Why this fault cannot act in ``world`` (``fake`` or ``directory``)
        on this machine (its cells are then reported ``n/a`` with the
        reason), or None when it can. A fault of your own that uses
        ``cell.fs`` (the fake filesystem) should say so for ``directory``."""
        return None

    def __repr__(self) -> str:
        return f"<fault {self.name}>"


class AfterSuccess(Fault):
    """A fault of calls that reached their handler and succeeded when
    recorded: those that change the handler's world."""

    applies_to = "calls that succeeded when recorded"

    def applies(self, target: Target) -> bool:
        return target.handler_can_run


def as_fault(fault: type[Fault] | Fault) -> Fault:
    """``fault`` as an instance (a class is made without arguments), checked:
    ``ValueError`` for a name that is not letters, digits and ``_``, or a
    missing ``applies_to``, ``injection`` or ``expected``."""
    instance: Any = fault() if isinstance(fault, type) else fault
    name = getattr(instance, "name", "")
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ValueError(f"a fault needs a name of letters, digits and _: {name!r}")
    for attribute in ("applies_to", "injection", "expected"):
        if not isinstance(getattr(instance, attribute, None), str):
            raise ValueError(f"fault {name}: set the class attribute {attribute} (a str)")
    checked: Fault = instance
    return checked


def with_added(known: Sequence[Fault], added: Sequence[type[Fault] | Fault]) -> tuple[Fault, ...]:
    """``known`` then ``added`` (checked by ``as_fault``), in that order.
    ``ValueError`` when an added fault's name is taken."""
    faults = list(known)
    for fault in added:
        instance = as_fault(fault)
        if any(f.name == instance.name for f in faults):
            raise ValueError(f"a fault named {instance.name!r} already exists")
        faults.append(instance)
    return tuple(faults)


def iter_cells(
    cassette: Cassette, registry: ToolRegistry, source: str, faults: Sequence[Fault]
) -> Iterator[tuple[Target, Fault]]:
    """Every (target, fault) pair that applies, in file then fault order."""
    for target in targets(cassette, registry, source):
        for fault in faults:
            if fault.applies(target):
                yield target, fault
