"""What the replay benchmark replays: a recorded read/write session, a
one-call case, and a 10,000-interaction cassette.

* ``record_session_workload``: a real workspace of ``MODULES`` Python files
  under ``src/``, and a session that reads each one and rewrites it with
  one more line (``read_text`` then ``write_file``, alternating), recorded
  with the library's ``Recorder`` through a real ``ToolRuntime``. The
  cassette's root is the real workspace's path, so the same cassette can
  run in the fake filesystem (pyfakefs rebuilds it there) and, for the
  variants without pyfakefs, on the real directory (``reset`` puts the
  files back first).
* ``ONE_CALL_CASE``: the smallest useful case, one ``read_text`` of one
  file, for the per-cassette set-up and the pytest items.
* ``big_cassette``: the shipped cassettes' interactions, cycled to 10,000
  with fresh call ids: realistic shapes and sizes (listings, refusals,
  search results, file contents), for loading and dumping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from variants import BenchmarkSetupError

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.replay import Cassette, CassetteError, load, loads
from pytest_toolguard.replay.cassette import Interaction
from pytest_toolguard.replay.recorder import Recorder
from pytest_toolguard.tools import builtin_registry

MODULES = 20
"""Files in the recorded workspace; the session makes two calls per file."""
RECORDED_AT = "2026-01-05T09:30:00+00:00"
"""The frozen time of the recorded session (fixed, so a variant that runs
without the frozen clock can be told apart by its audit timestamps)."""
SHIPPED = Path(__file__).resolve().parent.parent / "cassettes"

ONE_CALL_CASE = """\
format_version: 1
kind: case
description: One read_text of one small file (the replay benchmark's per-cassette case).
session:
  capabilities:
    allowed_risks: [read]
workspace:
  files:
    notes.txt: |
      - 2026-01-05: reviewed the feedback export, 35 rows, next step: report
interactions:
  - call:
      call_id: call-01
      tool_name: read_text
      arguments: {path: notes.txt}
    result:
      ok: true
      code: OK
      state: SUCCEEDED
    audit:
      state: SUCCEEDED
      decision: allow
      rule: policy.allow
final_files:
  notes.txt: |
    - 2026-01-05: reviewed the feedback export, 35 rows, next step: report
"""


@dataclass(frozen=True, slots=True)
class Session:
    """The recorded read/write session and the real workspace it came from."""

    cassette: Cassette
    root: Path
    capabilities: Capabilities
    calls: tuple[ToolCall, ...]
    initial: dict[str, bytes]
    """Each file's bytes before the first call, by path relative to ``root``."""

    def reset(self) -> None:
        """Put the real workspace back as it was before the first call."""
        for path, content in self.initial.items():
            (self.root / path).write_bytes(content)

    def changed(self) -> list[str]:
        """Files of the real workspace that differ from their initial bytes."""
        root = self.root
        return [path for path, data in self.initial.items() if (root / path).read_bytes() != data]


def module_text(index: int, lines: int = 24) -> str:
    """A small Python module (about 700 bytes), with no secrets in it."""
    body = "".join(
        f"    total += step_{line}(values[{line}])  # keep the running total\n"
        for line in range(lines)
    )
    head = f'"""Module {index:02d} of the benchmark project."""\n\n\n'
    return f"{head}def run(values):\n    total = 0\n{body}    return total\n"


def record_session_workload(directory: Path) -> Session:
    """Build the workspace under ``directory`` and record the session."""
    root = directory / "workspace"
    (root / "src").mkdir(parents=True)
    initial: dict[str, bytes] = {}
    calls: list[ToolCall] = []
    for index in range(MODULES):
        path = f"src/module_{index:02d}.py"
        text = module_text(index)
        initial[path] = text.encode("utf-8")
        (root / path).write_text(text, encoding="utf-8")
        calls.append(
            ToolCall(
                call_id=f"call-{2 * index + 1:03d}", tool_name="read_text", arguments={"path": path}
            )
        )
        calls.append(
            ToolCall(
                call_id=f"call-{2 * index + 2:03d}",
                tool_name="write_file",
                arguments={"path": path, "content": text + f"# reviewed {index:02d}\n"},
            )
        )
    capabilities = Capabilities(
        allowed_tools=frozenset({"read_text", "write_file"}),
        allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
        write_roots=("src",),
    )
    store = SQLiteAuditStore(":memory:")
    runtime = ToolRuntime(builtin_registry(), str(root), capabilities, store)
    recorder = Recorder(runtime, name="replay_bench_read_write")
    recorder.start()
    try:
        for call in calls:
            result = runtime.execute(call)
            if not result.ok:
                raise BenchmarkSetupError(
                    f"recording: {call.tool_name} answered {result.code}: {result.message}"
                )
    finally:
        recorder.stop()
    cassette = replace(recorder.cassette(), recorded_at=RECORDED_AT)
    runtime.close()
    store.close()
    if sorted(cassette.workspace.files) != sorted(initial):
        raise BenchmarkSetupError("recording: the cassette does not hold every workspace file")
    session = Session(cassette, root, capabilities, tuple(calls), initial)
    session.reset()
    return session


def one_call_case() -> Cassette:
    """``ONE_CALL_CASE``, loaded."""
    return loads(ONE_CALL_CASE, source="<replay benchmark case>")


def shipped_interactions(directory: Path = SHIPPED) -> tuple[Interaction, ...]:
    """Every interaction of the shipped cassettes, in file order."""
    paths = sorted(directory.glob("*.yaml"))
    if not paths:
        raise BenchmarkSetupError(f"no cassettes in {directory}")
    found: list[Interaction] = []
    for path in paths:
        try:
            found.extend(load(path).interactions)
        except CassetteError as exc:
            raise BenchmarkSetupError(f"a shipped cassette does not load: {exc}") from None
    return tuple(found)


def big_cassette(template: Cassette, interactions: Sequence[Interaction], count: int) -> Cassette:
    """``template`` with ``count`` interactions: ``interactions`` cycled,
    each with a fresh call id (``call-00001``, ...)."""
    made = []
    for index in range(count):
        item = interactions[index % len(interactions)]
        made.append(replace(item, call=replace(item.call, call_id=f"call-{index + 1:05d}")))
    return replace(template, name="replay_bench_10k", interactions=tuple(made))
