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
from typing import Any

import pytest
from adversarial_texts import generic_texts, rule_texts
from secret_examples import examples

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
    EntropyScope,
    Redactor,
    _combined,
)
from pytest_toolguard.secret_allowlists import Allowlist, _any_of, _shortest_lead
from pytest_toolguard.secret_regex import (
    SCAN_LIMIT,
    bounded_repeats,
    compile_bounded,
    reads_around,
    split_gap,
    split_lazy_prefix,
)
from pytest_toolguard.secret_rules import SecretRule, SecretRuleSet, default_rule_set
from pytest_toolguard.secret_scan import (
    assignment_sign_reach,
    gated_starts,
    gates_of,
    line_breaks,
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
        rest, prefix, _ = split_lazy_prefix(rule.pattern)
        if prefix:
            found.append((f"{rule.id} without its lazy run", compile_bounded(rest).pattern))
            found.append((f"{rule.id} lazy run", compile_bounded(f"{prefix}*\\Z").pattern))
        gap = split_gap(rule.pattern)
        if gap is not None:
            found.append((f"{rule.id} head", compile_bounded(gap.head).pattern))
            found.append((f"{rule.id} tail", compile_bounded(gap.tail).pattern))
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


# The suite redacts a sample of the adversarial corpus (the benchmark
# screens all of it): for every rule, the texts of the kinds below, and
# every generic text.
SAMPLED_KINDS = (
    "keyword glued",
    "example 0 cut short",
    "example 0 open run",
    "example 0 one line",
    "example 0 per line",
)
SAMPLE_SIZE = 2048


def sampled_texts(rule: SecretRule, size: int = SAMPLE_SIZE) -> dict[str, str]:
    return {
        name: text
        for name, text in rule_texts(rule, size)
        if name.split(": ", 1)[1] in SAMPLED_KINDS
    }


def assert_a_fixed_point(name: str, text: str) -> None:
    redactor = Redactor()
    once = redactor.redact_text(text)
    assert redactor.redact_text(once) == once, name


@pytest.mark.parametrize("rule", default_rule_set().rules, ids=lambda rule: rule.id)
def test_adversarial_texts_of_each_rule_are_redacted_to_a_fixed_point(rule: SecretRule) -> None:
    texts = sampled_texts(rule)
    assert texts
    for name, text in texts.items():
        assert_a_fixed_point(name, text)


@pytest.mark.parametrize(("name", "text"), list(generic_texts(SAMPLE_SIZE)), ids=lambda v: v[:30])
def test_generic_adversarial_texts_are_redacted_to_a_fixed_point(name: str, text: str) -> None:
    assert_a_fixed_point(name, text)


def test_the_corpus_has_texts_for_every_rule_with_a_repeat() -> None:
    rules = default_rule_set().rules
    assert all(list(rule_texts(rule, 64)) for rule in rules)


# --- what the per-finding shortcuts keep ----------------------------------------------


@pytest.mark.parametrize("rule", default_rule_set().rules, ids=lambda rule: rule.id)
def test_the_fast_scan_finds_what_the_whole_regexes_find_in_adversarial_texts(
    rule: SecretRule,
) -> None:
    # The fast scan gates heads, skips keywords with no assignment sign in
    # reach, searches allowlists by alternative and remembers verdicts; the
    # exhaustive one runs each whole regex over the text.
    # The curl rules, searched tail first, find more than their whole
    # regex: every credential, not only the last one on a line.
    # Short texts: the whole regexes cost the square of a long one.
    rules = default_rule_set()
    for name, text in sampled_texts(rule, 400).items():
        fast, whole = rules.find(text), rules.find(text, exhaustive=True)
        if split_gap(rule.pattern) is None:
            assert fast == whole, name
        else:
            assert set(whole) <= set(fast), name


def allowlist_texts() -> list[str]:
    texts = [
        "true",
        "FALSE",
        "x null",
        "aaaa",
        "${SECRET_NAME}",
        "{{ .Values.key }}",
        "/usr/local/bin/tool",
        "my-api-lib:jar:1.0",
        "api_version = 2",
        "keyboard_layout: us",
        "RUN --mount=type=secret,id=npm",
        "import { token } from 'lib'",
        'LICENSE = "MIT"',
        "A_B=\nC_D=\n",
        "kind: Secret\ndata:\n---\nkind: Other\ndata:",
        "nothing to allow here: Zq8mK2pLx9vQ7wE4",
    ]
    for rule in default_rule_set().rules:
        for example in examples(rule, 1):
            texts.append(example.text)
            texts.append(example.secret)
    return texts


def every_allowlist() -> list[tuple[str, Allowlist]]:
    rules = default_rule_set()
    found = [
        (f"{rule.id} {index}", allowlist)
        for rule in rules.rules
        for index, allowlist in enumerate(rule.allowlists)
    ]
    if rules.allowlist is not None:
        found.append(("global", rules.allowlist))
    return [(where, allowlist) for where, allowlist in found if allowlist.regexes]


@pytest.mark.parametrize(("where", "allowlist"), every_allowlist(), ids=lambda v: str(v)[:30])
def test_allowlist_alternatives_find_what_the_whole_regexes_find(
    where: str, allowlist: Allowlist
) -> None:
    alternatives = _any_of(allowlist.regexes)
    whole = [compile_bounded(regex) for regex in allowlist.regexes]
    for text in allowlist_texts():
        expected = any(regex.search(text) for regex in whole)
        assert alternatives.found_in(text) == expected, (where, text)


@pytest.mark.parametrize(
    ("pattern", "shortest"),
    [
        (r"[a-z0-9\-]*?api:jar:", "api:jar:"),
        (r"[\w.\-]+:x", r"[\w.\-]:x"),
        (r"a{2,5}b", "a{2}b"),
        (r"a{0,5}?b", "b"),
        (r"a?b?c", "c"),
        (r"\w++x", r"\w++x"),  # possessive: may take what follows
        (r"a*", "a*"),  # nothing would be left
        (r"\bx*y", r"\bx*y"),  # not a repeat first
        (r"(?:ab)*c", "(?:ab)*c"),  # not one character
    ],
)
def test_a_leading_repeat_is_cut_to_its_minimum_for_a_yes_or_no_search(
    pattern: str, shortest: str
) -> None:
    assert _shortest_lead(pattern) == shortest
    texts = ["", "c", "abc", "aab", "xxy", "api:jar:", "my-api:jar:", "k.v:x", "aaaaab", "b", "wx"]
    for text in texts:
        assert (re.search(shortest, text) is None) == (re.search(pattern, text) is None), text


KUBERNETES = next(rule for rule in default_rule_set().rules if rule.id == "kubernetes-secret-yaml")


@pytest.mark.parametrize(
    "text",
    [
        "kind: secret\ndata:\n" * 200,
        "kind: Secret\n" * 100 + "data:\n" * 100,
        "data:\n  kind: secret\n" * 150,
        ("kind: secret\ndata:\n" * 30 + "x" * 300) * 5,
    ],
)
def test_kubernetes_secret_heads_without_a_value_in_reach_are_not_tried(text: str) -> None:
    gates = gates_of(KUBERNETES.pattern)
    assert gates is not None
    assert list(gated_starts(text, gates)) == []
    assert list(KUBERNETES.matches(text)) == []


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n"
        "data:\n  password: cGFzc3dvcmQxMjM0NTY=\n",
        "data:\n  token: dG9rZW4xMjM0NTY3ODkw\nkind: Secret\n",
        "kind: secret\ndata:\n" * 40
        + "  key: c2VjcmV0MTIzNDU2Nzg=\n"
        + "kind: secret\ndata:\n" * 40,
        ("kind: secret\ndata:\n" * 20 + "  a: YWJjZGVmZ2hpams=\n") * 6,
        'kind: Secret\ndata:\n  a: ""\n---\nkind: Secret\ndata:\n  b: {{ .Values.b }}\n',
    ],
)
def test_kubernetes_secrets_are_found_as_the_whole_regex_finds_them(text: str) -> None:
    fast = [(match.span(), start) for match, start in KUBERNETES.matches(text)]
    whole = [(match.span(), start) for match, start in KUBERNETES.matches(text, exhaustive=True)]
    assert fast == whole
    assert fast


