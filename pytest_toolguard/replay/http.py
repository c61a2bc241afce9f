"""The HTTP traffic of tools that reach the network: recorded with the
cassette, served back in replay with no network reachable.

vcrpy does the recording and the serving (it patches ``http.client`` and
so ``urllib``, ``requests``, ``urllib3``, ``httpx``, ``aiohttp``, ...); this
module decides when it patches, which interaction each exchange belongs to,
and what is written. It needs the optional extra ``pytest-toolguard[http]``.

**Which handlers.** Those of tools whose risk is ``external`` or
``dangerous`` (``Risk.needs_approval``: the tools allowed to reach beyond
the workspace), wrapped in a copy of the registry (``registry()``). Other
tools' handlers are never patched: a read or write tool that makes an HTTP
request reaches the network even in replay, so declare such a tool external.

**When patched.** vcrpy patches the whole process, so it is patched only
while at least one wrapped handler runs (one window, counted: concurrent
and nested handlers of the session share it), never between calls: an
agent's own requests to its model between tool calls are left alone.
During a window every request of the process goes through vcrpy; one made
from a thread the handler started is counted as the handler's when it is
the only one running. Two sessions cannot have a window open at once: the
second one's handler raises ``HttpConflict``. A session's ``close()`` ends
its window, even when a handler that overran its deadline is still in it.

**Recording** (``HttpRecording``, what ``Recorder`` uses): record mode
``all``: every request goes to the network and its exchange is kept, in
order, with the call (``take(call_id)``). Before anything is kept it is
redacted with the tool's redactor (the runtime's when the tool has none):
a header whose name is sensitive (Authorization, Cookie, Set-Cookie,
X-Api-Key, ...) is replaced whole, other header values, the URL (tokens in
its query, passwords) and text bodies by the redactor's patterns;
compressed bodies are decoded first, and a response whose body shrank keeps
a Content-Length that fits it. A response's ``Date`` header is not kept: it
changes on every recording, and re-recording an unchanged session must
write the same bytes (``http_exchange``).

**Playback** (``HttpPlayback``: replay, fixture playback, fault cells):
record mode ``none``: a request is answered from the exchanges recorded
with the interaction being played, matched on method, scheme, host, port,
path and query after the same redaction; each exchange once, or as often as
asked with ``repeats`` (fault cells call a handler many times). A request
with no recorded exchange never reaches the network: vcrpy raises
``CannotOverwriteExistingCassetteException`` in the handler, and
``unmatched()`` names it (method and URL) for the replay's report, even when
the handler swallowed the error. The driver says which interaction plays
(``current``) before each call; a handler keeps the one it started with.
``injected(answer)`` replaces what each matched request gets (the
``network_error`` and ``http_error`` faults: ``faults.network``).

vcrpy reaches the exchanges through an in-memory persister and never reads
or writes a file, so it works inside the fake filesystem; sessions import it
and its stubs when they are made (before the fake filesystem starts).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ToolguardError
from ..redaction import Redactor
from ..registry import ToolRegistry, ToolSpec
from ..runtime.inline import call_tool_code
from .cassette import Cassette, HttpExchange, Interaction
from .http_exchange import exchange_of, redact_request, redact_response, vcr_exchange

if TYPE_CHECKING:
    from ..runtime import ToolRuntime

INSTALL_HINT = "pip install 'pytest-toolguard[http]'"

MATCH_ON = ("method", "scheme", "host", "port", "path", "query")
"""vcrpy's default matchers: the request's body and headers are not compared."""

_INTERACTION_MATCHER = "toolguard_interaction"
_INTERACTION = "_toolguard_interaction"
"""The attribute a served request carries: the index of its interaction."""

Answer = Callable[[Any, dict[str, Any]], dict[str, Any]]
"""``answer(request, response) -> response``: what a matched request gets
instead of its recorded response (or raise, as the network would); see
``faults.network``."""


class HttpUnavailable(ToolguardError, ImportError):
    """vcrpy is not installed, and the session needs it."""


class HttpConflict(ToolguardError, RuntimeError):
    """Another session is recording or serving HTTP in this process."""


def reaches_network(spec: ToolSpec) -> bool:
    """Whether a tool's handler is recorded and served: external and
    dangerous tools."""
    return spec.risk.needs_approval


# -- vcrpy, loaded once ------------------------------------------------------------

_LOADED: dict[str, Any] = {}
"""The warmed-up ``vcr`` module (a cache: loading it twice at once would
patch the process twice)."""
_LOAD_LOCK = threading.Lock()


def _vcr() -> Any:
    """The ``vcr`` package, imported and warmed up once: one window opened
    and closed, so the stubs it imports as it patches (requests, urllib3,
    httpx, aiohttp, ...) are loaded now, not inside a fake filesystem where
    importing them would fail and leave that library unpatched."""
    with _LOAD_LOCK:
        if "vcr" not in _LOADED:
            try:
                import vcr
                import vcr.cassette
                import vcr.record_mode
                import vcr.request
            except ImportError as exc:
                raise HttpUnavailable(
                    f"recording and replaying HTTP needs vcrpy: {INSTALL_HINT} ({exc})"
                ) from None
            with vcr.cassette.Cassette.use(
                path="pytest-toolguard-warm-up",
                persister=_Persister(lambda: ([], [])),
                record_mode=vcr.record_mode.RecordMode.NONE,
            ):
                pass
            _LOADED["vcr"] = vcr
        return _LOADED["vcr"]


class _Persister:
    """vcrpy's persister interface over memory: loading gives the session's
    exchanges; saving does nothing (recorded exchanges are taken as they
    happen)."""

    def __init__(self, load: Callable[[], tuple[list[Any], list[Any]]]) -> None:
        self._load = load

    def load_cassette(self, cassette_path: str, serializer: Any) -> tuple[list[Any], list[Any]]:
        return self._load()

    def save_cassette(self, cassette_path: str, cassette_dict: Any, serializer: Any) -> None:
        return None


# -- the window: vcrpy patched while handlers run ------------------------------------


class _Window:
    """The process's one vcrpy patch, opened by the first handler of a
    session and closed by its last (patches are process-wide: two open at
    once could be undone out of order)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: _Session | None = None
        self._count = 0
        self._context: Any = None

    def enter(self, session: _Session) -> None:
        with self._lock:
            if session.closed:
                raise HttpConflict("this HTTP session is closed")
            if self._count and self._owner is not session:
                raise HttpConflict(
                    "another session records or replays HTTP in this process; "
                    "run them one after the other"
                )
            if not self._count:
                context = session._vcr_context()
                context.__enter__()
                self._context, self._owner = context, session
            self._count += 1

    def leave(self, session: _Session) -> None:
        with self._lock:
            if self._owner is not session:
                return  # closed by force while this handler ran
            self._count -= 1
            if not self._count:
                self._close()

    def close(self, session: _Session) -> None:
        with self._lock:
            if self._owner is session:
                self._close()

    def _close(self) -> None:
        context, self._context, self._owner, self._count = self._context, None, None, 0
        context.__exit__(None, None, None)


