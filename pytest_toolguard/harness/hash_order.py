"""Whether a handler's code can depend on the hash seed: it builds a set,
iterates a constant set, or calls ``hash()``.

``may_depend_on_hash_order(handler)`` reads the bytecode of the handler
and of what it reaches by name: functions, classes' methods and modules
of the project (the handler's own package, and what is neither the
standard library, an installed package nor pytest-toolguard),
transitively. A set of strings is iterated in the
order the interpreter's hash seed decides; a ``dict`` keeps insertion
order and needs no seed. Running a call in other interpreters costs a
start and an import each (``seeded_interpreters``): this says where it
is worth it.

Not seen: a set built and iterated inside the standard library or an
installed package the handler calls (it answers that set's order), a
function reached through ``getattr`` with a computed name, an object's
method through an attribute of a value. Said conservatively: any
``set``/``frozenset`` name, set display, set comprehension, constant
frozenset or ``hash`` counts, even when its order never reaches the
answer (``x in {...}``, ``sorted(set(...))``).
"""

from __future__ import annotations

import dis
import inspect
import os
import sys
import sysconfig
import types
from typing import Any

SET_OPCODES = frozenset({"BUILD_SET", "SET_ADD", "SET_UPDATE"})
SET_NAMES = frozenset({"set", "frozenset", "hash", "__hash__"})

_LIBRARY_ROOTS = tuple(
    {
        os.path.realpath(path)
        for name in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(name))
    }
)
_OWN_PACKAGE = __name__.split(".")[0]


def may_depend_on_hash_order(handler: Any, limit: int = 2000) -> bool:
    """Whether ``handler`` (or what it reaches of the project's code, up
    to ``limit`` code objects) builds a set, iterates a constant one or
    calls ``hash``."""
    pending: list[tuple[types.CodeType, dict[str, Any]]] = []
    seen: set[int] = set()
    # A function's own module is always read; an object's class is read only
    # when it is the project's (a bridge's relay to a server is not).
    unwrapped = inspect.unwrap(handler)
    own = unwrapped.__module__ if isinstance(unwrapped, types.FunctionType) else ""

    def _projects(module: str | None) -> bool:
        return module == own or _is_projects(module, own.split(".")[0])

    def reach(value: Any) -> None:
        function = inspect.unwrap(value) if callable(value) else value
        for candidate in (
            value,
            function,
            getattr(value, "handler", None),
            getattr(value, "func", None),
        ):
            if isinstance(candidate, (types.MethodType, staticmethod, classmethod)):
                candidate = candidate.__func__
            if isinstance(candidate, types.FunctionType) and _projects(candidate.__module__):
                if id(candidate.__code__) not in seen:
                    seen.add(id(candidate.__code__))
                    pending.append((candidate.__code__, candidate.__globals__))
            elif isinstance(candidate, type) and _projects(candidate.__module__):
                if id(candidate) not in seen:
                    seen.add(id(candidate))
                    for member in vars(candidate).values():
                        reach(member)
            elif isinstance(candidate, types.ModuleType) and _projects(candidate.__name__):
                if id(candidate) not in seen:
                    seen.add(id(candidate))
                    for member in vars(candidate).values():
                        if getattr(member, "__module__", None) == candidate.__name__:
                            reach(member)
            elif (
                candidate is not None
                and callable(candidate)
                and not isinstance(candidate, (type, types.BuiltinFunctionType))
            ):
                call = vars(type(candidate)).get("__call__")
                if isinstance(call, types.FunctionType) and _projects(call.__module__):
                    reach(call)

    reach(handler)
    while pending and len(seen) <= limit:
        code, namespace = pending.pop()
        if SET_NAMES.intersection(code.co_names):
            return True
        if any(isinstance(constant, frozenset) for constant in code.co_consts):
            return True
        if any(instruction.opname in SET_OPCODES for instruction in dis.get_instructions(code)):
            return True
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType) and id(constant) not in seen:
                seen.add(id(constant))
                pending.append((constant, namespace))
        for name in code.co_names:
            if name in namespace:
                reach(namespace[name])
    return False


def _is_projects(module: str | None, home: str) -> bool:
    """Whether ``module`` is the project's: the handler's own package
    (``home``, wherever it is installed), or neither the standard library,
    an installed package nor pytest-toolguard itself."""
    if not module or module.split(".")[0] == _OWN_PACKAGE:
        return False
    if module.split(".")[0] == home:
        return True
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if not isinstance(path, str):
        return module == "__main__"
    real = os.path.realpath(path)
    return not any(real.startswith(root + os.sep) for root in _LIBRARY_ROOTS)
