"""Loading and dumping a 10,000-interaction cassette, in both syntaxes.

The cassette is made with ``replay_workload.big_cassette`` (the shipped
cassettes' interactions, cycled, without their amplified variants: 6 MB of
YAML, the size this row has always measured; with the variants it is 72
MB). Recording writes a cassette of more than ``JSON_ABOVE`` interactions as
JSON, so the row (``load_10k``) is ``loads`` of its JSON text; ``loads`` of
the same cassette written as YAML, the syntax below that size, is timed in
the same rounds, interleaved. Each round times ``dumps`` in each syntax and
``loads`` of each text, the garbage collector on, as in real use. The three
parts of ``loads`` are timed inside that same call: for its duration the
cassette module's ``_parse``, ``_quick_check``, ``_validator`` and
``_build`` are wrapped with timers (when a name is gone, that part shows
``n/a``): the parse (``json`` for a JSON text, the YAML loader the library
picked for any other: libyaml's ``CSafeLoader`` when present), the
validation against ``cassette.schema.json`` (``_quick_check``,
jsonschema-rs's "valid?", and for an invalid document only ``_validator``'s
errors) and the building of the ``Cassette`` objects.

References, timed once after the rounds, show what the same work can cost:
``loads`` of the YAML text with the garbage collector paused (the collector
walks every live object again and again while millions are made), and
``jsonschema_rs`` answering "valid?" (when installed) on its own.

Before timing, a 200-interaction slice checks that each syntax round-trips
(``dumps(loads(dumps(c))) == dumps(c)``) and that both load the same.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from replay_variants import patched
from variants import BenchmarkSetupError

from pytest_toolguard.replay import Cassette, dumps, loads
from pytest_toolguard.replay import cassette as cassette_module

CLOCK: tuple[Callable[[], int]] = (time.perf_counter_ns,)

DUMPS = "dumps as JSON (to_dict + json.dumps)"
DUMPS_YAML = "dumps as YAML (to_dict + YAML dump)"
LOADS = "loads of the JSON text (parse + validate + build)"
LOADS_YAML = "loads of the YAML text (parse + validate + build)"
PARSE = "  JSON parse (json)"
PARSE_YAML = "  YAML parse"
VALIDATE = "  schema validation (jsonschema-rs, jsonschema for errors)"
BUILD = "  building the Cassette"
ROUNDS_PARTS = (DUMPS, DUMPS_YAML, LOADS, PARSE, VALIDATE, BUILD, LOADS_YAML, PARSE_YAML)
REFERENCES = (
    "reference: loads of the YAML text, garbage collector paused",
    "reference: jsonschema_rs is_valid alone",
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

    def swaps(self, parse: str) -> dict[str, Any]:
        """Timers around the parts, the parse counted as ``parse``."""
        module = cassette_module
        swaps: dict[str, Any] = {}
        real_parse = getattr(module, "_parse", None)
        if real_parse is not None:
            parts = self

            def timed_parse(text: str, source: str) -> Any:
                raw = parts.timed(parse, real_parse)(text, source)
                parts.raw = raw
                return raw

            swaps["_parse"] = timed_parse
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


def time_load(cassette: Cassette, rounds: int) -> LoadTimes:
    """Every part, ``rounds`` times, the two syntaxes one after the other in
    each round (JSON first in even rounds, YAML first in odd ones); the
    references once. Only one parsed document is alive at a time (the
    collector's work grows with it)."""
    _check_round_trip(cassette)
    clock = CLOCK[0]
    seconds: dict[str, list[float]] = {}
    texts: dict[str, str] = {}
    document: list[Any] = []
    syntaxes = (("json", DUMPS, LOADS, PARSE), ("yaml", DUMPS_YAML, LOADS_YAML, PARSE_YAML))
    for round_index in range(rounds):
        order = syntaxes if round_index % 2 == 0 else syntaxes[::-1]
        for syntax, dumps_name, loads_name, parse_name in order:
            document.clear()
            start = clock()
            made = dumps(cassette, syntax=syntax)
            seconds.setdefault(dumps_name, []).append((clock() - start) / 1e9)
            if texts.get(syntax, made) != made:
                raise BenchmarkSetupError(
                    f"dumps wrote the 10k cassette differently twice ({syntax})"
                )
            texts[syntax], made = made, ""
            parts = _Parts()
            with patched(cassette_module, **parts.swaps(parse_name)):
                start = clock()
                loaded = loads(texts[syntax], source="<10k>")
                seconds.setdefault(loads_name, []).append((clock() - start) / 1e9)
            if len(loaded.interactions) != len(cassette.interactions):
                raise BenchmarkSetupError(f"the 10k cassette did not load back whole ({syntax})")
            del loaded
            if parse_name == PARSE_YAML:
                parts.seconds.pop(VALIDATE, None)
                parts.seconds.pop(BUILD, None)
            for name, value in parts.seconds.items():
                seconds.setdefault(name, []).append(value)
            if parts.raw is not None:
                document.append(parts.raw)
            del parts
    seconds.update(_references(texts["yaml"], document))
    return LoadTimes(
        interactions=len(cassette.interactions),
        size_bytes=len(texts["json"].encode("utf-8")),
        loader=getattr(getattr(cassette_module, "_Loader", None), "__name__", "?"),
        seconds=seconds,
    )


def _check_round_trip(cassette: Cassette) -> None:
    small = replace(cassette, interactions=cassette.interactions[:200])
    loaded = []
    for syntax in ("json", "yaml"):
        text = dumps(small, syntax=syntax)
        back = loads(text, source="<slice>")
        if dumps(back, syntax=syntax) != text:
            raise BenchmarkSetupError(
                f"a cassette does not dump back the same after loads ({syntax})"
            )
        loaded.append(back)
    if loaded[0] != loaded[1]:
        raise BenchmarkSetupError("the JSON and the YAML text of a cassette load differently")


def _references(text: str, document: list[Any]) -> dict[str, list[float]]:
    """The references; ``document`` (the last parsed document) is only
    validated."""
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
    fast = _fast_validator()
    if fast is not None and document:
        if not fast.is_valid(document[0]):
            raise BenchmarkSetupError("jsonschema_rs finds the 10k cassette invalid")
        once(REFERENCES[1], lambda: fast.is_valid(document[0]))
    return found


def _fast_validator() -> Any:
    try:
        import jsonschema_rs
    except ImportError:
        return None
    return jsonschema_rs.validator_for(cassette_module.schema())