_WINDOW = _Window()


@dataclass
class _Run:
    """One run of a wrapped handler."""

    session: _Session
    call_id: str
    redactor: Redactor
    interaction: int | None = None
    exchanges: list[HttpExchange] = field(default_factory=list)


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("toolguard_http", default=None)


class _InRun:
    """The awaitable a wrapped (sync) handler returned, awaited inside its
    run and window; the run ends when it is done, or when it is closed
    without ever being awaited (a call cancelled before it started)."""

    def __init__(self, run: _Run, awaitable: Any) -> None:
        self._run = run
        self._awaitable = awaitable
        self._started = False
        self._ended = False
        self._lock = threading.Lock()

    def __await__(self) -> Any:
        return self._body().__await__()

    async def _body(self) -> Any:
        self._started = True
        token = _RUN.set(self._run)
        try:
            return await self._awaitable
        finally:
            _RUN.reset(token)
            self._end()

    def close(self) -> None:
        if not self._started:
            close = getattr(self._awaitable, "close", None)
            if close is not None:
                close()
            self._end()

    def _end(self) -> None:
        with self._lock:
            ended, self._ended = self._ended, True
        if not ended:
            self._run.session._end(self._run)


# -- sessions ----------------------------------------------------------------------------


class _Session:
    """What recording and playback share: wrapping handlers, the window,
    redaction, and finding the run a request belongs to."""

    record_mode = "none"
    repeats = False

    def __init__(self, redactor: Redactor | None = None) -> None:
        _vcr()
        self.redactor = redactor or Redactor()
        self.closed = False
        self._active: list[_Run] = []
        self._active_lock = threading.Lock()
        self._cassette_class = _cassette_class(self)

    def registry(self, registry: ToolRegistry) -> ToolRegistry:
        """A copy of ``registry`` whose network tools run under this
        session; ``registry`` itself when it has none."""
        if not any(reaches_network(spec) for spec in registry):
            return registry
        return ToolRegistry(
            [self.wrap(spec) if reaches_network(spec) else spec for spec in registry]
        )

    def wrap(self, spec: ToolSpec) -> ToolSpec:
        """``spec`` with a handler that runs inside this session's window
        (an ``async def`` handler stays one; an awaitable a handler returns
        runs in the window too)."""
        handler = spec.handler
        redactor = spec.redactor or self.redactor

        if inspect.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def run_async(ctx: Any, **arguments: Any) -> Any:
                run = self._begin(ctx, redactor)
                token = _RUN.set(run)
                try:
                    return await handler(ctx, **arguments)
                finally:
                    _RUN.reset(token)
                    self._end(run)

            return spec.with_handler(run_async)

        @functools.wraps(handler)
        def run_sync(ctx: Any, **arguments: Any) -> Any:
            run = self._begin(ctx, redactor)
            token = _RUN.set(run)
            ended = True
            try:
                value = call_tool_code(handler, ctx, **arguments)  # only there may a deadline land
                if inspect.isawaitable(value):  # a wrapper of an async handler
                    ended = False
                    return _InRun(run, value)
                return value
            finally:
                _RUN.reset(token)
                if ended:
                    self._end(run)

        return spec.with_handler(run_sync)

    def close(self) -> None:
        """End the window now (a handler still running goes on unpatched)
        and refuse new ones. Idempotent."""
        self.closed = True
        _WINDOW.close(self)

    # -- runs

    def _begin(self, ctx: Any, redactor: Redactor) -> _Run:
        run = _Run(self, str(getattr(ctx, "call_id", "")), redactor)
        _WINDOW.enter(self)
        with self._active_lock:
            self._active.append(run)
        return run

    def _end(self, run: _Run) -> None:
        with self._active_lock:
            self._active.remove(run)
        _WINDOW.leave(self)

    def _run_now(self) -> _Run | None:
        """The run the request being made belongs to: the handler's own, or
        the only one running (a thread the handler started)."""
        run = _RUN.get()
        if run is not None and run.session is self:
            return run
        with self._active_lock:
            return self._active[0] if len(self._active) == 1 else None

    def _redactor_now(self) -> Redactor:
        run = self._run_now()
        return run.redactor if run is not None else self.redactor

    # -- vcrpy

    def _vcr_context(self) -> Any:
        vcr = _vcr()
        config = vcr.VCR(
            record_mode=self.record_mode,
            match_on=self._match_on(),
            before_record_request=self._before_request,
            before_record_response=self._before_response,
            decode_compressed_response=True,
        )
        config.register_persister(_Persister(self._load))
        self._register_matchers(config)
        merged = config.get_merged_config(
            path="pytest-toolguard", allow_playback_repeats=self.repeats
        )
        return self._cassette_class.use(**merged)

    def _match_on(self) -> tuple[str, ...]:
        return MATCH_ON

    def _register_matchers(self, config: Any) -> None:
        return None

    def _load(self) -> tuple[list[Any], list[Any]]:
        return [], []

    def _before_request(self, request: Any) -> Any:
        return redact_request(request, self._redactor_now())

    def _before_response(self, response: dict[str, Any]) -> dict[str, Any]:
        return redact_response(response, self._redactor_now())

    def _recorded(self, request: Any, response: dict[str, Any]) -> None:
        return None

    def _no_exchange(self, request: Any) -> None:
        return None

    def _serve(self, request: Any, response: dict[str, Any]) -> dict[str, Any]:
        return response


