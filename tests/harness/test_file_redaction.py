"""Workspace files a cassette keeps hold no secret, whatever their bytes.

A file that is not UTF-8 (latin-1 text, UTF-8 with one stray byte, UTF-16,
an SQLite database, a PNG) was kept as it was, base64 in the cassette, its
tokens intact. Such a file now has each secret its text readings hold
overwritten in place by as many ``*``: it keeps its length and every other
byte, so an SQLite database still opens. The cassette's raw bytes are
searched for every form of each secret: raw, hex, URL-encoded, base64 at
each alignment, UTF-16 either order.
"""

from __future__ import annotations

import base64
import io
import os
import sqlite3
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.faults.storage import secret_forms
from pytest_toolguard.redaction import Redactor
from pytest_toolguard.registry import ToolRegistry, tool
from pytest_toolguard.replay import load, record_session, replay
from pytest_toolguard.replay.redacting import FILL, redact_file

SECRETS = {
    "github": "ghp_" + "Zq8mK2pLx9vQ7wE4rT1yU6iO3aS5dF0gH2jK",
    "slack": "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "aws": "AKIA" + "Q3EGRIWBZXJ5T7NL",
}


def every_form(secret: str) -> list[tuple[str, bytes]]:
    forms = secret_forms(secret)
    forms.append(("utf-16-le", secret.encode("utf-16-le")))
    forms.append(("utf-16-be", secret.encode("utf-16-be")))
    forms.append(("base64 of utf-16-le", base64.b64encode(secret.encode("utf-16-le"))[4:-4]))
    return forms


def leaks(data: bytes, secret: str) -> list[str]:
    return [name for name, form in every_form(secret) if form and form in data]


def latin_1(secret: str) -> bytes:
    return f"Größe: 3 Äpfel\ntoken = {secret}\nEnde é\n".encode("latin-1")


def stray_byte(secret: str) -> bytes:
    return b"caf\xc3\xa9 \xff broken\nexport TOKEN=" + secret.encode() + b"\nend\n"


def utf16_bom(secret: str) -> bytes:
    return f"notes\nkey: {secret}\nend\n".encode("utf-16")  # with its BOM


def utf16_be_bom(secret: str) -> bytes:
    return b"\xfe\xff" + f"auth {secret} end".encode("utf-16-be")


def png(secret: str) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"tEXt", b"Comment\x00deploy key " + secret.encode() + b" \xfe\x00\x01")
        + chunk(b"IDAT", pixels)
        + chunk(b"IEND", b"")
    )


def sqlite_file(secret: str, path: Path) -> bytes:
    """A database whose first row holds ``secret`` as a column of its own,
    and a line of config holding it. (A record glues its columns' bytes: a
    token right after another text column is glued to its last letter.)"""
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(
            "create table settings (id integer primary key, value text, n integer, note text)"
        )
        db.execute("insert into settings values (1, ?, 7, ?)", (secret, f"token = {secret}"))
        db.execute("insert into settings values (2, 'plain value', 8, 'nothing')")
    db.close()
    return path.read_bytes()


KINDS: dict[str, Callable[[str], bytes]] = {
    "latin-1 text": latin_1,
    "UTF-8 with a stray byte": stray_byte,
    "UTF-16 with its BOM": utf16_bom,
    "UTF-16BE with its BOM": utf16_be_bom,
    "PNG with a text chunk": png,
}


@pytest.mark.parametrize("secret", SECRETS.values(), ids=list(SECRETS))
@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_a_file_that_is_not_utf8_is_kept_without_its_secret_and_with_its_length(
    kind: Callable[[str], bytes], secret: str
) -> None:
    content = kind(secret)
    assert leaks(content, secret)  # the file as written gives the secret away
    kept = redact_file(Redactor(), content)
    assert leaks(kept, secret) == []
    assert len(kept) == len(content)
    assert redact_file(Redactor(), kept) == kept  # replay redacts what it reads the same way


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_only_the_secret_is_overwritten_by_the_fill(kind: Callable[[str], bytes]) -> None:
    secret = SECRETS["github"]
    content = kind(secret)
    kept = redact_file(Redactor(), content)
    for codec in ("ascii", "utf-16-le", "utf-16-be"):
        form = secret.encode(codec)
        start = content.find(form)
        if start >= 0:
            break
    end = start + len(form)
    assert kept[:start] == content[:start]
    assert kept[end:] == content[end:]
    assert kept[start:end] == (FILL * len(secret)).encode(codec)


