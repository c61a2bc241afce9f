"""Record modes: when a test records its cassette and when it replays it.

- ``none`` (the default): never record. The cassette must exist; the test
  replays it. A missing cassette is an error that prints the command to
  record it.
- ``once``: record when the cassette is missing, otherwise replay it.
- ``rewrite``: always record, replacing the cassette (written to a
  temporary file and renamed, only when the test passed).

The mode comes from, in this order of precedence: the command line option
``--toolguard-record-mode``, the test's ``@pytest.mark.toolguard(record_mode=
...)``, the ini option ``toolguard_record_mode``.
"""

from __future__ import annotations

import enum


class RecordMode(str, enum.Enum):
    NONE = "none"
    ONCE = "once"
    REWRITE = "rewrite"


class Action(enum.Enum):
    """What a test does with its cassette."""

    REPLAY = "replay"
    RECORD = "record"
    MISSING = "missing"
    """Replay was required and there is nothing to replay."""


CHOICES = tuple(mode.value for mode in RecordMode)


def parse(value: str, where: str) -> RecordMode:
    """``value`` as a mode; ``ValueError`` naming ``where`` it came from."""
    try:
        return RecordMode(value)
    except ValueError:
        raise ValueError(
            f"{where}: unknown record mode {value!r}; choose one of {', '.join(CHOICES)}"
        ) from None


def choose(*candidates: RecordMode | None) -> RecordMode:
    """The first mode given, highest precedence first; ``none`` when none is."""
    return next((mode for mode in candidates if mode is not None), RecordMode.NONE)


def action(mode: RecordMode, cassette_exists: bool) -> Action:
    """What a test in ``mode`` does, given whether its cassette exists."""
    if mode is RecordMode.REWRITE or (mode is RecordMode.ONCE and not cassette_exists):
        return Action.RECORD
    return Action.REPLAY if cassette_exists else Action.MISSING
