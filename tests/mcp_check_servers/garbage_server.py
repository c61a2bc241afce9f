"""Not an MCP server: it answers anything with text that is not JSON-RPC."""

import sys

sys.stdout.write("Welcome to my server! Type HELP for help.\n")
sys.stdout.flush()
for _line in sys.stdin:
    sys.stdout.write("?? unknown command\n")
    sys.stdout.flush()
