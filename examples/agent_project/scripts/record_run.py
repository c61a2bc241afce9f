"""Record an agent run into cassettes/agent_run.yaml, as a user records one.

    python scripts/record_run.py

It starts a small status service on 127.0.0.1 (a thread of this script),
makes a workspace, and runs an agent's calls through a real ``ToolRuntime``
inside ``record_session``: arguments as JSON text (as model APIs send them),
one approved HTTP call to the service, and a few calls the boundary refuses.
Replay (``pytest --toolguard-replay``) needs neither the service nor the
approver: the approval and the HTTP exchange are in the cassette.
"""

from __future__ import annotations

import http.server
import json
import shutil
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from agent_tools import registry  # noqa: E402

from pytest_toolguard import (  # noqa: E402
    Approver,
    Capabilities,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRuntime,
)
from pytest_toolguard.replay import record_session  # noqa: E402

WORKSPACE = Path("/tmp/toolguard-example/workspace")
"""A fixed root: the cassette keeps the root it was recorded at."""
CASSETTE = HERE / "cassettes" / "agent_run.yaml"


class StatusHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = json.dumps({"service": "billing", "healthy": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def calls(base_url: str) -> list[tuple[str, dict[str, object]]]:
    return [
        ("grep_file", {"path": "logs/app.log", "pattern": "ERROR"}),
        ("fetch_status", {"url": f"{base_url}/status"}),
        ("save_note", {"path": "notes/status.md", "text": "billing is healthy\n"}),
        ("word_count", {"path": "notes/status.md"}),
        ("copy_file", {"source": "notes/status.md", "destination": "notes/archive/status.md"}),
        # Refused by the boundary:
        ("grep_file", {"path": ".env", "pattern": "KEY"}),
        ("save_note", {"path": "../escape.md", "text": "x"}),
        ("fetch_status", {"url": "http://example.com/status"}),
        ("save_nte", {"path": "notes/x.md", "text": "x"}),
    ]


def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StatusHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    shutil.rmtree(WORKSPACE, ignore_errors=True)
    (WORKSPACE / "logs").mkdir(parents=True)
    (WORKSPACE / "logs" / "app.log").write_text("INFO up\nERROR billing slow\nINFO ok\n")
    (WORKSPACE / ".env").write_text("BILLING_TOKEN=sk_live_do_not_record\n")
    runtime = ToolRuntime(
        registry(),
        str(WORKSPACE),
        Capabilities(
            allowed_risks=frozenset({Risk.READ, Risk.WRITE, Risk.EXTERNAL}),
            write_roots=("notes",),
            network_hosts=("127.0.0.1",),
        ),
        SQLiteAuditStore(":memory:"),
        hooks=[Approver(lambda event: True)],  # a human said yes
    )
    try:
        with record_session(runtime, CASSETTE, recorded_by="python scripts/record_run.py"):
            for number, (tool, arguments) in enumerate(calls(base_url), 1):
                result = runtime.execute(
                    ToolCall(
                        call_id=f"call_{number}", tool_name=tool, arguments=json.dumps(arguments)
                    )
                )
                print(f"{number} {tool}: {result.code.value}")
    finally:
        runtime.close()
        server.shutdown()
        shutil.rmtree(WORKSPACE.parent, ignore_errors=True)
    print(f"recorded {CASSETTE.relative_to(HERE)}")


if __name__ == "__main__":
    main()
