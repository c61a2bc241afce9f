"""Ours out: what our executor kept, in other ecosystems' formats (audit
rows as OpenTelemetry spans and as OpenAI Agents SDK traces). Our tools'
definitions go out through ``ToolSpec.to_mcp()``, ``to_openai()`` and
``to_anthropic()``."""
