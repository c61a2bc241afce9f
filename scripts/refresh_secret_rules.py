"""Refresh pytest_toolguard/secret_rules.json from a local copy of gitleaks.

    python scripts/refresh_secret_rules.py PATH/TO/gitleaks/config/gitleaks.toml \\
        --licence PATH/TO/gitleaks/LICENSE --version v8.30.0-27-gb58d3f10 --commit <sha>

When the file lies in a git checkout of gitleaks, ``--version``,
``--commit`` and ``--date`` default to what ``git describe`` and ``git log``
say there. Nothing is fetched: get the copy with git yourself.

Each rule's regex is translated from Go's RE2 syntax
(``pytest_toolguard.secret_rules.translate_go_regex``) and compiled; a
rule whose regex has no translation stops the refresh with its id, so a new
construct in a new gitleaks release is seen, not dropped. Rules that match
file names only (no regex) are listed under ``skipped``. The licence is
copied beside the rules. Run the tests afterwards: every rule must compile
and redact a generated secret (tests/test_secret_rules.py).

Needs Python 3.11+ (tomllib); the package itself reads only the JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_toolguard.secret_regex import (  # noqa: E402
    UnsupportedRegex,
    split_lazy_prefix,
    translate_go_regex,
)
from pytest_toolguard.secret_rules import RULES_FILE  # noqa: E402

PACKAGE = ROOT / "pytest_toolguard"
LICENCE_FILE = "secret_rules.LICENSE.txt"
UPSTREAM = "https://github.com/gitleaks/gitleaks"


def _git(directory: Path, *arguments: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *arguments],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip() or None


def _regex(pattern: str, where: str) -> str:
    try:
        translated = translate_go_regex(pattern)
        re.compile(translated, re.ASCII)
    except (UnsupportedRegex, re.error) as error:
        raise SystemExit(f"{where}: {error}\n  {pattern}") from error
    return translated


def _parser() -> Any:
    try:
        import re._parser as parser
    except ImportError:  # Python 3.10
        import sre_parse as parser  # type: ignore[no-redef]
    return parser


def _shortest_match(pattern: str) -> int:
    """The fewest characters a match of ``pattern`` can take."""
    low, _ = _parser().parse(pattern, re.ASCII).getwidth()
    return int(low)


def _constants() -> Any:
    try:
        import re._constants as constants
    except ImportError:  # Python 3.10
        import sre_constants as constants  # type: ignore[no-redef]
    return constants


_PRINTABLE = [chr(code) for code in range(32, 127)] + ["\t", "\n", "\r"]
_WIDEST_CLASS = 4
"""A class of more (lowercased) characters than this ends a literal start."""


def _class_chars(items: Any, ignore_case: bool) -> set[str] | None:
    """The lowercased characters a class matches, or None for a wide class."""
    c = _constants()

    def member(char: str) -> bool:
        variants = {char, char.lower(), char.upper()} if ignore_case else {char}
        found = False
        for op, value in items:
            if op is c.LITERAL:
                found |= chr(value) in variants
            elif op is c.RANGE:
                found |= any(value[0] <= ord(v) <= value[1] for v in variants)
        return found

    if any(op is c.CATEGORY or op is c.NEGATE for op, _ in items):
        return None  # \w, \d, \s, [^...]: wide
    chars = {char.lower() for char in _PRINTABLE if member(char)}
    return chars if len(chars) <= _WIDEST_CLASS else None


def _anchored(pattern: str, keywords: list[str]) -> bool:
    """True when every match of ``pattern`` starts with one of ``keywords``
    (in lowercase): the rule can then be tried at the keywords' places
    alone. Decided on the parse tree: each way through the pattern's start,
    zero-width parts skipped, must spell a keyword before it reaches a
    wide class, a repeat of unknown length or the keyword's length."""
    c = _constants()
    longest = max(map(len, keywords))
    parsed = _parser().parse(pattern, re.ASCII)
    ignore_case = bool(parsed.state.flags & re.IGNORECASE)

    def walk(items: list[tuple[Any, Any, bool]], path: str, budget: list[int]) -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False  # too many ways: not worth proving
        if any(path.startswith(word) for word in keywords):
            return True
        if len(path) >= longest or not items:
            return False
        (op, value, case), rest = items[0], items[1:]
        if op is c.LITERAL:
            return walk(rest, path + chr(value).lower(), budget)
        if op is c.IN:
            chars = _class_chars(value, case)
            return chars is not None and all(walk(rest, path + ch, budget) for ch in chars)
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            return walk(rest, path, budget)
        if op is c.SUBPATTERN:
            _, add, remove, sub = value
            inner = (case or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE
            return walk([(o, v, inner) for o, v in sub] + rest, path, budget)
        if op is c.BRANCH:
            return all(
                walk([(o, v, case) for o, v in alt] + rest, path, budget) for alt in value[1]
            )
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            low, high, sub = value
            once = [(o, v, case) for o, v in sub]
            if high is not c.MAXREPEAT and high > 4:
                return False
            if low >= 1:
                again = [] if high == 1 else [(op, (low - 1, high - 1, sub), case)]
                return walk(once + again + rest, path, budget)
            more = [] if high == 1 else [(op, (0, high - 1, sub), case)]
            return walk(rest, path, budget) and walk(once + more + rest, path, budget)
        return False

    return walk([(op, value, ignore_case) for op, value in parsed], "", [20000])


def _repeated_groups(pattern: str) -> list[int]:
    """The capturing groups of ``pattern`` inside a repeat: such a group holds
    only its last repetition (``([a-z0-9]{4}-){3}``), never the secret."""
    try:
        import re._constants as constants
        import re._parser as parser
    except ImportError:  # Python 3.10
        import sre_constants as constants  # type: ignore[no-redef]
        import sre_parse as parser  # type: ignore[no-redef]

    found: list[int] = []

    def walk(items: Any, repeated: bool) -> None:
        for op, value in items:
            if op in (constants.MAX_REPEAT, constants.MIN_REPEAT):
                low, high, sub = value
                walk(sub, repeated or high > 1)
            elif op is constants.SUBPATTERN:
                group, _, _, sub = value
                if group is not None and repeated:
                    found.append(group)
                walk(sub, repeated)
            elif op is constants.BRANCH:
                for branch in value[1]:
                    walk(branch, repeated)
            elif op in (constants.ASSERT, constants.ASSERT_NOT):
                walk(value[1], repeated)

    walk(parser.parse(pattern, re.ASCII), False)
    return sorted(found)


def _allowlist(entry: dict[str, Any], where: str) -> dict[str, Any]:
    allowlist: dict[str, Any] = {}
    if entry.get("regexes"):
        allowlist["regexes"] = [_regex(regex, where) for regex in entry["regexes"]]
    if entry.get("stopwords"):
        allowlist["stopwords"] = sorted({word.lower() for word in entry["stopwords"]})
    target = entry.get("regexTarget", "secret")
    if target != "secret":
        allowlist["target"] = target
    if entry.get("condition", "OR").upper() == "AND":
        allowlist["condition"] = "and"
    if entry.get("paths") or entry.get("commits"):
        allowlist["scoped"] = True
    return allowlist


def convert(config: dict[str, Any], source: dict[str, str]) -> dict[str, Any]:
    """The JSON document for ``config`` (gitleaks.toml, parsed)."""
    rules: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for rule in config["rules"]:
        rule_id = rule["id"]
        if "regex" not in rule:
            skipped.append({"id": rule_id, "reason": "matches file names only"})
            continue
        keywords = sorted({word.lower() for word in rule.get("keywords", ())})
        if not keywords:
            raise SystemExit(f"{rule_id}: no keywords (every rule here is found by one)")
        entry: dict[str, Any] = {
            "id": rule_id,
            "description": rule.get("description", ""),
            "regex": _regex(rule["regex"], rule_id),
            "go_regex": rule["regex"],
            "keywords": keywords,
        }
        entry["min_length"] = _shortest_match(entry["regex"])
        trimmed, _, _ = split_lazy_prefix(entry["regex"])
        if _anchored(trimmed, keywords):
            entry["anchored"] = True
        if rule.get("secretGroup"):
            entry["secret_group"] = rule["secretGroup"]
        elif repeated := _repeated_groups(entry["regex"]):
            entry["repeated_groups"] = repeated
        if rule.get("entropy"):
            entry["entropy"] = float(rule["entropy"])
        if rule.get("path"):
            entry["go_path"] = rule["path"]  # kept for reference; not applied (see the module)
        lists = [_allowlist(a, f"{rule_id} allowlist") for a in rule.get("allowlists", ())]
        lists = [allowlist for allowlist in lists if set(allowlist) - {"scoped"}]
        if lists:
            entry["allowlists"] = lists
        rules.append(entry)
    global_list = _allowlist(config.get("allowlist", {}), "global allowlist")
    return {
        "source": source,
        "allowlist": global_list,
        "rules": rules,
        "skipped": skipped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="a local gitleaks config/gitleaks.toml")
    parser.add_argument("--licence", type=Path, help="gitleaks' LICENSE (default: beside config/)")
    parser.add_argument("--version", help="the gitleaks version the file comes from")
    parser.add_argument("--commit", help="the gitleaks commit the file comes from")
    parser.add_argument("--date", help="the commit's date (YYYY-MM-DD)")
    parser.add_argument("--out", type=Path, default=PACKAGE, help="where the files go")
    args = parser.parse_args(argv)

    checkout = args.config.resolve().parent
    licence = args.licence or checkout.parent / "LICENSE"
    source = {
        "project": "gitleaks",
        "url": UPSTREAM,
        "file": "config/gitleaks.toml",
        "version": args.version or _git(checkout, "describe", "--tags", "--always") or "unknown",
        "commit": args.commit or _git(checkout, "rev-parse", "HEAD") or "unknown",
        "date": args.date or _git(checkout, "log", "-1", "--format=%cs") or "unknown",
        "licence": "MIT",
        "licence_file": LICENCE_FILE,
    }
    with args.config.open("rb") as file:
        config = tomllib.load(file)
    document = convert(config, source)
    out = args.out / RULES_FILE
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.copyfile(licence, args.out / LICENCE_FILE)
    print(
        f"{out}: {len(document['rules'])} rules from gitleaks {source['version']} "
        f"({source['commit'][:12]}), {len(document['skipped'])} skipped"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
