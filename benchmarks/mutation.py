"""Mutation score of replay on the tools: ``make mutation``.

How many small changes to a tool's code does ``pytest --toolguard-replay``
catch? cosmic-ray (a maintained mutation tester) mutates each module one
change at a time, and runs replay as the test command: a mutant is killed
when replay fails. The operators are these:
comparisons flipped (``>`` to ``>=``, ``==`` to ``!=``, ...), constants moved
by one, booleans flipped, conditions negated, ``and``/``or`` swapped, loops
that never run.

Two targets, each with its own cassettes:

- ``builtin``: ``pytest_toolguard/tools/`` replayed by ``cassettes`` and ``cases``;
- ``example``: ``examples/agent_project/agent_tools`` replayed by that
  project's ``cassettes``.

It works on a copy of the files git knows (committed or not, ignored files
left out) in a temporary directory, so the working tree is never mutated,
and the copy's ``pytest_toolguard`` is the one imported (``PYTHONPATH``).
Prints, per target, killed / total and every surviving mutant (file, line,
operator, the change) with its verdict: equivalent (a change of timing no
valid call can see, a schema default the runtime never applies, an output
check loosened that the tool already passes), a timing gap (a change only
some world's timing shows, which replay cannot make), else a gap of the
variants; the score without the equivalent ones follows. Exit status 0
whatever the score (a measurement); ``--min-score`` makes a lower score
(without the equivalent ones) fail.

    python benchmarks/mutation.py [--target builtin|example] [--min-score 95]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OPERATORS = (
    "core/ReplaceComparisonOperator_Gt_GtE",
    "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Lt_LtE",
    "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Eq_NotEq",
    "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Is_IsNot",
    "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceComparisonOperator_In_NotIn",
    "core/ReplaceComparisonOperator_NotIn_In",
    "core/NumberReplacer",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/AddNot",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/ZeroIterationForLoop",
)
"""The mutation operators run: one small change each (see the docstring)."""

TIMEOUT_SECONDS = 120.0
"""A mutant whose replay runs longer is counted as killed (cosmic-ray's rule)."""


TIMING_EQUIVALENT = {
    "timeout_seconds=310": "wait_for_file's own deadline: wait_seconds <= 300 bounds its run "
    "(its polls end by then), so no valid call reaches a deadline of 309, 310 or 311 s (a "
    "session's timeouts replace it)",
    "range(max( 0,": "wait_seconds > 0, so ceil(wait_seconds / poll) >= 1 and "
    "max(0, n) == max(1, n)",
    "asyncio.sleep( -1)": "asyncio.sleep takes a delay <= 0 as one pass of the event loop, "
    "as sleep(0)",
}
"""Survivors equivalent for every valid call (the removed line holds the
key, the added one the change where it matters)."""

TIMING_GAPS = {
    "WAIT_POLL_SECONDS = ": "a file that appears during the wait is seen a poll later, or, "
    "after the last poll of a short wait, not at all (a wait of 1 s: polls at 0, 0.05, ... "
    "against 0 only): needs a world where a file appears during the call, after the k-th "
    "poll (a harness hook on the workspace's size(), counted, not timed)",
    "range(max( 2,": "a second poll finds a file that appeared after the first (wait_seconds "
    "<= 0.05): the same world as the poll interval needs",
    "timeout=": "a server answering in 2 to 4 s gets the other outcome: replay serves the "
    "recorded exchange at once; needs a latency fault on the HTTP layer",
    "timeout_seconds=5": "a handler running 4 to 6 s (a slow server: urlopen's timeout is "
    "per operation) gets the other outcome: the same latency fault",
    "asyncio.sleep( 1)": "the same answer a second later: only a deadline under 1 s (a "
    "session's timeouts) tells it apart, and replay does not time handlers",
}
"""Survivors whose change shows only in time (the key in the removed or
added line): not equivalent, since some world's timing tells them apart,
but not reachable by replay, which freezes the clock and serves recorded
answers at once."""


MODE_GAPS = {
    "__toolguard_owned__ = ": "the package's marker says whether an inline deadline may "
    "interrupt its code (runtime/inline.py); replay runs handlers in thread mode, where no "
    "deadline is raised in them, so no replay sees it: tests/harness/test_inline_wrappers.py"
    "::test_our_packages_are_owned_but_those_holding_tools_code catches it in the suite",
}
"""Survivors whose change shows only in a mode replay does not run (the key
in the removed or added line)."""


@dataclass(frozen=True)
class Survivor:
    where: str
    operator: str
    change: str
    verdict: str
    """``equivalent: why`` or ``gap: what would kill it``."""


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]
    """Paths relative to the repository, mutated one change at a time."""
    directory: str
    """Where replay runs, relative to the repository."""
    replay: tuple[str, ...]
    """pytest's arguments after ``--toolguard-replay``."""


