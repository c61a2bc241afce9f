"""Fuzzing from a starting workspace of one's own (``workspace=``): every
example starts from that state, moved to the fuzz workspace's root beside the
same decoys and the link leading out; without it, the fixed fuzz workspace."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.fuzz import Problem, check_call, fuzz_tool
from pytest_toolguard.fuzz.workspace import (
    FUZZ_WORKSPACE,
    WORKSPACE_ROOT,
    WORKSPACE_SYMLINKS,
    starting_workspace,
)
from pytest_toolguard.registry import ToolSpec, WorldKind, tool
from pytest_toolguard.replay.cassette import WorkspaceState

RECORDED = "/home/me/project"
PROJECT = WorkspaceState(
    root=RECORDED,
    files={"config/settings.json": b'{"mode": "strict"}', "README.md": b"hello\n"},
    directories=("empty",),
    symlinks={"current": f"{RECORDED}/config", "up": "/srv/elsewhere"},
    outside_files={"/srv/elsewhere/x.txt": b"recorded outside"},
    aliases=("/private/home/me/project",),
)
PATH = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}},
    "required": ["path"],
    "additionalProperties": False,
}


def _reader(world: WorldKind) -> ToolSpec:
    """Reads with raw open() from the workspace root: it answers OK only
    where the file is, and leaks whatever it is led to."""

    def read_raw(ctx: ToolContext, path: str) -> dict[str, Any]:
        with open(os.path.join(ctx.workspace.root, path), encoding="utf-8") as handle:
            return {"content": handle.read()}

    made: ToolSpec = tool(name="read_raw", input_schema=PATH, risk=Risk.READ, world=world)(read_raw)
    return made


def test_without_a_workspace_the_fixed_fuzz_workspace_is_the_start() -> None:
    assert starting_workspace() is FUZZ_WORKSPACE
    assert starting_workspace(None) is FUZZ_WORKSPACE


def test_a_workspace_given_is_moved_to_the_fuzz_root_with_its_links() -> None:
    started = starting_workspace(PROJECT)
    assert started.root == WORKSPACE_ROOT
    assert started.files == PROJECT.files and started.directories == ("empty",)
    assert started.symlinks == {
        "current": f"{WORKSPACE_ROOT}/config",  # under the old root: moved with it
        "up": "/srv/elsewhere",  # elsewhere: as it is
        **WORKSPACE_SYMLINKS,  # the link leading out, for the probes
    }
    assert started.outside_files == {} and started.aliases == ()


def test_a_path_of_its_own_is_never_replaced_by_the_link_leading_out() -> None:
    (name,) = WORKSPACE_SYMLINKS
    own = WorkspaceState(root=RECORDED, files={name: b"a file here"})
    started = starting_workspace(own)
    assert started.files == {name: b"a file here"} and name not in started.symlinks


def _fixed(world: WorldKind, path: str) -> ToolSpec:
    """Reads one path of the workspace, taking no argument."""

    def read_fixed(ctx: ToolContext) -> dict[str, Any]:
        with open(os.path.join(ctx.workspace.root, path), encoding="utf-8") as handle:
            return {"content": handle.read()}

    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    made: ToolSpec = tool(name="read_fixed", input_schema=schema, risk=Risk.READ, world=world)(
        read_fixed
    )
    return made


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize(
    ("path", "given", "default"),
    [
        pytest.param("config/settings.json", "OK", "EXECUTION_ERROR", id="its-file"),
        pytest.param("current/settings.json", "OK", "EXECUTION_ERROR", id="its-link-moved"),
        pytest.param("notes.txt", "EXECUTION_ERROR", "OK", id="not-the-fuzz-file"),
    ],
)
def test_every_call_starts_from_the_workspace_given(
    world: WorldKind, path: str, given: str, default: str
) -> None:
    """The same call answers by what the start holds, and passes every
    check in both (a link under the recorded root leads inside, not out)."""
    for workspace, expected in ((PROJECT, given), (None, default)):
        report = fuzz_tool(_fixed(world, path), examples=2, workspace=workspace)
        assert report.failures == () and report.skipped is None
        valid = {code: n for code, n in report.codes.items() if code != "INVALID_ARGUMENT"}
        assert valid == {expected: report.valid_calls}
        assert check_call(_reader(world), {"path": path}, workspace=workspace) == ()


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize("path", ["link-out/secret.txt", "../outside/secret.txt"])
def test_escapes_from_a_workspace_given_are_still_caught(world: WorldKind, path: str) -> None:
    failures = check_call(_reader(world), {"path": path}, workspace=PROJECT)
    assert Problem.OUTSIDE_READ in {failure.problem for failure in failures}
