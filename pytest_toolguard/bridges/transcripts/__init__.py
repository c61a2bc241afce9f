"""Transcripts in: sessions another program ran (Claude Code JSONL, OpenAI
Responses and Chat, Anthropic Messages, MCP JSON-RPC logs) read as a
``Transcript`` (``transcript``), and re-executed into a cassette
(``into_cassette``, in a copy made by ``import_copy``)."""
