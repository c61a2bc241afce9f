"""How recording and replay redact, the same way the runtime does."""

from __future__ import annotations

from ..redaction import Redactor
from ..registry import ToolRegistry


def tool_redactor(registry: ToolRegistry | None, tool_name: object, default: Redactor) -> Redactor:
    """The redactor the runtime uses for a tool: its own, else ``default``."""
    spec = registry.get(tool_name) if registry is not None and isinstance(tool_name, str) else None
    return spec.redactor if spec is not None and spec.redactor is not None else default


def redact_file(redactor: Redactor, content: bytes) -> bytes:
    """A file's bytes as a cassette keeps them: UTF-8 text redacted like
    arguments, anything else as it is. Replay redacts what it reads the
    same way before comparing."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return content
    return redactor.redact_text(text).encode("utf-8")


def redact_path(redactor: Redactor, path: str) -> str:
    """A workspace path as a cassette keeps it: a token in a file's name is
    as secret as one in its content."""
    return redactor.redact_text(path)
