"""What an item found, carried on its own ``TestReport``.

An item's body leaves what it found (``leave``: replay totals, a matrix
cell, fuzz reports, as plain JSON data) in the item's stash; the report of
its call phase carries it (``attach``, as ``report.toolguard``: pytest and
pytest-xdist serialize a report's extra attributes); the process that logs
reports (the only one without xdist, the controller with it) hands it to
the run (``found_on``). One code path with or without xdist, and nothing
waits for a worker's end: a worker that crashes loses only the item it was
running, and that item, when it is a fault cell, is reported as a failed
cell (``crashed_cell``).

Every report of an item that was given ``toolguard_secrets`` (replay,
fault cells, fuzzing, amplify, a test using the ``toolguard`` fixture)
passes ``scrub`` before anything reads it: its failure text, captured
output, user properties (junit XML) and what it found (the summary lines,
the fault matrix's report files) hold a placeholder where a real secret
was. What the item itself printed to the terminal while it ran (``-s``)
and what other plugins write outside the report are not covered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

ATTRIBUTE = "toolguard"
"""The ``TestReport`` attribute that carries what an item found."""

YAML_SUFFIXES = (".yaml", ".yml")

FOUND: pytest.StashKey[dict[str, Any]] = pytest.StashKey()

SECRETS_FIXTURE = "toolguard_secrets"
"""The fixture whose values an item's reports never show."""

_KNOWN: pytest.StashKey[Any] = pytest.StashKey()


def leave(item: pytest.Item, **found: Any) -> None:
    """Keep what ``item`` found for its report: ``replay=`` totals as a
    dict, ``cell=`` a cell as a dict, ``fuzz=`` a list of fuzz reports as
    dicts."""
    item.stash.setdefault(FOUND, {}).update(found)


def attach(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put what ``item`` left on the report of its call phase."""
    if report.when == "call":
        found = item.stash.get(FOUND, None)
        if found:
            setattr(report, ATTRIBUTE, found)


def scrub(item: pytest.Item, report: pytest.TestReport) -> None:
    """Replace, in ``report``, every real secret the item was given
    (``toolguard_secrets``) by its placeholder: failure text, captured
    output, user properties and what the item found (``KnownSecrets``
    says which forms of a value are found). A report of an item without
    that fixture is left alone."""
    known = _known_secrets(item)
    if known is None:
        return
    longrepr = report.longrepr
    if isinstance(longrepr, str):
        report.longrepr = known.text(longrepr)
    elif isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        report.longrepr = known.scrub(longrepr)
    elif longrepr is not None:
        # A traceback: its text is what every consumer shows. Replaced by
        # that text scrubbed, and only when it held a secret.
        text = report.longreprtext
        scrubbed = known.text(text)
        if scrubbed != text:
            report.longrepr = scrubbed
    report.sections = [(known.text(title), known.text(body)) for title, body in report.sections]
    report.user_properties = [
        (known.scrub(name), known.scrub(value)) for name, value in report.user_properties
    ]
    found = getattr(report, ATTRIBUTE, None)
    if found is not None:
        setattr(report, ATTRIBUTE, known.scrub(found))


def _known_secrets(item: pytest.Item) -> Any:
    """The item's ``KnownSecrets`` (None when it has none), made once."""
    known = item.stash.get(_KNOWN, None)
    if known is None:
        funcargs = getattr(item, "funcargs", None)
        secrets = funcargs.get(SECRETS_FIXTURE) if isinstance(funcargs, Mapping) else None
        if not isinstance(secrets, Mapping) or not secrets:
            return None
        from ..harness.known_secrets import KnownSecrets

        known = item.stash[_KNOWN] = KnownSecrets(secrets)
    return known if known else None


def found_on(report: pytest.TestReport) -> Mapping[str, Any] | None:
    """What the report's item found, if it left anything."""
    found = getattr(report, ATTRIBUTE, None)
    return found if isinstance(found, Mapping) else None


def crashed_cell(nodeid: str, faults: Sequence[str], why: str) -> dict[str, Any] | None:
    """The failed cell of a fault cell whose worker crashed (its node id is
    ``<file>::<n>-<tool>::<fault>``), as ``CellOutcome.as_dict`` gives it;
    None for any other node id."""
    parts = nodeid.split("::")
    if len(parts) != 3 or not parts[0].endswith(YAML_SUFFIXES) or parts[2] not in faults:
        return None
    number, _, tool = parts[1].partition("-")
    if not number.isdigit() or int(number) < 1 or not tool:
        return None
    return {
        "source": parts[0],
        "interaction": int(number),
        "tool": tool,
        "fault": parts[2],
        "status": "fail",
        "problems": [f"the xdist worker running this cell crashed: {why}"],
        "nodeid": nodeid,
    }
