"""A file's content is stored once per cassette (format 3), and referred to.

A session that only reads an SQLite database kept it twice, as base64, in
``workspace.files`` and ``final_files``. Now a content named more than once
is written once under ``blobs:`` and each place holds ``{blob: <key>}``.
The raw bytes of a recorded cassette are counted: one copy of the database
and one of the text file, no secret in any form, and it replays. A format 2
cassette recorded before (``tests/data/cassettes``) still loads, replays and
upgrades. Hostile maps (a missing blob, a wrong digest, an unused blob, a
chain, a small file standing for a huge one) are refused with the field.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.cli import main
from pytest_toolguard.faults.storage import secret_forms
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import blobs, load, loads, record_session, replay
from pytest_toolguard.replay.cassette import (
    Cassette,
    CassetteError,
    FileState,
    Session,
    WorkspaceState,
    dumps,
    to_dict,
    with_root_placeholder,
)

FORMAT_2 = Path(__file__).parent.parent / "data" / "cassettes" / "format_2_unchanged_database.yaml"
"""Recorded by ``record`` below with the package as it was before format 3."""

SECRET = "ghp_" + "Zq8mK2pLx9vQ7wE4rT1yU6iO3aS5dF0gH2jK"


def leaks(data: bytes, secret: str) -> list[str]:
    """The forms of ``secret`` (raw, hex, URL-encoded, base64 at each
    alignment) found in ``data``."""
    return [name for name, form in secret_forms(secret) if form and form in data]


@tool(input_schema={"type": "object"})
def size_of(ctx: Any, name: str) -> dict[str, Any]:
    """The size of a workspace file."""
    return {"size": ctx.workspace.size(name)}


@tool(risk=Risk.WRITE, input_schema={"type": "object"})
def save(ctx: Any, name: str, text: str) -> dict[str, Any]:
    """Writes a workspace file."""
    ctx.workspace.write_text(name, text)
    return {"saved": name}


REGISTRY = ToolRegistry([size_of, save])


def notes(workspace: Path) -> str:
    lines = [f"- note {n}: the database keeps the settings of run {n}\n" for n in range(6)]
    return f"The database: {workspace}/app.db\n" + "".join(lines)


def database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table settings (id integer primary key, name text, value text)")
        db.execute("insert into settings values (1, 'token', ?)", (SECRET,))
        for n in range(2, 40):
            db.execute("insert into settings values (?, ?, ?)", (n, f"key{n}", f"value {n}"))
    db.close()


def record(workspace: Path, cassette: Path) -> None:
    """Reads the database twice and the notes once, writes another file:
    the database and the notes are the same before and after."""
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    database(workspace / "app.db")
    (workspace / "notes.md").write_text(notes(workspace))
    capabilities = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}))
    runtime = ToolRuntime(REGISTRY, str(workspace), capabilities, SQLiteAuditStore(":memory:"))
    calls = [
        ("size_of", {"name": "app.db"}),
        ("size_of", {"name": "notes.md"}),
        ("save", {"name": "out.txt", "text": "done\n"}),
        ("size_of", {"name": "app.db"}),
    ]
    with record_session(runtime, cassette):
        for number, (name, arguments) in enumerate(calls):
            assert runtime.execute(ToolCall(f"call-{number + 1}", name, arguments)).ok
    runtime.close()


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path]:
    workspace, cassette = tmp_path / "ws", tmp_path / "session.yaml"
    record(workspace, cassette)
    return workspace, cassette


# -- stored once ----------------------------------------------------------------


def test_an_unchanged_database_and_text_file_are_stored_once(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    workspace, cassette = recorded
    stored = cassette.read_bytes()
    document = yaml.safe_load(stored)
    assert document["format_version"] == blobs.BLOB_VERSION
    kept = load(cassette)
    database_b64 = base64.b64encode(kept.workspace.files["app.db"])
    assert stored.count(database_b64) == 1
    assert stored.count(b"- note 3: the database keeps the settings of run 3") == 1
    assert document["workspace"]["files"]["app.db"] == document["final_files"]["app.db"]
    assert set(document["workspace"]["files"]["app.db"]) == {"blob"}
    assert document["final_files"]["out.txt"] == "done\n"  # named once: inline
    assert kept.final_files["app.db"] == FileState.of(kept.workspace.files["app.db"])


def test_the_database_stored_once_holds_no_secret_in_any_form(
    recorded: tuple[Path, Path],
) -> None:
    _, cassette = recorded
    assert leaks(cassette.read_bytes(), SECRET) == []


def test_a_cassette_with_blobs_replays(recorded: tuple[Path, Path]) -> None:
    _, cassette = recorded
    report = replay(load(cassette), REGISTRY)
    assert report.ok, report.differences


def test_a_cassette_with_blobs_dumps_back_byte_for_byte(recorded: tuple[Path, Path]) -> None:
    _, cassette = recorded
    text = cassette.read_text()
    assert dumps(load(cassette)) == text
    assert dumps(loads(dumps(load(cassette), syntax="json")), syntax="yaml") == text


def test_re_recording_the_same_session_writes_the_same_blobs(tmp_path: Path) -> None:
    record(tmp_path / "ws", tmp_path / "first.yaml")
    record(tmp_path / "ws", tmp_path / "second.yaml")
    first = yaml.safe_load((tmp_path / "first.yaml").read_text())
    second = yaml.safe_load((tmp_path / "second.yaml").read_text())
    assert list(first["blobs"].items()) == list(second["blobs"].items())
    assert first["final_files"] == second["final_files"]


def test_a_blob_names_the_root_as_the_placeholder_and_loads_under_a_moved_root(
    recorded: tuple[Path, Path],
) -> None:
    workspace, cassette = recorded
    text = cassette.read_text()
    stored = yaml.safe_load(text)["blobs"].values()
    assert any(str(value).startswith("The database: {toolguard_root}/app.db") for value in stored)
    moved = loads(text.replace(f"root: {workspace}\n", "root: /elsewhere/ws\n"))
    assert moved.workspace.files["notes.md"].startswith(b"The database: /elsewhere/ws/app.db\n")
    assert moved.final_files["notes.md"].content == moved.workspace.files["notes.md"]


def test_a_json_cassette_stores_a_repeated_content_once(recorded: tuple[Path, Path]) -> None:
    _, cassette = recorded
    text = dumps(load(cassette), syntax="json")
    database_b64 = base64.b64encode(load(cassette).workspace.files["app.db"]).decode()
    assert text.count(database_b64) == 1
    assert loads(text) == replace(load(cassette), source="<string>")


def _cassette(files: dict[str, bytes], final: dict[str, bytes] | None = None) -> Cassette:
    after = files if final is None else final
    return Cassette(
        kind="cassette",
        name="c",
        session=Session(),
        workspace=WorkspaceState(root="/tmp/rec/ws", files=files),
        interactions=(),
        final_files={path: FileState.of(data) for path, data in after.items()},
    )


def test_a_short_text_named_twice_and_a_binary_named_once_stay_inline() -> None:
    short = b"x = 1\n"
    binary = bytes(range(256)) * 4
    text = dumps(_cassette({"a.py": short, "b.bin": binary}, {"a.py": short}))
    document = yaml.safe_load(text)
    assert "blobs" not in document and document["format_version"] == 1
    assert document["final_files"]["a.py"] == "x = 1\n"


def test_colliding_keys_take_the_whole_digest_and_load_back() -> None:
    files = {f"f{n}.txt": f"{n}\n".encode() * 100 for n in range(40)}
    cassette = _cassette(files)
    inline = with_root_placeholder(to_dict(cassette))
    body = blobs.stored_once(inline, key_chars=1)
    keys = list(body["blobs"])
    assert len(keys) == 40 and {len(key) for key in keys} == {1, 64}
    for key, text in body["blobs"].items():
        assert hashlib.sha256(text.encode()).hexdigest().startswith(key)
    assert blobs.resolved(body) == {**inline, "format_version": blobs.BLOB_VERSION}


def test_a_file_name_that_is_not_utf8_still_refers_to_its_blob() -> None:
    content = b"shared line\n" * 20
    cassette = _cassette({"caf\udce9.txt": content})
    loaded = loads(dumps(cassette))
    assert loaded.final_files["caf\\udce9.txt"].content == content


# -- the old format -------------------------------------------------------------


def test_a_format_2_cassette_still_loads_and_replays() -> None:
    assert yaml.safe_load(FORMAT_2.read_text())["format_version"] == 2
    cassette = load(FORMAT_2)
    assert cassette.workspace.files["app.db"].startswith(b"SQLite format 3\x00")
    assert cassette.final_files["app.db"] == FileState.of(cassette.workspace.files["app.db"])
    report = replay(cassette, REGISTRY)
    assert report.ok, report.differences


def test_a_format_2_cassette_loads_as_the_same_session_recorded_now(tmp_path: Path) -> None:
    record(Path("/tmp/toolguard-blobs-fixture/workspace"), tmp_path / "now.yaml")
    shutil.rmtree("/tmp/toolguard-blobs-fixture", ignore_errors=True)
    old, now = load(FORMAT_2), load(tmp_path / "now.yaml")
    assert old.workspace == now.workspace
    assert old.final_files == now.final_files
    assert [i.call for i in old.interactions] == [i.call for i in now.interactions]


def test_upgrading_a_format_2_cassette_stores_its_database_once(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    shutil.copy(FORMAT_2, path)
    assert main(["cassette", "upgrade", str(path)]) == 0
    stored = path.read_bytes()
    assert yaml.safe_load(stored)["format_version"] == 3
    database_b64 = base64.b64encode(load(FORMAT_2).workspace.files["app.db"])
    assert stored.count(database_b64) == 1
    assert load(path).workspace == load(FORMAT_2).workspace


# -- hostile cassettes ----------------------------------------------------------


TEXT = "a line of a file that is named twice in this cassette\n" * 3
KEY = blobs.KEY_CHARS * "0"


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[: blobs.KEY_CHARS]


def _document(
    refs: dict[str, str], blob_map: Any, *, version: int = 3, final: str | None = None
) -> str:
    body: dict[str, Any] = {
        "format_version": version,
        "kind": "cassette",
        "session": {},
        "workspace": {"root": "/tmp/rec/ws", "files": {"a.txt": {"blob": refs["a"]}}},
        "interactions": [],
        "final_files": {"a.txt": {"blob": refs.get("final", final or refs["a"])}},
    }
    if blob_map is not None:
        body["blobs"] = blob_map
    return yaml.safe_dump(body, sort_keys=False)


def _refused(text: str) -> CassetteError:
    with pytest.raises(CassetteError) as caught:
        loads(text, source="hostile.yaml")
    return caught.value


def test_a_well_formed_map_loads() -> None:
    cassette = loads(_document({"a": _key(TEXT)}, {_key(TEXT): TEXT}))
    assert cassette.workspace.files == {"a.txt": TEXT.encode()}
    assert cassette.final_files["a.txt"].content == TEXT.encode()


def test_a_reference_to_a_missing_blob_is_refused_naming_the_file() -> None:
    error = _refused(_document({"a": _key(TEXT), "final": KEY}, {_key(TEXT): TEXT}))
    assert error.where == '$.final_files["a.txt"]'
    assert f"refers to blob {KEY}, which blobs does not hold" in str(error)


def test_a_blob_whose_content_does_not_have_its_digest_is_refused() -> None:
    error = _refused(_document({"a": KEY}, {KEY: TEXT}))
    assert error.where == f"$.blobs.{KEY}" or error.where.startswith("$.blobs")
    assert f"SHA-256 begins {_key(TEXT)}, not {KEY}" in str(error)


def test_a_blob_no_file_refers_to_is_refused_not_dropped() -> None:
    other = "another content\n" * 10
    error = _refused(_document({"a": _key(TEXT)}, {_key(TEXT): TEXT, _key(other): other}))
    assert _key(other) in error.where
    assert "no file refers to it" in str(error)


def test_a_blob_referring_to_another_blob_is_refused() -> None:
    error = _refused(_document({"a": _key(TEXT)}, {_key(TEXT): {"blob": _key(TEXT)}}))
    assert _key(TEXT) in error.where
    assert "references never chain" in str(error)


def test_blobs_in_a_format_2_document_are_refused() -> None:
    error = _refused(_document({"a": _key(TEXT)}, {_key(TEXT): TEXT}, version=2))
    assert error.where == "$.blobs"
    assert "need format_version 3" in str(error)


def test_a_small_file_standing_for_more_than_a_document_may_hold_is_refused() -> None:
    big = "x" * (1024 * 1024)
    body = yaml.safe_load(_document({"a": _key(big)}, {_key(big): big}))
    body["final_files"] = {f"copy-{n}.txt": {"blob": _key(big)} for n in range(300)}
    error = _refused(json.dumps(body))
    assert error.where == "$.blobs"
    assert "MAX_DOCUMENT_BYTES" in str(error)


def test_a_blob_key_that_is_not_a_digest_is_refused() -> None:
    error = _refused(_document({"a": "xyz"}, {"xyz": TEXT}))
    assert error.where.startswith(("$.blobs", "$.workspace", "$.final_files"))


def test_a_blob_key_written_as_a_number_is_refused() -> None:
    digits = "1234567890123456"
    text = _document({"a": digits}, {digits: TEXT}).replace(f"'{digits}':", f"{digits}:")
    assert yaml.safe_load(text)["blobs"] == {int(digits): TEXT}
    error = _refused(text)
    assert error.where == "$.blobs"
    assert "is not text: quote it" in str(error)


def test_a_blob_of_broken_base64_is_refused() -> None:
    error = _refused(_document({"a": KEY}, {KEY: {"base64": "not base64!"}}))
    assert error.where.startswith("$.blobs")


def test_a_hostile_cassette_is_left_as_it_was_by_an_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(_document({"a": KEY}, {KEY: TEXT}))
    before = path.read_bytes()
    assert main(["cassette", "upgrade", str(path)]) != 0
    assert path.read_bytes() == before


def test_upgrading_a_document_with_broken_base64_twice_refuses_and_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = {"base64": "not base64!" * 20}
    path = tmp_path / "broken.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "format_version": 2,
                "kind": "cassette",
                "session": {},
                "workspace": {"root": "/tmp/rec/ws", "files": {"a.bin": broken}},
                "interactions": [],
                "final_files": {"a.bin": dict(broken)},
            }
        )
    )
    before = path.read_bytes()
    assert main(["cassette", "upgrade", str(path)]) != 0
    assert path.read_bytes() == before
    said = capsys.readouterr().err
    assert "broken.yaml: document: Only base64 data is allowed" in said  # as when inline
    assert "failed:" not in said  # refused as a bad cassette, not a crash of the command
