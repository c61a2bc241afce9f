"""Record the shipped cassettes with the built-in tools.

    python cassettes/record.py                 # every session
    python cassettes/record.py refusals        # one session
    python cassettes/record.py --out /tmp/x    # somewhere else (the tests do this)

Each session builds a real workspace, runs its calls through a real
``ToolRuntime`` (built-in tools, the session's capabilities, variables and
plan, an in-memory audit store) inside ``record_session`` and writes
``<out>/<name>.yaml``, then amplifies it (``pytest_toolguard.amplify``: its
variants, recorded with the same tools). Re-recording an unchanged session writes a
byte-identical file, so the shipped cassettes can be checked to be current:

- the workspace root is a fixed path, ``/tmp/toolguard-record/<name>/workspace``
  (wiped before and after; a lock keeps two recordings from sharing it),
  because the cassette keeps the root it was recorded at;
- the clock is frozen at ``RECORDED_AT`` (the cassette's ``recorded_at``);
- call ids are fixed (``call-01``, ...), and nothing random is sent.

The workspaces hold fake secrets (``SECRETS``) and some calls send them; the
recorder's redactor must keep every one of them out of the cassettes
(``tests/test_shipped_examples.py`` checks the bytes).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_toolguard import (
    Capabilities,
    PlanProgress,
    PlanStep,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRuntime,
)
from pytest_toolguard.amplify import amplify_file
from pytest_toolguard.demo import ANALYSIS_SCHEMA, FEEDBACK_CSV
from pytest_toolguard.harness.clock import frozen_clock
from pytest_toolguard.plan import Artifact
from pytest_toolguard.replay import record_session
from pytest_toolguard.tools import builtin_registry

HERE = Path(__file__).resolve().parent
RECORD_ROOT = Path("/tmp/toolguard-record")
"""Parent of every recording workspace: a fixed path, since the cassette
keeps the workspace root (replay recreates it in a fake filesystem)."""
RECORDED_AT = "2026-03-02T09:00:00+00:00"
RUN_ID = "run-001"
ARTIFACTS = f"runs/{RUN_ID}/artifacts"

# Fake secrets: in workspace files the recorder must not keep, and in the
# arguments of refused calls, where the redactor must replace them.
ENV_API_KEY = "sk-toolguard-fake-0123456789abcdefABCDEF"
BEARER_TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.c2lnbmF0dXJlLWZha2U"
GITHUB_TOKEN = "ghp_FAKEfake0123456789abcdefghijklmnopqr"
AWS_ACCESS_KEY = "AKIAFAKE0123456789AB"
URL_PASSWORD = "hunter2-fake-url-password"
OUTSIDE_SECRET = "outside-the-workspace-do-not-read"
SECRETS: tuple[str, ...] = (
    ENV_API_KEY,
    BEARER_TOKEN,
    GITHUB_TOKEN,
    AWS_ACCESS_KEY,
    URL_PASSWORD,
    OUTSIDE_SECRET,
)
"""Every secret the recordings use; none of their bytes may reach a cassette."""


@dataclass(frozen=True)
class Call:
    tool_name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    idempotency_key: str | None = None


@dataclass(frozen=True)
class SessionSpec:
    """One session to record: the workspace it starts from and its calls."""

    description: str
    capabilities: Capabilities
    calls: Sequence[Call]
    files: Mapping[str, str] = field(default_factory=dict)
    symlinks: Mapping[str, str] = field(default_factory=dict)
    """Workspace-relative link -> target, as ``os.symlink`` takes them."""
    outside_files: Mapping[str, str] = field(default_factory=dict)
    """Paths relative to the workspace's parent: files outside the workspace."""
    variables: Mapping[str, str] = field(default_factory=dict)
    plan: Sequence[PlanStep] | None = None
    actor: str = "agent"
    session_id: str = "session-1"
    timeouts: Mapping[str, float] = field(default_factory=dict)
    """Per-tool deadlines of the session (``ToolRuntime(timeouts=...)``)."""


# -- the feedback-analysis run of seed 000 ---------------------------------------


