"""The recorded workspace root stored as ``{toolguard_root}``: a cassette
recorded in one directory replays where that directory does not exist, in
the fake world and in the directory world, HTTP exchanges naming the root
included; a sibling that only shares the root's prefix is never mapped, and
a literal ``{toolguard_root}`` in a tool's output survives the round trip."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import tempfile
import threading
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_toolguard import (
    Approver,
    Capabilities,
    Risk,
    SQLiteAuditStore,
    ToolCall,
    ToolRegistry,
    ToolRuntime,
)
from pytest_toolguard.cli import main
from pytest_toolguard.registry import tool
from pytest_toolguard.replay import load, loads, record_session, replay
from pytest_toolguard.replay.cassette import (
    Cassette,
    Expectation,
    HttpExchange,
    Interaction,
    Session,
    WorkspaceState,
    binary_naming_root,
    dumps,
)
from pytest_toolguard.replay.http_exchange import mapped_exchange
from pytest_toolguard.replay.recorder import RootInBinary
from pytest_toolguard.replay.root_map import RootMap, RootPlaceholder, expanded

LITERALS = ("{toolguard_root}", "{toolguard_root=}", "{toolguard_root%}", "x{toolguard_root==}y")
"""Text a tool may hand back that only looks like the placeholder."""

CAPS = Capabilities(
    allowed_risks=frozenset({Risk.READ, Risk.WRITE, Risk.EXTERNAL}),
    write_roots=(".",),
    network_hosts=("127.0.0.1",),
)


# -- the placeholder itself -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("/tmp/ws", "{toolguard_root}"),
        ("/tmp/ws/a.txt", "{toolguard_root}/a.txt"),
        ("cd /tmp/ws && ls", "cd {toolguard_root} && ls"),
        ("'/tmp/ws/x' and \"/tmp/ws\"", "'{toolguard_root}/x' and \"{toolguard_root}\""),
        ("file=/tmp/ws/a", "file={toolguard_root}/a"),
        ("/real/tmp/ws/b", "{toolguard_root}/b"),  # the realpath spelling
        ("?file=%2Ftmp%2Fws%2Fa", "?file={toolguard_root%}%2Fa"),
        ("/tmp/ws2/a", "/tmp/ws2/a"),
        ("/tmp/ws-old", "/tmp/ws-old"),
        ("/tmp/ws.bak/a", "/tmp/ws.bak/a"),
        ("/data/tmp/ws/a", "/data/tmp/ws/a"),
        ("%2Ftmp%2Fws2", "%2Ftmp%2Fws2"),
        ("/tmp/wsx", "/tmp/wsx"),
        ("{toolguard_root}", "{toolguard_root=}"),
        ("{toolguard_root=}", "{toolguard_root==}"),
        ("{toolguard_root%}", "{toolguard_root%=}"),
        ("{toolguard_root=/tmp/ws}", "{toolguard_root={toolguard_root}}"),
        ("{toolguard_rooted}", "{toolguard_rooted}"),
    ],
)
def test_the_root_is_stored_as_the_placeholder_on_component_boundaries_only(
    text: str, stored: str
) -> None:
    placeholder = RootPlaceholder(["/tmp/ws", "/real/tmp/ws"])
    assert placeholder.stored(text) == stored
    given_back = expanded(stored, "/tmp/ws")
    assert given_back == text.replace("/real/tmp/ws", "/tmp/ws")


_PIECES = st.sampled_from(
    ["{toolguard_root", "=", "}", "%", "%2F", "/tmp/ws", "/real/tmp/ws", "2", "/", "a", " ", "{"]
)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_every_text_comes_back_exactly(text: str) -> None:
    stored = RootPlaceholder(["/tmp/ws"]).stored(text)
    assert expanded(stored, "/tmp/ws") == text
    assert expanded(stored.encode(), "/tmp/ws") == text.encode()


def test_bytes_are_mapped_only_when_they_are_text() -> None:
    placeholder = RootPlaceholder(["/tmp/ws"])
    binary = b"\xff\x00/tmp/ws/db\x00"
    assert placeholder.stored(binary) == binary
    assert placeholder.binary == 1
    assert placeholder.stored(b"/tmp/ws/a\r\n") == b"{toolguard_root}/a\r\n"


# -- cassettes: what the file holds, and what loading gives back -----------------------


def _cassette(root: str, data: Any, files: dict[str, bytes] | None = None) -> Cassette:
    call = ToolCall(call_id="1", tool_name="t", arguments={"path": f"{root}/a.txt"})
    return Cassette(
        kind="cassette",
        name="c",
        session=Session(),
        workspace=WorkspaceState(root=root, files=files or {}),
        interactions=(
            Interaction(call=call, result=Expectation(ok=True, data=data, check_data=True)),
        ),
    )


def test_a_cassette_file_names_its_root_once_and_loads_as_it_was() -> None:
    root = "/tmp/rec/proj"
    files = {
        "notes.md": f"see {root}/a.txt\n".encode(),
        "crlf.txt": f"{root}\r\n".encode(),
        "data.bin": b"\xff\xfe" + root.encode() + b"\x00",
    }
    cassette = _cassette(root, {"saved": f"{root}/a.txt", "sibling": f"{root}2/b"}, files)
    text = dumps(cassette)
    assert text.count(root) == 2  # workspace.root, and the sibling that only shares its prefix
    assert f"root: {root}\n" in text and f"{root}2/b" in text
    document = yaml.safe_load(text)
    assert document["format_version"] == 2  # no content repeats: no blobs, so not 3
    assert document["interactions"][0]["call"]["arguments"] == {"path": "{toolguard_root}/a.txt"}
    crlf = base64.b64decode(document["workspace"]["files"]["crlf.txt"]["base64"])
    assert crlf == b"{toolguard_root}\r\n"
    binary = base64.b64decode(document["workspace"]["files"]["data.bin"]["base64"])
    assert binary == files["data.bin"]  # a binary format would not survive another length
    loaded = loads(text)
    assert loaded.workspace.files == files
    assert loaded.interactions[0].call.arguments == cassette.interactions[0].call.arguments
    assert loaded.interactions[0].result.data == cassette.interactions[0].result.data


def test_loading_gives_every_placeholder_back_as_the_cassettes_root() -> None:
    text = dumps(_cassette("/tmp/rec/proj", {"saved": "/tmp/rec/proj/a.txt"}))
    moved = loads(text.replace("root: /tmp/rec/proj", "root: /elsewhere/p"))
    assert moved.workspace.root == "/elsewhere/p"
    assert moved.interactions[0].call.arguments == {"path": "/elsewhere/p/a.txt"}
    assert moved.interactions[0].result.data == {"saved": "/elsewhere/p/a.txt"}


@pytest.mark.parametrize("literal", LITERALS)
def test_a_literal_placeholder_in_the_data_survives_a_dump_and_a_load(literal: str) -> None:
    cassette = _cassette("/tmp/rec/proj", {"text": literal}, {"a.txt": literal.encode()})
    text = dumps(cassette)
    assert yaml.safe_load(text)["format_version"] == 2
    loaded = loads(text)
    assert loaded.interactions[0].result.data == {"text": literal}
    assert loaded.workspace.files == {"a.txt": literal.encode()}


def test_a_cassette_naming_no_root_is_still_written_as_format_1() -> None:
    cassette = _cassette("/tmp/rec/proj", {"n": 1})
    call = replace(cassette.interactions[0].call, arguments={"path": "a.txt"})
    text = dumps(replace(cassette, interactions=(replace(cassette.interactions[0], call=call),)))
    assert yaml.safe_load(text)["format_version"] == 1


@pytest.mark.parametrize("literal", LITERALS)
def test_an_old_cassette_keeps_its_literal_text_and_its_absolute_root(literal: str) -> None:
    text = (
        "format_version: 1\nkind: case\nsession: {}\nworkspace: {root: /tmp/old}\n"
        "interactions:\n- call: {tool_name: t, arguments: {path: /tmp/old/a, text: '"
        + literal
        + "'}}\n"
    )
    cassette = loads(text)
    assert cassette.interactions[0].call.arguments == {"path": "/tmp/old/a", "text": literal}


@pytest.mark.parametrize("literal", LITERALS)
def test_upgrading_an_old_cassette_keeps_its_literal_text(tmp_path: Path, literal: str) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(
        "format_version: 1\nkind: cassette\nsession: {}\nworkspace: {root: /tmp/old}\n"
        "interactions:\n- call: {tool_name: t, arguments: {path: /tmp/old/a, text: '"
        + literal
        + "'}}\n"
    )
    assert main(["cassette", "upgrade", str(path)]) == 0
    assert yaml.safe_load(path.read_text())["format_version"] == 2
    assert "/tmp/old/a" not in path.read_text()
    arguments = load(path).interactions[0].call.arguments
    assert arguments == {"path": "/tmp/old/a", "text": literal}


# -- recorded in a directory, replayed where it is gone ---------------------------------


def _tools(world: str) -> ToolRegistry:
    @tool(risk=Risk.WRITE, world=world)  # type: ignore[arg-type]
    def note_root(ctx: Any, text: str) -> dict[str, Any]:
        """Writes a note naming where it is; answers with paths under the root."""
        root = ctx.workspace.root
        with open(os.path.join(root, "where.txt"), "w", encoding="utf-8") as handle:
            handle.write(f"{root}/where.txt\n{text}\n")
        return {
            "path": os.path.join(root, "where.txt"),
            "real": os.path.realpath(os.path.join(root, "where.txt")),
            "text": text,
        }

    @tool(world=world)  # type: ignore[arg-type]
    def read_at(ctx: Any, path: str) -> dict[str, Any]:
        """Reads a file named by its absolute path."""
        with open(path, encoding="utf-8") as handle:
            return {"path": path, "first": handle.readline()}

    return ToolRegistry([note_root, read_at])


def _record(tmp_path: Path, registry: ToolRegistry, root: Path) -> Path:
    # The sibling only shares the root's prefix: it is never mapped.
    text = f"{{toolguard_root}} stays; {root}2/x too"
    calls = [
        ToolCall(call_id="1", tool_name="note_root", arguments={"text": text}),
        ToolCall(call_id="2", tool_name="read_at", arguments={"path": f"{root}/where.txt"}),
    ]
    runtime = ToolRuntime(registry, str(root), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "cassettes" / "session.yaml"
    path.parent.mkdir(exist_ok=True)
    with record_session(runtime, path):
        results = [runtime.execute(call) for call in calls]
    runtime.close()
    assert all(result.ok for result in results), [result.message for result in results]
    return path


@pytest.mark.parametrize("world", ["fake", "directory"])
@pytest.mark.parametrize("through_link", [False, True])
def test_a_session_naming_its_root_replays_after_the_root_is_gone(
    tmp_path: Path, world: str, through_link: bool
) -> None:
    real = tmp_path / "rec" / "proj"
    real.mkdir(parents=True)
    (real / "seed.txt").write_text(f"seeded in {real}\n")
    root = real
    if through_link:  # the runtime's root is a link: the realpath is another spelling
        (tmp_path / "link").symlink_to(tmp_path / "rec")
        root = tmp_path / "link" / "proj"
    registry = _tools(world)
    path = _record(tmp_path, registry, root)
    text = path.read_text()
    # Only workspace.root names it; the sibling that shares its prefix stays.
    assert f"{root}2/x" in text
    without_sibling = text.replace(f"{root}2/x", "")
    assert without_sibling.count(str(root)) == 1
    assert without_sibling.count(str(real)) == (0 if through_link else 1)
    assert "{toolguard_root}/where.txt" in text and f"{root}2/x" in text
    shutil.rmtree(tmp_path / "rec")
    for _ in range(2):
        report = replay(load(path), registry, world=world)
        assert report.differences == ()
        data = report.results[0].data
        assert data["path"] == data["real"] == f"{root}/where.txt"  # spelt as recorded
        assert data["text"] == f"{{toolguard_root}} stays; {root}2/x too"
    assert not (tmp_path / "rec").exists()


def test_a_moved_cassette_replays_under_its_new_root_in_the_fake_world(tmp_path: Path) -> None:
    root = tmp_path / "rec" / "proj"
    root.mkdir(parents=True)
    (root / "seed.txt").write_text("seed\n")
    registry = _tools("fake")
    path = _record(tmp_path, registry, root)
    path.write_text(path.read_text().replace(f"root: {root}\n", "root: /srv/moved/proj\n"))
    report = replay(load(path), registry, world="fake")
    assert report.differences == ()
    assert report.results[1].data["path"] == "/srv/moved/proj/where.txt"
    assert report.results[0].data["text"] == f"{{toolguard_root}} stays; {root}2/x too"


# -- HTTP exchanges that name the root --------------------------------------------------


class EchoServer:
    """A loopback server answering a POST with where the request said it
    saved its file: the body's ``file``, the query's and a header's."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                query = parse_qs(urlsplit(self.path).query)
                body = json.dumps(
                    {
                        "saved": sent["file"],
                        "query": query["file"][0],
                        "header": self.headers["X-Root"],
                        "literal": sent["literal"],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Location", sent["file"])
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/save"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@contextmanager
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join()


def _http_tools(world: str) -> ToolRegistry:
    @tool(risk=Risk.EXTERNAL, world=world, network_host_argument="url")  # type: ignore[arg-type]
    def save_remote(ctx: Any, url: str) -> dict[str, Any]:
        """Tells a server where it keeps its note (URL, header, body); keeps its answer."""
        root = ctx.workspace.root
        file = os.path.join(root, "note.txt")
        body = json.dumps({"file": file, "literal": "{toolguard_root}"}).encode()
        request = urllib.request.Request(
            f"{url}?{urlencode({'file': file})}",
            data=body,
            headers={"Content-Type": "application/json", "X-Root": root},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            answer = json.loads(response.read())
            location = response.headers["Location"]
        with open(file, "w", encoding="utf-8") as handle:
            handle.write(answer["saved"] + "\n")
        return {**answer, "location": location, "here": file}

    return ToolRegistry([save_remote])


@pytest.mark.parametrize("world", ["fake", "directory"])
def test_http_naming_the_root_replays_where_the_root_is_gone(tmp_path: Path, world: str) -> None:
    pytest.importorskip("vcr")
    root = tmp_path / "rec" / "proj"
    root.mkdir(parents=True)
    registry = _http_tools(world)
    runtime = ToolRuntime(
        registry, str(root), CAPS, SQLiteAuditStore(":memory:"), hooks=[Approver(lambda e: True)]
    )
    path = tmp_path / "http.yaml"
    with echo_server() as server, record_session(runtime, path):
        result = runtime.execute(
            ToolCall(call_id="1", tool_name="save_remote", arguments={"url": server.url})
        )
    runtime.close()
    assert result.ok, result.message
    assert result.data["query"] == result.data["saved"] == f"{root}/note.txt"
    text = path.read_text()
    assert text.count(str(root)) == 1  # workspace.root only
    assert text.count(quote(str(root), safe="")) == 0
    assert "{toolguard_root%}%2Fnote.txt" in text and "{toolguard_root}/note.txt" in text
    exchange = load(path).interactions[0].http[0]
    assert quote(f"{root}/note.txt", safe="") in exchange.uri
    assert exchange.response_headers["Location"] == (f"{root}/note.txt",)
    shutil.rmtree(tmp_path / "rec")
    report = replay(load(path), registry, world=world)  # the server is gone too
    assert report.differences == ()
    assert report.results[0].data["literal"] == "{toolguard_root}"
    assert not (tmp_path / "rec").exists()


def test_a_request_naming_another_root_is_not_served(tmp_path: Path) -> None:
    """The twin: a tool that names a sibling of its root gets no recorded answer."""
    pytest.importorskip("vcr")
    root = tmp_path / "rec" / "proj"
    root.mkdir(parents=True)
    registry = _http_tools("directory")
    runtime = ToolRuntime(
        registry, str(root), CAPS, SQLiteAuditStore(":memory:"), hooks=[Approver(lambda e: True)]
    )
    path = tmp_path / "http.yaml"
    with echo_server() as server, record_session(runtime, path):
        runtime.execute(
            ToolCall(call_id="1", tool_name="save_remote", arguments={"url": server.url})
        )
    runtime.close()
    # The recorded request named the sibling proj2, not the root.
    path.write_text(
        path.read_text().replace("{toolguard_root%}%2F", f"{quote(str(root), safe='')}2%2F")
    )
    shutil.rmtree(tmp_path / "rec")
    report = replay(load(path), registry, world="directory")
    assert report.differences
    unmatched = [d for d in report.differences if "http" in d.field.lower() or "http" in d.where]
    assert unmatched, report.differences
    assert any(quote(f"{root}/note.txt", safe="") in str(d.replayed) for d in unmatched)


def test_a_mapped_exchange_fits_its_lengths_and_leaves_compressed_bodies() -> None:
    mapping = RootMap("/tmp/ws", "/tmp/toolguard-world-abc/ws")
    exchange = HttpExchange(
        method="POST",
        uri="http://h/p?file=%2Ftmp%2Fws%2Fa&other=%2Ftmp%2Fws2",
        status=200,
        request_headers={"X-Root": ("/tmp/ws",), "Content-Length": ("12",)},
        request_body=b'{"f": "/tmp/ws"}',
        response_headers={"Content-Length": ("14",), "Location": ("/tmp/ws/a",)},
        response_body=b'{"s": "/tmp/ws/a"}',
    )
    mapped = mapped_exchange(exchange, mapping.to_world)
    world = "/tmp/toolguard-world-abc/ws"
    assert mapped.uri == f"http://h/p?file={quote(world, safe='')}%2Fa&other=%2Ftmp%2Fws2"
    assert mapped.request_headers["X-Root"] == (world,)
    assert mapped.request_body == b'{"f": "' + world.encode() + b'"}'
    assert mapped.request_headers["Content-Length"] == (str(len(mapped.request_body)),)
    assert mapped.response_headers["Location"] == (f"{world}/a",)
    assert mapped.response_headers["Content-Length"] == (str(len(mapped.response_body)),)
    gzipped = replace(
        exchange,
        response_headers={"Content-Encoding": ("gzip",), "Content-Length": ("18",)},
    )
    assert mapped_exchange(gzipped, mapping.to_world).response_body == exchange.response_body


# -- a result near its tool's limit ---------------------------------------------------

LIMIT = 300


@tool(world="directory", result_limit=LIMIT)
def padded_path(ctx: Any, pad: int) -> dict[str, Any]:
    """Answers with its root and ``pad`` characters: sized around its limit."""
    return {"path": f"{ctx.workspace.root}/x", "pad": "a" * pad}


@pytest.mark.parametrize("delta", [-1, 0, 1, 7])
@pytest.mark.parametrize("recorded_in", ["short", "long"])
def test_a_result_near_its_limit_is_cut_where_the_recording_cut_it(
    tmp_path: Path, delta: int, recorded_in: str
) -> None:
    """The world's root is longer or shorter than the recorded one: the
    result is still cut (or not) at the recording's place."""
    if recorded_in == "short":
        top = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    else:
        top = tmp_path / ("deep" * 12)
    root = top / "p"
    root.mkdir(parents=True)
    try:
        empty = len(json.dumps({"path": f"{root}/x", "pad": ""}, sort_keys=True))
        registry = ToolRegistry([padded_path])
        runtime = ToolRuntime(registry, str(root), CAPS, SQLiteAuditStore(":memory:"))
        path = tmp_path / "padded.yaml"
        with record_session(runtime, path):
            pad = LIMIT - empty + delta  # the JSON is the limit's size, plus delta
            call = ToolCall(call_id="1", tool_name="padded_path", arguments={"pad": pad})
            recorded = runtime.execute(call)
        runtime.close()
        assert recorded.truncated is (delta > 0)
    finally:
        shutil.rmtree(top)
    report = replay(load(path), registry)
    assert report.differences == ()
    assert report.results[0].truncated is (delta > 0)
    assert report.results[0].data == recorded.data


# -- binary content naming the root ---------------------------------------------------


@tool(risk=Risk.WRITE, world="directory")
def remember_place(ctx: Any) -> dict[str, Any]:
    """Keeps where its database is inside the database (a binary file)."""
    database = os.path.join(ctx.workspace.root, "place.db")
    connection = sqlite3.connect(database)
    with connection:
        connection.execute("create table if not exists place (path text)")
        connection.execute("insert into place values (?)", (database,))
    connection.close()
    return {"kept": True}


def test_binary_content_naming_the_root_is_kept_as_it_is_and_reported(tmp_path: Path) -> None:
    root = tmp_path / "rec" / "proj"
    root.mkdir(parents=True)
    registry = ToolRegistry([remember_place])
    runtime = ToolRuntime(registry, str(root), CAPS, SQLiteAuditStore(":memory:"))
    path = tmp_path / "place.yaml"
    with pytest.warns(RootInBinary) as caught, record_session(runtime, path):
        runtime.execute(ToolCall(call_id="1", tool_name="remember_place", arguments={}))
    runtime.close()
    assert caught[0].message.where == ("final_files.place.db",)  # type: ignore[union-attr]
    database = load(path).final_files["place.db"]
    assert database is not None and database.content is not None
    assert f"{root}/place.db".encode() in database.content  # kept, never rewritten
    assert binary_naming_root(load(path)) == ("final_files.place.db",)


def test_text_content_naming_the_root_is_not_reported(tmp_path: Path) -> None:
    root = tmp_path / "rec" / "proj"
    root.mkdir(parents=True)
    (root / "seed.txt").write_text("seed\n")
    registry = _tools("directory")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RootInBinary)
        _record(tmp_path, registry, root)
