"""The vendored gitleaks rules: every rule compiles, redacts a generated
secret of its own, and ordinary identifiers stay visible.

The examples (``secret_examples.py``) are drawn from each rule's regex by a
seeded generator; the reference a rule is judged by is the rule run alone,
with its whole regex and plain keyword checks (``exhaustive=True``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import warnings
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secret_examples import all_examples, examples

from pytest_toolguard.redaction import Redactor, placeholder
from pytest_toolguard.secret_regex import UnsupportedRegex, split_lazy_prefix, translate_go_regex
from pytest_toolguard.secret_rules import RULES_FILE, SecretRule, SecretRuleSet, default_rule_set

RULES = default_rule_set().rules
RULE_IDS = [rule.id for rule in RULES]
EXAMPLES = all_examples()
BY_ID = {rule.id: rule for rule in RULES}


def alone(rule: SecretRule) -> SecretRuleSet:
    return SecretRuleSet([rule], default_rule_set().allowlist)


def reported(rule: SecretRule, text: str, secret: str) -> bool:
    """The rule, run alone as the reference, reports ``secret`` in ``text``."""
    return any(
        text[finding.start : finding.end] == secret
        for finding in alone(rule).find(text, exhaustive=True)
    )


# --- the file: its rules, source and licence ---------------------------------------


def test_the_rules_file_names_its_source_version_and_licence() -> None:
    data = json.loads(resources.files("pytest_toolguard").joinpath(RULES_FILE).read_text("utf-8"))
    source = data["source"]
    assert source["project"] == "gitleaks" and source["licence"] == "MIT"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["version"].startswith("v8.")
    licence = resources.files("pytest_toolguard").joinpath(source["licence_file"])
    assert "MIT License" in licence.read_text("utf-8")


def test_the_rule_set_has_the_gitleaks_rules() -> None:
    assert len(RULES) >= 200
    assert len(set(RULE_IDS)) == len(RULE_IDS)
    assert {"generic-api-key", "stripe-access-token", "openai-api-key"} <= set(RULE_IDS)


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_every_rule_compiles_without_warnings(rule: SecretRule) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Possible nested set" means a class was misread
        re.compile(rule.pattern, re.ASCII)
        rest, _, _ = split_lazy_prefix(rule.pattern)
        re.compile(rest, re.ASCII)
        for allowlist in rule.allowlists:
            for regex in allowlist.regexes:
                re.compile(regex, re.ASCII)
    assert rule.keywords and all(word == word.lower() for word in rule.keywords)
    assert re.fullmatch(r"[a-z0-9_]+", rule.keyword)


# --- translating Go's RE2 syntax ---------------------------------------------------------

TRANSLATIONS = [
    # a flag in mid-pattern applies to the end of its group, across "|"
    (r"ab(?i)cd", "ab(?i:cd)"),
    (r"(?:x(?i)y|z)w", "(?:x(?i:y)|(?i:z))w"),
    (r"\b(p8e-(?i)[a-z0-9]{32})", r"\b(p8e-(?i:[a-z0-9]{32}))"),
    (r"(?i)abc", "(?i)abc"),  # leading: global in both
    (r"a(?-i)b", "a(?-i:b)"),
    # the end of the text
    (r"abc\z", r"abc\Z"),
    (r"abc$", r"abc\Z"),
    # classes
    (r"[[:alnum:]]{14}", "[0-9A-Za-z]{14}"),
    (r"[\w.-]", r"[\w.\-]"),
    (r"[a-z-_]", r"[a-z\-_]"),
    (r"[^]a]", r"[^\]a]"),
    (r"[&|~]", r"[\&\|\~]"),
    # other spellings
    (r"a{,3}", r"a\{,3}"),
    (r"\x{41}", r"\U00000041"),
    (r"(?<name>x)", "(?P<name>x)"),
    (r"\Q.*\E", r"\.\*"),
]


@pytest.mark.parametrize(("go", "python"), TRANSLATIONS)
def test_go_syntax_is_translated(go: str, python: str) -> None:
    assert translate_go_regex(go) == python


@pytest.mark.parametrize(
    ("go", "text", "matches"),
    [
        (r"ab(?i)cd", "abCD", True),
        (r"ab(?i)cd", "ABcd", False),
        (r"(?:x(?i)y|z)w", "Zw", True),
        (r"[[:alnum:]]+", "a:b", False),
        (r"x$", "x\n", False),  # Go's "$" is the end; Python's also takes a last newline
    ],
)
def test_translated_regex_matches_as_go_does(go: str, text: str, matches: bool) -> None:
    assert (re.fullmatch(translate_go_regex(go), text, re.ASCII) is not None) is matches


@pytest.mark.parametrize("go", [r"\pL", r"\p{Greek}", r"(?m)^a", r"(?U)a+", r"a\C", r"(a"])
def test_syntax_without_a_translation_is_refused(go: str) -> None:
    with pytest.raises(UnsupportedRegex):
        translate_go_regex(go)


# --- every rule redacts its generated secrets ---------------------------------------------


def contexts(text: str) -> list[str]:
    """``text`` as written alone, in a line of notes, as a JSON string value,
    as a YAML value and between words."""
    return [
        text,
        f"notes:\n{text}\nend\n",
        json.dumps({"value": text}),
        f"value: {json.dumps(text)}\n",
        f"see {text} here",
    ]


def test_every_rule_has_a_generated_example() -> None:
    covered = {example.rule for example in EXAMPLES}
    assert covered == set(RULE_IDS)


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_a_rules_generated_secrets_are_redacted_wherever_it_finds_them(rule: SecretRule) -> None:
    redactor = Redactor()
    for example in examples(rule):
        tried = [text for text in contexts(example.text) if reported(rule, text, example.secret)]
        assert tried  # at least the example alone
        for text in tried:
            once = redactor.redact_text(text)
            assert example.secret not in once
            assert redactor.redact_text(once) == once


SHORTEST_CHECKED = 8
"""Secrets drawn shorter than this (a rule's lone character class) may occur
in the text the redactor keeps: they are not looked for."""


@settings(
    max_examples=5,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_any_secret_hypothesis_draws_from_a_rule_is_redacted(rule: SecretRule, data) -> None:
    drawn = data.draw(st.from_regex(re.compile(rule.pattern, re.ASCII), fullmatch=True))
    named = any(word in drawn.lower() for word in rule.keywords)
    text = drawn if named else f"{rule.keywords[0]}\n{drawn}"
    redacted = Redactor().redact_text(text)
    for finding in alone(rule).find(text, exhaustive=True):
        secret = text[finding.start : finding.end]
        if len(secret) >= SHORTEST_CHECKED:
            assert secret not in redacted


def test_each_secret_gets_its_rules_placeholder() -> None:
    text = "stripe: sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" + " end"
    assert Redactor().redact_text(text) == f"stripe: {placeholder('stripe_access_token')} end"


def test_the_hand_written_families_keep_their_placeholders() -> None:
    # gitleaks has an AWS rule too; the older family's name stays.
    assert Redactor().redact_text("id AKIAQ3EGRT7KXN5ZP2WM") == "id <redacted:aws_access_key>"


# --- the fast way finds what the reference finds --------------------------------------


def mixed_texts() -> list[str]:
    """Examples glued to each other and to prose, placeholders and near misses."""
    texts = [example.text for example in EXAMPLES]
    for first, second in zip(EXAMPLES, EXAMPLES[7:], strict=False):
        texts.append(f"{first.text} {second.text}")
        texts.append(f"<redacted:api_key> {first.text}\n{second.text}")
    texts += [
        "The api key rotation: see the token docs; auth is via access key and secret.",
        "curl -u admin:changeit https://x.test && curl -H 'Authorization: Bearer x' y",
        "<redacted:api_key> token=Zq8Rk3Pw1Yt6Hn4Lc9Vb2Mx7 and key: <redacted:token>",
    ]
    return texts


def test_keyword_pass_and_trimmed_regexes_find_what_the_whole_regexes_find() -> None:
    rules = default_rule_set()
    differing = [t for t in mixed_texts() if rules.find(t) != rules.find(t, exhaustive=True)]
    assert differing == []


def test_the_regex_keyword_pass_finds_what_the_automaton_finds() -> None:
    accelerated, plain = default_rule_set(accelerated=True), default_rule_set(accelerated=False)
    texts = mixed_texts() + ["\udc80 key", "İstanbul KEY", "ſecret", "\u212aey"]
    differing = [
        t for t in texts if accelerated.candidates(t.lower()) != plain.candidates(t.lower())
    ]
    assert differing == []


def test_a_rule_trimmed_of_its_lazy_run_gives_the_same_matches_and_starts() -> None:
    trimmed = [rule for rule in RULES if split_lazy_prefix(rule.pattern)[1]]
    assert len(trimmed) >= 90
    for rule in trimmed:
        for example in examples(rule):
            for text in (example.text, f"x.y-z {example.text} {example.text}"):
                fast = [(m.span(), start) for m, start in rule.matches(text)]
                whole = [(m.span(), start) for m, start in rule.matches(text, exhaustive=True)]
                assert [start for _, start in fast] == [start for _, start in whole], rule.id
                assert [span[1] for span, _ in fast] == [span[1] for span, _ in whole], rule.id


def test_a_match_never_starts_inside_a_placeholder() -> None:
    # "<redacted:api_key>" holds gitleaks' label "key" and its XML separator ">".
    text = "<redacted:api_key> Zq8Rk3Pw1Yt6Hn4Lc9Vb2Mx7"
    assert Redactor().redact_text(text) == text


def test_a_secret_after_a_placeholder_is_still_found() -> None:
    text = "<redacted:api_key> creds=Zq8Rk3Pw1Yt6Hn4Lc9Vb2Mx7"
    assert Redactor().redact_text(text) == "<redacted:api_key> creds=<redacted:generic_api_key>"


def test_a_repeated_group_is_not_taken_for_the_secret() -> None:
    # gitleaks' first group here is the last "xxxx-" of ([a-z0-9]{4}-){3}.
    hook = (
        "https://acme.webhook.office.com/webhookb2/1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d@"
        "6d5c4b3a-2f1e-0d9c-8b7a-6f5e4d3c2b1a/IncomingWebhook/"
        "0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d/9c8b7a6f-5e4d-3c2b-1a0f-9e8d7c6b5a4f"
    )
    assert Redactor().redact_text(f"post to {hook} now") == (
        "post to <redacted:microsoft_teams_webhook> now"
    )


def test_an_empty_rule_set_finds_nothing() -> None:
    redactor = Redactor(secret_rules=SecretRuleSet([]), entropy="off")
    text = "stripe: sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    assert redactor.redact_text(text) == text


# --- false positives: identifiers that look random stay visible -------------------------

GIT_SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
SHA512_INTEGRITY = "sha512-" + base64.b64encode(hashlib.sha512(b"left-pad").digest()).decode()
SHA256_HEX = hashlib.sha256(b"requests-2.32.3").hexdigest()
BASE64_TEXT = base64.b64encode(b"the quick brown fox jumps over the lazy dog").decode()

VISIBLE = [
    ("git-sha", f"commit {GIT_SHA}"),
    ("git-sha-assigned", f"commit: {GIT_SHA}\nparent = {GIT_SHA}"),
    ("git-sha-json", json.dumps({"sha": GIT_SHA, "head": GIT_SHA})),
    ("uuid", f"request {UUID} done"),
    ("uuid-assigned", f"REQUEST={UUID}\nrequest_id: {UUID}"),
    ("base64-text", f"note: {BASE64_TEXT}"),
    ("base64-text-json", json.dumps({"payload": BASE64_TEXT})),
    (
        "package-lock",
        json.dumps(
            {
                "node_modules/left-pad": {
                    "version": "1.3.0",
                    "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",
                    "integrity": SHA512_INTEGRITY,
                }
            },
            indent=2,
        ),
    ),
    ("yarn-lock", f'left-pad@^1.3.0:\n  version "1.3.0"\n  integrity {SHA512_INTEGRITY}\n'),
    (
        "poetry-lock",
        f'[[package]]\nname = "requests"\nversion = "2.32.3"\nfiles = [\n'
        f'    {{file = "requests-2.32.3.tar.gz", hash = "sha256:{SHA256_HEX}"}},\n]\n',
    ),
    ("uv-lock", f'sdist = {{ url = "https://x.test/r.tar.gz", hash = "sha256:{SHA256_HEX}" }}'),
    ("cargo-lock", f'[[package]]\nname = "serde"\nchecksum = "{SHA256_HEX}"\n'),
    ("go-sum", "golang.org/x/text v0.3.7 h1:olpwvP2KacW1ZWvsR7uQhoyTYvKAupfQrRGBFM352Gk=\n"),
    ("requirements-hash", f"requests==2.32.3 --hash=sha256:{SHA256_HEX}\n"),
    ("docker-digest", f"image: python@sha256:{SHA256_HEX}\n"),
    ("identifier", "class_name: AbstractSingletonProxyFactoryBean\nmodule = com.example.app.Main"),
    ("path", "source: src/components/UserProfile2.tsx\nout=../../build/assets/main.js"),
    ("version", "release: 1.2.3-beta.4+build.567890\nTLS = TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("notes", "- 2026-01-05: reviewed the feedback export, 35 rows, next step: report"),
    ("prose", "The api key rotation is due; see the token docs and the auth guide."),
]


@pytest.mark.parametrize(("name", "text"), VISIBLE, ids=[name for name, _ in VISIBLE])
def test_identifiers_digests_and_encoded_text_stay_visible(name: str, text: str) -> None:
    assert Redactor().redact_text(text) == text


# --- entropy: long random values given to any name, in config syntax ------------------

RANDOM = "Zq8Rk3Pw1Yt6Hn4Lc9Vb2Mx7Qe5Sd0Fg"  # 32 characters, 4.9 bits each

CONFIG_LINES = [
    ("env", f"STRIPE_LIVE={RANDOM}\n"),
    ("env-export", f'export SIGNING="{RANDOM}"\n'),
    ("yaml", f"service:\n  signing: {RANDOM}  # rotated monthly\n"),
    ("yaml-list", f"- signing: '{RANDOM}'\n"),
    ("json", json.dumps({"service": {"signing": RANDOM}}, indent=2)),
    ("json-inline", json.dumps({"a": 1, "signing": RANDOM})),
    ("toml", f'[service]\nsigning = "{RANDOM}"\n'),
    ("ini", f"[service]\nsigning={RANDOM}\n"),
]


@pytest.mark.parametrize(("name", "text"), CONFIG_LINES, ids=[name for name, _ in CONFIG_LINES])
def test_a_high_entropy_value_given_to_a_name_in_config_syntax_is_redacted(
    name: str, text: str
) -> None:
    redacted = Redactor().redact_text(text)
    assert RANDOM not in redacted
    assert placeholder("high_entropy") in redacted


def test_a_high_entropy_value_in_prose_stays_by_default() -> None:
    text = f"the build printed {RANDOM} and stopped"
    assert Redactor().redact_text(text) == text


def test_entropy_everywhere_takes_high_entropy_values_in_prose_too() -> None:
    text = f"the build printed {RANDOM} and stopped"
    redacted = Redactor(entropy="everywhere").redact_text(text)
    assert redacted == f"the build printed {placeholder('high_entropy')} and stopped"


def test_entropy_off_leaves_config_values_to_the_rules() -> None:
    text = f"SIGNING={RANDOM}\n"
    assert Redactor(entropy="off").redact_text(text) == text


def test_an_unknown_entropy_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="entropy"):
        Redactor(entropy="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["commit", "sha256", "integrity", "request_id", "image_url"])
def test_a_name_that_says_what_the_value_is_keeps_it_visible(name: str) -> None:
    text = f"{name}: {RANDOM}\n"
    assert Redactor().redact_text(text) == text


# --- JSON text: an escape glues a secret to a letter ---------------------------------


@pytest.mark.parametrize(
    "secret",
    [
        "AKIAQ3EGRT7KXN5ZP2WM",
        "ghp_Xq7Lk2Vb9Nm4Rt8Yw1Zp5Hc3Jd6Fg0Sa2Qe7",
        "A3-CKIV6M-8GL6ZC-6SL2C-NPG42-1OAGY-OEJ2A",
    ],
)
def test_a_secret_after_an_escape_in_json_text_is_redacted(secret: str) -> None:
    """Arguments sent as JSON text were stored in cassettes as written: in
    ``"x\\nAKIA..."`` the ``n`` of the escape and the key make one word, so
    no ``\\b`` pattern matched."""
    text = json.dumps({"notes": f"line one\n{secret}\tend", "n": 1})
    redacted = Redactor().redact_text(text)
    assert secret not in redacted
    assert json.loads(redacted)["n"] == 1


def test_json_text_stays_json_and_idempotent_after_redaction() -> None:
    text = json.dumps(
        {"a": "x\nAKIAQ3EGRT7KXN5ZP2WM", "b": ["é\tstripe sk_live_4eC39HqLyjWDarjtT1zdp7dc"]}
    )
    once = Redactor().redact_text(text)
    assert json.loads(once) == {
        "a": "x\n<redacted:aws_access_key>",
        "b": ["é\tstripe <redacted:stripe_access_token>"],
    }
    assert Redactor().redact_text(once) == once


def test_an_anchored_rule_matches_only_where_one_of_its_keywords_starts() -> None:
    """What lets the fast way try anchored rules at the keywords' places
    alone, checked on every generated example."""
    anchored = [rule for rule in RULES if rule.anchored]
    assert len(anchored) >= 150
    for rule in anchored:
        trimmed = re.compile(split_lazy_prefix(rule.pattern)[0], re.ASCII)
        for example in examples(rule):
            for match in trimmed.finditer(example.text):
                start = example.text[match.start() :].lower()
                assert any(start.startswith(word) for word in rule.keywords), rule.id
