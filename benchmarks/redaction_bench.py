"""Benchmark of redaction with the vendored gitleaks rules against without
them, in one run, reported, never asserted.

    make bench                                    # after the executor's and replay's tables
    .venv/bin/python benchmarks/redaction_bench.py
    .venv/bin/python benchmarks/redaction_bench.py --blocks 20 --per-block 100

Three redactors, timed in alternating blocks on the same texts:

* **before**: the hand-written families alone, as before the rule set
  (``Redactor(secret_rules=SecretRuleSet([]), entropy="off")``);
* **after**: ``Redactor()`` as shipped: the families, the gitleaks rules
  behind one keyword pass (Aho-Corasick when ``ahocorasick_rs`` is
  installed, as ``make bench`` has it) and entropy in config syntax;
* **regex**: the same, with the keyword pass done by the trie regex that
  stands in when ``ahocorasick_rs`` is absent.

The texts: a short call's arguments (the hot path: every call redacts its
arguments), 1 KB and 20 KB of the notes ``variants.py`` reads (dates,
colons, numbers; no keyword of any rule), and 20 KB of config text full of
the rules' keywords (``api_key``, ``token``, ``password``...) but no
secret: there the rules run, and that is what they cost.

Then the adversarial corpus (``tests/adversarial_texts.py``: for every rule,
texts built to make a backtracking engine scan far from many starts, and
generic ones for the value patterns, the entropy pass and JSON): each text
is screened at 10 KB (the least of ``SCREEN_REPEATS`` timings: one timing
on a loaded machine can push a slow text out of the slowest, and the row
would then miss it), the slowest ``--worst`` are timed at 100 KB
against the plain 100 KB text (the config text above: every rule's keywords,
no secret), in rounds of CPU time: in each round every text is timed right
after the plain one (each timing the least of ``REPEATS``), in an order that
rotates from round to round. The summary row "worst adversarial 100 KB /
plain 100 KB" is the slowest text's median ratio, with its range.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from summary import record
from timing import Samples, machine, measure, package_version, ratio
from variants import ARGUMENTS, BenchmarkSetupError, sample_text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from adversarial_texts import corpus  # noqa: E402

from pytest_toolguard.redaction import Redactor
from pytest_toolguard.secret_rules import SecretRuleSet, default_rule_set

CONFIG_LINES = (
    "# service settings, reviewed 2026-01-05: the api key and the access token\n",
    "# live in vault, password rules are in the auth guide\n",
    "api_version = 2024-06-01\n",
    "token_ttl: 3600\n",
    "auth_mode = oidc\n",
    "access_log: /var/log/service/access.log\n",
    "key_rotation_days: 90\n",
    "- name: keyboard-layout\n  value: us\n",
)


def config_text(size: int) -> str:
    """``size`` characters of settings whose names hold the rules' keywords."""
    text = ""
    while len(text) < size:
        for line in CONFIG_LINES:
            text += line
    return text[:size]


def redactors() -> dict[str, Redactor]:
    return {
        "before": Redactor(secret_rules=SecretRuleSet([]), entropy="off"),
        "after": Redactor(),
        "regex": Redactor(secret_rules=default_rule_set(accelerated=False)),
    }


def texts() -> dict[str, object]:
    return {
        "call arguments": dict(ARGUMENTS),
        "1 KB notes": sample_text(1024),
        "20 KB notes": sample_text(20 * 1024),
        "20 KB config": config_text(20 * 1024),
    }


def check(variants: dict[str, Redactor]) -> None:
    """Each redactor does what its row says, or its timings mean nothing."""
    key = "stripe: sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    for name, redactor in variants.items():
        caught = "<redacted:stripe_access_token>" in redactor.redact_text(key)
        if caught != (name != "before"):
            raise BenchmarkSetupError(
                f"{name}: the Stripe key {'stayed' if not caught else 'went'}"
            )
        for label, text in texts().items():
            if redactor.redact(text) != text:
                raise BenchmarkSetupError(f"{name} changed {label}, which holds no secret")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks (default 10)")
    parser.add_argument("--per-block", type=int, default=60, help="calls per block and variant")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up calls per variant")
    parser.add_argument("--worst", type=int, default=8, help="adversarial texts timed at 100 KB")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of the adversarial texts")
    parser.add_argument(
        "--adversarial-only", action="store_true", help="time the adversarial corpus only"
    )
    options = parser.parse_args(argv)
    if options.adversarial_only:
        adversarial(options.worst, options.rounds)
        return 0

    variants = redactors()
    try:
        check(variants)
    except BenchmarkSetupError as error:
        print(f"redaction benchmark not run: {error}", file=sys.stderr)
        return 1
    rules = len(default_rule_set().rules)
    print(
        f"\nRedaction: {rules} gitleaks rules, ahocorasick_rs "
        f"{package_version('ahocorasick-rs')}; {machine()}; Python {sys.version.split()[0]}"
    )
    print(f"{options.blocks} blocks of {options.per_block} calls per variant and text\n")
    header = (
        f"{'text':<16} {'before µs':>10} {'after µs':>10} {'after/before':>22} "
        f"{'regex µs':>10} {'regex/before':>22}"
    )
    print(header)
    print("-" * len(header))
    for label, text in texts().items():
        calls: dict[str, Callable[[], object]] = {
            name: (lambda redactor=redactor, text=text: redactor.redact(text))
            for name, redactor in variants.items()
        }
        samples = measure(
            calls, warmup=options.warmup, blocks=options.blocks, per_block=options.per_block
        )
        print(_row(label, samples))
    print(
        "\nafter/before: median of the per-block ratios (lowest - highest); "
        "absolute times are this machine's only."
    )
    adversarial(options.worst, options.rounds)
    return 0


