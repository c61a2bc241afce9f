"""Adversarial texts for redaction, deterministic: long texts built to make
a backtracking regex engine scan far from many starts.

For every vendored gitleaks rule, from its keywords and its generated
examples (``secret_examples``), with no newline unless said:

* the keyword repeated, glued and spaced (many starts, none completes);
* an example cut short before its end, repeated (every start goes far
  into the pattern, then fails);
* an example whose last character is repeated to the end (one start that
  runs through an open repeat, then fails or holds);
* an example repeated, one per line and all on one line (many matches).

And generic ones for the hand-written patterns, the entropy pass and the
key rules: long runs of every label, separator, quote and scheme they
know, a JSON object with very many keys, a long line of token characters.
``corpus(size)`` gives them all, each ``size`` characters long, by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from secret_examples import examples

from pytest_toolguard.secret_rules import SecretRule, default_rule_set

GENERIC_UNITS = (
    "curl -u ",
    "curl -H ",
    "curl --user=",
    "curl\n",
    "password=",
    "password:",
    "api_key: ",
    '"token": "',
    "token ",
    "secret",
    "aws_secret_access_key=",
    "Bearer ",
    "Basic ",
    "https://",
    "https://a:",
    "a:b@",
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN ",
    "eyJ",
    "eyJabcdefgh.",
    "ghp_",
    "xoxb-",
    "xapp-1-",
    "AKIA",
    "hooks.slack.com/services/",
    "= ",
    ": ",
    ":",
    "=",
    '"',
    "'",
    "\\",
    "\\n",
    "<redacted:x>",
    "kind: secret\ndata:\n",
    '<add key="Password" value="',
    "<",
    "a",
    "A1b2C3d4",
    "\n",
)
"""Units repeated to make the generic texts: labels, prefixes, separators,
quotes and schemes the patterns and rules look for."""


def _fill(unit: str, size: int) -> str:
    return (unit * (size // max(len(unit), 1) + 1))[:size]


def rule_texts(rule: SecretRule, size: int) -> Iterator[tuple[str, str]]:
    """``(name, text)``: the adversarial texts built for ``rule``."""
    for keyword in rule.keywords:
        yield f"{rule.id}: keyword glued", _fill(keyword, size)
        yield f"{rule.id}: keyword spaced", _fill(keyword + " ", size)
    for number, example in enumerate(examples(rule, 2)):
        text = example.text
        cut = text.rfind(example.secret) + len(example.secret) - 1
        yield f"{rule.id}: example {number} cut short", _fill(text[:cut], size)
        yield f"{rule.id}: example {number} cut short, spaced", _fill(text[:cut] + " ", size)
        yield f"{rule.id}: example {number} halved", _fill(text[: max(1, cut // 2)], size)
        yield (
            f"{rule.id}: example {number} open run",
            (text[:cut] + _fill(text[cut - 1], size))[: size - 1] + "\x00",
        )
        yield f"{rule.id}: example {number} per line", _fill(text + "\n", size)
        yield f"{rule.id}: example {number} one line", _fill(text.replace("\n", " ") + " ", size)


def generic_texts(size: int) -> Iterator[tuple[str, str]]:
    """``(name, text)``: texts for the hand-written patterns, the entropy
    pass, the key rules and JSON."""
    for unit in GENERIC_UNITS:
        yield f"generic: {unit!r} repeated", _fill(unit, size)
    yield "generic: one long token", _fill("A1b2C3d4e5F6g7H8i9J0", size)
    yield "generic: key=long token", "key=" + _fill("A1b2C3d4e5F6g7H8i9J0", size - 4)
    keys = size // 12
    many = json.dumps({f"k{index:07d}": index for index in range(keys)}, separators=(",", ":"))
    yield "generic: JSON with many keys", many[:size]


def corpus(size: int) -> dict[str, str]:
    """Every adversarial text, ``size`` characters each, by name."""
    texts: dict[str, str] = {}
    for rule in default_rule_set().rules:
        texts.update(rule_texts(rule, size))
    texts.update(generic_texts(size))
    return texts