def test_gitleaks_semi_generic_rules_skip_keywords_with_no_assignment_sign_in_reach() -> None:
    rules = default_rule_set().rules
    reached = [
        rule.id for rule in rules if assignment_sign_reach(split_lazy_prefix(rule.pattern)[0])
    ]
    assert len(reached) > 80
    twitter = next(rule for rule in rules if rule.id == "twitter-api-key")
    text = "twitter" * 300
    starts = [index for index in range(len(text)) if text.startswith("twitter", index)]
    assert list(twitter.matches(text, starts=starts)) == []
    key = "twitter_key = " + "a1b2c3d4e5" * 2 + "abcde"
    assert [m.group(1) for m, _ in twitter.matches(f"x {key} ", starts=[2])] == [key[-25:]]


_SECRET_VALUE = "Zx9!Qw7#Rt5$Yu3%"
_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    "text",
    [
        # A label whose trigger word lies at the edge of its reach, or past it.
        *(f"{'a' * size}_password = {_SECRET_VALUE}\n" for size in (0, 55, 56, 63, 64, 65, 70)),
        *(f"x.{'b' * size}token: {_SECRET_VALUE} y" for size in (61, 62, 63)),
        "api_key: " * 50,
        f"tokens=1 max_tokens=2 token_count: 3 password: {_SECRET_VALUE}",
        # A URL's scheme of every length around its limit.
        *(f"see {'s' * size}://user:{_SECRET_VALUE}@host/ ok" for size in (1, 31, 32, 33, 40)),
        f"+x.a-b://u:{_SECRET_VALUE}@h and 9ab://u:{_SECRET_VALUE}@h",
        # Both spellings of the AWS secret's label, glued or spaced.
        f"aws_secret_access_key = {_AWS_SECRET}",
        f"AWSSECRETKEY={_AWS_SECRET} secret_access_key: '{_AWS_SECRET}'",
        f"xaws_secret_key={_AWS_SECRET}",
        "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
        f"K\u212aey: {_SECRET_VALUE} and pa\u017f\u017fword: {_SECRET_VALUE}",
        f"Bearer abcdef123456 basic dXNlcjpwYXNzd29yZA== eyJhbGciOi.eyJzdWIiOiIx.sig "
        f"AKIAZ7QW3RT5YU9IO2PA ghp_{'a' * 36} xoxb-1234567890-abc",
    ],
)
def test_the_value_families_tried_at_clue_starts_find_what_a_search_everywhere_finds(
    text: str,
) -> None:
    redactor = Redactor()
    assert redactor.redact_text(text) == redactor._redact_text_exhaustive(text)


