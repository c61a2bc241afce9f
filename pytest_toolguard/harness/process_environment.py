"""What a handler reads from its process, varied for a block and put back
however the block ends: the time zone (``TZ``), the terminal width
(``COLUMNS``/``LINES``), the locale and the working directory.

Each ``Variation`` is named as ``ToolSpec.depends_on_environment`` names
it (``registry.ENVIRONMENT_INPUTS``) and picks a value other than the
process's own when it is entered: a time zone of another UTC offset (a
POSIX ``TZ`` string, which needs no time-zone database), another width,
another locale the machine has, a directory other than the workspace.

Guarantees: when the block ends, even by an exception or
``KeyboardInterrupt``, the environment variables it set hold their old
values again (or are unset again), ``time.tzset()`` and
``locale.setlocale`` have read them back, and the working directory is the
one it left. What it cannot do: these are the process's, not a thread's,
so every thread sees the varied value while the block runs (the
executor's worker thread must: the handler runs there), and a locale the
machine does not have cannot be varied to: with only ``C`` and
``C.UTF-8`` installed, ``de_DE.UTF-8`` is made once with ``localedef``
and kept in the temporary directory (``generated_locales``), and without ``localedef`` only the
encoding and the ``LANG``/``LC_*`` variables change.

The hash seed cannot be varied in a running interpreter: see
``harness.seeded_interpreters``.
"""

from __future__ import annotations

import functools
import locale
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from types import SimpleNamespace

TIME_ZONES: tuple[tuple[str, int], ...] = (("<+0545>-05:45", 20700), ("<-0330>+03:30", -12600))
"""POSIX ``TZ`` values and their UTC offsets (seconds): odd offsets without
daylight saving, so that a local time is never taken for UTC by luck."""

WIDTHS: tuple[tuple[int, int], ...] = ((37, 7), (151, 97))
"""(``COLUMNS``, ``LINES``) pairs a wrapped text or a table meets."""

LOCALES: tuple[str, ...] = (
    "de_DE.UTF-8",
    "de_DE.utf8",
    "fr_FR.UTF-8",
    "fr_FR.utf8",
    "tr_TR.UTF-8",
    "tr_TR.utf8",
    "C.UTF-8",
    "C.utf8",
    "C",
)
"""Locales tried in order (a decimal comma, grouped thousands, another
collation first); the first the machine has, other than the current one."""

LOCALE_VARIABLES = ("LC_ALL", "LANG", "LANGUAGE")

ELSEWHERE = "toolguard-elsewhere"
"""The empty directory beside the workspace the ``cwd`` variation enters."""


@dataclass(frozen=True, slots=True)
class Variation:
    """One input of the process, varied: ``applied(workspace_root)`` is the
    block; ``describe`` says what it set, after it was entered."""

    name: str
    applied: Callable[[str], AbstractContextManager[str]]
    """``applied(root)``: a context manager that yields what it set
    (``TZ=<+0545>-05:45``), and puts everything back when it ends."""
    advice: str
    """What a tool that should not depend on it does instead."""


