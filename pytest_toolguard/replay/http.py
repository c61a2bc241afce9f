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
``network_error``, ``http_error`` and ``http_redirect`` faults:
``faults.network``). ``served()`` lists every matched request, with the
call it was made in and what it was answered (``ServedRequest``), so a
fault cell can count what a call sent (``faults.http_sends``). In a
world whose root is not the recorded one (the directory world),
``map_root(root_map)`` spells every recorded exchange for that world
before it is matched or served (``http_exchange.mapped_exchange``: URL,
headers, bodies): a request naming the world's root matches one recorded
naming the recorded root, and the response names the world's root;
``unmatched()`` names its requests as recorded.

**Hosts, hop by hop.** The policy judges a tool's URL argument; the server
may answer with a redirect, which the client follows with a request of its
own. So every request vcrpy sees during a run, each redirect hop included,
is judged as the argument was (``host_refusal``: ``hosts.parse_host``,
``permits_host``) when the run is confined (``confinement``: a tool naming
its host, or any network tool of a session listing network hosts): one to a
host outside is refused before it is sent or served (``HostRefused``,
PERMISSION_DENIED), and noted (``refused()``; in playback also
``unmatched()``, so replay reports it). A redirect whose Location leads in
another scheme to a host outside (``ftp://``, which urllib follows through
ftplib, where no request is checked) is withheld from the client
(``redirect_refusal``). A redirect to an HTTP(S) host outside that the
client does not follow is left alone: nothing was sent. A request of no
run's (another thread, while several handlers run) must keep to every
running confined handler's hosts. Not covered: a client vcrpy does not
patch, raw sockets, subprocesses; and aiohttp while recording, which
follows redirects inside one patched call (its outside hops are refused
and not kept, but only once they were sent). Ports are not judged: the
allow-list names hosts. vcrpy writes an IPv6 host without brackets in the
URLs of ``http.client``-based clients, which cannot be judged: refused.

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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from ..capabilities import Capabilities
from ..contract import ErrorCode
from ..errors import ToolguardError
from ..hosts import AmbiguousHost, parse_host
from ..redaction import Redactor
from ..registry import ToolRegistry, ToolSpec
from ..runtime.inline import call_tool_code
from ..sandbox import SandboxError
from .cassette import Cassette, HttpExchange, Interaction
from .http_exchange import (
    ServedRequest,
    exchange_of,
    mapped_exchange,
    redact_request,
    redact_response,
    served_request,
    vcr_exchange,
)
from .root_map import RootMap

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


class HostRefused(SandboxError):
    """An HTTP request of a confined handler (see ``confinement``) to a
    host outside the session's network hosts, refused before it was sent
    (or served); or a redirect the client could follow where no request is
    checked (``ftp://`` to such a host), refused before the client read it.

    A sandbox refusal, so that a handler letting it through answers
    PERMISSION_DENIED, whatever HTTP client it used; the message names the
    host, never the URL."""

    code = ErrorCode.PERMISSION_DENIED


NOT_RECORDED = "no recorded exchange; not sent"
"""Why an unmatched request was not answered (``UnmatchedRequest.why``)."""

_HTTP_SCHEMES = ("http", "https")


def reaches_network(spec: ToolSpec) -> bool:
    """Whether a tool's handler is recorded and served: external and
    dangerous tools."""
    return spec.risk.needs_approval


def confinement(spec: ToolSpec, capabilities: Capabilities | None) -> Capabilities | None:
    """The capabilities whose ``network_hosts`` every HTTP request of a run
    of ``spec``'s handler must keep to, redirect hops included: the
    session's, when it lists network hosts or when the tool names its host
    (``network_host_argument``; no capabilities then means no host). None:
    the run is not confined (a tool naming no host, in a session listing
    none)."""
    names_host = spec.network_host_argument is not None
    if capabilities is None:
        return Capabilities() if names_host else None
    return capabilities if names_host or capabilities.network_hosts else None


def host_refusal(url: str, capabilities: Capabilities) -> str | None:
    """Why a request to ``url`` is refused under ``capabilities`` (judged
    as the policy judges a host argument: ``hosts.parse_host`` and
    ``permits_host``); None when it is allowed."""
    try:
        host = parse_host(url)
    except AmbiguousHost as exc:
        return f"its host is refused: {exc}"
    if host is None:
        return "it names no host"
    if not capabilities.permits_host(host):
        allowed = ", ".join(capabilities.network_hosts) or "none"
        return f"host {host} is not among the allowed network hosts ({allowed})"
    return None