# --- what the shortcuts over placeholders keep ---------------------------------------


def placeholder_texts(rule: SecretRule) -> dict[str, str]:
    """Texts that hold placeholders where a rule's keywords and matches are:
    the rule's adversarial texts and examples redacted once (their matches
    become placeholders, which may hold the rule's keywords), and examples
    glued right after and before placeholders that hold keywords."""
    redactor = Redactor()
    texts: dict[str, str] = {}
    for name, text in sampled_texts(rule, 600).items():
        texts[f"{name}, redacted once"] = redactor.redact_text(text)
    for index, example in enumerate(examples(rule, 2)):
        texts[f"example {index} redacted once"] = redactor.redact_text(example.text)
        for holder in ("<redacted:api_key>", f"<redacted:{rule.keyword}>", "<redacted:x>"):
            texts[f"example {index} after {holder}"] = f"{holder}{example.text}"
            texts[f"example {index} before {holder}"] = f"{example.text}{holder} {holder}"
            texts[f"example {index} secret after {holder}"] = f"{holder}{example.secret} x"
    return texts


@pytest.mark.parametrize("rule", default_rule_set().rules, ids=lambda rule: rule.id)
def test_keyword_places_inside_placeholders_are_skipped_without_changing_a_finding(
    rule: SecretRule,
) -> None:
    # A keyword inside a placeholder can only seed a match the placeholder
    # bars; the rule set that still looks for keywords there finds the same.
    rules = default_rule_set()
    unmasked = SecretRuleSet(rules.rules, rules.allowlist)
    unmasked._maskable = False
    texts = placeholder_texts(rule)
    assert sum("<redacted:" in text for text in texts.values()) >= 6
    for name, text in texts.items():
        assert rules.find(text) == unmasked.find(text), name


