"""Guards: our executor deciding the calls of tools that run elsewhere.
Inside another program's loop (the Claude Code hook, the OpenAI Agents SDK
guardrails, LangGraph's ``wrap_tool_call``), each admitting and finishing
calls through ``gate``; or in front of a live MCP server (in-process,
started as a command over stdio, or over Streamable HTTP), each relaying
a call our pipeline admitted."""
