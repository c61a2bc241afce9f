"""Bridges: other ecosystems' tools and sessions in, ours out.

Importers of tool definitions (pure functions over the documented wire
formats, no SDK needed): ``from_mcp``, ``from_openai``, ``from_anthropic``,
``from_langchain`` and ``from_function`` (a plain typed function). The
reverse is on ``ToolSpec``: ``to_mcp()``, ``to_openai()``,
``to_anthropic()``. Session readers (Claude Code JSONL, OpenAI Responses
and Chat, Anthropic Messages, MCP JSON-RPC logs) live in the module of
their ecosystem and give a ``Transcript``; ``transcript_to_cassette``
re-executes one through a registry into a cassette. A tool of another
ecosystem, which gets no ``ToolContext``, finds the workspace of the call it
runs in with ``pytest_toolguard.context.current_workspace()``.

The public names load on first use, like the package's own
(``pytest_toolguard.lazy_exports``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .anthropic import from_anthropic as from_anthropic
    from .definitions import BridgeError as BridgeError
    from .definitions import BridgeWarning as BridgeWarning
    from .langchain import from_langchain as from_langchain
    from .mcp import from_mcp as from_mcp
    from .mcp import risk_from_annotations as risk_from_annotations
    from .openai import from_openai as from_openai
    from .python import from_function as from_function
    from .python import schema_from_signature as schema_from_signature
    from .transcript import ImportReport as ImportReport
    from .transcript import Problem as Problem
    from .transcript import Transcript as Transcript
    from .transcript import TranscriptCall as TranscriptCall
    from .transcript import TranscriptResult as TranscriptResult
    from .transcript import transcript_to_cassette as transcript_to_cassette

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "anthropic": ("from_anthropic",),
        "definitions": (
            "BridgeError",
            "BridgeWarning",
        ),
        "langchain": ("from_langchain",),
        "mcp": (
            "from_mcp",
            "risk_from_annotations",
        ),
        "openai": ("from_openai",),
        "python": (
            "from_function",
            "schema_from_signature",
        ),
        "transcript": (
            "ImportReport",
            "Problem",
            "Transcript",
            "TranscriptCall",
            "TranscriptResult",
            "transcript_to_cassette",
        ),
    },
)

__toolguard_owned__ = False  # tools' code: an inline deadline may interrupt it (runtime/inline.py)