ASSIGNMENTS = (
    "password: hunter2hunter2",
    "password: 'hunter2hunter2'",
    'password: "hunter2hunter2"',
    "password=hunter2hunter2",
    "password: <redacted:password>",
    "PASSWORD: hunter2hunter2",
    "api_key: api_key:",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB_password: x1",
    "token_count: 12",
    "max_tokens=300",
    "secret: Bearer abc.def.ghi",
)


@pytest.mark.parametrize("order", ["as listed", "reversed", "interleaved"])
@pytest.mark.parametrize("separator", ["\n", "  ", "; "])
def test_an_assignment_repeated_in_a_text_is_redacted_as_when_alone(
    order: str, separator: str
) -> None:
    # A pass remembers what each (label, separator, value) became; every
    # repeat must come out as the assignment alone does, and nothing else.
    lines = list(ASSIGNMENTS) * 3
    if order == "reversed":
        lines.reverse()
    elif order == "interleaved":
        lines = [line for pair in zip(lines, reversed(lines), strict=True) for line in pair]
    redactor = Redactor(secret_rules=SecretRuleSet([]), entropy="off")
    alone = {
        line: Redactor(secret_rules=SecretRuleSet([]), entropy="off").redact_text(line)
        for line in ASSIGNMENTS
    }
    assert redactor.redact_text(separator.join(lines)) == separator.join(
        alone[line] for line in lines
    )


_HOLDERS = (
    "<redacted:password>",
    "<redacted:aws_secret_key>",
    "<redacted:kubernetes_secret_yaml>",
    "<redacted:api_key_token_auth_pwd_cookie_credential_jwt>",
    "<redacted:github_token>",
    f"<redacted:ghp_{'a' * 36}>",
    f"<redacted:xoxb_{'a' * 20}>",
)


@pytest.mark.parametrize("holder", _HOLDERS)
@pytest.mark.parametrize(
    "around",
    [
        "{h}",
        "x{h}: {v}",
        "{h}={v} and {h}: {v}",
        "password{h}: {v}",
        "{h}password: {v}",
        "secret_{h}_key = {v}",
        "aws_secret_access_key={h}{a}",
        "{h}aws_secret_access_key={a}",
        "token: {h} token: {h}\npassword: {v}",
        "{h} https://u:{v}@host/ {h}",
    ],
)
@pytest.mark.parametrize("padding", [0, 40, 400])
def test_labelled_families_skip_clue_words_inside_placeholders_and_find_the_same(
    holder: str, around: str, padding: int
) -> None:
    # Clue words inside a placeholder list no place a label may start (the
    # sparse path); with padding, the places are sparse, and the value
    # families find what a search at every place finds.
    text = ("n " * padding) + around.format(h=holder, v=_SECRET_VALUE, a=_AWS_SECRET) + " end"
    redactor = Redactor()
    assert redactor.redact_text(text) == redactor._redact_text_exhaustive(text)


