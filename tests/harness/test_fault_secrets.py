"""Faults that rewrite a call's arguments send the real secret, not the
recorded placeholder: ``Cell.call(arguments)`` fills ``toolguard_secrets``
in last, whatever arguments a fault derived from the recorded ones."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pytest_toolguard import Risk
from pytest_toolguard.faults import BUILTIN_FAULTS, iter_cells, run_cell
from pytest_toolguard.faults.storage import SHAPELESS_SECRET
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import loads

REAL = "s3cr3t-value-for-the-test"

CASE = """
format_version: 1
kind: case
session:
  capabilities: {allowed_risks: [read, write], write_roots: ["."]}
workspace:
  files: {notes.txt: "hello\\n"}
interactions:
  - call:
      tool_name: annotate
      arguments: {path: notes.txt, api_key: "<redacted:api_key>", note: "a short note"}
    result: {ok: true, code: OK}
"""

seen: list[str] = []
lock = threading.Lock()


@tool(input_schema={"type": "object"}, risk=Risk.WRITE)
def annotate(ctx: Any, path: str, api_key: str, note: str = "") -> dict[str, Any]:
    """Appends a note to a file; refuses a wrong key, as a real API would."""
    with lock:
        seen.append(api_key)
    if api_key != REAL:
        raise PermissionError("bad api key")
    text = ctx.workspace.read_text(path)
    ctx.workspace.write_text(path, text + note + "\n")
    return {"chars": len(text) + len(note) + 1}


REGISTRY = ToolRegistry([annotate])
REWRITING = ("path_traversal", "secret_in_payload", "secret_by_name")


@pytest.mark.parametrize("name", [fault.name for fault in BUILTIN_FAULTS])
def test_no_fault_sends_a_recorded_placeholder_for_a_known_secret(name: str) -> None:
    cassette = loads(CASE, source="case.yaml")
    faults = [fault for fault in BUILTIN_FAULTS if fault.name == name]
    seen.clear()
    for target, fault in iter_cells(cassette, REGISTRY, "case.yaml", faults):
        run_cell(fault, target, REGISTRY, secrets={"api_key": REAL})
    assert not [value for value in seen if "<redacted:" in value]
    if name == "secret_by_name":  # it sends a secret of its own in the secret argument
        assert seen and all(value == SHAPELESS_SECRET for value in seen)
    else:
        assert all(value.startswith(REAL) for value in seen)
    if name in REWRITING:  # these rewrite the arguments, and the handler runs
        assert seen