def redirect_refusal(url: str, response: dict[str, Any], capabilities: Capabilities) -> str | None:
    """Why a redirect ``response`` to a request of ``url`` is refused: its
    ``Location`` leads, in another scheme than HTTP(S), to a host
    ``host_refusal`` refuses. urllib follows ``ftp://`` through ftplib,
    where no request is checked; an HTTP(S) Location is left to the check
    of the request that follows it, if any is made. None otherwise."""
    status = response.get("status")
    code = status.get("code") if isinstance(status, dict) else None
    if not isinstance(code, int) or not 300 <= code < 400:
        return None
    headers = response.get("headers")
    if not isinstance(headers, dict):
        return None
    for name, values in headers.items():
        if str(name).lower() != "location":
            continue
        for location in values if isinstance(values, list | tuple) else [values]:
            try:
                target = urljoin(url, str(location))
                parts = urlsplit(target)
            except ValueError:
                return "its redirect Location cannot be read"
            if parts.scheme.lower() in _HTTP_SCHEMES or not parts.netloc:
                continue
            why = host_refusal(target, capabilities)
            if why is not None:
                return (
                    f"its response redirects to {parts.scheme.lower()}://, "
                    f"where {why}; the response was withheld"
                )
    return None


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
    hosts: Capabilities | None = None
    """What its requests must keep to (``confinement``); None: anywhere."""
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
        self._noted: list[UnmatchedRequest] = []
        self._noted_ids: set[int] = set()
        self._noted_requests: list[Any] = []
        self._noted_lock = threading.Lock()
        self._cassette_class = _cassette_class(self)

    def registry(self, registry: ToolRegistry) -> ToolRegistry:
        """A copy of ``registry`` whose network tools run under this
        session; ``registry`` itself when it has none."""
        if not any(reaches_network(spec) for spec in registry):
            return registry
        return ToolRegistry(
            [self.wrap(spec) if reaches_network(spec) else spec for spec in registry],
            world=registry.world,
        )

    def wrap(self, spec: ToolSpec) -> ToolSpec:
        """``spec`` with a handler that runs inside this session's window
        (an ``async def`` handler stays one; an awaitable a handler returns
        runs in the window too)."""
        handler = spec.handler
        redactor = spec.redactor or self.redactor

        def begin(ctx: Any) -> _Run:
            capabilities = getattr(ctx, "capabilities", None)
            if not isinstance(capabilities, Capabilities):
                capabilities = None
            return self._begin(ctx, redactor, confinement(spec, capabilities))

        if inspect.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def run_async(ctx: Any, **arguments: Any) -> Any:
                run = begin(ctx)
                token = _RUN.set(run)
                try:
                    return await handler(ctx, **arguments)
                finally:
                    _RUN.reset(token)
                    self._end(run)

            return spec.with_handler(run_async)

        @functools.wraps(handler)
        def run_sync(ctx: Any, **arguments: Any) -> Any:
            run = begin(ctx)
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

    def _begin(self, ctx: Any, redactor: Redactor, hosts: Capabilities | None) -> _Run:
        run = _Run(self, str(getattr(ctx, "call_id", "")), redactor, hosts)
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

    def _judged_by(self) -> list[_Run]:
        """The runs whose confinement a request being made must keep to:
        its own run's, or, when it cannot be told, every running one's."""
        run = self._run_now()
        if run is not None:
            return [run]
        with self._active_lock:
            return list(self._active)

    def _interaction_now(self) -> int | None:
        return None

    # -- the hosts a request may reach

    def refused(self) -> list[UnmatchedRequest]:
        """Every request refused for its host (``HostRefused``), in order."""
        with self._noted_lock:
            return [request for request in self._noted if request.why != NOT_RECORDED]

    def _check_request(self, request: Any) -> None:
        """Raise ``HostRefused`` (and note it) if ``request`` goes to a host
        a run it may belong to is confined away from."""
        for run in self._judged_by():
            if run.hosts is not None:
                why = host_refusal(str(request.uri), run.hosts)
                if why is not None:
                    self._refuse(request, f"refused: {why}; not sent")

    def _check_response(self, request: Any, response: dict[str, Any]) -> None:
        """Raise ``HostRefused`` (and note it) if ``response`` redirects
        where a client could follow with no request checked."""
        for run in self._judged_by():
            if run.hosts is not None:
                why = redirect_refusal(str(request.uri), response, run.hosts)
                if why is not None:
                    self._refuse(request, f"refused: {why}")

    def _refuse(self, request: Any, why: str) -> None:
        uri = self._note(request, why)
        raise HostRefused(f"HTTP request {why}", uri)

    def _note(self, request: Any, why: str) -> str:
        """Keep ``request`` (once: a client may ask twice about one
        request) as unanswered for ``why``; its redacted URL."""
        uri = self._redactor_now().redact_text(str(request.uri))
        with self._noted_lock:
            if id(request) not in self._noted_ids:
                self._noted_ids.add(id(request))
                self._noted_requests.append(request)  # keeps ids in _noted_ids unique
                self._noted.append(
                    UnmatchedRequest(self._interaction_now(), str(request.method), uri, why)
                )
        return uri

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
            # Checked before already, but for a client that follows
            # redirects inside one patched call (aiohttp): not kept.
            session._check_request(request)
            with append_lock:  # the exchange just appended is this one
                count = len(self.data)
                super().append(request, response)
                if len(self.data) > count:
                    session._recorded(*self.data[-1])
            session._check_response(request, response)

        def can_play_response_for(self, request: Any) -> bool:
            # Every stub asks this before it sends or serves a request:
            # each redirect hop is a request of its own.
            session._check_request(request)
            playable = bool(super().can_play_response_for(request))
            if not playable and self.write_protected:
                session._no_exchange(request)
            return playable

        def play_response(self, request: Any) -> Any:
            session._check_request(request)
            response = session._serve(request, super().play_response(request))
            session._check_response(request, response)
            return response

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

    def _begin(self, ctx: Any, redactor: Redactor, hosts: Capabilities | None) -> _Run:
        run = super()._begin(ctx, redactor, hosts)
        with self._lock:
            self._by_call.setdefault(run.call_id, []).append(run)
        return run

    def _recorded(self, request: Any, response: dict[str, Any]) -> None:
        run = self._run_now()
        if run is not None:  # a request of no handler's is not kept
            run.exchanges.append(exchange_of(request, response))


