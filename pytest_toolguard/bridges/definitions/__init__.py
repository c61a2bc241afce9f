"""Definitions in: other ecosystems' tool definitions (MCP, OpenAI,
Anthropic, LangChain, Claude Code's built-in tools, plain Python
functions) into ``ToolSpec``s of our registry. Pure functions over the
documented wire formats; no SDK is imported. ``spec`` holds what every
importer shares."""
