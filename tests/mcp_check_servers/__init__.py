"""Small stdio MCP servers for ``toolguard mcp check``'s tests."""
