"""Generated secrets for every vendored gitleaks rule, deterministic.

``examples(rule)`` draws strings that fully match a rule's regex, from a
random generator seeded by the rule's id: a walk of the regex's parse tree
that picks a branch, a repeat count and a character of each class at
random, so the secrets are random text (high entropy, as real keys are),
not the simplest match. Each example is kept only when the regex matches
it whole and the rule itself, with its entropy threshold and allowlists,
reports a secret in it: that secret is what must never be stored.
"""

from __future__ import annotations

import random
import re
import string
import zlib
from dataclasses import dataclass

try:  # Python 3.11+
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from pytest_toolguard.secret_rules import SecretRule, SecretRuleSet, default_rule_set

# Characters classes are drawn from: printable ASCII and the whitespace the
# rules' separators use (no newline but where a class asks for it).
ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \t\n"
EXAMPLES_PER_RULE = 3
TRIES = 60
LONGEST_EXTRA = 6
"""An open repeat (``{40,}``, ``+``) runs at most this far past its minimum."""

_C = sre_constants


@dataclass(frozen=True)
class Example:
    rule: str
    text: str
    secret: str


def _category(category: object, char: str) -> bool:
    tests = {
        _C.CATEGORY_DIGIT: char.isdigit(),
        _C.CATEGORY_NOT_DIGIT: not char.isdigit(),
        _C.CATEGORY_WORD: char.isalnum() or char == "_",
        _C.CATEGORY_NOT_WORD: not (char.isalnum() or char == "_"),
        _C.CATEGORY_SPACE: char in " \t\n\r\f\v",
        _C.CATEGORY_NOT_SPACE: char not in " \t\n\r\f\v",
    }
    return tests[category]


def _in_class(items: list[tuple[object, object]], char: str, ignore_case: bool) -> bool:
    negate = False
    found = False
    variants = {char, char.lower(), char.upper()} if ignore_case else {char}
    for op, value in items:
        if op is _C.NEGATE:
            negate = True
        elif op is _C.LITERAL:
            found |= chr(value) in variants  # type: ignore[arg-type]
        elif op is _C.RANGE:
            low, high = value  # type: ignore[misc]
            found |= any(low <= ord(v) <= high for v in variants)
        elif op is _C.CATEGORY:
            found |= _category(value, char)
    return found != negate


_CLASS_CHARS: dict[tuple[int, bool], list[str]] = {}


def _class_chars(items: list[tuple[object, object]], ignore_case: bool) -> list[str]:
    key = (id(items), ignore_case)  # parse trees are cached: ids are stable
    if key not in _CLASS_CHARS:
        _CLASS_CHARS[key] = [c for c in ALPHABET if _in_class(items, c, ignore_case)]
    return _CLASS_CHARS[key]


_PARSED: dict[str, sre_parse.SubPattern] = {}


class _Generator:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.groups: dict[int, str] = {}

    def emit(self, pattern: sre_parse.SubPattern, ignore_case: bool) -> str:
        return "".join(self.item(op, value, ignore_case) for op, value in pattern)

    def item(self, op: object, value: object, ignore_case: bool) -> str:  # noqa: C901
        pick = self.random.choice
        if op is _C.LITERAL:
            char = chr(value)  # type: ignore[arg-type]
            return pick([char.lower(), char.upper()]) if ignore_case else char
        if op is _C.NOT_LITERAL:
            return pick([c for c in ALPHABET if c != chr(value) and c != "\n"])  # type: ignore[arg-type]
        if op is _C.ANY:
            # Often a dot, as most rules mean it (an unescaped dot in a host name).
            return "." if self.random.random() < 0.5 else pick(string.ascii_letters + string.digits)
        if op is _C.IN:
            return pick(_class_chars(value, ignore_case))
        if op is _C.CATEGORY:
            return pick([c for c in ALPHABET if _category(value, c)])
        if op in (_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", None)):
            low, high, sub = value  # type: ignore[misc]
            high = low + LONGEST_EXTRA if high is _C.MAXREPEAT else min(high, low + LONGEST_EXTRA)
            count = self.random.randint(low, high)
            return "".join(self.emit(sub, ignore_case) for _ in range(count))
        if op is _C.SUBPATTERN:
            group, add, remove, sub = value  # type: ignore[misc]
            case = (ignore_case or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE
            text = self.emit(sub, case)
            if group is not None:
                self.groups[group] = text
            return text
        if op is getattr(_C, "ATOMIC_GROUP", None):
            return self.emit(value, ignore_case)  # type: ignore[arg-type]
        if op is _C.BRANCH:
            _, branches = value  # type: ignore[misc]
            return self.emit(pick(branches), ignore_case)
        if op is _C.GROUPREF:
            return self.groups.get(value, "")  # type: ignore[arg-type]
        if op in (_C.AT, _C.ASSERT, _C.ASSERT_NOT):
            return ""  # zero-width: the fullmatch check decides
        raise NotImplementedError(f"{op} in a rule's regex")


def _draw(rule: SecretRule, seed: int) -> str:
    if rule.pattern not in _PARSED:
        _PARSED[rule.pattern] = sre_parse.parse(rule.pattern, re.ASCII)
    parsed = _PARSED[rule.pattern]
    ignore_case = bool(parsed.state.flags & re.IGNORECASE)
    return _Generator(seed).emit(parsed, ignore_case)


def examples(rule: SecretRule, count: int = EXAMPLES_PER_RULE) -> list[Example]:
    """Up to ``count`` generated texts the rule reports, each with its secret."""
    alone = SecretRuleSet([rule], default_rule_set().allowlist)
    regex = rule.regex()
    found: list[Example] = []
    seed = zlib.crc32(rule.id.encode())
    for attempt in range(TRIES):
        drawn = _draw(rule, seed + attempt)
        if not regex.fullmatch(drawn):
            continue
        # A rule runs where one of its keywords is: when the match holds
        # none (the keyword names the provider elsewhere), a line names it.
        lowered = drawn.lower()
        if any(word in lowered for word in rule.keywords):
            text = drawn
        else:
            text = f"# {rule.keywords[0]}\n{drawn}"
        findings = alone.find(text, exhaustive=True)
        if len(findings) != 1:
            continue
        secret = text[findings[0].start : findings[0].end]
        if any(example.secret == secret for example in found):
            continue
        found.append(Example(rule.id, text, secret))
        if len(found) == count:
            break
    return found


def all_examples() -> list[Example]:
    """Every rule's examples, in rule order."""
    return [example for rule in default_rule_set().rules for example in examples(rule)]