@pytest.mark.parametrize("secret", SECRETS.values(), ids=list(SECRETS))
def test_an_sqlite_database_keeps_no_token_and_still_opens(tmp_path: Path, secret: str) -> None:
    content = sqlite_file(secret, tmp_path / "app.db")
    assert leaks(content, secret)
    kept = redact_file(Redactor(), content)
    assert leaks(kept, secret) == []
    assert len(kept) == len(content)
    copy = tmp_path / "kept.db"
    copy.write_bytes(kept)
    with sqlite3.connect(copy) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        rows = db.execute("select id, value, n, note from settings order by id").fetchall()
    db.close()
    assert rows[0][:3] == (1, FILL * len(secret), 7)
    assert rows[0][3].endswith(" = " + FILL * len(secret))
    assert rows[1] == (2, "plain value", 8, "nothing")


@pytest.mark.parametrize(
    "content",
    [b"\x00\x01\x02\xff" * 64, "Größe é\n".encode("latin-1") * 20, "plain\n".encode("utf-16")],
    ids=["binary", "latin-1", "utf-16"],
)
def test_a_file_without_a_secret_is_kept_byte_for_byte(content: bytes) -> None:
    assert redact_file(Redactor(), content) == content


def test_utf8_text_keeps_its_placeholders() -> None:
    secret = SECRETS["github"]
    kept = redact_file(Redactor(), f"see {secret} here\n".encode())
    assert kept == b"see <redacted:github_token> here\n"


@tool(input_schema={"type": "object"})
def size_of(ctx: Any, name: str) -> dict[str, Any]:
    """Asks about a file, which makes the recorder keep it."""
    return {"size": ctx.workspace.size(name)}


# Every secret: the text around a token in a binary file is glued to it.
GLUED_SECRETS = {
    **SECRETS,
    "github, 36 characters": "ghp_" + "Zq8mK2pLx9vQ7wE4rT1yU6iO3aS5dF0g",
    "openai": "sk-" + "A1b2C3d4E5f6G7h8I9j0T3BlbkFJ" + "A1b2C3d4E5f6G7h8I9j0",
    "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
}


def sqlite_rows(columns: tuple[str, ...], values: tuple[Any, ...], path: Path) -> bytes:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(f"create table t ({', '.join(f'{name} text' for name in columns)})")
        db.execute(f"insert into t values ({', '.join('?' * len(values))})", values)
        db.execute(
            f"insert into t values ({', '.join('?' * len(values))})", ("plain",) * len(values)
        )
    db.close()
    return path.read_bytes()


# Tables whose record glues the token to a serial-type byte (a letter or a
# digit for a text of 18 to 56 bytes), to a text column before it, or to
# one after it.
LAYOUTS: dict[str, Callable[[str, Path], bytes]] = {
    "alone": lambda secret, path: sqlite_rows(("value",), (secret,), path),
    "after a label": lambda secret, path: sqlite_rows(("name", "value"), ("token", secret), path),
    "after an empty text": lambda secret, path: sqlite_rows(("name", "value"), ("", secret), path),
    "before a label": lambda secret, path: sqlite_rows(("value", "name"), (secret, "Note"), path),
    "as a line of a note": lambda secret, path: sqlite_file(secret, path),
}


@pytest.mark.parametrize("secret", GLUED_SECRETS.values(), ids=list(GLUED_SECRETS))
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=list(LAYOUTS))
def test_a_token_glued_to_the_bytes_of_an_sqlite_record_is_redacted(
    tmp_path: Path, layout: Callable[[str, Path], bytes], secret: str
) -> None:
    content = layout(secret, tmp_path / "app.db")
    assert leaks(content, secret)
    kept = redact_file(Redactor(), content)
    assert leaks(kept, secret) == []
    assert len(kept) == len(content)
    assert redact_file(Redactor(), kept) == kept
    copy = tmp_path / "kept.db"
    copy.write_bytes(kept)
    with sqlite3.connect(copy) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        assert db.execute("select count(*) from sqlite_master").fetchone() == (1,)
    db.close()