@pytest.mark.parametrize("rule", default_rule_set().rules, ids=lambda rule: rule.id)
def test_texts_redacted_once_are_redacted_again_as_a_search_everywhere_does(
    rule: SecretRule,
) -> None:
    redactor = Redactor()
    for name, text in placeholder_texts(rule).items():
        assert redactor.redact_text(text) == redactor._redact_text_exhaustive(text), name


# --- what the confirming pass skips ----------------------------------------------------


def redacted_scanning_every_pass(redactor: Redactor, text: str) -> str:
    """``redact_text`` with every pass scanning its text with the rules
    and the entropy pass afresh, as before the confirming pass skipped a
    text it had found clean."""
    for _ in range(4):
        redacted = redactor._redact_text(text, exhaustive=False)
        if redacted == text:
            break
        text = redacted
    return text


CONFIRMED_TEXTS = {
    "labels repeated": "api_key: " * 40,
    "assignments then a token": "password: hunter2hunter2\n" * 5 + f"ghp_{'a' * 36}\n",
    "an assignment and a rule's match": "token: abc\nstripe: sk_live_4eC39HqLyjWDarjtT1zdp7dc\n",
    "an assignment and entropy": "secret = x\nDB_KEY=Zx8vQ2mP9kL4nR7tY3wE6uI1oA5sD0fG\n",
    "an assignment glued to a label": "password:password:password: x\n",
}


@pytest.mark.parametrize("extra_patterns", [(), (("x", r"@@"),)], ids=["no extras", "an extra"])
@pytest.mark.parametrize(("name", "text"), list(CONFIRMED_TEXTS.items()))
def test_a_confirming_pass_that_skips_a_text_found_clean_redacts_the_same(
    name: str, text: str, extra_patterns: tuple[tuple[str, str], ...]
) -> None:
    redactor = Redactor(extra_patterns=extra_patterns)
    for variant in (text, text.replace(": ", ":@@ "), f"curl -u @@ {text}"):
        assert redactor.redact_text(variant) == redacted_scanning_every_pass(
            Redactor(extra_patterns=extra_patterns), variant
        ), variant


@pytest.mark.parametrize("rule", default_rule_set().rules, ids=lambda rule: rule.id)
def test_adversarial_texts_redact_the_same_with_the_confirming_scan_skipped(
    rule: SecretRule,
) -> None:
    redactor = Redactor()
    for name, text in sampled_texts(rule, 600).items():
        assert redactor.redact_text(text) == redacted_scanning_every_pass(redactor, text), name


def test_a_text_only_the_families_change_is_scanned_by_the_rules_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two passes (the second confirms), one scan: the same text, scanned
    # again, would be found clean again.
    rules = default_rule_set()
    scanned: list[int] = []
    find = type(rules).find

    def counting(self: SecretRuleSet, text: str, *args: Any, **kwargs: Any) -> Any:
        scanned.append(len(text))
        return find(self, text, *args, **kwargs)

    monkeypatch.setattr(type(rules), "find", counting)
    text = "api_key: " * 200
    redacted = Redactor().redact_text(text)
    assert redacted != text
    # (The labels, redacted as pieces, are scanned too: short texts.)
    assert [size for size in scanned if size > 100] == [len(redacted)]


@pytest.mark.parametrize(
    "text",
    [
        "password: x\n@@abcdefgh12\n",
        "@@abcdefgh12 password: x",
        "api_key: api_key: @@abcdefgh12 @@abcdefgh12",
        "@@abcdefgh12",
    ],
)
def test_a_text_an_extra_pattern_changed_after_the_scan_is_scanned_again(text: str) -> None:
    # The extra patterns run after the rules: what they leave (here a
    # placeholder a rule matches from) is a text the rules have not seen.
    rules = SecretRuleSet(
        [SecretRule("after-x", r"(<redacted:x>\w{8,})", ("<redacted:x>",), min_length=20)]
    )

    def redactor() -> Redactor:
        return Redactor(extra_patterns=[("x", "@@")], secret_rules=rules)

    redacted = redactor().redact_text(text)
    assert "<redacted:after_x>" in redacted
    assert redacted == redacted_scanning_every_pass(redactor(), text)


