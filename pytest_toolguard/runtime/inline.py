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
- It is raised only in the tool's own code: never while toolguard-owned
  code runs between the handler and the interrupted point (the pipeline,
  the sandbox's operations, the rollback journal, the audit stores,
  redaction, the harness's probes and its HTTP window, ...); the next
  repetition tries again. A change the workspace had started is finished or
  refused whole, a nested ``execute`` inside a handler finishes its own
  row, and a wrapper's bookkeeping is never cut in two.
- What is toolguard-owned is said by a marker, not a list: a module is
  owned when the nearest ``__toolguard_owned__`` of the module or of a
  package above it is true. ``pytest_toolguard`` sets it; the packages that
  hold tools' code (``tools``, ``bridges``, ``faults``, ``demo``) set it
  false. Owned code that calls the tool's code (a wrapper around a handler)
  calls it through ``call_tool_code``: the tool's frames above that call
  stay interruptible, and the wrapper's frames below it see the exception
  come out of the call, as they would any the handler raised.
- A sync handler that returns an awaitable (a coroutine) has it run as in
  thread mode: on a worker thread's loop for what is left of the deadline,
  cancelled there at the deadline (an event loop run on the main thread
  cannot be interrupted safely).
- It is used only where it can be: on the main thread (signals are delivered
  there), with SIGALRM's handler the default or ours and no interval timer
  armed (pytest-timeout's ``signal`` method, a nested call, a handler's own
  alarm): otherwise the call goes to a worker thread, as in ``"thread"`` mode.
  ``async def`` handlers always do.
- Arming and disarming stand a ``KeyboardInterrupt``: the timer is armed
  inside the block whose ``finally`` disarms it, and the disarming is
  retried when one lands just before it (then raised).

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
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

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

OWNED = "__toolguard_owned__"
"""The marker of toolguard-owned code (see the module docstring): a module
global, read from the module of a frame, then from the packages above it."""

T = TypeVar("T")


def call_tool_code(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``: how toolguard-owned code (a wrapper around a
    handler) calls the tool's code, which the deadline may then interrupt;
    the caller's own frames stay spared, and must expect ``DeadlinePassed``
    (a ``BaseException``) out of this call as any exception of the tool's."""
    return fn(*args, **kwargs)


_TOOL_CODE: CodeType = call_tool_code.__code__


def owned(module: str) -> bool:
    """Whether the code of ``module`` (a module's ``__name__``) is
    toolguard-owned: the nearest ``__toolguard_owned__`` of it or of a
    package above it (loaded ones; none found: not owned)."""
    name = module
    while name:
        loaded = sys.modules.get(name)
        if loaded is not None:
            flag = vars(loaded).get(OWNED)  # not getattr: a package's __getattr__ is lazy
            if flag is not None:
                return bool(flag)
        name = name.rpartition(".")[0]
    return False


def _owned_frame(frame: FrameType) -> bool:
    flag = frame.f_globals.get(OWNED)
    if flag is not None:
        return bool(flag)
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and owned(name)


def _interruptible(frame: FrameType, boundary: CodeType) -> bool | None:
    """Whether ``DeadlinePassed`` may be raised in ``frame``: None when the
    call's boundary is not on the stack (its handler returned). Walking down
    from the interrupted frame, owned code spares it unless it is a wrapper
    waiting on the tool's code (below a ``call_tool_code``)."""
    spared = frame.f_code is _TOOL_CODE
    waiting = False  # the frames met so far end in a call of the tool's code
    current: FrameType | None = frame
    while current is not None and current.f_code is not boundary:
        if current.f_code is _TOOL_CODE:
            waiting = True
        elif _owned_frame(current):
            spared = spared or not waiting
        else:
            waiting = False
        current = current.f_back
    if current is None:
        return None
    return not spared and frame is not current


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
    interruptible = _interruptible(frame, armed.boundary)
    if interruptible is None:
        return  # the handler already returned: its frame is gone from the stack
    if not armed.passed:
        armed.passed = True
        armed.on_deadline()
    if interruptible:
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
    # inline, and a nested call finds the timer armed. Armed inside the try
    # whose finally disarms it: a KeyboardInterrupt as setitimer returns
    # leaves no timer behind.
    _armed = armed  # before the timer: until fn runs, no boundary is on the stack
    restore = _DISARMED
    try:
        previous = signal.setitimer(signal.ITIMER_REAL, timeout, RETRY_SECONDS)
        if previous != _DISARMED:
            restore = previous
            raise TimerBusy
        value = fn()
    finally:
        # fn's frame is gone: a repetition arriving now finds no boundary
        # and returns without raising. A KeyboardInterrupt landing before
        # the disarming is done has it done again, then is raised.
        interrupted: KeyboardInterrupt | None = None
        while True:
            try:
                _disarm(restore)
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted
    if armed.passed:
        raise HandlerTimeout(timeout)
    return value


def _disarm(restore: tuple[float, float]) -> None:
    """Put the timer back to ``restore`` (disarmed, or what a caller had
    armed), forget the call, and reinstall our handler if the tool replaced
    it. Idempotent: ``run_inline`` calls it again when interrupted."""
    global _armed
    signal.setitimer(signal.ITIMER_REAL, *restore)
    _armed = None
    if _ALARM is not None and _disposition(_ALARM) is not _on_alarm:  # the handler replaced it
        signal.signal(_ALARM, _on_alarm)


def installed() -> bool:
    """Whether our SIGALRM handler is the one installed (tests)."""
    return _ALARM is not None and _disposition(_ALARM) is _on_alarm
