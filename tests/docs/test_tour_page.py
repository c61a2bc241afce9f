"""The first guarded call of docs/tour.md runs as written (with its two
paths pointed at a temporary directory), and answers what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_toolguard import ErrorCode, SQLiteAuditStore

TOUR = Path(__file__).resolve().parents[2] / "docs" / "tour.md"


def _tour() -> str:
    text = TOUR.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "the tour has a python block"
    return match.group(1)


def test_the_tour_runs_and_answers_as_its_comments_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "agent-workspace"
    workspace.mkdir()
    monkeypatch.chdir(tmp_path)
    code = _tour()
    assert '"/srv/agent-workspace"' in code
    namespace: dict[str, object] = {}
    exec(
        compile(code.replace("/srv/agent-workspace", str(workspace)), "docs/tour.md", "exec"),
        namespace,
    )
    assert namespace["result"].code is ErrorCode.OK  # type: ignore[attr-defined]
    assert not (workspace / "notes" / "a.md").exists()  # rolled back by the tour
    with SQLiteAuditStore(tmp_path / "audit.db") as store:
        codes = [(row.call_id, row.result_code) for row in store.rows()]
    assert codes == [
        ("call_1", ErrorCode.OK),
        ("call_2", ErrorCode.PATH_OUTSIDE_WORKSPACE),
        ("rollback-call_1", ErrorCode.OK),
    ]


def test_the_tour_without_its_workspace_says_to_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = _tour().replace("/srv/agent-workspace", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="does not exist: create it first"):
        exec(compile(code, "docs/tour.md", "exec"), {})