@dataclass(frozen=True, slots=True)
class UnmatchedRequest:
    """A request made in playback that no recorded exchange answered, or
    one refused for its host (``HostRefused``) in recording or playback."""

    interaction: int | None
    """The index of the interaction being played (None: outside any)."""
    method: str
    uri: str
    why: str = NOT_RECORDED
    """Why it was not answered, ending with what became of it."""


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
        self._root_map: RootMap | None = None
        self._served_log: list[ServedRequest] = []

    def map_root(self, root_map: RootMap) -> None:
        """Serve the exchanges spelt for the world ``root_map`` leads to
        (before the first handler runs)."""
        self._root_map = root_map

    def unmatched(self) -> list[UnmatchedRequest]:
        """Every request no recorded exchange answered (none matched, or it
        was refused for its host), in order, its URL spelt as recorded."""
        with self._noted_lock:
            noted = list(self._noted)
        mapping = self._root_map
        if mapping is None or mapping.identity:
            return noted
        return [replace(item, uri=mapping.to_recorded(item.uri)) for item in noted]

    def served(self) -> list[ServedRequest]:
        """Every request a handler made that was answered from a recorded
        exchange or matched none (``answered`` says which), in order; a
        request refused for its host is not (it was never to be sent)."""
        with self._noted_lock:
            return list(self._served_log)

    @contextmanager
    def injected(self, fault: Answer) -> Iterator[None]:
        """Within the block, every matched request gets ``fault``'s answer."""
        self._fault = fault
        try:
            yield
        finally:
            self._fault = None

    def _begin(self, ctx: Any, redactor: Redactor, hosts: Capabilities | None) -> _Run:
        run = super()._begin(ctx, redactor, hosts)
        run.interaction = self.current
        return run

    def _playing(self) -> int | None:
        run = self._run_now()
        return run.interaction if run is not None else self.current

    def _interaction_now(self) -> int | None:
        return self._playing()

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
        mapping = self._root_map
        for index, exchange in self._served:
            if mapping is not None and not mapping.identity:
                exchange = mapped_exchange(exchange, mapping.to_world)
            request, response = vcr_exchange(exchange, vcr.request.Request)
            setattr(request, _INTERACTION, index)
            requests.append(request)
            responses.append(response)
        return requests, responses

    def _no_exchange(self, request: Any) -> None:
        with self._noted_lock:
            first = id(request) not in self._noted_ids  # a client may ask twice
        self._note(request, NOT_RECORDED)
        if first:
            self._log_served(request, None, None, answered=False)

    def _serve(self, request: Any, response: dict[str, Any]) -> dict[str, Any]:
        fault = self._fault
        try:
            answer = response if fault is None else fault(request, response)
        except BaseException as exc:
            self._log_served(request, None, type(exc).__name__)
            raise
        status = answer.get("status")
        code = status.get("code") if isinstance(status, dict) else None
        self._log_served(request, code if isinstance(code, int) else None, None)
        return answer

    def _log_served(
        self, request: Any, status: int | None, raised: str | None, *, answered: bool = True
    ) -> None:
        run = self._run_now()
        served = served_request(
            request,
            run.call_id if run is not None else "",
            self._redactor_now().redact_text(str(request.uri)),
            status,
            raised,
            answered=answered,
        )
        with self._noted_lock:
            self._served_log.append(served)