SCREEN_SIZE = 10 * 1024
SIZE = 100 * 1024
REPEATS = 5
"""Each timing at 100 KB is the least of this many: on a machine others load,
a run is only ever slowed down. With the least of 3 in 7 rounds, one text's
ratios spread by a fifth either side of their median (4.10-5.94 around
5.09), and the row, the largest of 8 medians, drifts up with the spread."""
SCREEN_REPEATS = 2


def _cpu_seconds(redactor: Redactor, text: str, repeats: int = 1) -> float:
    """The least CPU time of ``repeats`` redactions of ``text``: on a shared
    machine a run is only ever slowed down, so the least is the truest."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        redactor.redact_text(text)
        best = min(best, time.process_time() - start)
    return best


def adversarial(worst: int, rounds: int) -> None:
    """Screen the corpus at 10 KB, then time the slowest texts at 100 KB
    against the plain 100 KB text, in alternating rounds; record the row."""
    redactor = Redactor()
    screened = sorted(
        (
            (_cpu_seconds(redactor, text, SCREEN_REPEATS), name)
            for name, text in corpus(SCREEN_SIZE).items()
        ),
        reverse=True,
    )
    names = [name for _, name in screened[:worst]]
    full = corpus(SIZE)
    plain = config_text(SIZE)
    notes = sample_text(SIZE)
    texts = {"plain (config)": plain, "plain (notes)": notes, **{n: full[n] for n in names}}
    # Each round times every text against the plain one right before it, so a
    # ratio compares two timings taken under the same load.
    times: dict[str, list[float]] = {name: [] for name in texts}
    bases: dict[str, list[float]] = {name: [] for name in texts}
    for round_ in range(rounds):
        order = list(texts)
        shift = round_ % len(order)
        for name in order[shift:] + order[:shift]:
            bases[name].append(_cpu_seconds(redactor, plain, REPEATS))
            times[name].append(_cpu_seconds(redactor, texts[name], REPEATS))
    print(
        f"\nAdversarial corpus: {len(screened)} texts screened at {SCREEN_SIZE // 1024} KB "
        f"(slowest {screened[0][0] * 1000:.1f} ms); the {worst} slowest at {SIZE // 1024} KB, "
        f"{rounds} rounds of CPU time, each time the least of {REPEATS}, each text against the "
        "plain one timed just before it\n"
    )
    header = f"{'text':<58} {'median ms':>10} {'/ plain':>8} {'range':>15}"
    print(header)
    print("-" * len(header))
    rows = []
    for name, samples in times.items():
        ratios = [value / base for value, base in zip(samples, bases[name], strict=True)]
        rows.append((statistics.median(ratios), min(ratios), max(ratios), name, samples))
        print(
            f"{name[:58]:<58} {statistics.median(samples) * 1000:>10.1f} "
            f"{statistics.median(ratios):>8.2f} {min(ratios):>6.2f} - {max(ratios):<6.2f}"
        )
    value, low, high, name, _ = max(row for row in rows if not row[3].startswith("plain"))
    print(f"\nworst adversarial 100 KB / plain 100 KB: {value:.2f} ({name})")
    record("redaction_adversarial", value, low, high, note=name)


def _row(label: str, samples: dict[str, Samples]) -> str:
    after, low, high = ratio(samples["after"], samples["before"])
    regex, regex_low, regex_high = ratio(samples["regex"], samples["before"])
    return (
        f"{label:<16} {samples['before'].median_us:>10.1f} {samples['after'].median_us:>10.1f} "
        f"{f'{after:.2f} ({low:.2f} - {high:.2f})':>22} {samples['regex'].median_us:>10.1f} "
        f"{f'{regex:.2f} ({regex_low:.2f} - {regex_high:.2f})':>22}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
