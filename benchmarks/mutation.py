"""Mutation score of replay on the tools: ``make mutation``.

How many small changes to a tool's code does ``pytest --toolguard-replay``
catch? cosmic-ray (a maintained mutation tester) mutates each module one
change at a time, and runs replay as the test command: a mutant is killed
when replay fails. The operators are those of the measurement in issue 15:
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
operator, the change). Exit status 0 whatever the score (a measurement);
``--min-score`` makes a lower score fail.

    python benchmarks/mutation.py [--target builtin|example] [--min-score 95]
"""

from __future__ import annotations

import argparse
import json
import os
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
            score = 100.0 * killed / total if total else 100.0
            print(f"mutation {target.name}: {killed} killed / {total} mutants ({score:.1f}%)")
            for line in survivors:
                print(f"  survived: {line}")
            failed |= score < options.min_score
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


def _run(target: Target, copy: Path, scratch: Path) -> tuple[int, int, list[str]]:
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


def _results(dump: str, copy: Path) -> tuple[int, int, list[str]]:
    killed = total = 0
    survivors: list[str] = []
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
            where = Path(mutation["module_path"]).relative_to(copy)
            change = _change(result.get("diff") or "")
            survivors.append(
                f"{where}:{mutation['start_pos'][0]} {mutation['operator_name']}: {change}"
            )
    return killed, total, sorted(survivors)


def _change(diff: str) -> str:
    """The removed and added line of a unified diff, ``old -> new``."""
    removed = [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("-") and not line.startswith("---")
    ]
    added = [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    return f"{' | '.join(removed)} -> {' | '.join(added)}"


if __name__ == "__main__":
    sys.exit(main())
