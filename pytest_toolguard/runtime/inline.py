"""Inline handlers: run on the calling thread, the deadline kept by SIGALRM.

Handing a call to a worker thread and back costs about 170 µs on a 2-vCPU
machine (an idle CPU must be woken, both ways), more than the rest of the
pipeline. On the main thread the runtime's opt-in mode (``"inline"``) calls
the handler directly instead, and keeps its deadline as pytest-timeout's
``signal`` method does: ``signal.setitimer(ITIMER_REAL, ...)`` and a SIGALRM
handler that raises ``DeadlinePassed`` inside the tool's handler. That also
interrupts blocking sleeps, lock waits and socket reads (PEP 475 retries a
system call only when the signal handler does not raise), and stops a late
handler instead of leaving it running as an orphaned thread.

What keeps it safe:

- ``DeadlinePassed`` is a ``BaseException``: ``except Exception`` in a
  handler does not catch it. A handler that swallows it anyway meets it again:
  the timer repeats every ``RETRY_SECONDS`` until the handler returns, and
  the call is answered TIMEOUT whatever it returns.
- From the deadline on, the call counts as cancelled (``ctx.cancelled`` reads
  set, the workspace refuses every later change), as in thread mode.
- It is raised only in the tool's own code: never while a frame of the
  runtime's core (the pipeline, the sandbox's operations, the rollback
  journal, the audit stores, redaction, ...) is running between the handler
  and the interrupted point; the next repetition tries again. A change the
  workspace had started is finished or refused whole, and a nested
  ``execute`` inside a handler finishes its own row.
- It is used only where it can be: on the main thread (signals are delivered
  there), with SIGALRM's handler the default or ours and no interval timer
  armed (pytest-timeout's ``signal`` method, a nested call, a handler's own
  alarm): otherwise the call goes to a worker thread, as in ``"thread"`` mode.
  ``async def`` handlers always do.

What it cannot do: a handler that replaces SIGALRM's handler or re-arms the
interval timer itself takes the deadline over (its SIGALRM disposition is
put back when it returns); a handler that swallows ``BaseException`` in a
loop forever blocks its caller; a handler inside C code that does not
check for signals is stopped only when it comes back to Python. Run such
tools with ``isolation="thread"`` or ``"process"``. ``KeyboardInterrupt``
in an inline handler ends the call as its failure (EXECUTION_ERROR) instead
of unwinding ``execute``.

Our SIGALRM handler stays installed once installed (putting SIG_DFL back
could let a repetition already on its way end the process); between calls it
does nothing.
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from ..errors import ToolguardError
from ..isolation import HandlerTimeout


def _load_disposition() -> Callable[[int], object]:
    """``signal.getsignal`` wraps ``_signal.getsignal`` in an enum lookup that
    fails, for a function handler: about 10 µs a call. The raw one answers in
    0.1 µs (CPython's ``signal`` module is a thin layer over ``_signal``)."""
    try:
        raw = importlib.import_module("_signal")
    except ImportError:  # pragma: no cover - another Python
        return signal.getsignal
    found: Callable[[int], object] = getattr(raw, "getsignal", signal.getsignal)
    return found


_disposition = _load_disposition()

RETRY_SECONDS = 0.05
"""After the deadline, the alarm repeats this often until the handler returns."""

_ALARM: signal.Signals | None = getattr(signal, "SIGALRM", None)
_DISARMED = (0.0, 0.0)

_CORE = (
    "pytest_toolguard.runtime",
    "pytest_toolguard.isolation",
    "pytest_toolguard.sandbox",
    "pytest_toolguard.rollback",
    "pytest_toolguard.audit",
    "pytest_toolguard.idempotency",
    "pytest_toolguard.recovery",
    "pytest_toolguard.lease",
    "pytest_toolguard.redaction",
    "pytest_toolguard.secret_rules",
    "pytest_toolguard.jsondata",
    "pytest_toolguard.policy",
    "pytest_toolguard.schema",
)
"""Modules whose frames are never interrupted: ``DeadlinePassed`` waits for
the next repetition while one of them runs under the handler (``audit``
covers ``audit_postgres`` and ``audit_stores`` too)."""


class DeadlinePassed(BaseException):
    """Raised inside a handler running inline once its deadline has passed.
    A ``BaseException`` on purpose, like ``KeyboardInterrupt``: ``except
    Exception`` must not swallow it. The runtime answers the call TIMEOUT."""


class Cancellation(threading.Event):
    """``ctx.cancelled`` of a call: an ``Event`` that also reads set once the
    inline deadline marked it. ``mark`` sets a plain attribute and takes no
    lock, so the signal handler may call it whatever the interrupted code
    holds; ``set`` (after the handler returned) wakes waiters as usual."""

    _marked = False

    def mark(self) -> None:
        self._marked = True

    def is_set(self) -> bool:
        return self._marked or super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        # ``mark`` wakes no waiter (it may take no lock), and this frame is
        # the runtime's, where the alarm never raises: wait in slices of
        # ``RETRY_SECONDS`` so that a mark ends the wait within one slice.
        # The slices are counted, not timed: a frozen clock (freezegun in
        # replay stops time.monotonic) must not make the wait endless.
        left = timeout
        while not self._marked:
            if left is not None and left <= 0:
                return self.is_set()
            step = RETRY_SECONDS if left is None else min(left, RETRY_SECONDS)
            if super().wait(step):
                return True
            if left is not None:
                left -= step
        return True


class _Armed:
    """The one call running inline (only the main thread runs one)."""

    __slots__ = ("boundary", "on_deadline", "passed")

    def __init__(self, boundary: CodeType, on_deadline: Callable[[], None]) -> None:
        self.boundary = boundary
        self.on_deadline = on_deadline
        self.passed = False


_armed: _Armed | None = None


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    armed = _armed
    if armed is None or frame is None:
        return  # between calls, or after this call's handler returned
    # Up from the interrupted frame to the one that called the tool's handler:
    # raise only if every frame on the way is the tool's own code.
    interruptible = True
    current: FrameType | None = frame
    while current is not None and current.f_code is not armed.boundary:
        name = current.f_globals.get("__name__", "")
        if isinstance(name, str) and name.startswith(_CORE):
            interruptible = False
        current = current.f_back
    if current is None:
        return  # the handler already returned: its frame is gone from the stack
    if not armed.passed:
        armed.passed = True
        armed.on_deadline()
    if interruptible and frame.f_code is not armed.boundary:
        raise DeadlinePassed("the call's deadline passed")


class TimerBusy(ToolguardError):  # noqa: N818 - a condition, not an error of the call
    """``run_inline`` found the interval timer armed by someone else (it is
    left as it was): run the handler another way."""


def usable() -> bool:
    """Whether a handler can run inline here: on the main thread, with
    SIGALRM's handler the default or ours (``run_inline`` checks the timer)."""
    if _ALARM is None or threading.current_thread() is not threading.main_thread():
        return False
    handler = _disposition(_ALARM)
    return handler is _on_alarm or handler == signal.SIG_DFL


def run_inline(fn: Callable[[], Any], timeout: float, on_deadline: Callable[[], None]) -> Any:
    """``fn()``'s value, or ``HandlerTimeout`` once its deadline passed
    (whatever ``fn`` did then); ``TimerBusy`` before anything ran when the
    interval timer was armed (pytest-timeout's ``signal`` method, a nested
    call). Call only when ``usable()``. ``fn`` is the bound method that
    calls the tool's handler (its frame is the boundary below which
    ``DeadlinePassed`` may be raised), and must catch what the handler
    raises; ``on_deadline`` is called once, from the signal handler, at the
    deadline: it may take no lock."""
    global _armed
    assert _ALARM is not None
    code: CodeType = getattr(fn, "__code__")  # noqa: B009 - a bound method's function's
    armed = _Armed(code, on_deadline)
    # Someone else's timer (signal.alarm with the default action: a
    # watchdog) is left alone, and so is SIGALRM's disposition.
    if signal.getitimer(signal.ITIMER_REAL) != _DISARMED:
        raise TimerBusy
    if _disposition(_ALARM) is not _on_alarm:
        signal.signal(_ALARM, _on_alarm)
    # Only one call arms the timer at a time: the main thread runs one handler
    # inline, and a nested call finds the timer armed.
    previous = signal.setitimer(signal.ITIMER_REAL, timeout, RETRY_SECONDS)
    if previous != _DISARMED:
        signal.setitimer(signal.ITIMER_REAL, *previous)
        raise TimerBusy
    _armed = armed
    try:
        value = fn()
    finally:
        # fn's frame is gone: a repetition arriving now finds no boundary
        # and returns without raising.
        signal.setitimer(signal.ITIMER_REAL, 0)
        _armed = None
        if _disposition(_ALARM) is not _on_alarm:  # the handler replaced it
            signal.signal(_ALARM, _on_alarm)
    if armed.passed:
        raise HandlerTimeout(timeout)
    return value


def installed() -> bool:
    """Whether our SIGALRM handler is the one installed (tests)."""
    return _ALARM is not None and _disposition(_ALARM) is _on_alarm


__all__ = [
    "RETRY_SECONDS",
    "Cancellation",
    "DeadlinePassed",
    "TimerBusy",
    "installed",
    "run_inline",
    "usable",
]
