"""``toolguard import`` re-executes a session in a copy, and the workspace the
user names is never written.

A session log names its files by absolute paths: the directory it ran in
(``/home/dev/proj/notes/a.md``), which is often the very directory the user
names with ``--workspace``. Re-executed as they are, a tool that writes (or
runs ``git commit`` in a subprocess) changes the user's directory, and the
cassette names a path that replay then writes again. The import maps those
paths to its copy before each call, and the copy's path to the cassette's
root in what it records. A tool that still writes outside the copy (a path
it was not given, a sibling of the copy) leaves the import without a
cassette, and the report says what changed.

The tools here write through the host filesystem, as an MCP server does:
only where the arguments point decides where they write.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import PathAccess, Risk, ToolRegistry
from pytest_toolguard.bridges import Transcript, transcript_to_cassette
from pytest_toolguard.bridges.transcripts.transcript import TranscriptCall, TranscriptResult
from pytest_toolguard.cli import main
from pytest_toolguard.registry import ToolSpec
from pytest_toolguard.replay import dumps, load, replay

NEVER_HERE = "never-here/proj"
"""Where the session ran, as its log says, beneath each test's own
directory and never made: so that even an import that did not map it
would write nothing outside the test's directory."""

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(*args: str, cwd: str | Path) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def state(directory: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry beneath ``directory``, ``.git`` included: mode, mtime
    (ns) and content hash (a link's target)."""
    found: dict[str, tuple[int, int, str]] = {}
    for here, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(here, name)
            st = path.lstat()
            if path.is_symlink():
                what = "-> " + os.readlink(path)
            elif path.is_file():
                what = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                what = "dir"
            found[str(path.relative_to(directory))] = (st.st_mode, st.st_mtime_ns, what)
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A git repository with ``notes/a.md``: the workspace the user names."""
    ws = tmp_path / "proj"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "a.md").write_text("first\n")
    git("init", "-q", "-b", "main", cwd=ws)
    git("add", "-A", cwd=ws)
    git("commit", "-q", "-m", "start", cwd=ws)
    yield ws


def _write(ctx: Any, path: str, text: str) -> str:
    target = Path(ctx.workspace.root, path)  # an absolute path is used as it is
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return str(target)


def write_file(ctx: Any, path: str, content: str) -> dict[str, Any]:
    return {"wrote": _write(ctx, path, content)}


def write_many(ctx: Any, files: list[dict[str, str]]) -> dict[str, Any]:
    return {"wrote": [_write(ctx, item["file_path"], item["text"]) for item in files]}


def git_commit(ctx: Any, repo_path: str, message: str) -> dict[str, Any]:
    where = os.path.join(ctx.workspace.root, repo_path)
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", message, cwd=where)
    return {"head": git("rev-parse", "HEAD", cwd=where).strip()}


def spec(name: str, handler: Any, properties: dict[str, Any], *paths: PathAccess) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=name,
        input_schema={"type": "object", "properties": properties},
        handler=handler,
        risk=Risk.WRITE,
        paths=paths,
    )


STRING = {"type": "string"}
FILES = {
    "type": "array",
    "items": {"type": "object", "properties": {"file_path": STRING, "text": STRING}},
}


def registry(*extra: ToolSpec) -> ToolRegistry:
    return ToolRegistry(
        [
            spec("write_file", write_file, {"path": STRING, "content": STRING}),
            spec(
                "write_many",
                write_many,
                {"files": FILES},
                PathAccess.write("{files[*].file_path}"),
            ),
            spec("git_commit", git_commit, {"repo_path": STRING, "message": STRING}),
            *extra,
        ]
    )


def transcript(*calls: tuple[str, dict[str, Any]], cwd: str | None) -> Transcript:
    return Transcript(
        format="mcp",
        calls=tuple(
            TranscriptCall(f"c{i}", name, arguments, f"line {i}", TranscriptResult(ok=True))
            for i, (name, arguments) in enumerate(calls, start=1)
        ),
        cwd=cwd,
    )


def spellings(ws: Path, link: Path, cwd: str) -> dict[str, str]:
    return {
        "named": str(ws),
        "named, doubled slash": f"/{ws}",
        "named through a link": str(link),
        "real path": os.path.realpath(ws),
        "the session's cwd": cwd,
    }


@pytest.fixture
def link(repo: Path, tmp_path: Path) -> Path:
    """Another spelling of the workspace: a link to it."""
    link = tmp_path / "proj-link"
    link.symlink_to(repo)
    return link


SPELLINGS = [
    "named",
    "named, doubled slash",
    "named through a link",
    "real path",
    "the session's cwd",
]


@pytest.mark.parametrize("spelt", SPELLINGS)
@pytest.mark.parametrize("named_by", ["repo", "link"])
def test_writes_to_absolute_paths_naming_the_workspace_land_in_the_copy(
    repo, link, tmp_path, spelt, named_by
):
    cwd = str(tmp_path / NEVER_HERE)
    base = spellings(repo, link, cwd)[spelt]
    before = state(repo)
    output = tmp_path / "out.yaml"
    report = transcript_to_cassette(
        transcript(
            ("write_file", {"path": f"{base}/notes/a.md", "content": "changed\n"}),
            ("write_many", {"files": [{"file_path": f"{base}/notes/b.md", "text": "new\n"}]}),
            ("git_commit", {"repo_path": base, "message": "edit"}),
            cwd=cwd,
        ),
        registry(),
        workspace=repo if named_by == "repo" else link,
        output=output,
    )
    assert [i.result.ok for i in report.cassette.interactions] == [True, True, True], [
        i.result.message for i in report.cassette.interactions
    ]
    assert state(repo) == before
    assert report.written and report.changed_outside == ()
    cassette = load(output)
    final = cassette.final_files
    assert final["notes/a.md"] is not None and final["notes/a.md"].content == b"changed\n"
    assert final["notes/b.md"] is not None and final["notes/b.md"].content == b"new\n"
    # The cassette names its own root, never the copy or the user's directory.
    text = output.read_text(encoding="utf-8")
    assert "toolguard-import-" not in text
    assert str(repo) not in text and str(link) not in text
    assert cassette.workspace.root == cwd
    first = cassette.interactions[0].call.arguments
    assert first["path"] == f"{cwd}/notes/a.md"
    assert not Path(cwd).exists()


def test_a_root_given_on_the_command_line_is_mapped_and_named(repo, tmp_path):
    before = state(repo)
    root = str(tmp_path / "srv" / "app")
    report = transcript_to_cassette(
        transcript(("write_file", {"path": f"{root}/notes/a.md", "content": "x\n"}), cwd=None),
        registry(),
        workspace=repo,
        output=tmp_path / "out.yaml",
        root=root,
    )
    assert report.cassette.interactions[0].result.ok
    assert state(repo) == before
    assert not Path(root).exists()
    assert report.cassette.workspace.root == root
    assert report.cassette.interactions[0].call.arguments["path"] == f"{root}/notes/a.md"


@pytest.mark.parametrize(
    "other",
    [
        "{ws}2/notes/a.md",
        "{ws}-old/notes/a.md",
        "{ws}.bak/notes/a.md",
        "{parent}/elsewhere/proj/notes/a.md",
    ],
)
def test_a_path_that_only_shares_the_workspaces_prefix_is_not_mapped(repo, tmp_path, other):
    # Such a path is another directory: not the workspace, not the copy.
    where = other.format(ws=repo, parent=repo.parent)
    report = transcript_to_cassette(
        transcript(("write_file", {"path": where, "content": "x\n"}), cwd=None),
        registry(),
        workspace=repo,
        output=tmp_path / "out.yaml",
    )
    assert report.cassette.interactions[0].call.arguments["path"] == where


# -- a tool that writes outside the copy anyway --------------------------------


def leaky(target: Path) -> ToolSpec:
    """Writes ``target``, a path its arguments never name (a tool with a
    hard-coded path, or one that derives it from its own configuration)."""

    def handler(ctx: Any) -> dict[str, Any]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("leaked\n")
        return {}

    return spec("leaky", handler, {})


def beside(ctx: Any, name: str) -> dict[str, Any]:
    Path(ctx.workspace.root, "..", name).write_text("beside\n")
    return {}


@pytest.mark.parametrize(
    "where", ["notes/a.md", "notes/new.md", ".git/refs/heads/leaked", "deep/new/dir/x"]
)
def test_an_import_whose_tool_wrote_the_named_workspace_writes_no_cassette(repo, tmp_path, where):
    output = tmp_path / "out.yaml"
    output.write_text("earlier cassette\n")
    report = transcript_to_cassette(
        transcript(
            ("write_file", {"path": "notes/ok.md", "content": "ok\n"}), ("leaky", {}), cwd=None
        ),
        registry(leaky(repo / where)),
        workspace=repo,
        output=output,
    )
    assert not report.written
    assert report.changed_outside and all(
        path.startswith("workspace/") for path in report.changed_outside
    )
    assert output.read_text() == "earlier cassette\n"
    assert str(tmp_path) not in "\n".join(report.changed_outside)


@pytest.mark.parametrize("name", ["escape.txt", "workspace2", ".hidden"])
def test_an_import_whose_tool_wrote_beside_its_copy_writes_no_cassette(repo, tmp_path, name):
    output = tmp_path / "out.yaml"
    report = transcript_to_cassette(
        transcript(("beside", {"name": name}), cwd=None),
        registry(spec("beside", beside, {"name": STRING})),
        workspace=repo,
        output=output,
    )
    assert report.changed_outside == (f"beside the copy/{name}",)
    assert not output.exists()


# -- the command line ------------------------------------------------------------

TOOLS_MODULE = """
import sys
sys.path.insert(0, {tests!r})
from test_security_import_copy import registry, leaky
from pathlib import Path
tools = registry()
leaking = registry(leaky(Path({target!r})))
"""


def mcp_log(*calls: tuple[str, dict[str, Any]]) -> str:
    import json

    lines = []
    for number, (name, arguments) in enumerate(calls, start=1):
        request = {"name": name, "arguments": arguments}
        lines.append({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": request})
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
        lines.append({"jsonrpc": "2.0", "id": number, "result": result})
    return "\n".join(json.dumps(line) for line in lines) + "\n"


@pytest.fixture
def tools_module(repo, tmp_path, monkeypatch) -> str:
    # A name of its own per test: the module holds this test's workspace.
    name = "import_tools_" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    module = tmp_path / "modules" / f"{name}.py"
    module.parent.mkdir()
    tests = str(Path(__file__).parent)
    module.write_text(TOOLS_MODULE.format(tests=tests, target=str(repo / "notes" / "a.md")))
    monkeypatch.syspath_prepend(str(module.parent))
    monkeypatch.syspath_prepend(tests)
    return name


def test_the_command_re_executes_in_a_copy_and_never_changes_the_workspace(
    repo, tmp_path, tools_module, capsys
):
    log = tmp_path / "calls.jsonl"
    log.write_text(
        mcp_log(
            ("write_file", {"path": f"{repo}/notes/a.md", "content": "changed\n"}),
            ("git_commit", {"repo_path": str(repo), "message": "edit"}),
        )
    )
    head = git("rev-parse", "HEAD", cwd=repo)
    before = state(repo)
    output = tmp_path / "out.yaml"
    code = main(
        [
            "import",
            "mcp",
            str(log),
            "--registry",
            f"{tools_module}:tools",
            "--workspace",
            str(repo),
            "-o",
            str(output),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out
    assert state(repo) == before
    assert git("rev-parse", "HEAD", cwd=repo) == head
    cassette = load(output)
    assert [i.result.ok for i in cassette.interactions] == [True, True]
    assert "toolguard-import-" not in dumps(cassette)


def test_the_command_fails_and_writes_nothing_when_a_tool_wrote_the_workspace(
    repo, tmp_path, tools_module, capsys
):
    log = tmp_path / "calls.jsonl"
    log.write_text(mcp_log(("leaky", {})))
    output = tmp_path / "out.yaml"
    code = main(
        [
            "import",
            "mcp",
            str(log),
            "--registry",
            f"{tools_module}:leaking",
            "--workspace",
            str(repo),
            "-o",
            str(output),
        ]
    )
    out = capsys.readouterr()
    assert code == 1, out
    assert "not written" in out.out and "workspace/notes/a.md" in out.out
    assert "Traceback" not in out.err
    assert not output.exists()


def test_the_help_says_what_import_does_to_the_workspace(capsys):
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "copied, and the calls run in the copy" in text
    assert "root mapped there" in text
    assert "no cassette is written" in text


# -- replaying what was imported ---------------------------------------------------


def directory_registry() -> ToolRegistry:
    return ToolRegistry(
        [spec("write_file", write_file, {"path": STRING, "content": STRING})], world="directory"
    )


def test_an_imported_cassette_replays_in_its_world_and_never_in_the_workspace(repo, tmp_path):
    output = tmp_path / "out.yaml"
    cwd = str(tmp_path / NEVER_HERE)
    report = transcript_to_cassette(
        transcript(("write_file", {"path": f"{repo}/notes/a.md", "content": "changed\n"}), cwd=cwd),
        directory_registry(),
        workspace=repo,
        output=output,
    )
    assert report.written
    before = state(repo)
    result = replay(load(output), directory_registry())
    assert result.ok, result
    assert state(repo) == before
    assert not Path(cwd).exists()
