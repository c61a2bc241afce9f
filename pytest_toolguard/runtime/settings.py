"""What a runtime was configured with, shared by every step of its pipeline.

``ToolRuntime``'s public attributes (``registry``, ``workspace``,
``capabilities``, ``audit``, ``hooks``, ``redactor``, ``variables``,
``idempotency_scope``, ``timeouts``) read and write one ``RuntimeSettings``,
so a change made between calls (``HttpRecording`` swapping the registry)
is seen by admission, invocation and the audit log alike.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from ..audit.protocol import AuditStore
from ..capabilities import Capabilities
from ..hooks import PostToolUse, PreToolUse
from ..redaction import Redactor
from ..registry import ToolRegistry, ToolSpec
from ..sandbox import Workspace


@dataclass
class RuntimeSettings:
    """The runtime's configuration (see ``ToolRuntime`` for each field)."""

    registry: ToolRegistry
    workspace: Workspace
    capabilities: Capabilities
    audit: AuditStore
    hooks: tuple[PreToolUse | PostToolUse, ...]
    redactor: Redactor
    variables: Mapping[str, str]
    idempotency_scope: str | None
    timeouts: Mapping[str, float]
    clock: Callable[[], datetime]

    def redactor_for(self, spec: ToolSpec | None) -> Redactor:
        """The tool's own redactor, else the runtime's."""
        return spec.redactor if spec is not None and spec.redactor is not None else self.redactor

    def deadline(self, spec: ToolSpec) -> float:
        """The tool's deadline in seconds, as this runtime sets it."""
        return self.timeouts.get(spec.name, spec.timeout_seconds)

    def now(self) -> str:
        """The clock's time as an audit row keeps it (ISO 8601, UTC, ms)."""
        return self.clock().astimezone(timezone.utc).isoformat(timespec="milliseconds")

    @functools.cached_property
    def _host_paths(self) -> tuple[str, ...]:
        """The workspace root as given and resolved, longest first (made on
        first use: most runtimes never need it)."""
        root = self.workspace.root
        return tuple(sorted({root, os.path.realpath(root)}, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """No absolute host path of the workspace in anything a model sees."""
        for host_path in self._host_paths:
            text = text.replace(host_path + os.sep, "").replace(host_path, ".")
        return text


def utc_now() -> datetime:
    """The default clock."""
    return datetime.now(timezone.utc)