TARGETS = (
    Target("builtin", ("pytest_toolguard/tools",), ".", ("cassettes", "cases")),
    Target(
        "example",
        ("examples/agent_project/agent_tools/__init__.py",),
        "examples/agent_project",
        ("cassettes",),
    ),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=[t.name for t in TARGETS], action="append")
    parser.add_argument("--min-score", type=float, default=0.0, help="fail below this percent")
    parser.add_argument(
        "--without-variants",
        action="store_true",
        help="replay the cassettes with their amplified variants taken out (the score before)",
    )
    options = parser.parse_args(argv)
    chosen = [t for t in TARGETS if not options.target or t.name in options.target]
    failed = False
    with tempfile.TemporaryDirectory(prefix="toolguard-mutation-") as scratch:
        copy = Path(scratch) / "repo"
        _copy_tree(copy)
        for target in chosen:
            if options.without_variants:
                _strip_variants(copy / target.directory, target.replay)
            killed, total, survivors = _run(target, copy, Path(scratch))
            equivalent = sum(s.verdict.startswith("equivalent") for s in survivors)
            score = 100.0 * killed / total if total else 100.0
            counted = total - equivalent
            adjusted = 100.0 * killed / counted if counted else 100.0
            print(
                f"mutation {target.name}: {killed} killed / {total} mutants ({score:.1f}%); "
                f"{equivalent} equivalent: {killed} / {counted} ({adjusted:.1f}%)"
            )
            for survivor in survivors:
                print(f"  survived: {survivor.where} {survivor.operator}: {survivor.change}")
                print(f"    {survivor.verdict}")
            failed |= adjusted < options.min_score
    return 1 if failed else 0