# --- where a match's lazy leading run starts -------------------------------------------


def lazily_led_rules() -> list[SecretRule]:
    return [rule for rule in default_rule_set().rules if split_lazy_prefix(rule.pattern)[1]]


@pytest.mark.parametrize("rule", lazily_led_rules(), ids=lambda rule: rule.id)
def test_a_match_starts_where_its_lazy_leading_run_is_cut(rule: SecretRule) -> None:
    # The fast scan runs the regex without its leading lazy run and finds
    # where that run starts afterwards, reading the text backwards: as far
    # back as the run's class and reach go, never before the text's start,
    # the previous match's end or a placeholder's end. Texts with the run
    # cut by each of these.
    _, prefix, longest = split_lazy_prefix(rule.pattern)
    in_class = compile_bounded(prefix)
    texts = dict(sampled_texts(rule, 600))
    for index, example in enumerate(examples(rule, 2)):
        for before in ("", "x" * 120, "a.b-c_" * 15 + " ", "<redacted:x>", "n-"):
            texts[f"example {index} after {before[:8]!r}"] = before + example.text
            texts[f"example {index} twice after {before[:8]!r}"] = (
                before + example.text + before + example.text
            )
        for glue in ("", "_", ".x-"):
            texts[f"example {index} glued by {glue!r}"] = glue.join([example.text.strip()] * 3)
    found = 0
    for name, text in texts.items():
        barriers = [m.span() for m in re.finditer(r"<redacted:[a-z0-9_]+>", text)]
        cuts = {0, *(end for _, end in barriers)}
        for match, start in rule.matches(text, False, barriers):
            found += 1
            run = text[start : match.start()]
            assert len(run) <= longest and all(in_class.fullmatch(c) for c in run), name
            assert (
                start in cuts or len(run) == longest or not in_class.fullmatch(text[start - 1])
            ), name
            cuts.add(match.end())
    assert found > 0


@pytest.mark.parametrize(
    ("text", "starts"),
    [
        ("key=abcdkey=efgh", [0, 8]),
        ("x.y-key=abcd.key=efgh", [0, 12]),
        ("a" * 60 + "key=abcd", [10]),
        ("<redacted:x>zzkey=abcd", [12]),
        ("ab cd-key=abcd", [3]),
    ],
)
def test_a_lazy_leading_run_stops_at_the_previous_match_and_its_reach(
    text: str, starts: list[int]
) -> None:
    rule = SecretRule("glued", r"[\w.\-]{0,50}?key=(\w{4})", ("key",), anchored=True)
    barriers = [m.span() for m in re.finditer(r"<redacted:[a-z0-9_]+>", text)]
    assert [start for _, start in rule.matches(text, False, barriers)] == starts
    whole = [match.start() for match, _ in rule.matches(text, True, barriers)]
    assert whole == starts


# --- allowlists that hold on no line of a text ---------------------------------------


@pytest.mark.parametrize(
    ("pattern", "reads"),
    [
        ("abc", False),
        ("[a-z]+x{2,5}", False),
        ("(a)(?(1)b|c)", False),
        ("import[ \\t]+{[ \\t\\w,]+}[ \\t]+from", False),
        ("(?i)x(?:y|z)+", False),
        ("^abc", True),
        ("abc$", True),
        ("\\Aabc", True),
        ("a\\bc", True),
        ("(?:a|b\\Z)", True),
        ("(?=x)a", True),
        ("(?<!x)y", True),
        ("(?>a\\B)", True),
        ("(?i)x(?:y|(?:z|\\b))", True),
        ("(?:ab){2,}(?!c)", True),
    ],
)
def test_reads_around_names_anchors_boundaries_and_lookarounds(pattern: str, reads: bool) -> None:
    assert reads_around(pattern) is reads


