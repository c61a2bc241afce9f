"""``toolguard mcp check`` and ``toolguard import ... --command``: an MCP
server started as a command (``bridges.guards.mcp_server.from_mcp_command``),
tested the way its author tests it.

``mcp check`` starts the server, lists its tools, and runs what it is
given against them, each call in a fresh directory world with the server
started in it: a cassette replayed and its fault matrix (``--cassette``),
a JSON-RPC log re-executed in a copy of a workspace into a cassette and
then the same (``--calls``), and the fuzzer (``--fuzz N``). With no paths
declared (the author's view) the server is judged on its own confinement:
the faults' escaping payloads reach it and the world's oracles judge what
it did. ``--path TOOL=TEMPLATE[:MODE]`` declares paths, as an agent's
developer would: the boundary refuses escapes before the server sees them.

``UsageError`` lives here so that both this module and ``cli`` (which
re-exports it) raise the error ``cli.main`` prints as one line, exit 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import ToolguardError

CLEAN, FOUND = 0, 1
DEFAULT_FUZZ_EXAMPLES = 20
"""Examples per tool when ``mcp check`` is given nothing else to run."""
REPORT_SUFFIXES = (".md", ".json")
HTTP_URL = "http://127.0.0.1:{port}/mcp"
"""``--http``'s URL unless given: the SDK servers' default path."""
SHOWN_FAILURES = 20


class UsageError(ToolguardError):
    """A mistake in what the command was given: printed as one line, exit 2."""


# -- the parser ---------------------------------------------------------------


def add_mcp_command(command: Callable[..., Any]) -> None:
    """Register ``mcp check`` with ``cli``'s ``command(name, help, example, run)``."""
    sub = command(
        "mcp",
        "test an MCP server started as a command: replay, fault matrix and fuzzing in "
        "fresh directory worlds (exit 0 clean, 1 a problem found, 2 a usage error)",
        "toolguard mcp check --calls session.jsonl --faults all --fuzz 20 "
        "--report build/mcp.md -- python server.py {workspace}\n\n"
        "{workspace} in the command is the root of the world each call runs in.",
        run_check,
    )
    sub.usage = (
        "toolguard mcp check [--cassette C | --calls LOG [--workspace DIR]] [--faults all|NAMES]"
        " [--fuzz N] [--report FILE] [--path TOOL=TEMPLATE[:MODE]] ... -- COMMAND ..."
    )
    sub.add_argument("action", choices=("check",), help="check: the one action")
    given = sub.add_mutually_exclusive_group()
    given.add_argument("--cassette", help="a cassette of this server's calls to replay")
    given.add_argument(
        "--calls", metavar="LOG", help="a JSON-RPC log (the mcp transcript format) to re-execute"
    )
    sub.add_argument("--faults", default="all", help="fault names, comma-separated (default all)")
    sub.add_argument(
        "--fuzz",
        type=int,
        metavar="N",
        help=f"fuzz each tool with N examples (default {DEFAULT_FUZZ_EXAMPLES} when there is "
        "no --cassette or --calls, else none)",
    )
    sub.add_argument("--seed", type=int, default=0, help="the fuzz seed (default 0)")
    sub.add_argument(
        "--workspace",
        help="with --calls: the files before the session, copied (default: an empty directory)",
    )
    sub.add_argument("--report", help=f"write the report ({' or '.join(REPORT_SUFFIXES)})")
    add_path_option(sub)


def add_path_option(parser: argparse.ArgumentParser) -> None:
    """How the server is started (``--cwd``, ``--env``, ``--startup-timeout``)
    and ``--path TOOL=TEMPLATE[:MODE]``, repeatable: the agent developer's view."""
    parser.add_argument(
        "--cwd", help="the server's working directory ({workspace}: the world's root)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server (repeat; {workspace} is filled in)",
    )
    parser.add_argument(
        "--startup-timeout", type=float, help="seconds the server may take to answer initialize"
    )
    parser.add_argument(
        "--http",
        nargs="?",
        const=HTTP_URL,
        metavar="URL",
        help="the server speaks Streamable HTTP on the loopback, not stdio, at URL (default "
        f"{HTTP_URL}); {{port}} in the command and URL is a free port chosen for each server",
    )
    parser.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="TOOL=TEMPLATE[:MODE]",
        help="declare a path a tool touches (repeat; MODE read or write, default read), as an "
        "agent's developer does: the boundary then refuses escapes before the server sees them "
        "(default: none declared, the server judged on its own confinement)",
    )


def add_command_option(parser: argparse.ArgumentParser) -> None:
    """``import``'s ``--command``: the server to re-execute the calls against."""
    parser.add_argument(
        "--command",
        action="append",
        default=[],
        metavar="COMMAND",
        help="an MCP server to run the calls against, started in the copy instead of "
        "--registry: one shell-quoted string, or one argument per --command (or after --); "
        "{workspace} is the copy",
    )
    add_path_option(parser)