def _cassette_class(session: _Session) -> Any:
    """vcrpy's ``Cassette``, telling ``session`` what happens: an exchange
    recorded, a request with nothing to play, a response about to be
    played."""
    vcr = _vcr()
    record_all = vcr.record_mode.RecordMode.ALL
    append_lock = threading.Lock()

    class ToolguardCassette(vcr.cassette.Cassette):  # type: ignore[misc,name-defined]
        def append(self, request: Any, response: Any) -> None:
            if self.record_mode != record_all:  # loading what plays back
                super().append(request, response)
                return
            with append_lock:  # the exchange just appended is this one
                count = len(self.data)
                super().append(request, response)
                if len(self.data) > count:
                    session._recorded(*self.data[-1])

        def can_play_response_for(self, request: Any) -> bool:
            playable = bool(super().can_play_response_for(request))
            if not playable and self.write_protected:
                session._no_exchange(request)
            return playable

        def play_response(self, request: Any) -> Any:
            return session._serve(request, super().play_response(request))

    return ToolguardCassette


class HttpRecording(_Session):
    """Records the HTTP exchanges of network tools' handlers, by call."""

    record_mode = "all"

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__(redactor)
        self._by_call: dict[str, list[_Run]] = {}
        self._lock = threading.Lock()
        self._attached: tuple[ToolRuntime, ToolRegistry, ToolRegistry] | None = None

    @classmethod
    def attach(cls, runtime: ToolRuntime) -> HttpRecording | None:
        """Record the HTTP of ``runtime``'s network tools from now on: its
        ``registry`` is replaced by a copy whose network tools are wrapped,
        until ``detach()``. None when it has no network tool, or (with a
        RuntimeWarning: their requests go out unrecorded) when vcrpy is not
        installed."""
        registry = runtime.registry
        if not any(reaches_network(spec) for spec in registry):
            return None
        try:
            recording = cls(runtime.redactor)
        except HttpUnavailable as exc:
            warnings.warn(
                f"the HTTP requests of external tools are not recorded: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        wrapped = recording.registry(registry)
        recording._attached = (runtime, registry, wrapped)
        runtime.registry = wrapped
        return recording

    def detach(self) -> None:
        """Stop recording and give the runtime its own registry back."""
        self.close()
        if self._attached is not None:
            runtime, registry, wrapped = self._attached
            if runtime.registry is wrapped:
                runtime.registry = registry
            self._attached = None

    def take(self, call_id: str) -> list[HttpExchange]:
        """The exchanges of the oldest run of ``call_id``'s handler not
        taken yet (empty when it made none, or never ran). The list is live:
        a handler that overran its deadline may still add to it."""
        with self._lock:
            runs = self._by_call.get(call_id)
            if not runs:
                return []
            run = runs.pop(0)
            if not runs:
                del self._by_call[call_id]
            return run.exchanges

    def _begin(self, ctx: Any, redactor: Redactor) -> _Run:
        run = super()._begin(ctx, redactor)
        with self._lock:
            self._by_call.setdefault(run.call_id, []).append(run)
        return run

    def _recorded(self, request: Any, response: dict[str, Any]) -> None:
        run = self._run_now()
        if run is not None:  # a request of no handler's is not kept
            run.exchanges.append(exchange_of(request, response))


@dataclass(frozen=True, slots=True)
class UnmatchedRequest:
    """A request made in playback that no recorded exchange answered."""

    interaction: int | None
    """The index of the interaction being played (None: outside any)."""
    method: str
    uri: str


class HttpPlayback(_Session):
    """Serves each interaction's recorded exchanges to the handlers of
    network tools, and lists the requests it could not answer."""

    @classmethod
    def for_cassette(
        cls,
        cassette: Cassette,
        registry: ToolRegistry,
        redactor: Redactor | None = None,
        *,
        repeats: bool = False,
    ) -> HttpPlayback | None:
        """The playback ``cassette`` needs over ``registry``: None when none
        of its calls is of a network tool and none holds exchanges.
        ``HttpUnavailable`` when vcrpy is missing and there are exchanges
        to serve; None when it is missing and there are none (the requests
        of network tools are then not stopped)."""
        network = any(
            spec is not None and reaches_network(spec)
            for spec in (registry.get(i.call.tool_name) for i in cassette.interactions)
        )
        recorded = any(interaction.http for interaction in cassette.interactions)
        if not (network or recorded):
            return None
        try:
            return cls(cassette.interactions, redactor, repeats=repeats)
        except HttpUnavailable:
            if recorded:
                raise
            return None

    def __init__(
        self,
        interactions: Sequence[Interaction],
        redactor: Redactor | None = None,
        *,
        repeats: bool = False,
    ) -> None:
        super().__init__(redactor)
        self.repeats = repeats
        self._served = [
            (index, exchange)
            for index, interaction in enumerate(interactions)
            for exchange in interaction.http
        ]
        self.current: int | None = None
        """The interaction the next handler run plays (set by the driver)."""
        self._fault: Answer | None = None
        self._unmatched: list[UnmatchedRequest] = []
        self._seen: set[int] = set()
        self._requests: list[Any] = []  # keeps ids in _seen unique
        self._lock = threading.Lock()

    def unmatched(self) -> list[UnmatchedRequest]:
        """Every request no recorded exchange answered, in order."""
        with self._lock:
            return list(self._unmatched)

    @contextmanager
    def injected(self, fault: Answer) -> Iterator[None]:
        """Within the block, every matched request gets ``fault``'s answer."""
        self._fault = fault
        try:
            yield
        finally:
            self._fault = None

    def _begin(self, ctx: Any, redactor: Redactor) -> _Run:
        run = super()._begin(ctx, redactor)
        run.interaction = self.current
        return run

    def _playing(self) -> int | None:
        run = self._run_now()
        return run.interaction if run is not None else self.current

    def _match_on(self) -> tuple[str, ...]:
        return (*MATCH_ON, _INTERACTION_MATCHER)

    def _register_matchers(self, config: Any) -> None:
        def same_interaction(made: Any, recorded: Any) -> None:
            if getattr(recorded, _INTERACTION, None) != self._playing():
                raise AssertionError("recorded with another interaction")

        config.register_matcher(_INTERACTION_MATCHER, same_interaction)

    def _load(self) -> tuple[list[Any], list[Any]]:
        vcr = _vcr()
        requests, responses = [], []
        for index, exchange in self._served:
            request, response = vcr_exchange(exchange, vcr.request.Request)
            setattr(request, _INTERACTION, index)
            requests.append(request)
            responses.append(response)
        return requests, responses

    def _no_exchange(self, request: Any) -> None:
        with self._lock:
            if id(request) in self._seen:
                return
            self._seen.add(id(request))
            self._requests.append(request)
            self._unmatched.append(
                UnmatchedRequest(
                    self._playing(),
                    str(request.method),
                    self._redactor_now().redact_text(str(request.uri)),
                )
            )

    def _serve(self, request: Any, response: dict[str, Any]) -> dict[str, Any]:
        fault = self._fault
        return response if fault is None else fault(request, response)
