"""The handler acts where the policy checked, not where the path leads a
moment later.

The write root was checked by the policy, then the handler resolved the
path again: a ``RENAME_EXCHANGE`` swap inside the workspace put a write
outside its root after 19 calls, with an audit row saying ``allow``. Here a
thread keeps exchanging ``a/d`` (a directory of the root ``a``, the one the
session may use) with ``a/d.link``, a symlink into the other root ``b``.
When the policy meets the link it refuses (``b`` is not allowed); when it
meets the directory it allows, and the handler must then act in that very
directory, wherever the swap has moved it (it stays inside ``a``). So no
call may ever write into ``b`` nor read from it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_symlink_race import EXCHANGE, Swapper

from pytest_toolguard import Capabilities, ErrorCode, Risk, ToolCall, ToolRuntime
from pytest_toolguard.tools import builtin_registry

TRIES = 3000
INSIDE = "inside line\n"
SECRET = "SECRET line of root b\n"


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    """``a/d/f.txt`` (inside the allowed root), ``b/f.txt`` (the other
    root), and ``a/d.link -> ../b``, the swapper's twin of ``a/d``."""
    workspace = tmp_path / "ws"
    (workspace / "a" / "d").mkdir(parents=True)
    (workspace / "b").mkdir()
    (workspace / "a" / "d" / "f.txt").write_text(INSIDE)
    (workspace / "b" / "f.txt").write_text(SECRET)
    (workspace / "a" / "d.link").symlink_to("../b")
    return workspace


@pytest.fixture
def swapping(roots: Path) -> Iterator[Swapper]:
    swapper = Swapper(roots / "a", "d")
    thread = threading.Thread(target=swapper.run, name="swapper-a-d", daemon=True)
    thread.start()
    try:
        yield swapper
    finally:
        swapper.stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and swapper.errors == []


def write_call(i: int) -> ToolCall:
    return ToolCall(f"w{i}", "write_file", {"path": f"a/d/x-{i}.txt", "content": "x"})


def read_call(i: int) -> ToolCall:
    return ToolCall(f"r{i}", "read_text", {"path": "a/d/f.txt"})


def search_call(i: int) -> ToolCall:
    return ToolCall(f"s{i}", "search_text", {"query": "line", "path": "a/d"})


def listing_call(i: int) -> ToolCall:
    return ToolCall(f"l{i}", "list_files", {"path": "a/d"})


def leaked(result: Any) -> bool:
    """``b``'s content or names came back."""
    text = str(result.data)
    return "SECRET" in text or "b/f.txt" in text


VARIANTS: dict[str, Callable[[int], ToolCall]] = {
    "write_file": write_call,
    "read_text": read_call,
    "search_text": search_call,
    "list_files": listing_call,
}


@pytest.mark.slow
@pytest.mark.skipif(EXCHANGE is None, reason="needs renameat2(RENAME_EXCHANGE) (Linux)")
@pytest.mark.parametrize("tool", sorted(VARIANTS))
def test_a_swap_between_two_roots_never_moves_a_call_outside_the_root_checked(
    roots: Path, swapping: Swapper, tool: str
) -> None:
    make = VARIANTS[tool]
    caps = Capabilities(
        allowed_risks=frozenset({Risk.READ, Risk.WRITE}), read_roots=("a",), write_roots=("a",)
    )
    outcomes: Counter[str] = Counter()
    escapes = 0
    with ToolRuntime(builtin_registry(), str(roots), caps) as runtime:
        for i in range(TRIES):
            result = runtime.execute(make(i))
            if result.ok and leaked(result):
                escapes += 1
            outcomes[result.code.value] += 1
    escapes += len(list((roots / "b").glob("x-*")))  # writes that landed in b
    print(f"\n{tool}: {TRIES} tries, {escapes} escapes, {dict(outcomes)}, {swapping.swaps} swaps")
    assert escapes == 0
    # Both states were met: allowed calls, and calls the policy refused.
    assert outcomes[ErrorCode.OK.value] > 0
    assert outcomes[ErrorCode.PERMISSION_DENIED.value] > 0


