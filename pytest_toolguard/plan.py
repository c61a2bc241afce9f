"""The plan: steps a run must go through, and the hook that keeps to them.

``PlanProgress`` is the seed's plan hook (a PreToolUse and PostToolUse hook,
see ``hooks``): a call must use a tool of the current step, and the run
advances as the steps' tools succeed. ``stop_validation`` checks at the end
that every step is done and every artifact is there.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .contract import ToolCall
from .documents import DocumentRefused, parse_json
from .hooks import HookDecision, PostToolUseEvent, PreToolUseEvent
from .jsondata import canonical_json
from .sandbox import SandboxError, Workspace
from .schema import SchemaValidator


@dataclass(frozen=True, slots=True)
class Artifact:
    """A file a plan step must leave behind, optionally JSON matching a schema."""

    path: str
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step: the tools it allows, and the tools whose success completes it
    (default: any allowed tool succeeding once)."""

    id: str
    allowed_tools: frozenset[str]
    required_tools: tuple[str, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_tools", frozenset(self.allowed_tools))
        object.__setattr__(self, "required_tools", tuple(self.required_tools))
        object.__setattr__(self, "artifacts", tuple(self.artifacts))


StepStatus = Literal["pending", "active", "done", "failed"]


@dataclass(frozen=True, slots=True)
class StopReport:
    """The end-of-run check: ``ok`` only when every step is done and every
    artifact exists and matches its schema."""

    ok: bool
    problems: tuple[str, ...] = field(default=())


class PlanProgress:
    """The seed's plan hook: a call must use a tool of the current step.

    PreToolUse blocks a tool the current step does not allow (``tool X is not
    allowed for current plan step step_1``) and every call once the plan is
    complete, except the retry of a keyed call it already let run (same
    idempotency key, session, tool and arguments: the runtime answers it
    from the stored outcome). PostToolUse records successes, advances when the step's
    required tools all succeeded, and marks the step failed when its handler
    failed; a later success on the same step makes it active again (the model
    may retry). Thread-safe.
    """

    name = "plan_progress"

    def __init__(self, steps: Sequence[PlanStep]) -> None:
        if not steps:
            raise ValueError("a plan needs at least one step")
        ids = [step.id for step in steps]
        if len(set(ids)) != len(ids):
            raise ValueError(f"plan step ids must be unique: {ids}")
        self.steps: tuple[PlanStep, ...] = tuple(steps)
        self._index = 0
        self._succeeded: set[str] = set()
        self._failed = False
        self._keyed: set[tuple[str, ...]] = set()
        """(key, session, tool, arguments) of keyed calls whose handler ran."""
        self._lock = threading.Lock()

    def copy(self) -> PlanProgress:
        """A new ``PlanProgress`` over the same steps, at the same point."""
        twin = PlanProgress(self.steps)
        with self._lock:
            twin._index, twin._succeeded, twin._failed, twin._keyed = (
                self._index,
                set(self._succeeded),
                self._failed,
                set(self._keyed),
            )
        return twin

    @property
    def current_step(self) -> PlanStep | None:
        with self._lock:
            return self.steps[self._index] if self._index < len(self.steps) else None

    @property
    def is_complete(self) -> bool:
        with self._lock:
            return self._index >= len(self.steps)

    def status(self, step_id: str) -> StepStatus:
        with self._lock:
            for position, step in enumerate(self.steps):
                if step.id == step_id:
                    if position < self._index:
                        return "done"
                    if position > self._index:
                        return "pending"
                    return "failed" if self._failed else "active"
        raise KeyError(step_id)

    def pre_tool_use(self, event: PreToolUseEvent) -> HookDecision:
        if self._ran(event.call, event.spec.name, event.arguments) in self._keyed:
            # The retry of a call this plan let run, with its idempotency key:
            # the runtime answers it with the stored outcome and runs nothing,
            # so a plan that has moved on since must not block it.
            return HookDecision.proceed()
        step = self.current_step
        tool_name = event.spec.name
        if step is None:
            return HookDecision.deny(f"plan is complete; tool {tool_name} is not allowed")
        if tool_name not in step.allowed_tools:
            return HookDecision.deny(
                f"tool {tool_name} is not allowed for current plan step {step.id}"
            )
        return HookDecision.proceed()

    @staticmethod
    def _ran(call: ToolCall, tool_name: str, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        key = call.idempotency_key
        if not key:
            return ()
        return (key, call.session_id, tool_name, canonical_json(dict(arguments)))

    def post_tool_use(self, event: PostToolUseEvent) -> None:
        ran = self._ran(event.call, event.spec.name, event.arguments)
        with self._lock:
            if ran:
                self._keyed.add(ran)
            if self._index >= len(self.steps):
                return
            step = self.steps[self._index]
            if event.spec.name not in step.allowed_tools:
                return
            if not event.result.ok:
                self._failed = True
                return
            self._failed = False
            self._succeeded.add(event.spec.name)
            required = step.required_tools or tuple(step.allowed_tools)
            done = (
                all(name in self._succeeded for name in required)
                if step.required_tools
                else any(name in self._succeeded for name in required)
            )
            if done:
                self._index += 1
                self._succeeded.clear()

    def stop_validation(self, workspace: Workspace) -> StopReport:
        """Check at the end of a run that the plan finished and that every
        step's artifacts exist and match their schemas."""
        problems: list[str] = []
        for step in self.steps:
            status = self.status(step.id)
            if status != "done":
                problems.append(f"step {step.id} is {status}")
            for artifact in step.artifacts:
                problems.extend(_check_artifact(workspace, artifact))
        return StopReport(ok=not problems, problems=tuple(problems))


def _check_artifact(workspace: Workspace, artifact: Artifact) -> list[str]:
    try:
        text = workspace.read_text(artifact.path)
    except (OSError, SandboxError):
        return [f"artifact {artifact.path} is missing"]
    if artifact.schema is None:
        return []
    try:
        value = parse_json(text)  # a handler wrote it: bounded before it is validated
    except DocumentRefused as exc:
        return [f"artifact {artifact.path} is refused: {exc}"]
    except ValueError as exc:
        return [f"artifact {artifact.path} is not valid JSON: {exc}"]
    validator = SchemaValidator(artifact.schema, root=artifact.path)
    return validator.errors(value)
