"""Bridges: other ecosystems' tools and sessions in, our executor inside
their loops, ours out; one subpackage per direction (ARCHITECTURE.md,
"The bridges, by direction").

``definitions``: importers of tool definitions (pure functions over the
documented wire formats, no SDK needed): ``from_mcp``, ``from_openai``,
``from_anthropic``, ``from_langchain`` and ``from_function`` (a plain typed
function). The reverse is on ``ToolSpec``: ``to_mcp()``, ``to_openai()``,
``to_anthropic()``. ``transcripts``: session readers (Claude Code JSONL,
OpenAI Responses and Chat, Anthropic Messages, MCP JSON-RPC logs), one
module per source, each giving a ``Transcript``; ``transcript_to_cassette``
re-executes one through a registry into a cassette. ``guards``: the Claude
Code hook, the Agents SDK guardrails, LangGraph's tool-call guard and live
MCP servers behind our executor. ``exports``: audit rows as OpenTelemetry
spans and Agents SDK traces. A tool of another ecosystem, which gets no
``ToolContext``, finds the workspace of the call it runs in with
``pytest_toolguard.context.current_workspace()``.

The public names load on first use, like the package's own
(``pytest_toolguard.lazy_exports``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .definitions.anthropic import from_anthropic as from_anthropic
    from .definitions.langchain import from_langchain as from_langchain
    from .definitions.mcp import from_mcp as from_mcp
    from .definitions.openai import from_openai as from_openai
    from .definitions.python import from_function as from_function
    from .errors import BridgeError as BridgeError
    from .errors import BridgeWarning as BridgeWarning
    from .transcripts.into_cassette import ImportReport as ImportReport
    from .transcripts.into_cassette import transcript_to_cassette as transcript_to_cassette
    from .transcripts.transcript import Transcript as Transcript
    from .transcripts.transcript import TranscriptProblem as TranscriptProblem

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "definitions.anthropic": ("from_anthropic",),
        "definitions.langchain": ("from_langchain",),
        "definitions.mcp": ("from_mcp",),
        "definitions.openai": ("from_openai",),
        "definitions.python": ("from_function",),
        "errors": (
            "BridgeError",
            "BridgeWarning",
        ),
        "transcripts.into_cassette": (
            "ImportReport",
            "transcript_to_cassette",
        ),
        "transcripts.transcript": ("Transcript", "TranscriptProblem"),
    },
)

__toolguard_owned__ = False  # tools' code: an inline deadline may interrupt it (runtime/inline.py)
