"""The search: Hypothesis over one kind of arguments (valid or invalid),
each example checked by a ``CallChecker``, every failure shrunk to a minimal
call, run again with each problem found known until no new kind turns up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import Phase, Verbosity, example, given, seed, settings
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from ..errors import ToolguardError
from .arguments import HEALTH_CHECKS
from .call import CallChecker, short
from .report import FuzzFailure, Problem


class _ExampleFailed(ToolguardError):
    """Raised inside the Hypothesis test so that it shrinks the example."""

    def __init__(self, problem: Problem, detail: str, arguments: dict[str, Any]) -> None:
        super().__init__(f"{problem}: {detail}")
        self.problem = problem
        self.detail = detail
        self.arguments = arguments


class Search:
    """Hypothesis over one kind of arguments (valid or invalid), until no
    new kind of problem turns up."""

    def __init__(
        self,
        checker: CallChecker,
        strategy: SearchStrategy[dict[str, Any]],
        *,
        valid: bool,
        explicit: tuple[dict[str, Any], ...],
    ) -> None:
        self.checker = checker
        self.strategy = strategy
        self.valid = valid
        self.explicit = explicit
        self.calls = 0

    def run(self, examples: int, seed_value: int, notes: list[str]) -> list[FuzzFailure]:
        """One minimal failure per problem: after each failure the search
        runs again with that problem known, so another one can surface."""
        known: set[Problem] = set()
        failures: list[FuzzFailure] = []
        for _ in range(len(Problem)):
            failure = self._once(examples, seed_value, known, notes)
            if failure is None:
                break
            failures.append(failure)
            if failure.problem is Problem.FLAKY:
                break  # another run would meet the same unsteady failure
            known.add(failure.problem)
        return failures

    def _once(
        self, examples: int, seed_value: int, known: set[Problem], notes: list[str]
    ) -> FuzzFailure | None:
        def body(arguments: dict[str, Any]) -> None:
            self.calls += 1
            for problem, detail in self.checker.check(arguments, self.valid):
                if problem not in known:
                    raise _ExampleFailed(problem, detail, arguments)

        test: Callable[..., None] = body
        for arguments in reversed(self.explicit):
            test = example(arguments)(test)
        test = given(self.strategy)(test)
        test = seed(seed_value)(test)
        test = settings(
            max_examples=examples,
            database=None,
            deadline=None,  # the handler runs on a worker thread under its own deadline
            derandomize=False,  # the seed decides
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=HEALTH_CHECKS,
            report_multiple_bugs=False,
            print_blob=False,
            verbosity=Verbosity.quiet,
        )(test)
        kind = "valid" if self.valid else "invalid"
        try:
            test()
        except _ExampleFailed as failed:
            return self._failure(failed)
        except Unsatisfiable:
            notes.append(f"no {kind} arguments could be generated from the input schema")
        except Flaky as flaky:
            inner = next(
                (e for e in getattr(flaky, "exceptions", ()) if isinstance(e, _ExampleFailed)),
                None,
            )
            detail = f"a failure did not happen again with the same arguments ({flaky})"
            if inner is not None and inner.problem not in known:
                detail = f"{inner.detail} (but not every time with these arguments)"
            arguments = inner.arguments if inner is not None else None
            return FuzzFailure(
                self.checker.spec.name, Problem.FLAKY, short(detail), arguments, self.valid
            )
        return None

    def _failure(self, failed: _ExampleFailed) -> FuzzFailure:
        return FuzzFailure(
            self.checker.spec.name, failed.problem, failed.detail, failed.arguments, self.valid
        )