def parts(text: str) -> list[str]:
    return [text[start:end] for start in range(0, len(text), 7) for end in (start + 9, len(text))]


@pytest.mark.parametrize(("where", "allowlist"), every_allowlist(), ids=lambda v: str(v)[:30])
def test_an_allowlist_said_to_hold_on_no_part_of_a_text_holds_on_none(
    where: str, allowlist: Allowlist
) -> None:
    texts = allowlist_texts()
    texts += [f"x = 1\n{text}\ny = 2" for text in texts[:20]]
    said = 0
    for text in texts:
        if allowlist.holds_on_no_part_of(text):
            said += 1
            for part in parts(text):
                assert not allowlist.allows(part, part, part), (where, text, part)
    assert said or allowlist.stopwords or _any_of(allowlist.regexes).reads_around


LINE_ALLOWED = (
    "RUN --mount=type=secret,id=x api_key=Zq8mK2pLx9vQ7wE4aB\n",
    "import { token } from 'lib'; const api_key = 'Zq8mK2pLx9vQ7wE4aB'\n",
    "api_key=Zq8mK2pLx9vQ7wE4aB\n",
    "api_key=Zq8mK2pLx9vQ7wE4aB\nRUN --mount=type=secret,id=x\n",
    'LICENSE = "MIT" api_key=Zq8mK2pLx9vQ7wE4aB\n',
)


@pytest.mark.parametrize("repeats", [1, 3])
@pytest.mark.parametrize("text", LINE_ALLOWED)
def test_line_allowlists_found_nowhere_are_skipped_without_changing_a_finding(
    text: str, repeats: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = default_rule_set()
    texts = [text * repeats, "".join(LINE_ALLOWED) * repeats]
    fast = [rules.find(each) for each in texts]
    monkeypatch.setattr(Allowlist, "holds_on_no_part_of", lambda self, text: False)
    assert fast == [rules.find(each) for each in texts]
    assert any(finding.rule == "generic-api-key" for found in fast for finding in found)


# --- what the line-gap rules share -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "\n\n",
        "abc",
        "a\nb",
        "a\nb\n",
        "\r\n",
        "a\rb\nc\r\n\r",
        "x\u2028y\n\u0085z\n",
        "é\nü",
    ],
)
def test_line_breaks_are_where_each_break_is(text: str) -> None:
    assert line_breaks(text) == [i for i, char in enumerate(text) if char in "\r\n"]


CURL_TEXTS = (
    'curl -u "alice:Zq8mK2pLx9" -H "Authorization: Bearer Zq8mK2pLx9vQ7wE4" https://x\n',
    "curl https://x \\\n  --user alice:Zq8mK2pLx9 \\\n  --header 'X-Api-Key: Zq8mK2pLx9vQ7wE4'\n",
    "curl\n.\n\nL. --header=\"x-KeY:\t\tro8gqPQw\"\r\ncurl -u 'alice:bcdefgh'\r\n",
)


