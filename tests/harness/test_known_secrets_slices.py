"""``KnownSecrets.scrub`` finds a secret a tool cut or encoded.

A hostile case picks the slice (``read_text max_chars: 22`` of a 23-character
secret) and the report printed it. Every run of at least ``slice_bound``
characters (half the secret, at least ``MIN_SLICE``) of the secret, of its
reverse, other case, hexadecimal, base64 or base64url is scrubbed, from the
start, the middle or the end; a shorter run is left (the documented stop).
The search is linear in the text.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from pytest_toolguard.harness.known_secrets import MIN_SLICE, KnownSecrets, slice_bound
from pytest_toolguard.replay import loads
from pytest_toolguard.replay.player import replay
from pytest_toolguard.replay.report import format_report
from pytest_toolguard.tools import builtin_registry

SECRETS = {
    "short": "k3y-9Q!zZx7",  # bound MIN_SLICE
    "api_key": "Sup3r-S3cret-Value-9f2c",
    "long": "ghp_R8kT2vXqL0mN5pW7sY1zA3bC6dE9fG4hJ2Ue2",
}


def forms(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "as is": secret,
        "reversed": secret[::-1],
        "upper": secret.upper(),
        "lower": secret.lower(),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "base64": base64.b64encode(raw).decode(),
        "base64url": base64.urlsafe_b64encode(raw).decode(),
    }


def longest_run(text: str, form: str) -> int:
    """The longest substring of ``form`` found in ``text`` (brute force)."""
    best = 0
    for start in range(len(form)):
        for end in range(start + best + 1, len(form) + 1):
            if form[start:end] not in text:
                break
            best = end - start
    return best


def slices(secret: str) -> list[tuple[int, int]]:
    """Every slice of at least the bound: from the start, the middle, the end."""
    bound, size = slice_bound(secret), len(secret)
    found = []
    for length in range(bound, size + 1):
        middle = (size - length) // 2
        found += [(0, length), (middle, middle + length), (size - length, size)]
    return sorted(set(found))


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_every_slice_at_least_the_bound_is_scrubbed(name: str) -> None:
    secret = SECRETS[name]
    known = KnownSecrets({name: secret})
    bound = slice_bound(secret)
    for form_name, form in forms(secret).items():
        for start, end in slices(form):
            text = f"content: {form[start:end]} (total {len(form)})"
            scrubbed = known.scrub(text)
            assert longest_run(scrubbed, form) < bound, (form_name, start, end, scrubbed)
            assert f"<redacted:{name}>" in scrubbed
            as_bytes = known.scrub(text.encode())
            assert longest_run(as_bytes.decode(), form) < bound, (form_name, start, end)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_run_shorter_than_the_bound_is_left_as_documented(name: str) -> None:
    secret = SECRETS[name]
    known = KnownSecrets({name: secret})
    bound = slice_bound(secret)
    assert bound == max(MIN_SLICE, len(secret) // 2)
    for start in (0, (len(secret) - bound) // 2, len(secret) - bound + 1):
        piece = secret[start : start + bound - 1]
        assert known.scrub(f"[{piece}]") == f"[{piece}]"


@pytest.mark.parametrize("shift", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("encoder", ["b64encode", "urlsafe_b64encode"])
@pytest.mark.parametrize("name", sorted(SECRETS))
def test_base64_of_the_secret_inside_a_longer_value_is_scrubbed(
    name: str, encoder: str, shift: int
) -> None:
    secret = SECRETS[name]
    encode = getattr(base64, encoder)
    text = encode(b"p" * shift + secret.encode() + b" and more").decode()
    scrubbed = KnownSecrets({name: secret}).scrub(text)
    assert f"<redacted:{name}>" in scrubbed
    # What is left decodes to less than the bound of the secret.
    body = encode(secret.encode()[3:-3]).decode()
    assert longest_run(scrubbed, body) < slice_bound(body)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_base64_of_a_slice_is_scrubbed(name: str) -> None:
    secret = SECRETS[name]
    known = KnownSecrets({name: secret})
    for start, end in slices(secret):
        encoded = base64.b64encode(secret[start:end].encode()).decode()
        if len(encoded) >= 2 * slice_bound(secret):  # the whole groups alone pass the bound
            assert f"<redacted:{name}>" in known.scrub(encoded), (start, end)


def test_several_secrets_and_nested_values() -> None:
    known = KnownSecrets(SECRETS)
    value: Any = {
        "a": [SECRETS["api_key"][:20], (SECRETS["long"][5:30],)],
        SECRETS["short"][::-1]: b"x" + SECRETS["long"][-25:].encode(),
    }
    scrubbed = known.scrub(value)
    shown = repr(scrubbed)
    for name, secret in SECRETS.items():
        assert longest_run(shown, secret) < slice_bound(secret), name
    assert "<redacted:short>" in shown and "<redacted:long>" in shown


def test_ordinary_text_is_left_alone() -> None:
    known = KnownSecrets(SECRETS)
    text = "Super secret values are redacted; hexdump 0123456789abcdef; base64 U3VwZXI="
    assert known.scrub(text) == text


def best_time(known: KnownSecrets, text: str) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        known.scrub(text)
        times.append(time.perf_counter() - started)
    return min(times)


@pytest.mark.parametrize(
    "secret",
    ["Sup3r-S3cret-Value-9f2c", "a" * 40, "ab" * 30, "ghp_R8kT2vXqL0mN5pW7sY1zA3bC6dE9fG4hJ2Ue2"],
)
def test_the_search_is_linear_in_the_text(secret: str) -> None:
    known = KnownSecrets({"k": secret})
    bound = slice_bound(secret)
    # Every run one character short of the bound: each probe hits, nothing is replaced.
    unit = secret[: bound - 1] + "\x00" + secret[-(bound - 1) :] + "\x01"
    small = unit * (50_000 // len(unit))
    large = unit * (200_000 // len(unit))
    assert best_time(known, large) < 10 * best_time(known, small) + 0.05


# -- end to end: a hostile case picks the slice ------------------------------------------

SLICE_CASE = """\
format_version: 1
kind: case
session:
  capabilities: {{allowed_risks: [read, write], write_roots: ["."]}}
interactions:
  - call: {{tool_name: write_file, arguments: {{path: k.txt, content: "<redacted:api_key>"}}}}
    result: {{ok: true, code: OK}}
  - call: {{tool_name: read_text, arguments: {{path: k.txt, max_chars: {chars}}}}}
    result: {{ok: true, code: OK, data: {{content: other}}}}
"""


@pytest.mark.parametrize("chars", [11, 12, 16, 20, 22, 23])
def test_a_case_reading_back_a_slice_never_prints_it(chars: int) -> None:
    secret = SECRETS["api_key"]
    cassette = loads(SLICE_CASE.format(chars=chars), source="slice.yaml")
    report = replay(cassette, builtin_registry(), secrets={"api_key": secret})
    assert not report.ok
    text = format_report(report, cassette_path="slice.yaml", rerecord="edit it")
    shown = text + repr(report.differences)
    assert longest_run(shown, secret) < slice_bound(secret), shown