def _analysis(csv_text: str) -> dict[str, Any]:
    """What the model concludes from the feedback: one item per row, with
    its category and the text as evidence."""
    header, *lines = csv_text.strip().splitlines()
    names = header.split(",")
    items = []
    for line in lines:
        row = dict(zip(names, line.split(",", len(names) - 1), strict=True))
        lowered = row["text"].lower()
        bug = any(word in lowered for word in ("crash", "fails", "loses", "slow"))
        items.append(
            {
                "id": row["id"],
                "channel": row["channel"],
                "category": "bug" if bug else "praise",
                "evidence": row["text"],
            }
        )
    return {
        "items": items,
        "failed_batches": [],
        "categories": dict(sorted(Counter(item["category"] for item in items).items())),
    }


def feedback_analysis() -> SessionSpec:
    analysis = _analysis(FEEDBACK_CSV)
    report = "# Feedback report\n\n" + "".join(
        f"- {name}: {count}\n" for name, count in analysis["categories"].items()
    )
    return SessionSpec(
        description=(
            "Seed 000's feedback-analysis run under a three-step plan (read the CSV, "
            "write the analysis JSON, write the Markdown report), with the seed's two "
            "mistakes: write_markdown_file at step_1 (BLOCKED by the plan) and "
            "write_json_file without content (INVALID_ARGUMENT). The .env file holds "
            "a fake key and never enters the cassette."
        ),
        capabilities=Capabilities(
            allowed_tools=frozenset(
                {"read_csv", "write_json_file", "write_markdown_file", "list_run_files"}
            ),
            allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
            read_roots=("data", f"runs/{RUN_ID}"),
            write_roots=(ARTIFACTS,),
            max_write_bytes=20_000,
        ),
        files={"data/feedback.csv": FEEDBACK_CSV, ".env": f"API_KEY={ENV_API_KEY}\n"},
        variables={"run_id": RUN_ID},
        plan=(
            PlanStep("step_1", frozenset({"read_csv"}), description="read the feedback"),
            PlanStep(
                "step_2",
                frozenset({"write_json_file"}),
                description="write the analysis",
                artifacts=(Artifact(f"{ARTIFACTS}/feedback_analysis.json", ANALYSIS_SCHEMA),),
            ),
            PlanStep(
                "step_3",
                frozenset({"write_markdown_file", "write_json_file", "list_run_files"}),
                description="write the report",
                required_tools=("write_markdown_file",),
                artifacts=(Artifact(f"{ARTIFACTS}/report.md"),),
            ),
        ),
        actor="feedback-agent",
        session_id="feedback-run-001",
        calls=(
            Call("write_markdown_file", {"artifact_name": "report.md", "content": "# Report"}),
            Call("read_csv", {"path": "data/feedback.csv"}),
            Call("write_json_file", {"artifact_name": "feedback_analysis.json"}),
            Call(
                "write_json_file",
                {"artifact_name": "feedback_analysis.json", "content": analysis},
                idempotency_key="analysis-v1",
            ),
            Call("list_run_files", {}),
            Call("write_markdown_file", {"artifact_name": "report.md", "content": report}),
        ),
    )


# -- a code-editing session ----------------------------------------------------

GREET_PY = '''"""Greetings."""


def greet(name: str) -> str:
    return "Hello " + name
'''
GREET_PY_EDITED = '''"""Greetings."""


def greet(name: str, punctuation: str = "!") -> str:
    return f"Hello, {name}{punctuation}"
'''
FAREWELL_PY = '''"""Farewells."""


def farewell(name: str) -> str:
    return f"Goodbye, {name}."
'''