@pytest.mark.parametrize("repeats", [1, 5])
@pytest.mark.parametrize("text", CURL_TEXTS)
def test_rules_with_one_head_share_its_places_and_the_breaks_without_changing_a_finding(
    text: str, repeats: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = default_rule_set()
    shared = rules.find(text * repeats)
    assert {"curl-auth-user", "curl-auth-header"} <= {finding.rule for finding in shared}
    matches = SecretRule.matches

    def alone(self: SecretRule, *args: Any) -> Any:
        return matches(self, *args[:4])  # no ``shared``: each scan on its own

    monkeypatch.setattr(SecretRule, "matches", alone)
    assert rules.find(text * repeats) == shared


def test_rules_with_other_heads_do_not_share_them() -> None:
    gap = r"\b{}\b(?:.*?|.*?(?:[\r\n]{{1,2}}.*?){{1,5}})[ \t\n\r]--password=(\w{{8,}})"
    rules = SecretRuleSet(
        SecretRule(name, gap.format(name), (name,), min_length=10) for name in ("wget", "curl")
    )
    assert all(split_gap(rule.pattern) is not None for rule in rules.rules)
    text = "wget\n --password=Zq8mK2pLx9\ncurl x\n\n --password=Zq8mK2pLx9\n" * 3
    alone = [finding for rule in rules.rules for finding in SecretRuleSet([rule]).find(text)]
    together = rules.find(text)
    assert {finding.rule for finding in together} == {"wget", "curl"}
    assert sorted(together, key=lambda f: (f.start, f.rule)) == sorted(
        alone, key=lambda f: (f.start, f.rule)
    )


# --- findings that are exactly a placeholder ----------------------------------------------

_FILLED_HOLDERS = (
    "<redacted:password>",
    "<redacted:a1b2c3d4e5f6g7h8i9j0klmnopqrst>",
    "<redacted:ghp_0123456789abcdefghijklmnopqrstuvwxyzAB>",
    "<redacted:xoxb_1234567890_abcdefghij>",
    f"<redacted:{'k' * 70}>",
)


@pytest.mark.parametrize("holder", _FILLED_HOLDERS)
@pytest.mark.parametrize(
    "around",
    [
        '<add key="Password" value="{h}"/>\n',
        '<add key="Password" value="{h}"/>\n<add key="ClearTextPassword" value="{h}" />\n',
        '<add key="Password" value="{h}x"/>\n',
        'password: "{h}"\nsecret = {h}\n',
        "curl -H 'Authorization: Bearer {h}' https://x\n",
    ],
)
@pytest.mark.parametrize("entropy", ["config", "everywhere"])
def test_findings_that_are_exactly_a_placeholder_are_left_out_only_when_they_change_nothing(
    holder: str, around: str, entropy: EntropyScope
) -> None:
    # A rule whose secret may be any text matches each placeholder of a text
    # redacted once; such a finding is judged only when another starts inside
    # its placeholder (an entropy finding in a high-entropy keyword, a token
    # in it), where the merged span takes its keyword. The exhaustive
    # redaction judges every finding.
    redactor = Redactor(entropy=entropy)
    for text in (around.format(h=holder), around.format(h=holder) * 3):
        assert redactor.redact_text(text) == redactor._redact_text_exhaustive(text), text


def test_a_text_redacted_once_does_not_judge_again_its_placeholders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rules = default_rule_set()
    judged: list[str] = []
    judge = SecretRuleSet._judge

    def counting(self: SecretRuleSet, rule: SecretRule, *args: Any) -> Any:
        judged.append(rule.id)
        return judge(self, rule, *args)

    text = Redactor().redact_text('<add key="Password" value="hunter2hunter2"/>\n' * 50)
    assert text.count("<redacted:nuget_config_password>") == 50
    monkeypatch.setattr(SecretRuleSet, "_judge", counting)
    assert Redactor(secret_rules=rules).redact_text(text) == text
    assert "nuget-config-password" not in judged


@pytest.mark.parametrize("tail", ["xxxxxx", "xxxxxx yyy", 'xxxxxx"'])
def test_a_placeholder_finding_names_the_span_a_finding_inside_it_runs_on_from(tail: str) -> None:
    # Rule "a" matches the placeholder exactly; rule "b" from inside it on
    # past its end: the merged span is named by "a", the first by start, so
    # "a" must be judged, not left out as a finding that changes nothing.
    rules = SecretRuleSet(
        [
            SecretRule("a", r'value="(<[^>]*>)', ("value",), min_length=8),
            SecretRule("b", r'value="<redacted:(\w+>x+)', ("value",), min_length=8),
        ]
    )
    redactor = Redactor(secret_rules=rules, entropy="off")
    text = f'value="<redacted:abc>{tail}'
    assert redactor.redact_text(text) == redactor._redact_text_exhaustive(text)
    assert "<redacted:abc><redacted:a>" in redactor.redact_text(text)
