"""Redaction costs time linear in the text: every regex it runs over a text
has its repeats bounded, so each try looks at a bounded window.

Checked on the regexes' parse trees, never by timing (the benchmark
``benchmarks/redaction_bench.py`` times the adversarial corpus). The
behaviour the bounding must keep (what the rules and patterns catch) is
checked on tables of texts below.
"""

from __future__ import annotations

import json
import re

import pytest
from adversarial_texts import corpus, rule_texts

try:  # Python 3.11+
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from pytest_toolguard.redaction import (
    _ASSIGN_VALUE,
    _EVERY_FAMILY,
    _PEM_BEGIN,
    FAMILY_LIMIT,
    Redactor,
    _combined,
)
from pytest_toolguard.secret_rules import (
    SCAN_LIMIT,
    _any_of,
    _compiled,
    _split_gap,
    _split_lazy_prefix,
    bounded_repeats,
    default_rule_set,
)

_C = sre_constants
_REPEATS = {_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", _C.MAX_REPEAT)}


def open_repeats(pattern: str, flags: int = re.ASCII) -> list[str]:
    """The repeats of ``pattern`` with no upper bound, each as its parse tree."""
    found: list[str] = []

    def walk(items: object) -> None:
        for op, value in items:  # type: ignore[attr-defined]
            if op in _REPEATS:
                low, high, sub = value
                if high == _C.MAXREPEAT:
                    found.append(f"{{{low},}} {sub}")
                walk(sub)
            elif op is _C.SUBPATTERN:
                walk(value[-1])
            elif op is _C.BRANCH:
                for branch in value[1]:
                    walk(branch)
            elif op in (_C.ASSERT, _C.ASSERT_NOT):
                walk(value[1])
            elif op is getattr(_C, "ATOMIC_GROUP", None):
                walk(value)

    walk(sre_parse.parse(pattern, flags))
    return found


def rule_regexes() -> list[tuple[str, str]]:
    """``(where, pattern)``: every regex the rules run over a text, as compiled."""
    rules = default_rule_set()
    found: list[tuple[str, str]] = []
    for rule in rules.rules:
        found.append((rule.id, rule.regex().pattern))
        rest, prefix, _ = _split_lazy_prefix(rule.pattern)
        if prefix:
            found.append((f"{rule.id} without its lazy run", _compiled(rest).pattern))
            found.append((f"{rule.id} lazy run", _compiled(f"{prefix}*\\Z").pattern))
        gap = _split_gap(rule.pattern)
        if gap is not None:
            found.append((f"{rule.id} head", _compiled(gap.head).pattern))
            found.append((f"{rule.id} tail", _compiled(gap.tail).pattern))
        for allowlist in rule.allowlists:
            if allowlist.regexes:
                for pattern in _any_of(allowlist.regexes).patterns:
                    found.append((f"{rule.id} allowlist", pattern))
    if rules.allowlist is not None and rules.allowlist.regexes:
        for pattern in _any_of(rules.allowlist.regexes).patterns:
            found.append(("global allowlist", pattern))
    return found


@pytest.mark.parametrize(("where", "pattern"), rule_regexes(), ids=lambda value: value[:40])
def test_every_regex_a_rule_runs_has_bounded_repeats(where: str, pattern: str) -> None:
    assert open_repeats(pattern) == [], where


@pytest.mark.parametrize("after_placeholder", [False, True])
@pytest.mark.parametrize("guarded", [False, True])
def test_every_value_pattern_has_bounded_repeats(after_placeholder: bool, guarded: bool) -> None:
    combined = _combined(_EVERY_FAMILY, after_placeholder, guarded)
    assert open_repeats(combined.pattern, 0) == []
    assert open_repeats(_ASSIGN_VALUE.pattern, 0) == []
    assert open_repeats(_PEM_BEGIN.pattern, 0) == []


@pytest.mark.parametrize(
    ("pattern", "bounded"),
    [
        (r"a*", "a{0,9}"),
        (r"a+b", "a{1,9}b"),
        (r"a{3,}", "a{3,9}"),
        (r"a{30,}", "a{30,30}"),
        (r"a*?b+?", "a{0,9}?b{1,9}?"),
        (r"a*+", "a{0,9}+"),
        (r"a{2,5}b{3}", "a{2,5}b{3}"),
        (r"[*+]\*\+", r"[*+]\*\+"),
        (r"[]*]+", r"[]*]{1,9}"),
        (r"[^]x]*", r"[^]x]{0,9}"),
        (r"(?:ab)*(?i:c)+", r"(?:ab){0,9}(?i:c){1,9}"),
        (r"(?P<name>x)+", r"(?P<name>x){1,9}"),
        (r"\{\{[^}]+}}", r"\{\{[^}]{1,9}}}"),
        (r"a?+", r"a?+"),
    ],
)
def test_bounded_repeats_bounds_open_repeats_and_nothing_else(pattern: str, bounded: str) -> None:
    assert bounded_repeats(pattern, 9) == bounded
    re.compile(bounded)


@pytest.mark.parametrize(
    "text",
    [
        "curl -u alice:Zq8mK2pLx9v https://api.example.com",
        "curl https://api.example.com -u alice:Zq8mK2pLx9v",
        "curl --user=alice:Zq8mK2pLx9v https://api.example.com",
        "curl https://api.example.com \\\n  -X POST \\\n  -u alice:Zq8mK2pLx9v",
        "curl -s x -u bob:Hy7rT4qWe1 && curl -s y -u alice:Zq8mK2pLx9v",
        "curl -H 'x: y' " * 50 + "-u alice:Zq8mK2pLx9v",
        'curl -H "Authorization: Bearer Zq8mK2pLx9vQ7wE4rT1y" https://x',
        "curl https://x \\\n -H 'X-Api-Key: Zq8mK2pLx9vQ7wE4rT1y'",
    ],
)
def test_a_credential_given_to_curl_is_found_on_its_line_or_the_next_ones(text: str) -> None:
    redacted = Redactor(entropy="off").redact_text(text)
    assert "Zq8" not in redacted
    assert "<redacted:" in redacted


def test_every_credential_after_a_curl_is_found_not_only_the_last_one() -> None:
    text = "curl x -u bob:Hy7rT4qWe1z -u alice:Zq8mK2pLx9v\n"
    findings = default_rule_set().find(text)
    secrets = {text[finding.start : finding.end] for finding in findings}
    assert {"bob:Hy7rT4qWe1z", "alice:Zq8mK2pLx9v"} <= secrets


@pytest.mark.parametrize("lines_between", [12, 20])
def test_a_credential_far_below_curl_is_not_its_credential(lines_between: int) -> None:
    text = "curl https://x\n" + "echo\n" * lines_between + "  -u alice:Zq8mK2pLx9v\n"
    rules = [finding.rule for finding in default_rule_set().find(text)]
    assert "curl-auth-user" not in rules


@pytest.mark.parametrize(
    "secret",
    [
        # Long secrets, within the limits, are still found whole.
        "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIx" * 500 + ".SflKxwRJSMeKKF2QT4fw",
        "ghp_" + "aB3" * 80,
        "xoxb-123456789012-1234567890123-" + "AbCd" * 300,
    ],
)
def test_long_secrets_within_the_limits_are_still_redacted(secret: str) -> None:
    assert len(secret) < FAMILY_LIMIT
    redacted = Redactor().redact_text(f"token {secret} end")
    assert secret[10:40] not in redacted
    assert redacted.endswith(" end")


@pytest.mark.parametrize("size", [SCAN_LIMIT * 4])
def test_a_password_value_longer_than_the_scan_limit_leaves_nothing_of_its_start(
    size: int,
) -> None:
    value = "Zq8" + "x" * size
    redacted = Redactor().redact_text(f"password={value}")
    assert redacted.startswith("password=<redacted:password>")
    assert "Zq8" not in redacted


def test_a_long_block_cut_short_is_redacted_to_the_end() -> None:
    text = "x\n-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEpAIBAAKCAQEA3Tz2\n" * 500
    assert Redactor().redact_text(text) == "x\n<redacted:private_key>"


def test_private_key_blocks_end_at_their_own_end_line() -> None:
    block = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----"
    other = "-----END RSA PRIVATE KEY----- stays"
    text = f"a {block} b {block} c"
    assert Redactor().redact_text(text) == "a <redacted:private_key> b <redacted:private_key> c"
    assert Redactor().redact_text(f"{block} {other}") == f"<redacted:private_key> {other}"


@pytest.mark.parametrize(
    "label", ["max_tokens", "token_count", "tokens", "keyboard", "author", "passage"]
)
def test_harmless_labels_repeated_on_one_line_keep_the_text(label: str) -> None:
    text = f"{label}=" * 2000
    assert Redactor(entropy="off").redact_text(text) == text


def test_a_json_output_with_many_keys_keeps_its_content() -> None:
    data = {f"key{index:06d}": index for index in range(20000)}
    data["password"] = "hunter2hunter2"
    redacted = Redactor().redact(data)
    assert redacted["password"] == "<redacted:password>"
    assert redacted["key019999"] == 19999
    text = Redactor().redact_text(json.dumps(data))
    assert "hunter2" not in text


ADVERSARIAL = corpus(2048)


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_texts_are_redacted_to_a_fixed_point(name: str) -> None:
    redactor = Redactor()
    once = redactor.redact_text(ADVERSARIAL[name])
    assert redactor.redact_text(once) == once


def test_the_corpus_has_texts_for_every_rule_with_a_repeat() -> None:
    rules = default_rule_set().rules
    assert all(list(rule_texts(rule, 64)) for rule in rules)