class SwapAfterThePolicy:
    """A PreToolUse hook (it runs after the policy, before the handler) that
    moves the checked directory away and puts a link into root ``b`` in its
    place: the race of the test above, made to happen every time."""

    name = "swap_after_the_policy"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def pre_tool_use(self, event: Any) -> Any:
        from pytest_toolguard import HookDecision

        self.directory.rename(self.directory.with_name("moved"))
        self.directory.symlink_to(self.link_target)
        return HookDecision("proceed")

    @property
    def link_target(self) -> str:
        depth = len(self.directory.relative_to(self.root).parts) - 1
        return "../" * depth + "b"

    root: Path = Path()


# (tool, arguments, the directory swapped after the policy)
SWAPPED: list[tuple[str, dict[str, Any], str]] = [
    ("write_file", {"path": "a/d/new.txt", "content": "x"}, "a/d"),
    ("write_file", {"path": "a/d/deeper/new.txt", "content": "x"}, "a/d"),
    ("write_file", {"path": "a/d/f.txt", "content": "x"}, "a/d"),
    ("read_text", {"path": "a/d/f.txt"}, "a/d"),
    ("read_csv", {"path": "a/d/f.txt"}, "a/d"),
    ("wait_for_file", {"path": "a/d/f.txt", "wait_seconds": 0.05}, "a/d"),
    ("search_text", {"query": "line", "path": "a/d"}, "a/d"),
    ("search_text", {"query": "line", "path": "a"}, "a/d"),
    ("list_files", {"path": "a/d"}, "a/d"),
    ("list_files", {"path": "a/d", "recursive": True}, "a/d"),
    ("write_markdown_file", {"artifact_name": "r.md", "content": "x"}, "runs/r1/artifacts"),
    ("write_json_file", {"artifact_name": "r.json", "content": {}}, "runs/r1/artifacts"),
    ("list_run_files", {}, "runs/r1"),
]


@pytest.mark.parametrize("isolation", ["thread", "process", "aexecute"])
@pytest.mark.parametrize(
    ("tool", "arguments", "swapped"), SWAPPED, ids=[f"{t}-{a}"[:50] for t, a, _ in SWAPPED]
)
def test_a_directory_swapped_after_the_policy_never_redirects_the_handler(
    roots: Path, tool: str, arguments: dict[str, Any], swapped: str, isolation: Any
) -> None:
    (roots / "runs" / "r1" / "artifacts").mkdir(parents=True)
    (roots / "runs" / "r1" / "artifacts" / "old.md").write_text(INSIDE)
    (roots / "b" / "old.md").write_text(SECRET)
    hook = SwapAfterThePolicy(roots / swapped)
    hook.root = roots
    caps = Capabilities(
        allowed_risks=frozenset({Risk.READ, Risk.WRITE}),
        read_roots=("a", "runs"),
        write_roots=("a", "runs"),
    )
    before_b = sorted(path.name for path in (roots / "b").iterdir())
    with ToolRuntime(
        builtin_registry(),
        str(roots),
        caps,
        hooks=[hook],
        variables={"run_id": "r1"},
        isolation="thread" if isolation == "aexecute" else isolation,
    ) as runtime:
        call = ToolCall("c1", tool, arguments)
        if isolation == "aexecute":
            result = asyncio.run(runtime.aexecute(call))
        else:
            result = runtime.execute(call)
    assert result.code in (ErrorCode.OK, ErrorCode.FORBIDDEN_PATH), result.message
    assert not leaked(result)
    assert sorted(path.name for path in (roots / "b").iterdir()) == before_b
    assert (roots / "b" / "f.txt").read_text() == SECRET


def test_the_handler_meets_a_link_swapped_in_at_the_final_name_as_a_refusal(
    roots: Path,
) -> None:
    class SwapFile:
        name = "swap_file"

        def pre_tool_use(self, event: Any) -> Any:
            from pytest_toolguard import HookDecision

            (roots / "a" / "d" / "f.txt").unlink()
            (roots / "a" / "d" / "f.txt").symlink_to("../../b/f.txt")
            return HookDecision("proceed")

    with ToolRuntime(
        builtin_registry(), str(roots), Capabilities(read_roots=("a",)), hooks=[SwapFile()]
    ) as runtime:
        result = runtime.execute(ToolCall("c1", "read_text", {"path": "a/d/f.txt"}))
    assert result.code is ErrorCode.FORBIDDEN_PATH
    assert "changed while the call ran" in result.message