def code_editing() -> SessionSpec:
    return SessionSpec(
        description=(
            "A code-editing session: list the project, search for a function, read it, "
            "rewrite it and add a module under src/ (the only write root), read the "
            "result back; writing a test outside src/ is refused (policy.write_root); "
            "then it waits for a file that is there, and for a build output that never "
            "comes (wait_for_file gives up after its 0.1 s)."
        ),
        capabilities=Capabilities(
            allowed_tools=frozenset(
                {"list_files", "read_text", "search_text", "write_file", "wait_for_file"}
            ),
            allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
            write_roots=("src",),
        ),
        files={
            "README.md": "# greeter\n\nSays hello.\n",
            "pyproject.toml": '[project]\nname = "greeter"\nversion = "0.1.0"\n',
            "src/greeter/__init__.py": '"""The greeter package."""\n\nfrom .greet import greet\n',
            "src/greeter/greet.py": GREET_PY,
            "src/greeter/cli.py": (
                "import sys\n\nfrom .greet import greet\n\n\n"
                "def main() -> None:\n    print(greet(sys.argv[1]))\n"
            ),
            "tests/test_greet.py": (
                "from greeter import greet\n\n\n"
                "def test_greet():\n    assert greet('Ada') == 'Hello Ada'\n"
            ),
        },
        actor="coding-agent",
        session_id="edit-greeter",
        calls=(
            Call("list_files", {}),
            Call("list_files", {"path": "src", "recursive": True}),
            Call("search_text", {"query": "def greet"}),
            Call("read_text", {"path": "src/greeter/greet.py"}),
            Call("write_file", {"path": "src/greeter/greet.py", "content": GREET_PY_EDITED}),
            Call("write_file", {"path": "src/greeter/farewell.py", "content": FAREWELL_PY}),
            Call("read_text", {"path": "src/greeter/greet.py", "max_chars": 200}),
            Call("search_text", {"query": "GOODBYE", "path": "src", "case_sensitive": False}),
            Call(
                "write_file",
                {"path": "tests/test_farewell.py", "content": "def test_farewell(): ...\n"},
            ),
            # Waits for a file that is there (answered at once), then for a
            # build output no job writes (two polls, then TimeoutError).
            Call("wait_for_file", {"path": "pyproject.toml", "wait_seconds": 0.2}),
            Call("wait_for_file", {"path": "build/wheel.txt", "wait_seconds": 0.1}),
        ),
    )


# -- a session full of refusals ----------------------------------------------------


def refusals() -> SessionSpec:
    analysis = {"items": [{"id": "1", "category": "bug"}], "failed_batches": []}
    return SessionSpec(
        description=(
            "A session full of refusals: a wait for a file that never appears, stopped "
            "by the session's 50 ms deadline (TIMEOUT); then, each decided before any "
            "handler ran: traversal with '..', an absolute path, a symlink whose target "
            "is outside, .env, a plan violation, a schema error, an unknown tool, JSON "
            "that does not parse, a write into another run, a write over the size limit, "
            "and a duplicate submission (same idempotency key: the first outcome is "
            "replayed; with other arguments: a conflict). Several calls carry fake "
            "secrets, redacted here."
        ),
        capabilities=Capabilities(
            allowed_tools=frozenset(
                {
                    "list_files",
                    "read_csv",
                    "read_text",
                    "write_file",
                    "write_json_file",
                    "write_markdown_file",
                    "wait_for_file",
                }
            ),
            allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
            write_roots=(ARTIFACTS,),
            max_write_bytes=1_000,
        ),
        files={
            "data/feedback.csv": FEEDBACK_CSV,
            "docs/guide.md": "# Guide\n\nRead data/feedback.csv, write the analysis.\n",
            ".env": f"OPENAI_API_KEY={ENV_API_KEY}\n",
            "runs/run-002/artifacts/feedback_analysis.json": '{"items": []}\n',
        },
        symlinks={"docs/shared.txt": "../../outside/secret.txt"},
        outside_files={"outside/secret.txt": f"{OUTSIDE_SECRET}\n"},
        variables={"run_id": RUN_ID},
        plan=(
            PlanStep(
                "step_1",
                frozenset({"read_csv", "read_text", "list_files", "wait_for_file"}),
                description="read the feedback",
                required_tools=("read_csv",),
            ),
            PlanStep("step_2", frozenset({"write_json_file"}), description="write the analysis"),
            PlanStep(
                "step_3",
                frozenset({"write_json_file", "write_markdown_file"}),
                description="write the report",
                required_tools=("write_markdown_file",),
            ),
        ),
        actor="careless-agent",
        session_id="refusals-1",
        timeouts={"wait_for_file": 0.05},
        calls=(
            # Looks around: the listing shows docs/shared.txt is a symlink. (It
            # also makes the recorder keep the link: a refused call through it
            # touches nothing, so alone it would leave the link out.)
            Call("list_files", {"path": "docs"}),
            # Waits for an export no job will write: the deadline stops it.
            Call("wait_for_file", {"path": "exports/feedback.json", "wait_seconds": 30}),
            Call("read_text", {"path": "../outside/secret.txt"}),
            Call("read_text", {"path": "data/../../outside/secret.txt"}),
            Call("read_text", {"path": "/etc/passwd"}),
            Call("read_text", {"path": "docs/shared.txt"}),
            Call("read_text", {"path": ".env"}),
            Call("read_text", {"path": "docs/../.env"}),
            Call(
                "write_file",
                {"path": ".env", "content": f"GITHUB_TOKEN={GITHUB_TOKEN}\n"},
            ),
            Call("write_markdown_file", {"artifact_name": "report.md", "content": "# early"}),
            Call(
                "read_csv",
                {
                    "path": "data/feedback.csv",
                    "headers": {"Authorization": f"Bearer {BEARER_TOKEN}"},
                },
            ),
            Call(
                "write_file",
                {
                    "path": "../outside/notes.txt",
                    "content": f"db: postgres://agent:{URL_PASSWORD}@db.internal/app\n",
                },
            ),
            Call("fetch_url", {"url": "https://example.com", "aws_key": AWS_ACCESS_KEY}),
            Call("read_csv", '{"path": "data/feedback.csv"'),
            Call("read_csv", {"path": "data/feedback.csv", "max_rows": 3}),
            Call(
                "write_file",
                {"path": "runs/run-002/artifacts/feedback_analysis.json", "content": "{}"},
            ),
            Call(
                "write_json_file",
                {"artifact_name": "feedback_analysis.json", "content": {"blob": "x" * 1_200}},
            ),
            Call(
                "write_json_file",
                {"artifact_name": "feedback_analysis.json", "content": analysis},
                idempotency_key="analysis-v1",
            ),
            Call(
                "write_json_file",
                {"artifact_name": "feedback_analysis.json", "content": analysis},
                idempotency_key="analysis-v1",
            ),
            Call(
                "write_json_file",
                {"artifact_name": "feedback_analysis.json", "content": {"items": []}},
                idempotency_key="analysis-v1",
            ),
        ),
    )


