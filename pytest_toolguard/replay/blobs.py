"""Content stored once per cassette: the ``blobs`` map and the references to it.

A session that only reads a file names it twice, in ``workspace.files`` (before
the first call) and in ``final_files`` (after the last): a 40 KB database,
written as base64, was most of a 110 KB cassette. ``stored_once`` writes such
a content once, under ``blobs:`` at the end of the document, keyed by the start
of its SHA-256, and each place that names it holds ``{blob: <key>}``.

**What goes to the map.** A content named more than once among the workspace's
files, the files outside it and the final files, whose stored form (the text,
or the base64 text) is at least ``SHARED_FROM`` characters. Anything else stays
inline, where its path is: a content named once gains nothing from the map and
reads best under its path, and a short one is about as long as a reference.
So a cassette with no repeated content is written exactly as before, in the
format version it had. Variants (``amplify`` writes them into a file's own
text) and HTTP bodies stay inline.

**Keys.** The first ``KEY_CHARS`` hex digits of the SHA-256 of the content's
bytes as stored (the recorded root already written as its placeholder). Two
different contents whose keys would be the same both take their whole digest.
The map is in the order of first use (workspace files, outside files, final
files, each by path), so the same session always writes the same bytes.

**What loading guarantees** (``resolved``, on a document the schema has
accepted): every reference names a blob of the map; every blob's content has
a SHA-256 that begins with its key; every blob is referred to; the content the
references stand for is, together, at most ``documents.MAX_DOCUMENT_BYTES``
characters, so a small file never stands for a large one (the reason YAML
aliases are refused). Otherwise ``BlobError`` naming the field; a content is
never dropped or guessed. What it does not do: redact. Recording redacts a
file before it is stored (``replay.redacting.redact_file``), and the map holds
the bytes that would have been inline, nothing more.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..documents import MAX_DOCUMENT_BYTES
from ..errors import ToolguardError
from ..schema import format_path

BLOB_VERSION = 3
"""The first ``format_version`` that may hold ``blobs``."""

KEY = "blobs"
"""The document's field holding the map, and (``blob``) a reference's."""

REFERENCE = "blob"

KEY_CHARS = 16
"""Hex digits of a key: 64 bits, so two of a cassette's few hundred contents
share one with a chance under 10^-14; ``stored_once`` still checks."""

SHARED_FROM = 128
"""The shortest stored form (characters) put in the map: below it, a content
written twice costs little more than a reference and a map entry."""

_PLACES: tuple[tuple[str, ...], ...] = (
    ("workspace", "files"),
    ("workspace", "outside_files"),
    ("final_files",),
)
"""Where a file's content may be a reference, in the order keys are given."""


class Reference(dict[str, str]):
    """``{blob: <key>}``: a plain mapping, of its own type so that the YAML
    writer can put it on one line, beside the path it is the content of."""


