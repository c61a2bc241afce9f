"""Amplified text shapes: a file read with a BOM, a key in the other Unicode
normalisation form, a line longer than the read buffers, a character across
a byte limit, a byte that is never UTF-8. Each tool below is recorded with
its correct twin and amplified with the default cap; every broken twin is
caught by a variant of the shape's family (its name starts with the family),
and the correct twin replays every variant clean.

Catch table (twin: the variant that catches it, what differs):

=================================  ===================================================
broken twin                        caught by
=================================  ===================================================
csv_rows, plain utf-8              ``BOM: people.csv starts with a UTF-8 BOM``: the
                                   first column is ``\\ufeffid`` (result.data)
config_get, plain utf-8            ``BOM: app.ini ...``: the first key is not found
json_field, plain utf-8            ``BOM: settings.json ...``: fails (Unexpected BOM)
phone_of, names compared as sent   ``normalisation: name in NFC, people.csv in NFD``:
                                   not found
phone_of, only the name normalised the same variant: the file's side still NFD
find_file, names compared as sent  ``normalisation: name in NFC, a file named for it
                                   in NFD``: not found (fake and directory worlds)
grep, readline(4096)               ``long lines: notes.txt, line 2 longer than 64 KiB
                                   (65,580 characters)``: the line split into matches
grep, readline(65536)              the same variant: split once, the key after it
line_stats, read(8192) chunks      the same variant: more lines, a shorter longest
head_bytes, data[:n].decode()      ``byte limit: notes.txt, non-ASCII with '€'
                                   across byte 20``: fails (UnicodeDecodeError)
head_bytes, errors="replace"       the same variant: the text ends in U+FFFD
head_bytes, characters for bytes   the same variant: more characters than fit
read_file, errors="ignore"         ``undecodable: every file read holds byte 0xff,
                                   notes.txt inside line 2``: the trusted tool fails
grep (errors="replace" trusted),   the same variant: the line still matches, as if
errors="ignore"                    the byte were never there
word_count, errors="ignore"        the same variant: one character fewer
=================================  ===================================================
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_toolguard import Capabilities, Risk, SQLiteAuditStore, ToolCall, ToolRuntime
from pytest_toolguard.amplify import amplify
from pytest_toolguard.amplify.derive import GROUPS, CallFacts, candidates
from pytest_toolguard.amplify.record import VariantCaps
from pytest_toolguard.amplify.shapes import SHAPES, composed
from pytest_toolguard.registry import PathAccess, ToolRegistry, ToolSpec, tool
from pytest_toolguard.replay import load, record_session
from pytest_toolguard.replay.cassette import Cassette
from pytest_toolguard.replay.variants import replay_variants

CAPS = Capabilities(allowed_risks=frozenset({Risk.READ}))
PATH = {"type": "string", "minLength": 1, "maxLength": 100}
KEY = {"type": "string", "minLength": 1, "maxLength": 40}
NOTES = "alpha\nthe needle here\nomega\n"
Handler = Callable[..., dict[str, Any]]


def _schema(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name, schema in properties.items() if "default" not in schema],
        "additionalProperties": False,
    }


def _spec(handler: Handler, schema: dict[str, Any], world: str | None = None) -> ToolSpec:
    folder = "folder" in schema["properties"]
    where = PathAccess.read("{folder}" if folder else "{path}")
    return tool(name=handler.__name__, input_schema=schema, paths=[where], world=world)(handler)


# -- BOM ------------------------------------------------------------------------------


def _csv_rows(encoding: str) -> ToolSpec:
    def csv_rows(ctx: Any, path: str) -> dict[str, Any]:
        """The rows of a CSV file, keyed by its header."""
        text = ctx.workspace.read_bytes(path).decode(encoding)
        return {"rows": list(csv.DictReader(io.StringIO(text)))}

    return _spec(csv_rows, _schema(path=PATH))


def _config_get(encoding: str) -> ToolSpec:
    def config_get(ctx: Any, path: str, key: str) -> dict[str, Any]:
        """The value of ``key`` in a file of ``key=value`` lines."""
        for line in ctx.workspace.read_bytes(path).decode(encoding).splitlines():
            name, _, value = line.partition("=")
            if name.strip() == key:
                return {"key": key, "value": value.strip()}
        return {"key": key, "value": None}

    return _spec(config_get, _schema(path=PATH, key=KEY))


def _json_field(encoding: str) -> ToolSpec:
    def json_field(ctx: Any, path: str, field: str) -> dict[str, Any]:
        """One field of a JSON object in a file."""
        document = json.loads(ctx.workspace.read_bytes(path).decode(encoding))
        return {"field": field, "value": document.get(field)}

    return _spec(json_field, _schema(path=PATH, field=KEY))


# -- normalisation ----------------------------------------------------------------------


def _same(form: str | None) -> Callable[[str], str]:
    return (lambda text: text) if form is None else (lambda text: unicodedata.normalize(form, text))


def _phone_of(file_form: str | None, name_form: str | None) -> ToolSpec:
    on_file, on_name = _same(file_form), _same(name_form)

    def phone_of(ctx: Any, path: str, name: str) -> dict[str, Any]:
        """The phone number of ``name`` in a CSV file of names and phones."""
        text = ctx.workspace.read_text(path)
        for row in csv.DictReader(io.StringIO(text)):
            if on_file(row["name"]) == on_name(name):
                return {"name": name, "phone": row["phone"]}
        return {"name": name, "phone": None}

    return _spec(phone_of, _schema(path=PATH, name=KEY))


def _find_file(form: str | None, world: str | None = None) -> ToolSpec:
    same = _same(form)

    def find_file(ctx: Any, folder: str, name: str) -> dict[str, Any]:
        """The file of ``folder`` whose name, without its suffix, is ``name``."""
        for entry in ctx.workspace.list_dir(folder):
            if same(entry.name.rsplit(".", 1)[0]) == same(name):
                return {"path": entry.path}
        return {"path": None}

    return _spec(find_file, _schema(folder=PATH, name=KEY), world)


# -- long lines ------------------------------------------------------------------------


def _grep(buffer: int = 0, errors: str = "strict") -> ToolSpec:
    def grep(ctx: Any, path: str, query: str) -> dict[str, Any]:
        """The lines of a file holding ``query``, each cut to 60 characters."""
        stream = io.BytesIO(ctx.workspace.read_bytes(path))
        lines = iter(lambda: stream.readline(buffer), b"") if buffer else stream
        found = []
        for number, raw in enumerate(lines, 1):
            line = raw.decode("utf-8", errors).rstrip("\n")
            if query in line:
                found.append({"line": number, "text": line[:60]})
        return {"matches": found}

    return _spec(grep, _schema(path=PATH, query=KEY))


def _line_stats(chunk: int = 0) -> ToolSpec:
    def line_stats(ctx: Any, path: str) -> dict[str, Any]:
        """How many lines a file has, and how long its longest is."""
        data = ctx.workspace.read_bytes(path)
        chunks = [data[at : at + chunk] for at in range(0, len(data), chunk)] if chunk else [data]
        lines = [line for piece in chunks for line in piece.splitlines()]
        return {"lines": len(lines), "longest": max(map(len, lines), default=0)}

    return _spec(line_stats, _schema(path=PATH))


# -- byte limit -----------------------------------------------------------------------

MAX_BYTES = {"type": "integer", "minimum": 1, "maximum": 4096, "default": 64}


def _head_bytes(cut: str) -> ToolSpec:
    def head_bytes(ctx: Any, path: str, max_bytes: int = 64) -> dict[str, Any]:
        """The start of a text file: at most ``max_bytes`` bytes of it."""
        data = ctx.workspace.read_bytes(path)
        if cut == "characters":
            text = data.decode("utf-8")[:max_bytes]
        elif cut == "bytes":
            text = data[:max_bytes].decode("utf-8")
        elif cut == "replace":
            text = data[:max_bytes].decode("utf-8", "replace")
        else:  # back to the character boundary before the limit
            end = max_bytes
            while 0 < end < len(data) and data[end] & 0xC0 == 0x80:
                end -= 1
            text = data[:end].decode("utf-8")
        return {"text": text, "truncated": len(text.encode("utf-8")) < len(data)}

    return _spec(head_bytes, _schema(path=PATH, max_bytes=MAX_BYTES))


# -- undecodable bytes ------------------------------------------------------------------


def _read_file(errors: str) -> ToolSpec:
    def read_file(ctx: Any, path: str) -> dict[str, Any]:
        """A text file's content."""
        return {"content": ctx.workspace.read_bytes(path).decode("utf-8", errors)}

    return _spec(read_file, _schema(path=PATH))