def stored_zip(secret: str) -> bytes:
    """A ZIP that stores (does not compress) a text file: the text stands
    right after the member's name, glued to it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("notes.txt", secret + "\n")
    return buffer.getvalue()


def glued_in_noise(secret: str) -> bytes:
    """Random bytes, then the token glued to a letter before and after."""
    noise = bytes(range(256)) * 2
    return noise + b"Q" + secret.encode() + b"Z" + noise


def glued_to_digits(secret: str) -> bytes:
    return b"\x00\x01" + b"7" + secret.encode() + b"9\x02\xff"


def wide_glued(codec: str) -> Callable[[str], bytes]:
    def content(secret: str) -> bytes:
        return b"\x00\x01\x02\x03" + f"E{secret}Note".encode(codec) + b"\x00\x02\x03\x04"

    return content


BINARIES: dict[str, Callable[[str], bytes]] = {
    "stored ZIP": stored_zip,
    "random bytes, glued to letters": glued_in_noise,
    "glued to digits": glued_to_digits,
    "UTF-16LE, glued to letters": wide_glued("utf-16-le"),
    "UTF-16BE, glued to letters": wide_glued("utf-16-be"),
}


@pytest.mark.parametrize("secret", GLUED_SECRETS.values(), ids=list(GLUED_SECRETS))
@pytest.mark.parametrize("kind", BINARIES.values(), ids=list(BINARIES))
def test_a_token_glued_to_the_bytes_of_a_binary_file_is_redacted(
    kind: Callable[[str], bytes], secret: str
) -> None:
    content = kind(secret)
    assert leaks(content, secret)
    kept = redact_file(Redactor(), content)
    assert leaks(kept, secret) == []
    assert len(kept) == len(content)
    assert redact_file(Redactor(), kept) == kept


def test_a_stored_zip_still_opens_once_redacted() -> None:
    secret = GLUED_SECRETS["aws"]
    kept = redact_file(Redactor(), stored_zip(secret))
    with zipfile.ZipFile(io.BytesIO(kept)) as archive:
        # The member's CRC was over the secret: reading it fails; its name is intact.
        assert archive.namelist() == ["notes.txt"]
        with pytest.raises(zipfile.BadZipFile):
            archive.read("notes.txt")


@tool(risk=Risk.WRITE, world="directory")
def add_row(ctx: Any, name: str) -> dict[str, Any]:
    """Adds a row to the workspace's database through C code."""
    with sqlite3.connect(os.path.join(ctx.workspace.root, "app.db")) as db:
        db.execute("insert into t values (?, ?)", (name, "plain"))
        count = db.execute("select count(*) from t").fetchone()[0]
    db.close()
    return {"count": count}


@pytest.mark.parametrize("secret", GLUED_SECRETS.values(), ids=list(GLUED_SECRETS))
def test_a_recorded_sqlite_session_holds_no_glued_token_and_replays(
    tmp_path: Path, secret: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sqlite_rows(("name", "value"), ("", secret), workspace / "app.db")
    capabilities = Capabilities(allowed_risks=frozenset({Risk.READ, Risk.WRITE}))
    registry = ToolRegistry([add_row])
    runtime = ToolRuntime(registry, str(workspace), capabilities, SQLiteAuditStore(":memory:"))
    cassette = tmp_path / "session.yaml"
    with record_session(runtime, cassette):
        result = runtime.execute(ToolCall("c1", "add_row", {"name": "Ada"}))
    runtime.close()
    assert result.ok
    stored = cassette.read_bytes()
    assert leaks(stored, secret) == []
    report = replay(load(cassette), registry)
    assert report.ok, report.differences


@pytest.mark.parametrize("secret", GLUED_SECRETS.values(), ids=list(GLUED_SECRETS))
def test_a_recorded_cassette_holds_no_secret_of_its_files_in_any_form(
    tmp_path: Path, secret: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    files = {f"file-{index}.bin": kind(secret) for index, kind in enumerate(KINDS.values())}
    files["app.db"] = sqlite_file(secret, tmp_path / "made.db")
    for name, content in files.items():
        (workspace / name).write_bytes(content)
    capabilities = Capabilities(allowed_risks=frozenset({Risk.READ}))
    runtime = ToolRuntime(
        ToolRegistry([size_of]), str(workspace), capabilities, SQLiteAuditStore(":memory:")
    )
    cassette = tmp_path / "session.yaml"
    with record_session(runtime, cassette):
        results = [
            runtime.execute(ToolCall(f"c{index}", "size_of", {"name": name}))
            for index, name in enumerate(files)
        ]
    runtime.close()
    assert all(result.ok for result in results)
    stored = cassette.read_bytes()
    assert leaks(stored, secret) == []
    for name in files:
        assert name.encode() in stored  # each file is in the cassette