class BlobError(ToolguardError, ValueError):
    """A ``blobs`` map or reference that cannot be used: ``where`` is the
    field (``$.blobs.<key>``, ``$.final_files.<path>``), ``str()`` says what
    is wrong and what to do."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        super().__init__(message)


# -- writing ----------------------------------------------------------------


def stored_once(body: dict[str, Any], *, key_chars: int = KEY_CHARS) -> dict[str, Any]:
    """``body`` (a document as a file stores it, root placeholders written)
    with each content named more than once written once under ``blobs``
    and referred to; ``format_version`` ``BLOB_VERSION`` when it has any.
    ``body`` itself when nothing repeats. ``key_chars`` is for tests that
    need two keys to collide."""
    counts: dict[tuple[str, str], int] = {}
    for _, content in _contents(body):
        form = _form(content)
        if form is not None:
            counts[form] = counts.get(form, 0) + 1
    shared = [
        form
        for form, count in counts.items()
        if count > 1 and len(form[1]) >= SHARED_FROM and _readable(form)
    ]
    if not shared:
        return body
    keys = _keys(shared, key_chars)

    def reference(content: Any) -> Any:
        form = _form(content)
        return Reference({REFERENCE: keys[form]}) if form is not None and form in keys else content

    stored = _each_content(body, reference)
    stored["format_version"] = max(BLOB_VERSION, body.get("format_version", BLOB_VERSION))
    stored[KEY] = {keys[form]: _value(form) for form in shared}
    return stored


def plain(body: dict[str, Any]) -> dict[str, Any]:
    """``stored_once``'s ``body`` with each ``Reference`` a plain ``dict``,
    for a writer that knows only plain data (``yaml.safe_dump``)."""
    return _each_content(
        body, lambda content: dict(content) if isinstance(content, Reference) else content
    )


def _keys(forms: list[tuple[str, str]], key_chars: int) -> dict[tuple[str, str], str]:
    digests = {form: hashlib.sha256(_bytes(form)).hexdigest() for form in forms}
    starts: dict[str, set[str]] = {}
    for digest in digests.values():
        starts.setdefault(digest[:key_chars], set()).add(digest)
    return {
        form: digest if len(starts[digest[:key_chars]]) > 1 else digest[:key_chars]
        for form, digest in digests.items()
    }


def _form(content: Any) -> tuple[str, str] | None:
    """``("text", s)`` or ``("base64", s)`` for a stored content; None for
    anything else (a ``{sha256: ...}``, a null, a reference)."""
    if isinstance(content, str):
        return ("text", content)
    if isinstance(content, Mapping) and set(content) == {"base64"}:
        text = content["base64"]
        return ("base64", text) if isinstance(text, str) else None
    return None


def _value(form: tuple[str, str]) -> str | dict[str, str]:
    return form[1] if form[0] == "text" else {"base64": form[1]}


def _readable(form: tuple[str, str]) -> bool:
    """Whether the form's bytes can be had: broken base64 (a hand-written
    document being upgraded) stays inline, for loading to refuse."""
    try:
        _bytes(form)
    except (binascii.Error, ValueError):
        return False
    return True


def _bytes(form: tuple[str, str]) -> bytes:
    """The bytes a stored form writes; ``binascii.Error`` for broken base64."""
    if form[0] == "text":
        return form[1].encode("utf-8", "surrogatepass")
    return base64.b64decode(form[1], validate=True)


def _contents(body: Mapping[str, Any]) -> Iterator[tuple[list[str | int], Any]]:
    """Every ``(field path, stored content)`` of the places a content may
    be a reference, in the order keys are given; tolerant of any shape."""
    for place in _PLACES:
        value: Any = body
        for name in place:
            value = value.get(name) if isinstance(value, Mapping) else None
        if isinstance(value, Mapping):
            for path, content in value.items():
                yield [*place, path], content


# -- reading ----------------------------------------------------------------


def precheck(raw: Mapping[str, Any]) -> None:
    """Before the schema: ``BlobError`` for what the schema would refuse
    without saying why (a blob that refers to another blob) or accept
    wrongly (blobs in a document of a version that has none)."""
    blobs = raw.get(KEY)
    references = [where for where, content in _contents(raw) if _reference(content) is not None]
    if blobs is None and not references:
        return
    version = raw.get("format_version")
    if isinstance(version, int) and version < BLOB_VERSION:
        where = format_path("$", [KEY] if blobs is not None else references[0])
        raise BlobError(
            where,
            f"blobs and {{blob: ...}} references need format_version {BLOB_VERSION}, "
            f"and this document says {version}: set format_version to {BLOB_VERSION}",
        )
    if isinstance(blobs, Mapping):
        for key, value in blobs.items():
            if _reference(value) is not None:
                raise BlobError(
                    format_path("$", [KEY, str(key)]),
                    "refers to another blob: a blob holds a content (text or "
                    "{base64: ...}), never a reference, so references never chain",
                )


def resolved(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a document the schema accepted) with every reference
    replaced by the content of its blob and ``blobs`` gone: the document as
    if written inline. ``BlobError`` for a reference to no blob, a blob no
    file refers to, a blob whose content does not have its key's digest, or
    references standing for more than ``MAX_DOCUMENT_BYTES`` together."""
    blobs = raw.get(KEY)
    references = [
        (where, key)
        for where, content in _contents(raw)
        if (key := _reference(content)) is not None
    ]
    if blobs is None and not references:
        return raw
    blobs = blobs if isinstance(blobs, Mapping) else {}
    for key in blobs:
        if not isinstance(key, str):
            raise BlobError(
                format_path("$", [KEY]),
                f"a key ({key!r}) is not text: quote it, as written keys are",
            )
    used: set[str] = set()
    total = 0
    for where, key in references:
        if key not in blobs:
            raise BlobError(
                format_path("$", where),
                f"refers to blob {key}, which {KEY} does not hold: the content is lost; "
                "re-record the cassette, or write the content here",
            )
        used.add(key)
        total += len(_form_of_blob(blobs, key)[1])
    for key in blobs:
        if key not in used:
            raise BlobError(
                format_path("$", [KEY, key]),
                "no file refers to it: remove it, or refer to it as {blob: " + key + "}",
            )
    if total > MAX_DOCUMENT_BYTES:
        raise BlobError(
            format_path("$", [KEY]),
            f"the references stand for {total:,} characters of content, more than "
            f"{MAX_DOCUMENT_BYTES:,}, the most a document may hold written inline "
            "(limit: pytest_toolguard.documents.MAX_DOCUMENT_BYTES)",
        )
    for key in blobs:
        _check_digest(key, _form_of_blob(blobs, key))
    given = {name: value for name, value in raw.items() if name != KEY}
    return _each_content(
        given, lambda content: blobs[key] if (key := _reference(content)) is not None else content
    )


def _form_of_blob(blobs: Mapping[str, Any], key: str) -> tuple[str, str]:
    form = _form(blobs[key])
    if form is None:  # the schema allows text or {base64: text} only
        raise BlobError(format_path("$", [KEY, key]), "must be text or {base64: ...}")
    return form


def _check_digest(key: str, form: tuple[str, str]) -> None:
    where = format_path("$", [KEY, key])
    try:
        data = _bytes(form)
    except (binascii.Error, ValueError):
        raise BlobError(where, "base64: not valid base64") from None
    digest = hashlib.sha256(data).hexdigest()
    if not digest.startswith(key):
        raise BlobError(
            where,
            f"its content's SHA-256 begins {digest[: len(key)]}, not {key}: the content or "
            "its key was edited. Re-record the cassette; or, if the content is right, "
            f"rename the blob and every {{blob: {key}}} to {digest[:KEY_CHARS]}",
        )


def _each_content(body: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """``body`` with ``change`` run over each content of the places a
    content may be a reference (new mappings; ``body`` is left as it is)."""

    def files(contents: Any) -> Any:
        if not isinstance(contents, Mapping):
            return contents
        return {path: change(content) for path, content in contents.items()}

    changed = dict(body)
    if isinstance(changed.get("workspace"), Mapping):
        changed["workspace"] = {
            name: files(item) if name in ("files", "outside_files") else item
            for name, item in changed["workspace"].items()
        }
    if "final_files" in changed:
        changed["final_files"] = files(changed["final_files"])
    return changed


def _reference(content: Any) -> str | None:
    if isinstance(content, Mapping) and REFERENCE in content:
        key = content[REFERENCE]
        return key if isinstance(key, str) else repr(key)
    return None