# -- the server ---------------------------------------------------------------


def environment(given: Sequence[str]) -> dict[str, str] | None:
    """``--env`` values as a mapping; None for none."""
    pairs = {}
    for text in given:
        name, equals, value = text.partition("=")
        if not equals or not name:
            raise UsageError(f"--env {text!r}: expected NAME=VALUE")
        pairs[name] = value
    return pairs or None


def declared_paths(given: Sequence[str]) -> dict[str, list[Any]] | None:
    """``--path`` values as ``from_mcp_command``'s ``paths``; None for none."""
    from .registry import PathAccess

    if not given:
        return None
    paths: dict[str, list[Any]] = {}
    for text in given:
        tool, equals, template = text.partition("=")
        mode = "read"
        head, colon, tail = template.rpartition(":")
        if colon and tail in ("read", "write"):
            template, mode = head, tail
        if not equals or not tool or not template:
            raise UsageError(f"--path {text!r}: expected TOOL=TEMPLATE[:MODE], e.g. read={{path}}")
        try:
            paths.setdefault(tool, []).append(PathAccess(template, mode))  # type: ignore[arg-type]
        except ValueError as exc:
            raise UsageError(f"--path {text!r}: {exc}") from None
    return paths


def server_registry(
    command: Sequence[str], paths: dict[str, list[Any]] | None, options: argparse.Namespace
) -> Any:
    """The ``ToolRegistry`` of the server ``command`` starts (with
    ``options``' ``--cwd``, ``--env``, ``--startup-timeout``); a server that
    cannot be started or listed is a ``UsageError``, one line."""
    from .bridges import BridgeError, BridgeWarning
    from .bridges.guards.mcp_server import from_mcp_command, from_mcp_http
    from .registry import ToolRegistry

    if not command:
        raise UsageError("no server command: put it after --, e.g. -- python server.py {workspace}")
    started: dict[str, Any] = {"cwd": options.cwd, "env": environment(options.env)}
    start = from_mcp_command
    if options.http is not None:
        start = functools.partial(from_mcp_http, url=options.http)
    if options.startup_timeout is not None:
        started["startup_timeout"] = options.startup_timeout
    shown = shlex.join(command)
    quiet_sdk_logs()
    try:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as scratch:
            warnings.simplefilter("ignore", BridgeWarning)  # a path left undeclared: the view
            specs = start(
                list(command), paths=paths, list_in=_listing_copy(options, scratch), **started
            )
    except (BridgeError, OSError, ValueError, TimeoutError) as exc:  # it names the command
        raise UsageError(_one_line(str(exc) or f"{shown}: {type(exc).__name__}")) from None
    except ImportError as exc:  # the SDK, an extra
        raise UsageError(f"{exc}: pip install 'pytest-toolguard[mcp]'") from None
    if paths:
        known = {spec.name for spec in specs}
        unknown = sorted(set(paths) - known)
        if unknown:
            raise UsageError(f"--path names {', '.join(unknown)}, not a tool of {shown}")
    return ToolRegistry(specs)


def _listing_copy(options: argparse.Namespace, scratch: str) -> str | None:
    """A copy of ``--workspace`` in ``scratch`` for the server to list its
    tools in (a server may refuse an empty directory: a git server wants
    its repository), never the workspace itself; None without one."""
    workspace = getattr(options, "workspace", None)
    if not workspace:
        return None
    copy = os.path.join(scratch, os.path.basename(os.path.abspath(workspace)) or "workspace")
    shutil.copytree(workspace, copy, symlinks=True)
    return copy


def quiet_sdk_logs() -> None:
    """The SDK logs a server's unreadable line with its traceback; the
    command says what went wrong in one line of its own instead."""
    sdk = logging.getLogger("mcp")
    if not sdk.handlers:
        sdk.addHandler(logging.NullHandler())
        sdk.propagate = False


def command_of(options: argparse.Namespace, passthrough: Sequence[str]) -> list[str]:
    """``import``'s server command: one ``--command`` shell-split, several
    as they are, else what follows ``--``; empty for none."""
    given: list[str] = options.command
    if given and passthrough:
        raise UsageError("give the server's command either with --command or after --, not both")
    if len(given) == 1:
        try:
            return shlex.split(given[0])
        except ValueError as exc:
            raise UsageError(f"--command {given[0]!r}: {exc}") from None
    return list(given or passthrough)


def tools_from(options: argparse.Namespace) -> str:
    """How ``import`` was told where the tools are, for ``recorded_by``."""
    if getattr(options, "server", None):
        return f"--command {shlex.quote(shlex.join(options.server))}"
    return f"--registry {options.registry}"