def _copy_tree(destination: Path) -> None:
    """The files git knows (tracked and untracked, ignored ones left out)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _strip_variants(directory: Path, paths: tuple[str, ...]) -> None:
    """Every cassette and case under ``paths`` as it was before amplification."""
    from pytest_toolguard.amplify.write import with_variants
    from pytest_toolguard.replay.cassette import loads

    for path in paths:
        for file in sorted((directory / path).rglob("*.y*ml")):
            text = file.read_text(encoding="utf-8")
            count = len(loads(text, source=str(file)).interactions)
            file.write_text(with_variants(text, [()] * count), encoding="utf-8")


def _run(target: Target, copy: Path, scratch: Path) -> tuple[int, int, list[Survivor]]:
    config = scratch / f"{target.name}.toml"
    session = scratch / f"{target.name}.sqlite"
    # Only our plugin (PYTEST_DISABLE_PLUGIN_AUTOLOAD below): the others'
    # start-up (hypothesis's alone ~1.5 s) would be most of each mutant's run.
    replay = " ".join(
        [sys.executable, "-m", "pytest", "-p", "pytest_toolguard.plugin"]
        + ["--toolguard-replay", *target.replay, "-x", "-q", "-p", "no:cacheprovider"]
    )
    workdir = copy / target.directory
    modules = ", ".join(json.dumps(str(copy / module)) for module in target.modules)
    excluded = ", ".join(json.dumps(f"^{name}$") for name in _other_operators())
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = [{modules}]\n"
        f"timeout = {TIMEOUT_SECONDS}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(replay)}\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n'
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = [{excluded}]\n",
        encoding="utf-8",
    )
    environment = dict(os.environ, PYTHONPATH=str(copy), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    bin_dir = Path(sys.executable).parent

    def tool(*arguments: str) -> str:
        done = subprocess.run(
            [str(bin_dir / arguments[0]), *arguments[1:]],
            cwd=workdir,
            env=environment,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    tool("cosmic-ray", "init", str(config), str(session))
    tool("cr-filter-operators", str(session), str(config))
    baseline = subprocess.run(
        replay.split(), cwd=workdir, env=environment, capture_output=True, text=True
    )
    if baseline.returncode != 0:
        raise SystemExit(f"{target.name}: replay fails before any mutation:\n{baseline.stdout}")
    tool("cosmic-ray", "exec", str(config), str(session))
    return _results(tool("cosmic-ray", "dump", str(session)), copy)


def _other_operators() -> list[str]:
    """Every operator cosmic-ray has but those of ``OPERATORS``."""
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "cosmic-ray"), "operators"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [name for name in listed if name not in OPERATORS]


def _results(dump: str, copy: Path) -> tuple[int, int, list[Survivor]]:
    killed = total = 0
    survivors: list[Survivor] = []
    for line in dump.splitlines():
        item, result = json.loads(line)
        if result is None or result.get("worker_outcome") == "skipped":
            continue
        if result.get("test_outcome") == "incompetent":
            continue
        total += 1
        if result.get("test_outcome") == "killed":
            killed += 1
            continue
        for mutation in item["mutations"]:
            module = Path(mutation["module_path"])
            number = mutation["start_pos"][0]
            old, new = _change(result.get("diff") or "")
            survivors.append(
                Survivor(
                    f"{module.relative_to(copy)}:{number}",
                    mutation["operator_name"],
                    f"{old} -> {new}",
                    _verdict(module, number, old, new),
                )
            )
    return killed, total, sorted(survivors, key=lambda s: (s.where, s.change))


def _verdict(module: Path, number: int, old: str, new: str) -> str:
    """Why a mutant survived, when the reason is known: equivalent (no
    valid call can tell it from the tool), a timing gap (only some world's
    timing can), else a gap of the variants."""
    change = f"{old} -> {new}"
    for key, why in TIMING_EQUIVALENT.items():
        if key in change:
            return f"equivalent (timing only): {why}"
    for key, why in TIMING_GAPS.items():
        if key in change:
            return f"gap (timing only): {why}"
    for key, why in MODE_GAPS.items():
        if key in change:
            return f"gap (inline mode only): {why}"
    default = re.compile(r'"default": [^,}]+')
    if '"default"' in old and default.sub("", old) == default.sub("", new):
        return (
            "equivalent: a schema's default is documentation for the model; the runtime "
            "never fills it in (the handler's own default applies)"
        )
    if number in _output_schema_lines(module) and _loosens(old, new):
        return (
            "equivalent: loosens an output schema check that the tool's results already "
            "pass (the right tool never returns what only the looser schema allows)"
        )
    return "gap: no variant reaches it (no variant changes the data the mutated line reads)"


def _loosens(old: str, new: str) -> bool:
    """``additionalProperties`` false to true, a ``minimum`` lowered, a ``maximum`` raised."""
    if '"additionalProperties": False' in old and '"additionalProperties": True' in new:
        return True
    for key, lower in (("minimum", True), ("maximum", False)):
        was = re.search(rf'"{key}": (-?\d+)', old)
        now = re.search(rf'"{key}": ?(-?\d+)', new)
        if was and now and (int(now.group(1)) < int(was.group(1))) == lower:
            return int(now.group(1)) != int(was.group(1))
    return False


def _output_schema_lines(module: Path) -> set[int]:
    """Lines of ``output_schema=`` arguments, and of module constants they name."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "output_schema":
                continue
            value = keyword.value
            if isinstance(value, ast.Name) and value.id in constants:
                value = constants[value.id]
            lines.update(range(value.lineno, (value.end_lineno or value.lineno) + 1))
    return lines


def _change(diff: str) -> tuple[str, str]:
    """The removed and the added lines of a unified diff."""
    lines = diff.splitlines()
    removed = [x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")]
    added = [x[1:].strip() for x in lines if x.startswith("+") and not x.startswith("+++")]
    return " | ".join(removed), " | ".join(added)


if __name__ == "__main__":
    sys.exit(main())
