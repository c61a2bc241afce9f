"""Exits at once, before any MCP message, saying why on stderr."""

import sys

sys.stderr.write("cannot start: no configuration\n")
sys.exit(3)