def command_registry(
    options: argparse.Namespace, passthrough: Sequence[str], transcript: Any
) -> Any:
    """The registry ``import`` re-executes against when a server command is
    given (None when not): every tool the transcript names must be one of
    the server's."""
    command = options.server = command_of(options, passthrough)
    if not command:
        return None
    registry = server_registry(command, declared_paths(options.path), options)
    unknown_tools(transcript, registry, options.file)
    return registry


def unknown_tools(transcript: Any, registry: Any, log: str) -> None:
    """``UsageError`` naming the first call of a tool the server lacks."""
    from .bridges.transcripts.into_cassette import registry_name
    from .redaction import Redactor

    for call in transcript.calls:
        if registry_name(call.tool_name, registry) not in registry:
            said = Redactor().redact_text(call.tool_name)
            raise UsageError(
                f"{log} {call.where}: tool {said!r} is not one of the server's tools "
                f"({', '.join(registry.names()) or 'none'})"
            )


# -- mcp check ----------------------------------------------------------------


def run_check(options: argparse.Namespace, command: list[str]) -> int:
    """``toolguard mcp check``: what it found on stdout, the exit status."""
    from .faults import select_faults

    if options.report and Path(options.report).suffix.lower() not in REPORT_SUFFIXES:
        raise UsageError(f"--report {options.report}: the name must end in .md or .json")
    if options.fuzz is not None and options.fuzz < 1:
        raise UsageError(f"--fuzz {options.fuzz}: give at least 1 example")
    if options.workspace and not options.calls:
        raise UsageError("--workspace is the files before a --calls session: give --calls too")
    if options.workspace and not os.path.isdir(options.workspace):
        raise UsageError(f"--workspace {options.workspace}: not a directory")
    try:
        faults = select_faults(options.faults)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    paths = declared_paths(options.path)
    transcript = _transcript(options.calls) if options.calls else None
    cassette_text = _read(options.cassette) if options.cassette else None
    registry = server_registry(command, paths, options)
    shown = shlex.join(command)
    view = "the agent developer's view (paths declared)" if paths else "the author's view"
    out = [f"{shown}: {len(registry)} tool(s): {', '.join(registry.names())}; {view}"]
    if not any("{workspace}" in part for part in [*command, options.cwd or ""]):
        out.append("note: no {workspace} in the command or --cwd: the server works where it runs")
    found, body = (
        False,
        {"command": shown, "tools": registry.names(), "paths_declared": bool(paths)},
    )
    cassette, source = None, options.cassette or options.calls
    with tempfile.TemporaryDirectory(prefix="toolguard-mcp-check-") as scratch:
        if transcript is not None:
            unknown_tools(transcript, registry, options.calls)
            cassette, lines, imported_clean = _imported(transcript, registry, options, scratch)
            out += lines
            found |= not imported_clean
        elif cassette_text is not None:
            cassette = _cassette(cassette_text, options.cassette)
        matrix = None
        if cassette is not None:
            matrix, lines, failing = _cells(cassette, registry, source, faults, scratch, body)
            out += lines
            found |= failing
        examples = options.fuzz or (None if cassette is not None else DEFAULT_FUZZ_EXAMPLES)
        fuzzed = _fuzzed(registry, examples, options.seed) if examples else []
        out += _fuzz_lines(fuzzed)
        found |= any(report.failures for report in fuzzed)
        body["fuzz"] = [report.as_dict() for report in fuzzed]
    out.append("problems found" if found else "clean")
    body["clean"] = not found
    print("\n".join(out))
    if options.report:
        _write_report(options.report, matrix, body, out)
    return FOUND if found else CLEAN


def _cells(
    cassette: Any,
    registry: Any,
    source: str,
    faults: Sequence[Any],
    scratch: str,
    body: dict[str, Any],
) -> tuple[Any, list[str], bool]:
    """The cassette replayed, then its fault matrix: (the matrix, summary
    lines, whether anything differed or failed)."""
    replayed = _replayed(cassette, registry)
    lines = [
        f"replay: {len(cassette.interactions)} call(s), "
        + (f"{len(replayed)} difference(s)" if replayed else "as recorded")
    ]
    lines += [f"  differs: {_one_line(line)}" for line in replayed[:SHOWN_FAILURES]]
    body["replay_differences"] = replayed
    matrix = _matrix(cassette, registry, source, faults, scratch)
    counts = matrix.counts()
    lines.append(
        f"matrix: {len(matrix.cells)} cell(s): {counts['pass']} pass, "
        f"{counts['fail']} fail, {counts['n/a']} n/a"
    )
    failed = [cell for cell in matrix.cells if cell.status == "fail"]
    # Each cell's world is a fresh directory in the scratch one: named alike.
    world = re.compile(re.escape(scratch) + r"/toolguard-world-[^/]+")
    for cell in failed[:SHOWN_FAILURES]:
        why = world.sub("<world>", "; ".join(_one_line(p) for p in cell.problems[:2]))
        lines.append(f"  fail: {cell.interaction}. {cell.tool} x {cell.fault}: {why[:300]}")
    if len(failed) > SHOWN_FAILURES:
        lines.append(f"  and {len(failed) - SHOWN_FAILURES} more failing cell(s) (--report)")
    return matrix, lines, bool(replayed or failed)


