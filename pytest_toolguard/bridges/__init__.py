"""Bridges: other ecosystems' tools and sessions in, ours out.

Importers of tool definitions (pure functions over the documented wire
formats, no SDK needed): ``from_mcp``, ``from_openai``, ``from_anthropic``,
``from_langchain`` and ``from_function`` (a plain typed function). The
reverse is on ``ToolSpec``: ``to_mcp()``, ``to_openai()``,
``to_anthropic()``. Session readers (Claude Code JSONL, OpenAI Responses
and Chat, Anthropic Messages, MCP JSON-RPC logs) live in the module of
their ecosystem and give a ``Transcript``; ``transcript_to_cassette``
re-executes one through a registry into a cassette.

Names load on first use, like the package's own re-exports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._common import BridgeError, BridgeWarning
    from .anthropic import from_anthropic
    from .langchain import from_langchain
    from .mcp import from_mcp, risk_from_annotations
    from .openai import from_openai
    from .python import from_function, schema_from_signature
    from .transcript import (
        ImportReport,
        Problem,
        Transcript,
        TranscriptCall,
        TranscriptResult,
        transcript_to_cassette,
    )

__all__ = [
    "BridgeError",
    "BridgeWarning",
    "ImportReport",
    "Problem",
    "Transcript",
    "TranscriptCall",
    "TranscriptResult",
    "from_anthropic",
    "from_function",
    "from_langchain",
    "from_mcp",
    "from_openai",
    "risk_from_annotations",
    "schema_from_signature",
    "transcript_to_cassette",
]

_EXPORTED_FROM = {
    "_common": ("BridgeError", "BridgeWarning"),
    "anthropic": ("from_anthropic",),
    "langchain": ("from_langchain",),
    "mcp": ("from_mcp", "risk_from_annotations"),
    "openai": ("from_openai",),
    "python": ("from_function", "schema_from_signature"),
    "transcript": (
        "ImportReport",
        "Problem",
        "Transcript",
        "TranscriptCall",
        "TranscriptResult",
        "transcript_to_cassette",
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTED_FROM)
