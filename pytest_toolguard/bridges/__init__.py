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

The public names are listed once, in ``__init__.pyi``, and load on first
use, like the package's own (``pytest_toolguard.lazy_exports``).
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__)

__toolguard_owned__ = False  # tools' code: an inline deadline may interrupt it (runtime/inline.py)
