"""Shared helpers: small tools whose calls can be counted and steered.

Hypothesis runs derandomized under CI (``CI`` set, as ``.ci/run`` runs):
every run tries the same examples, so a red run is reproducible, and no
example database carries failures from one run to the next. Elsewhere it
explores as usual; ``HYPOTHESIS_PROFILE=ci`` reproduces CI's examples.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from pytest_toolguard.capabilities import Capabilities, Risk
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool

# suite_guard: the whole run writes nothing outside its worlds (decoys, leftover worlds,
# the project's own tree), checked on the xdist controller.
pytest_plugins = ["pytester", "suite_guard"]

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests run first. Under xdist the two workers then share them
    at the start, instead of one worker running the last of them alone at
    the end while the other has nothing left (a matrix over a real tool
    takes a minute)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


EVERY_RISK = frozenset(Risk)
WRITE_ANYWHERE = Capabilities(allowed_risks=EVERY_RISK, write_roots=(".",))


class Spy:
    """Counts handler calls; ``block`` holds handlers until ``release``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.started = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def block(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def record(self, arguments: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(arguments)
        self.started.set()
        self.gate.wait(10)

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.calls)


CONDITION_BOUND = 30.0
"""Seconds a test waits for a condition it is sure to reach (a generous
bound, not a guess at how long it takes)."""


def python_path(*directories: object) -> str:
    """A ``PYTHONPATH`` for a child process: ``directories`` before the
    inherited one, with no empty entry (an empty entry puts the child's
    working directory on its import path, where a test may have planted
    modules on purpose)."""
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return os.pathsep.join(str(entry) for entry in (*directories, *inherited) if str(entry))


def wait_for(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` until it holds; fail after ``CONDITION_BOUND``."""
    end = time.monotonic() + CONDITION_BOUND
    while not condition():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.001)


def spy_tool(
    spy: Spy,
    name: str = "spy",
    *,
    risk: Risk = Risk.READ,
    result: Callable[..., Any] | None = None,
    schema: dict[str, Any] | None = None,
    **options: Any,
) -> ToolSpec:
    """A tool that records its arguments in ``spy`` and returns ``result(**arguments)``
    (default: ``{"echo": arguments}``)."""

    def handler(ctx: Any, **arguments: Any) -> Any:
        spy.record(arguments)
        return result(ctx, **arguments) if result else {"echo": arguments}

    return ToolSpec(
        name=name,
        description=f"test tool {name}",
        input_schema=schema
        or {
            "type": "object",
            "properties": {"text": {"type": "string"}, "path": {"type": "string"}},
            "additionalProperties": False,
        },
        handler=handler,
        risk=risk,
        **options,
    )


def append_tool(spy: Spy, name: str = "append") -> ToolSpec:
    """A side effect that is visible on disk: appends a line to ``log.txt``."""

    def result(ctx: Any, **arguments: Any) -> Any:
        old = ctx.workspace.read_text("log.txt") if ctx.workspace.exists("log.txt") else ""
        ctx.workspace.write_text("log.txt", old + arguments.get("text", "") + "\n")
        return {"lines": (old + "x\n").count("\n")}

    return spy_tool(
        spy,
        name,
        risk=Risk.WRITE,
        result=result,
        paths=(PathAccess.write("log.txt"),),
    )


NOT_OURS = ("-p", "no:langsmith_plugin")
"""Options that leave out the pytest plugins of libraries the suite does not
test: langsmith (installed with langchain-core) registers one whose import,
its assertion rewriting included, costs every pytest process over a second
of CPU, and no test uses it."""


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, whose runs (in process or not) leave out ``NOT_OURS``
    (pytester clears ``PYTEST_ADDOPTS`` first: this is set after)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(NOT_OURS))
    return pytester


@pytest.fixture
def spy() -> Spy:
    return Spy()


@pytest.fixture
def workspace_dir(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def registry_of() -> Callable[..., ToolRegistry]:
    return lambda *specs: ToolRegistry(list(specs))


# --- audit stores: SQLite, and a throwaway PostgreSQL server -------------------------


def _postgres_required() -> bool:
    """CI installs the server (.ci/run), so there a missing one is an error."""
    return bool(os.environ.get("CI") or os.environ.get("TOOLGUARD_REQUIRE_POSTGRES"))


@pytest.fixture(scope="session")
def postgres_server() -> Any:
    """One PostgreSQL server per test session (per xdist worker), started
    on first use: initdb in a temporary directory, a unix socket, no TCP.
    Skips, naming the command to install it, where there is none (fails
    instead under CI)."""
    from postgres_server import ServerUnavailable, start_server

    try:
        server = start_server()
    except ServerUnavailable as exc:
        if _postgres_required():
            pytest.fail(f"PostgreSQL is required under CI: {exc}")
        pytest.skip(str(exc))
    yield server
    server.remove()


@pytest.fixture
def own_postgres_server(postgres_server: Any) -> Any:
    """A PostgreSQL server of this test's own (for tests that stop it, or
    read every byte of its data directory), removed afterwards."""
    from postgres_server import start_server

    server = start_server()
    yield server
    server.remove()


@pytest.fixture(params=["sqlite", "postgres"])
def audit_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Each audit store backend in turn, on a database of this test's own
    (a SQLite file; a PostgreSQL schema)."""
    from audit_backends import PostgresBackend, SQLiteBackend

    backend = (
        SQLiteBackend(tmp_path / "audit.db")
        if request.param == "sqlite"
        else PostgresBackend(request.getfixturevalue("postgres_server"))
    )
    yield backend
    backend.close()


@tool(
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    risk=Risk.WRITE,
    paths=[PathAccess.write("{path}")],
)
def delete_file(ctx: Any, path: str) -> dict[str, Any]:
    """Delete one file."""
    ctx.workspace.delete(path)
    return {}


def hook_in_process(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    project: Path,
    command: str,
    stdin: bytes,
) -> tuple[int, str, str]:
    """``toolguard hook COMMAND`` run in process in ``project`` (its
    ``toolguard.yaml``), ``stdin`` as the bytes it reads: (status, stdout,
    stderr)."""
    from pytest_toolguard.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    monkeypatch.chdir(project)
    status = main(["hook", command, "--config", str(project / "toolguard.yaml")])
    out, err = capsys.readouterr()
    return status, out, err