def _fuzz_lines(fuzzed: Sequence[Any]) -> list[str]:
    lines = []
    for report in fuzzed:
        state = (
            f"skipped ({report.skipped})"
            if report.skipped
            else f"{len(report.failures)} problem(s)"
        )
        lines.append(f"fuzz {report.tool}: {report.valid_calls} valid call(s), {state}")
        lines += [f"  {_one_line(failure.format())[:300]}" for failure in report.failures]
    return lines


def _read(path: str) -> str:
    from .documents import DocumentRefused, read_text

    try:
        return read_text(path)
    except (DocumentRefused, OSError, UnicodeDecodeError) as exc:
        said = exc.strerror if isinstance(exc, OSError) else exc
        raise UsageError(f"cannot read {path}: {said}") from None


def _transcript(log: str) -> Any:
    """The log's calls; a log with anything unreadable (a truncated line, a
    result with no call) is refused: a check must run the session it names."""
    from .bridges.transcripts.mcp import read_jsonrpc_log
    from .bridges.transcripts.transcript import undecodable
    from .redaction import Redactor

    transcript = read_jsonrpc_log(_read(log))
    problem = undecodable(transcript) or next(iter(transcript.problems), None)
    if problem is not None:
        raise UsageError(_one_line(f"{log}: {problem.shown(Redactor())}"))
    if not transcript.calls:
        raise UsageError(f"{log}: no tools/call request in it")
    return transcript


def _cassette(text: str, path: str) -> Any:
    from .replay.cassette import CassetteError, loads

    try:
        return loads(text, source=path)
    except CassetteError as exc:
        raise UsageError(_one_line(str(exc))) from None


def _imported(
    transcript: Any, registry: Any, options: argparse.Namespace, scratch: str
) -> tuple[Any, list[str], bool]:
    """The log re-executed in a copy of ``--workspace`` (or of an empty
    directory) into a cassette: (cassette, report lines, nothing outside changed)."""
    from .bridges.transcripts.into_cassette import transcript_to_cassette

    workspace = options.workspace or os.path.join(scratch, "empty")
    os.makedirs(workspace, exist_ok=True)
    report = transcript_to_cassette(
        transcript,
        registry,
        workspace=workspace,
        output=os.path.join(scratch, "imported.yaml"),
        recorded_by=f"toolguard mcp check --calls {options.calls}",
    )
    lines = [f"calls: {line.strip()}" for line in report.lines()]
    lines[0] = lines[0].replace(report.path, options.calls, 1)
    return report.cassette, lines, report.written


def _replayed(cassette: Any, registry: Any) -> list[str]:
    from .replay.player import replay
    from .replay.report import show

    return [
        f"{difference.where}: {difference.field}: recorded {show(difference.recorded)}, "
        f"replayed {show(difference.replayed)}"
        for difference in replay(cassette, registry, world="directory").differences
    ]


def _matrix(cassette: Any, registry: Any, source: str, faults: Sequence[Any], parent: str) -> Any:
    from .faults import run_cell, targets
    from .faults.outcome import MatrixReport
    from .faults.prefixes import PrefixCache

    prefixes, cells = PrefixCache(), []
    for target in targets(cassette, registry, source, "directory"):
        for fault in faults:
            cells.append(
                run_cell(
                    fault, target, registry, prefixes=prefixes, world="directory", parent=parent
                )
            )
    return MatrixReport.of((fault.name for fault in faults), cells)


def _fuzzed(registry: Any, examples: int, seed: int) -> list[Any]:
    from .fuzz import fuzz_registry

    return fuzz_registry(registry, examples=examples, seed=seed, world="directory")


def _write_report(path: str, matrix: Any, body: dict[str, Any], summary: list[str]) -> None:
    from .faults.report import render_json, render_markdown
    from .file_writes import SHARED_MODE, write_atomically

    if path.lower().endswith(".json"):
        body["matrix"] = json.loads(render_json(matrix)) if matrix is not None else None
        text = json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    else:
        text = "# toolguard mcp check\n\n```\n" + "\n".join(summary) + "\n```\n"
        if matrix is not None:
            text += "\n" + render_markdown(matrix)
    try:
        write_atomically(Path(path), text, new_mode=SHARED_MODE)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())
