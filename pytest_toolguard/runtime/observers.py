"""Who hears about a call once it is decided: PostToolUse hooks, listeners
and file watchers. None of them can change the result: they get copies,
and one that raises is reported as a RuntimeWarning."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from ..contract import ToolCall, ToolResult
from ..hooks import Approval, PostToolUse, PostToolUseEvent, PreToolUse
from ..jsondata import copy_json
from ..registry import ToolSpec
from .messages import text, warn

Listener = Callable[[ToolCall, ToolResult, Any, Approval | None], None]
"""``listener(call, result, stored_data, approval)``: see ``ToolRuntime.add_listener``."""

FileWatcher = Callable[[str, Sequence[str]], None]
"""``watcher(call_id, paths)``: see ``ToolRuntime.watch_files``."""


class Observers:
    """The listeners and file watchers of one runtime."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self.file_watchers: list[FileWatcher] = []

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def watch_files(self, watcher: FileWatcher) -> Callable[[], None]:
        self.file_watchers.append(watcher)
        return lambda: self.file_watchers.remove(watcher)

    def tell_watchers(self, call_id: str, paths: Sequence[str]) -> None:
        for watcher in list(self.file_watchers):
            try:
                watcher(call_id, paths)
            except Exception as exc:
                warn(f"file watcher raised {type(exc).__name__}: {text(exc)}")

    def tell_listeners(
        self, call: ToolCall, result: ToolResult, stored: Any, approval: Approval | None
    ) -> None:
        for listener in list(self.listeners):
            try:
                listener(call, result, stored, approval)
            except Exception as exc:
                warn(f"execute listener raised {type(exc).__name__}: {text(exc)}")


def post_tool_use(
    hooks: Sequence[PreToolUse | PostToolUse],
    call: ToolCall,
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    result: ToolResult,
) -> None:
    """Show the call to every PostToolUse hook, in order."""
    for hook in hooks:
        if isinstance(hook, PostToolUse):
            # Each observer gets copies: it cannot change what the caller,
            # the audit row or a later replay of the key sees.
            event = PostToolUseEvent(
                call=call,
                spec=spec,
                arguments=MappingProxyType(copy_json(arguments)),
                result=replace(result, data=copy_json(result.data)),
            )
            try:
                hook.post_tool_use(event)
            except Exception as exc:  # observers never change the outcome
                warn(
                    f"PostToolUse hook {getattr(hook, 'name', 'hook')!r} raised "
                    f"{type(exc).__name__}: {text(exc)}"
                )