def _word_count(errors: str) -> ToolSpec:
    def word_count(ctx: Any, path: str) -> dict[str, Any]:
        """How many characters and words a text file holds."""
        text = ctx.workspace.read_bytes(path).decode("utf-8", errors)
        return {"characters": len(text), "words": len(text.split())}

    return _spec(word_count, _schema(path=PATH))


# -- the cases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    family: str
    correct: ToolSpec
    files: dict[str, str]
    arguments: dict[str, Any]
    twins: dict[str, ToolSpec]


PEOPLE = "name,phone\nAda,555-0100\nBob,555-0199\n"
CASES = {
    "csv_rows": Case(
        "BOM",
        _csv_rows("utf-8-sig"),
        {"people.csv": "id,name\n1,Ada\n2,Bob\n"},
        {"path": "people.csv"},
        {"plain utf-8": _csv_rows("utf-8")},
    ),
    "config_get": Case(
        "BOM",
        _config_get("utf-8-sig"),
        {"app.ini": "name=demo\nport=8080\n"},
        {"path": "app.ini", "key": "name"},
        {"plain utf-8": _config_get("utf-8")},
    ),
    "json_field": Case(
        "BOM",
        _json_field("utf-8-sig"),
        {"settings.json": '{"theme": "dark"}\n'},
        {"path": "settings.json", "field": "theme"},
        {"plain utf-8": _json_field("utf-8")},
    ),
    "phone_of": Case(
        "normalisation",
        _phone_of("NFC", "NFC"),
        {"people.csv": PEOPLE},
        {"path": "people.csv", "name": "Ada"},
        {"names compared as sent": _phone_of(None, None), "only the name": _phone_of(None, "NFC")},
    ),
    "find_file": Case(
        "normalisation",
        _find_file("NFC"),
        {"docs/report.txt": "quarterly figures\n", "docs/notes.txt": "todo\n"},
        {"folder": "docs", "name": "report"},
        {"names compared as sent": _find_file(None)},
    ),
    "find_file on real files": Case(
        "normalisation",
        _find_file("NFC", "directory"),
        {"docs/report.txt": "quarterly figures\n", "docs/notes.txt": "todo\n"},
        {"folder": "docs", "name": "report"},
        {"names compared as sent": _find_file(None, "directory")},
    ),
    "grep": Case(
        "long lines",
        _grep(),
        {"notes.txt": NOTES},
        {"path": "notes.txt", "query": "needle"},
        {"readline(4096)": _grep(4096), "readline(65536)": _grep(65536)},
    ),
    "line_stats": Case(
        "long lines",
        _line_stats(),
        {"notes.txt": NOTES},
        {"path": "notes.txt"},
        {"read(8192) chunks": _line_stats(8192)},
    ),
    "head_bytes": Case(
        "byte limit",
        _head_bytes("boundary"),
        {"notes.txt": NOTES * 2},
        {"path": "notes.txt", "max_bytes": 20},
        {
            "data[:n].decode()": _head_bytes("bytes"),
            'errors="replace"': _head_bytes("replace"),
            "characters for bytes": _head_bytes("characters"),
        },
    ),
    "read_file": Case(
        "undecodable",
        _read_file("strict"),
        {"notes.txt": NOTES},
        {"path": "notes.txt"},
        {'errors="ignore"': _read_file("ignore")},
    ),
    "grep, replacing": Case(
        "undecodable",
        _grep(errors="replace"),
        {"notes.txt": NOTES},
        {"path": "notes.txt", "query": "needle"},
        {'errors="ignore"': _grep(errors="ignore")},
    ),
    "word_count": Case(
        "undecodable",
        _word_count("replace"),
        {"notes.txt": NOTES},
        {"path": "notes.txt"},
        {'errors="ignore"': _word_count("ignore")},
    ),
}
TWINS = [(case, twin) for case, item in CASES.items() for twin in item.twins]


