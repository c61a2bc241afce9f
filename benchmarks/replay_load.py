"""Loading and dumping a 10,000-interaction cassette.

The cassette is made with ``replay_workload.big_cassette`` (the shipped
cassettes' interactions, cycled). Each round times ``dumps`` of it and
``loads`` of that text, the garbage collector on, as in real use. The three
parts of ``loads`` are timed inside that same call: for its duration the
cassette module's ``yaml``, ``_validator`` and ``_build`` are wrapped with
timers (when a name is gone, that part shows ``n/a``): the YAML parse (the
loader the library picked: libyaml's ``CSafeLoader`` when present), the
validation against ``cassette.schema.json`` (every error collected, as
``loads`` does) and the building of the ``Cassette`` objects. Validation is
``_quick_check`` (jsonschema-rs's "valid?") and, for an invalid document only,
``_validator``'s errors.

References, timed once after the rounds, show what the same work can cost:
``loads`` and ``dumps`` with the garbage collector paused (the collector
walks every live object again and again while millions are made),
``json.loads`` of the same document written as JSON, and ``jsonschema_rs``
answering "valid?" (when installed), the fast path the tool schemas use.

Before timing, a 200-interaction slice checks that the format round-trips
(``dumps(loads(dumps(c))) == dumps(c)``).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from replay_variants import patched
from variants import BenchmarkSetupError

from pytest_toolguard.replay import Cassette, dumps, loads
from pytest_toolguard.replay import cassette as cassette_module

CLOCK: tuple[Callable[[], int]] = (time.perf_counter_ns,)

DUMPS = "dumps (to_dict + YAML dump)"
LOADS = "loads (parse + validate + build)"
PARSE = "  YAML parse"
VALIDATE = "  schema validation (jsonschema-rs, jsonschema for errors)"
BUILD = "  building the Cassette"
ROUNDS_PARTS = (DUMPS, LOADS, PARSE, VALIDATE, BUILD)
REFERENCES = (
    "reference: loads, garbage collector paused",
    "reference: dumps, garbage collector paused",
    "reference: json.loads of the same document",
    "reference: jsonschema_rs is_valid",
)
PARTS = ROUNDS_PARTS + REFERENCES


@dataclass(frozen=True, slots=True)
class LoadTimes:
    interactions: int
    size_bytes: int
    loader: str
    seconds: dict[str, list[float]]
    """Seconds of each part (``PARTS``), one per round (one for a
    reference); a part not measured is absent."""


class _Parts:
    """Timers around the parts of one ``loads``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.raw: Any = None

    def timed(self, name: str, step: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            clock = CLOCK[0]
            start = clock()
            value = step(*args, **kwargs)
            self.seconds[name] = self.seconds.get(name, 0.0) + (clock() - start) / 1e9
            return value

        return run

    def swaps(self) -> dict[str, Any]:
        module = cassette_module
        swaps: dict[str, Any] = {}
        real_yaml = getattr(module, "yaml", None)
        if real_yaml is not None:
            swaps["yaml"] = _TimedYaml(real_yaml, self)
        validator = getattr(module, "_validator", None)
        if validator is not None:
            parts = self

            class TimedValidator:
                def __init__(self, real: Any) -> None:
                    self.real = real

                def iter_errors(self, raw: Any) -> Iterator[Any]:
                    errors = parts.timed(VALIDATE, lambda: list(self.real.iter_errors(raw)))()
                    return iter(errors)

            swaps["_validator"] = lambda: TimedValidator(validator())
        quick = getattr(module, "_quick_check", None)
        if quick is not None:  # "valid?" first: the validation is both, when both run
            parts = self

            class TimedQuick:
                def __init__(self, real: Any) -> None:
                    self.real = real

                def is_valid(self, raw: Any) -> bool:
                    return bool(parts.timed(VALIDATE, self.real.is_valid)(raw))

            swaps["_quick_check"] = lambda: TimedQuick(quick())
        build = getattr(module, "_build", None)
        if build is not None:
            swaps["_build"] = self.timed(BUILD, build)
        return swaps


class _TimedYaml:
    """The ``yaml`` module, with ``load`` timed."""

    def __init__(self, real: Any, parts: _Parts) -> None:
        self._real = real
        self._parts = parts

    def load(self, text: str, Loader: Any) -> Any:  # noqa: N803 - yaml's spelling
        raw = self._parts.timed(PARSE, self._real.load)(text, Loader=Loader)
        self._parts.raw = raw
        return raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def time_load(cassette: Cassette, rounds: int) -> LoadTimes:
    """Every part, ``rounds`` times; the references once. Only one parsed
    document is alive at a time (the collector's work grows with it)."""
    _check_round_trip(cassette)
    clock = CLOCK[0]
    seconds: dict[str, list[float]] = {}
    text = ""
    document: list[Any] = []
    for _ in range(rounds):
        document.clear()
        start = clock()
        made = dumps(cassette)
        seconds.setdefault(DUMPS, []).append((clock() - start) / 1e9)
        if text and made != text:
            raise BenchmarkSetupError("dumps wrote the 10k cassette differently twice")
        text, made = made, ""
        parts = _Parts()
        with patched(cassette_module, **parts.swaps()):
            start = clock()
            loaded = loads(text, source="<10k>")
            seconds.setdefault(LOADS, []).append((clock() - start) / 1e9)
        if len(loaded.interactions) != len(cassette.interactions):
            raise BenchmarkSetupError("the 10k cassette did not load back whole")
        del loaded
        for name, value in parts.seconds.items():
            seconds.setdefault(name, []).append(value)
        if parts.raw is not None:
            document.append(parts.raw)
        del parts
    seconds.update(_references(cassette, text, document))
    return LoadTimes(
        interactions=len(cassette.interactions),
        size_bytes=len(text.encode("utf-8")),
        loader=getattr(getattr(cassette_module, "_Loader", None), "__name__", "?"),
        seconds=seconds,
    )


def _check_round_trip(cassette: Cassette) -> None:
    small = replace(cassette, interactions=cassette.interactions[:200])
    text = dumps(small)
    if dumps(loads(text, source="<slice>")) != text:
        raise BenchmarkSetupError("a cassette does not dump back the same after loads")


def _references(cassette: Cassette, text: str, document: list[Any]) -> dict[str, list[float]]:
    """The references; ``document`` (the parsed YAML, when the parse was
    seen) is emptied before ``json.loads`` makes its own copy."""
    clock = CLOCK[0]
    found: dict[str, list[float]] = {}

    def once(name: str, step: Callable[[], object], *, paused: bool = False) -> None:
        if paused:
            gc.disable()
        try:
            start = clock()
            step()
            found[name] = [(clock() - start) / 1e9]
        finally:
            gc.enable()

    once(REFERENCES[0], lambda: loads(text, source="<10k>"), paused=True)
    once(REFERENCES[1], lambda: dumps(cassette), paused=True)
    if not document:
        return found
    fast = _fast_validator()
    if fast is not None:
        if not fast.is_valid(document[0]):
            raise BenchmarkSetupError("jsonschema_rs finds the 10k cassette invalid")
        once(REFERENCES[3], lambda: fast.is_valid(document[0]))
    as_json = json.dumps(document.pop())
    once(REFERENCES[2], lambda: json.loads(as_json))
    return found


def _fast_validator() -> Any:
    try:
        import jsonschema_rs
    except ImportError:
        return None
    return jsonschema_rs.validator_for(cassette_module.schema())
