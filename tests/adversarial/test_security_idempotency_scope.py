"""Idempotency is scoped on the raw session and key, never on their redacted
or escaped forms.

Two runtimes with separate workspaces shared one audit database, and their
session ids looked like JWTs: both were stored as ``<redacted:jwt>``, which
scoped the key, so Bob's read with key ``read-todo`` was answered
``IDEMPOTENT_REPLAY`` with Alice's file content. The keys ``"\\udc80"`` and
``"\\\\udc80"`` (escaped alike for storage) collided too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_toolguard import ErrorCode, Redactor, ToolCall, ToolRuntime
from pytest_toolguard.audit import SQLiteAuditStore
from pytest_toolguard.idempotency import scope_client_key
from pytest_toolguard.storable import storable_text
from pytest_toolguard.tools import builtin_registry

JWT_HEAD = "eyJhbGciOiJIUzI1NiJ9"

# Pairs of distinct values that are stored alike (redacted or escaped).
SESSION_PAIRS = [
    (
        f"{JWT_HEAD}.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlYQ",
        f"{JWT_HEAD}.eyJzdWIiOiJib2IifQ.c2lnbmF0dXJlYg",
    ),
    ("Bearer sk_live_aaaaaaaaaaaa1", "Bearer sk_live_bbbbbbbbbbbb2"),
    ("ghp_" + "a" * 36, "ghp_" + "b" * 36),
    ("AKIAAAAAAAAAAAAAAAAA", "AKIABBBBBBBBBBBBBBBB"),
    ("xoxb-1111111111-aaaa", "xoxb-2222222222-bbbb"),
    ("https://u:alicepw@h/x", "https://u:bobpw@h/x"),
    ("session_token=alice", "session_token=bob"),
    ("s-\udc80", "s-\\udc80"),
]
KEY_PAIRS = [
    ("\udc80", "\\udc80"),
    ("ghp_" + "c" * 36, "ghp_" + "d" * 36),
    ("Bearer tok_1234567890a", "Bearer tok_1234567890b"),
    ("k-\udcff\udcfe", "k-\\udcff\\udcfe"),
]


def stored_alike(a: str, b: str) -> bool:
    redact = Redactor().redact_text
    return storable_text(redact(a)) == storable_text(redact(b))


def test_the_pairs_are_stored_alike_which_is_what_made_them_collide() -> None:
    assert all(stored_alike(a, b) and a != b for a, b in SESSION_PAIRS + KEY_PAIRS)


@pytest.fixture
def shared_store(tmp_path: Path):
    store = SQLiteAuditStore(tmp_path / "shared.db")
    yield store
    store.close()


def runtime_on(tmp_path: Path, name: str, store: SQLiteAuditStore) -> ToolRuntime:
    root = tmp_path / name
    root.mkdir()
    (root / "todo.txt").write_text(f"{name}'s todo\n")
    return ToolRuntime(builtin_registry(), str(root), audit=store)


@pytest.mark.parametrize(("alice", "bob"), SESSION_PAIRS, ids=repr)
def test_a_key_in_one_session_never_answers_another_session(
    tmp_path: Path, shared_store: SQLiteAuditStore, alice: str, bob: str
) -> None:
    with (
        runtime_on(tmp_path, "alice", shared_store) as first,
        runtime_on(tmp_path, "bob", shared_store) as second,
    ):
        read = {"path": "todo.txt"}
        mine = first.execute(
            ToolCall("a1", "read_text", read, session_id=alice, idempotency_key="read-todo")
        )
        theirs = second.execute(
            ToolCall("b1", "read_text", read, session_id=bob, idempotency_key="read-todo")
        )
    assert mine.code is ErrorCode.OK and mine.data["content"] == "alice's todo\n"
    assert theirs.code is ErrorCode.OK and theirs.data["content"] == "bob's todo\n"


@pytest.mark.parametrize(("first_key", "second_key"), KEY_PAIRS, ids=repr)
def test_two_keys_stored_alike_are_two_actions(
    tmp_path: Path, shared_store: SQLiteAuditStore, first_key: str, second_key: str
) -> None:
    with runtime_on(tmp_path, "alice", shared_store) as runtime:
        (Path(runtime.workspace.root) / "done.txt").write_text("done\n")
        first = runtime.execute(
            ToolCall("c1", "read_text", {"path": "todo.txt"}, idempotency_key=first_key)
        )
        second = runtime.execute(
            ToolCall("c2", "read_text", {"path": "done.txt"}, idempotency_key=second_key)
        )
    assert first.code is ErrorCode.OK
    assert second.code is ErrorCode.OK  # not IDEMPOTENCY_CONFLICT
    assert second.data["content"] == "done\n"


@pytest.mark.parametrize(("alice", "bob"), SESSION_PAIRS[:2], ids=repr)
def test_the_same_key_in_the_same_session_still_replays(
    tmp_path: Path, shared_store: SQLiteAuditStore, alice: str, bob: str
) -> None:
    with runtime_on(tmp_path, "alice", shared_store) as runtime:
        read = {"path": "todo.txt"}
        runtime.execute(ToolCall("c1", "read_text", read, session_id=alice, idempotency_key="k"))
        again = runtime.execute(
            ToolCall("c2", "read_text", read, session_id=alice, idempotency_key="k")
        )
    assert again.code is ErrorCode.IDEMPOTENT_REPLAY


def test_only_the_redacted_session_and_key_are_stored(
    tmp_path: Path, shared_store: SQLiteAuditStore
) -> None:
    alice, _ = SESSION_PAIRS[0]
    key = KEY_PAIRS[1][0]
    with runtime_on(tmp_path, "alice", shared_store) as runtime:
        runtime.execute(
            ToolCall("c1", "read_text", {"path": "todo.txt"}, session_id=alice, idempotency_key=key)
        )
    (row,) = shared_store.rows()
    assert (row.session_id, row.idempotency_key) == ("<redacted:jwt>", "<redacted:github_token>")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("shared.db*"))
    assert alice.encode() not in raw and key.encode() not in raw


def test_a_scope_never_collides_with_a_session_of_the_same_name() -> None:
    assert scope_client_key("k", "t", "s1") != scope_client_key(
        "k", "t", "s1", scope_kind="session"
    )