SESSIONS: dict[str, Callable[[], SessionSpec]] = {
    "feedback_analysis": feedback_analysis,
    "code_editing": code_editing,
    "refusals": refusals,
}


# -- recording ----------------------------------------------------------------------


@contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """One recording at a time uses the fixed workspace paths."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(base: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))


def record(name: str, out: Path) -> Path:
    """Record the session ``name`` into ``out/<name>.yaml``; return the path."""
    spec = SESSIONS[name]()
    base = RECORD_ROOT / name
    workspace = base / "workspace"
    target = out / f"{name}.yaml"
    shutil.rmtree(base, ignore_errors=True)
    try:
        workspace.mkdir(parents=True)
        _write(workspace, spec.files)
        _write(base, spec.outside_files)
        for link, link_target in spec.symlinks.items():
            (workspace / link).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link_target, workspace / link)
        store = SQLiteAuditStore(":memory:")
        runtime = ToolRuntime(
            builtin_registry(),
            str(workspace),
            spec.capabilities,
            store,
            hooks=[PlanProgress(spec.plan)] if spec.plan else [],
            variables=spec.variables,
            timeouts=spec.timeouts,
        )
        try:
            with (
                frozen_clock(RECORDED_AT),
                record_session(
                    runtime,
                    target,
                    recorded_by=f"python cassettes/record.py {name}",
                    description=spec.description,
                ),
            ):
                for number, call in enumerate(spec.calls, start=1):
                    runtime.execute(
                        ToolCall(
                            call_id=f"call-{number:02d}",
                            tool_name=call.tool_name,
                            arguments=call.arguments,
                            actor=spec.actor,
                            session_id=spec.session_id,
                            idempotency_key=call.idempotency_key,
                        )
                    )
        finally:
            runtime.close()
            store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        metavar="name",
        help=f"sessions to record (default: all): {', '.join(SESSIONS)}",
    )
    parser.add_argument(
        "--out", type=Path, default=HERE, help="directory to write to (default: %(default)s)"
    )
    options = parser.parse_args(argv)
    unknown = [name for name in options.names if name not in SESSIONS]
    if unknown:
        parser.error(f"unknown session {', '.join(unknown)}; known: {', '.join(SESSIONS)}")
    options.out.mkdir(parents=True, exist_ok=True)
    with _exclusive(RECORD_ROOT):
        for name in options.names or list(SESSIONS):
            path = record(name, options.out)
            # Then its variants, recorded with the same (trusted) tools.
            report = amplify_file(path, builtin_registry(), source=f"{name}.yaml")
            if not report.ok:
                raise SystemExit("\n".join(report.lines()))
            print(f"recorded {path} ({report.kept} variants)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
