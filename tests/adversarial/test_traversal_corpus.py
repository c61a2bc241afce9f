"""Every public path-traversal payload, raw and decoded, against a real tree.

The payloads come from PayloadsAllTheThings (see the corpus README). The
workspace sits 16 directories deep, deeper than any payload climbs, and every
ancestor holds a sentinel ``etc/passwd``, so a ``../`` of any depth that got
through would meet something real. The oracles: no read returns anything the
test did not write inside the workspace, nothing outside the workspace is
created or changed, and every payload that ``os.path.normpath`` would place
outside the workspace is refused as ``PathOutsideWorkspace``, not as a
missing file.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

from pytest_toolguard.sandbox import PathOutsideWorkspace, SandboxError, Workspace

# A copy of the shared corpus (MIT, see its LICENSE file), so a clone tests itself.
CORPUS = Path(__file__).resolve().parents[1] / "corpora" / "traversal"
DEPTH = 16
SENTINEL = b"SENTINEL: outside the workspace"
MARKER = b"written through the workspace: "
ORDINARY_MISSES = (SandboxError, FileNotFoundError, IsADirectoryError, NotADirectoryError)


def load_raw_payloads() -> list[str]:
    """Every non-empty line of every corpus file, ``{FILE}`` filled in, in
    file order, duplicates dropped."""
    lines: list[str] = []
    for corpus_file in sorted(CORPUS.glob("*.txt")):
        for line in corpus_file.read_text(encoding="utf-8").splitlines():
            if line:
                lines.append(line.replace("{FILE}", "etc/passwd"))
    return list(dict.fromkeys(lines))


def decoded_variants(payload: str) -> list[str]:
    """What a careless server would make of ``payload``: URL-decoded up to
    three times, NFKC-normalized, backslashes made slashes."""
    variants: list[str] = []
    text = payload
    for _ in range(4):
        normalized = unicodedata.normalize("NFKC", text)
        for form in (text, normalized):
            variants += [form, form.replace("\\", "/")]
        text = unquote(text)
    return variants


def is_real_escape(workspace: str, payload: str) -> bool:
    """Would a plain join-and-normpath place ``payload`` outside the workspace?"""
    target = os.path.normpath(os.path.join(workspace, payload))
    return target != workspace and not target.startswith(workspace + os.sep)


def snapshot(base: Path, skip: Path) -> dict[str, str]:
    """Every entry under ``base`` except ``skip``: files by content hash,
    directories and links by kind."""
    state: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        here = Path(dirpath)
        dirnames[:] = sorted(name for name in dirnames if here / name != skip)
        for name in dirnames:
            state[str(here / name)] = "dir"
        for name in sorted(filenames):
            path = here / name
            state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def host_targets(payloads: list[str]) -> dict[str, str | None]:
    """The host files absolute payloads name, hashed (None: absent), so a
    write that reached the real root would show."""
    state: dict[str, str | None] = {}
    for payload in payloads:
        if not payload.startswith("/") or "\0" in payload:
            continue
        path = os.path.normpath(payload)
        try:
            with open(path, "rb") as handle:
                state[path] = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            state[path] = None if not os.path.lexists(path) else "unreadable"
    return state


def attempt(ws: Workspace, operation: str, payload: str, index: int) -> bytes:
    """Run one operation with ``payload``; a read returns what it read."""
    if operation == "read":
        return ws.read_bytes(payload, max_bytes=1 << 20)
    if operation == "write":
        ws.write_bytes(payload, MARKER + b"%d" % index)
    else:
        ws.resolve(payload)
    return b""


@pytest.fixture
def deep_workspace(tmp_path: Path) -> Path:
    """``tmp/l01/.../l16/ws`` with a sentinel ``etc/passwd`` at every ancestor."""
    level = tmp_path
    for depth in range(DEPTH + 1):
        (level / "etc").mkdir()
        (level / "etc" / "passwd").write_bytes(SENTINEL + b" at depth %d" % depth)
        if depth < DEPTH:
            level = level / f"l{depth + 1:02d}"
            level.mkdir()
    workspace = level / "ws"
    workspace.mkdir()
    return workspace


def test_no_traversal_payload_escapes_the_workspace(deep_workspace: Path, tmp_path: Path) -> None:
    raw = load_raw_payloads()
    raw_set = set(raw)
    decoded = [
        variant
        for variant in dict.fromkeys(v for payload in raw for v in decoded_variants(payload))
        if variant not in raw_set
    ]
    payloads = raw + decoded
    root = str(deep_workspace)
    escapes = [payload for payload in payloads if is_real_escape(root, payload)]
    # Sanity of the setup: deeper than any climb, so a broken sandbox would
    # hit the sentinels under tmp_path, not the host.
    climbs_past_tmp = [
        payload
        for payload in escapes
        if not payload.startswith("/")
        and not os.path.normpath(os.path.join(root, payload)).startswith(str(tmp_path) + os.sep)
    ]
    assert climbs_past_tmp == [], "nest the workspace deeper than the corpus climbs"

    with Workspace(deep_workspace) as ws:
        # Before any I/O: every real escape must already fail the lexical
        # check, so this test cannot write over host files if the sandbox is
        # broken.
        slipped = []
        for payload in escapes:
            try:
                ws.normalize(payload)
                slipped.append(payload)
            except PathOutsideWorkspace:
                pass
        if slipped:
            pytest.fail(f"{len(slipped)} real escapes pass normalize(), e.g. {slipped[:5]}")

        outside_before = snapshot(tmp_path, skip=deep_workspace)
        host_before = host_targets(payloads)
        leaked_reads: list[str] = []
        wrong_refusals: list[tuple[str, str, str]] = []
        host_path_in_message: list[str] = []
        unexpected: list[tuple[str, str, str]] = []

        escape_set = set(escapes)
        for index, payload in enumerate(payloads):
            escape = payload in escape_set
            for operation in ("read", "write", "resolve"):
                try:
                    result = attempt(ws, operation, payload, index)
                except ORDINARY_MISSES as exc:
                    if str(tmp_path) in str(exc):
                        host_path_in_message.append(payload)
                    if escape and not isinstance(exc, PathOutsideWorkspace):
                        wrong_refusals.append((operation, payload, type(exc).__name__))
                    continue
                except Exception as exc:  # anything else is a bug worth reporting
                    unexpected.append((operation, payload, repr(exc)))
                    continue
                if escape:
                    wrong_refusals.append((operation, payload, "succeeded"))
                if operation == "read" and not result.startswith(MARKER):
                    leaked_reads.append(payload)

        outside_after = snapshot(tmp_path, skip=deep_workspace)
        host_after = host_targets(payloads)

    changed_outside = sorted(
        path
        for path in outside_before.keys() | outside_after.keys()
        if outside_before.get(path) != outside_after.get(path)
    )
    changed_host = sorted(path for path in host_before if host_before[path] != host_after[path])
    print(
        f"\ntraversal corpus: {len(raw)} raw payloads, {len(decoded)} decoded variants, "
        f"{len(payloads) * 3} operations; {len(escapes)} real escapes refused as "
        f"PathOutsideWorkspace: {len(escapes) - len({p for _, p, _ in wrong_refusals})}; "
        f"escapes: {len(leaked_reads) + len(changed_outside) + len(changed_host)}"
    )
    assert leaked_reads == []
    assert changed_outside == []
    assert changed_host == []
    assert wrong_refusals == []
    assert unexpected == []
    assert host_path_in_message == []
