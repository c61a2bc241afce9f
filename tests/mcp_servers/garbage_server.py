"""Not an MCP server: it writes a banner to stdout, something to stderr,
then waits for input it never answers."""

import sys

sys.stdout.write("Welcome to the notes server v1.0!\n")
sys.stdout.flush()
sys.stderr.write("starting up\n")
sys.stderr.flush()
for _line in sys.stdin:
    pass