@contextmanager
def _variables(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` holding ``values`` for the block; the old values (or
    their absence) back after it."""
    before = {name: os.environ.get(name) for name in values}
    try:
        os.environ.update(values)
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def other_time_zone(_root: str = "") -> Iterator[str]:
    """``TZ`` set to a zone of another UTC offset than the process's now,
    read by ``time.tzset()``; the old one read back after."""
    offset = time.localtime().tm_gmtoff
    value = next(zone for zone, seconds in TIME_ZONES if seconds != offset)
    try:
        with _variables({"TZ": value}):
            time.tzset()
            yield f"TZ={value}"
    finally:
        time.tzset()


@contextmanager
def other_width(_root: str = "") -> Iterator[str]:
    """``COLUMNS`` and ``LINES`` (what ``shutil.get_terminal_size`` reads
    first) set to another size than the process's now."""
    columns = shutil.get_terminal_size().columns
    width, lines = next(pair for pair in WIDTHS if pair[0] != columns)
    with _variables({"COLUMNS": str(width), "LINES": str(lines)}):
        yield f"COLUMNS={width}"


GENERATED_LOCALE = "de_DE.UTF-8"
"""The locale made with ``localedef`` when the machine has none of ``LOCALES``
but ``C``: a decimal comma, grouped thousands, German collation and names."""


_REAL = SimpleNamespace(spawn=os.posix_spawn, wait=os.waitpid)
"""Taken at import: pyfakefs patches the module-level names of ``os``'s
functions (and ``subprocess``'s pipes) while a fake world runs, and the
locale is made on the real disk whichever world asks first."""

MAKE_LOCALE = """
shared=$1 language=$2 name=$3 scratch=$4
kept() {
  [ -d "$shared/$name" ] && [ -O "$shared" ] &&
    [ -z "$(find "$shared" -maxdepth 0 -perm /022)" ]
}
kept && exit 0
umask 077
if mkdir -p "$scratch" && localedef -i "$language" -f UTF-8 "$scratch/$name"; then
  mv -T -- "$scratch" "$shared" 2>/dev/null
fi
rm -rf -- "$scratch"
kept
"""
"""Reuses the shared locale directory when this user owns it and nobody
else may write it; else makes one beside it and moves it into place (a
process that loses the race to another keeps the winner's)."""


@functools.lru_cache(maxsize=1)
def generated_locales() -> str | None:
    """A directory for ``LOCPATH`` holding ``GENERATED_LOCALE``, made with
    ``localedef`` (about two seconds) the first time any process of this
    user asks, in the temporary directory, and kept for the next ones;
    None when ``localedef`` or its sources are missing, or the directory
    is not this user's alone. Made by processes started with
    ``os.posix_spawn`` (a shell, ``localedef``): a fake filesystem may be
    active, and neither sees it."""
    temporary = os.environ.get("TMPDIR") or "/tmp"
    shared = os.path.join(temporary, f"toolguard-locales-{os.getuid()}")
    scratch = f"{shared}-{os.getpid()}-{uuid.uuid4().hex}"
    language = GENERATED_LOCALE.split(".")[0]
    argv = ["/bin/sh", "-c", MAKE_LOCALE, "sh", shared, language, GENERATED_LOCALE, scratch]
    return shared if _run(argv) == 0 else None


def _run(argv: list[str]) -> int:
    """Run ``argv`` (output to /dev/null) and wait for it: its exit status."""
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    try:
        pid = _REAL.spawn(argv[0], argv, dict(os.environ), file_actions=quiet)
    except OSError:
        return 127
    _pid, status = _REAL.wait(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _same_locale(one: str, other: str) -> bool:
    return one.lower().replace("-", "") == other.lower().replace("-", "")


def other_locale() -> str | None:
    """The first of ``LOCALES`` the machine has, other than the process's
    current ``LC_ALL``/``LC_CTYPE`` locale; None when it has none. Asks
    ``setlocale`` (and puts the current locale back)."""
    current = locale.setlocale(locale.LC_ALL)
    ctype = locale.setlocale(locale.LC_CTYPE)
    try:
        for name in LOCALES:
            if _same_locale(name, current) or _same_locale(name, ctype):
                continue
            try:
                locale.setlocale(locale.LC_ALL, name)
            except locale.Error:
                continue
            return name
        return None
    finally:
        locale.setlocale(locale.LC_ALL, current)


@contextmanager
def other_locale_set(_root: str = "") -> Iterator[str]:
    """``LC_ALL``, ``LANG`` and ``LANGUAGE`` naming ``other_locale()``, and
    the categories a process launched under them would have set to it
    (``_categories_taken_from_the_environment``); the old locale (every
    category, as ``setlocale`` spells a mixed one) back after."""
    current = locale.setlocale(locale.LC_ALL)
    name = other_locale()
    variables = {}
    if name is None or name.startswith("C"):  # one with other numbers, names, collation
        directory = generated_locales()
        if directory is not None:
            name, variables = GENERATED_LOCALE, {"LOCPATH": directory}
    if name is None:  # nothing to set but the variables
        name = "C" if "UTF" in current.upper() else "C.UTF-8"
    variables.update(dict.fromkeys(LOCALE_VARIABLES, name))
    try:
        with _variables(variables):
            # The machine may have none but the current one: the variables still say it.
            with suppress(locale.Error):
                for category in _categories_taken_from_the_environment():
                    locale.setlocale(category, name)
            yield f"locale {name}"
    finally:
        locale.setlocale(locale.LC_ALL, current)


def _categories_taken_from_the_environment() -> list[int]:
    """The categories a process launched under other locale variables would
    have in the other locale: ``LC_CTYPE`` (Python sets it at start), and
    each one the process had already set from C (an application that called
    ``setlocale(LC_ALL, "")``). Python leaves the others C, whatever the
    variables say, so a tool formatting a date or a number there gets C's
    answer in any environment; one that calls ``setlocale`` itself reads
    the variables."""
    categories = [locale.LC_CTYPE]
    for name in ("LC_COLLATE", "LC_TIME", "LC_MONETARY", "LC_NUMERIC", "LC_MESSAGES"):
        category = getattr(locale, name, None)
        if category is not None and locale.setlocale(category) not in ("C", "POSIX"):
            categories.append(category)
    return categories


@contextmanager
def other_directory(root: str) -> Iterator[str]:
    """The working directory (and ``$PWD``) an empty directory beside the
    workspace ``root`` (``ELSEWHERE``), made for the block and removed after
    when still empty; the directory the process was in back after."""
    elsewhere = os.path.join(os.path.dirname(root), ELSEWHERE)
    os.makedirs(elsewhere, exist_ok=True)
    before = os.getcwd()
    try:
        with _variables({"PWD": elsewhere}):
            os.chdir(elsewhere)
            try:
                yield f"cwd {elsewhere}"
            finally:
                os.chdir(before)
    finally:
        # A handler wrote there: it is left for the outside oracle to see.
        with suppress(OSError):
            os.rmdir(elsewhere)


VARIATIONS: tuple[Variation, ...] = (
    Variation("TZ", other_time_zone, "answer in UTC (datetime.now(timezone.utc))"),
    Variation("COLUMNS", other_width, "wrap to a fixed width"),
    Variation("locale", other_locale_set, "format and sort without the locale"),
    Variation("cwd", other_directory, "resolve paths in ctx.workspace, never against the cwd"),
)
"""The inputs varied in this process, in the order they are reported."""