@pytest.fixture(scope="module")
def amplified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Cassette]:
    """Each case's call recorded with its correct twin, amplified with the default cap."""
    found = {}
    for name, case in CASES.items():
        base = tmp_path_factory.mktemp("shapes")
        workspace = base / "ws"
        for path, text in case.files.items():
            (workspace / path).parent.mkdir(parents=True, exist_ok=True)
            (workspace / path).write_text(text, encoding="utf-8")
        registry = ToolRegistry([case.correct])
        runtime = ToolRuntime(registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
        with record_session(runtime, base / "session.yaml"):
            runtime.execute(ToolCall("call-1", case.correct.name, case.arguments))
        runtime.close()
        cassette, report = amplify(load(base / "session.yaml"), registry)
        assert report.ok, name
        found[name] = cassette
    return found


@pytest.mark.parametrize(("case", "twin"), TWINS, ids=[f"{c}: {t}" for c, t in TWINS])
def test_each_broken_twin_is_caught_by_a_variant_of_its_family(
    amplified: dict[str, Cassette], case: str, twin: str
) -> None:
    item = CASES[case]
    report = replay_variants(amplified[case], ToolRegistry([item.twins[twin]]))
    caught = {d.where.split("`")[1] for d in report.differences}
    assert any(name.startswith(f"{item.family}: ") for name in caught), caught


@pytest.mark.parametrize("case", CASES)
def test_the_correct_twin_replays_every_variant_clean(
    amplified: dict[str, Cassette], case: str
) -> None:
    report = replay_variants(amplified[case], ToolRegistry([CASES[case].correct]))
    assert report.ok and report.variants > 0, [(d.where, d.field) for d in report.differences]


def _preview(cut: str) -> ToolSpec:
    def preview(ctx: Any, path: str) -> dict[str, Any]:
        """The first 4 KiB of a text file (a limit the handler keeps to itself)."""
        data = ctx.workspace.read_bytes(path)
        end = 4096
        if cut == "boundary":
            while 0 < end < len(data) and data[end] & 0xC0 == 0x80:
                end -= 1
        return {"text": data[:end].decode("utf-8")}

    return _spec(preview, _schema(path=PATH))


def test_a_byte_limit_the_handler_keeps_to_itself_is_met_at_the_usual_buffers(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text(NOTES)
    registry = ToolRegistry([_preview("boundary")])
    runtime = ToolRuntime(registry, str(workspace), CAPS, SQLiteAuditStore(":memory:"))
    with record_session(runtime, tmp_path / "session.yaml"):
        runtime.execute(ToolCall("call-1", "preview", {"path": "notes.txt"}))
    runtime.close()
    cassette, _ = amplify(load(tmp_path / "session.yaml"), registry, caps=VariantCaps(40))
    assert replay_variants(cassette, registry).ok
    report = replay_variants(cassette, ToolRegistry([_preview("bytes")]))
    caught = {d.where.split("`")[1] for d in report.differences}
    assert "byte limit: notes.txt, non-ASCII with '€' across byte 4,096" in caught


def test_under_the_default_cap_a_call_gets_a_variant_of_every_shape(
    amplified: dict[str, Cassette],
) -> None:
    names = {v.name.split(":")[0] for v in amplified["grep"].interactions[0].variants}
    # grep's key is in its file: every shape applies, and none is starved.
    assert set(SHAPES) <= names


def test_every_group_gets_a_candidate_before_any_group_gets_a_second() -> None:
    facts = CallFacts(
        arguments={"path": "notes.txt", "query": "needle", "limit": 5},
        schema=_schema(path=PATH, query=KEY, limit={"type": "integer", "maximum": 50}),
        fixed=frozenset({"path"}),
        files_read={"notes.txt": NOTES.encode()},
        data={"matches": [{"line": 2, "text": "the needle here"}]},
    )
    groups = [GROUPS[c.family] for c in candidates(facts) if GROUPS[c.family] != "refusal"]
    present = set(groups)
    assert set(groups[: len(present)]) == present
    assert set(SHAPES) <= present


def test_a_shape_s_files_have_the_shape_its_name_says() -> None:
    facts = CallFacts(
        arguments={"path": "notes.txt", "query": "needle", "max_bytes": 20},
        schema=_schema(path=PATH, query=KEY, max_bytes=MAX_BYTES),
        fixed=frozenset({"path"}),
        files_read={"notes.txt": NOTES.encode()},
        data={"matches": [{"line": 2, "text": "the needle here"}]},
    )
    found = {c.name: c for c in candidates(facts)}

    def content(name: str) -> bytes:
        value = found[name].files["notes.txt"]
        return value if isinstance(value, bytes) else value.content()

    assert content("BOM: notes.txt starts with a UTF-8 BOM").startswith(b"\xef\xbb\xbfalpha")
    long = content("long lines: notes.txt, line 2 longer than 4 KiB (4,140 characters)")
    lines = long.decode().split("\n")
    assert [len(line) for line in lines] == [5, 4140, 5, 0] and "needle" in lines[1][4096:]
    across = content("byte limit: notes.txt, non-ASCII with '€' across byte 20")
    assert across[18:21] == "€".encode()
    with pytest.raises(UnicodeDecodeError):
        across[:20].decode("utf-8")
    inside = content("undecodable: every file read holds byte 0xff, notes.txt inside line 2")
    assert inside.replace(b"\xff", b"").decode() == NOTES and b"\xff" in inside.split(b"\n")[1]
    nfd = found["normalisation: query in NFC, notes.txt in NFD"]
    sent, on_file = nfd.arguments["query"], content(nfd.name).decode()
    assert sent == composed("needle") and sent not in on_file
    assert unicodedata.normalize("NFC", on_file) == NOTES.replace("needle", sent)


def test_a_key_in_a_file_name_the_data_quotes_is_varied_in_the_name_first(
    amplified: dict[str, Cassette],
) -> None:
    names = [v.name for v in amplified["find_file"].interactions[0].variants]
    shapes = [name for name in names if name.startswith("normalisation: ")]
    assert shapes[0] == "normalisation: name in NFC, a file named for it in NFD"


def test_an_undecodable_byte_sits_where_dropping_it_shows() -> None:
    """Replacing (or failing) is what the trusted tool did; a tool that
    drops the byte returns the recorded line itself, so the variant's
    recorded result cannot be met by dropping."""
    facts = CallFacts(
        arguments={"path": "notes.txt", "query": "needle"},
        schema=_schema(path=PATH, query=KEY),
        fixed=frozenset({"path"}),
        files_read={"notes.txt": NOTES.encode()},
        data={"matches": [{"line": 2, "text": "the needle here"}]},
    )
    first = next(c for c in candidates(facts) if c.family == "undecodable")
    value = first.files["notes.txt"]
    assert isinstance(value, bytes)
    dropped = value.decode("utf-8", "ignore").split("\n")[1]
    replaced = value.decode("utf-8", "replace").split("\n")[1]
    assert dropped == "the needle here" != replaced and "needle" not in replaced
