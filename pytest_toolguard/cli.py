"""The ``toolguard`` command (also ``python -m pytest_toolguard``).

Every subcommand has ``--help`` with an example. A bad file, format,
registry or configuration is one line on stderr (``toolguard: ...``) and
exit status 2, never a traceback. ``replay``, ``matrix`` and ``fuzz`` run
pytest with the plugin's options and exit with pytest's status.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from . import options as options_names
from .cli_mcp import UsageError as UsageError
from .cli_mcp import add_command_option, add_mcp_command, command_registry, tools_from
from .documents import DocumentRefused, parse_yaml, read_text

USAGE_ERROR = 2
PYTEST_USAGE_ERROR = 4
"""``pytest.ExitCode.USAGE_ERROR`` (pytest is not imported here)."""

FORMATS = ("claude-code", "openai-chat", "openai-responses", "anthropic", "mcp")


# -- entry point --------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``toolguard`` with ``argv`` (default ``sys.argv[1:]``); returns
    the exit status."""
    parser = _parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in arguments:
        cut = arguments.index("--")
        arguments, passthrough = arguments[:cut], arguments[cut + 1 :]
    options = parser.parse_args(arguments)
    if not hasattr(options, "run"):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    # Claude Code reads any status of a hook but 2 as "go ahead": whatever
    # goes wrong in the hook is exit 2, which blocks the call.
    hook = options.run is _hook
    if not hook and os.getcwd() not in sys.path:
        # A registry beside the project, never ahead of installed modules (hook: _hook)
        sys.path.append(os.getcwd())
    try:
        status: int = options.run(options, passthrough)
        return status
    except UsageError as exc:
        print(f"toolguard: {one_line(str(exc))}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return USAGE_ERROR if hook else 130
    except BrokenPipeError:  # `toolguard tools | head`: the reader left
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout at exit
        return USAGE_ERROR if hook else 0
    except Exception as exc:  # input no check foresaw, or a bug: still one line
        print(f"toolguard: {options.command} failed: {_failure(exc)}", file=sys.stderr)
        return USAGE_ERROR


def one_line(message: str) -> str:
    """``message`` on one line (a YAML error spans several)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def _failure(exc: BaseException) -> str:
    """An unexpected exception as one redacted line: its type and first line."""
    from .redaction import Redactor
    from .runtime.messages import text

    said = Redactor().redact_text(text(exc).partition("\n")[0][:300])
    return f"{type(exc).__name__}: {said}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="toolguard",
        description="Record, replay, fault-test and guard LLM agents' tool calls.",
        epilog="Run 'toolguard <command> --help' for a command's options and an example.",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str, example: str, run: Callable[..., int]) -> Any:
        sub = commands.add_parser(
            name,
            help=help,
            description=help,
            epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(run=run, command=name)
        return sub

    sub = command(
        "import",
        "turn another program's session transcript into a cassette, re-executing its calls",
        "toolguard import claude-code ~/.claude/projects/x/s.jsonl --registry "
        "pytest_toolguard.bridges.definitions.claude_code:claude_code_registry --workspace repo "
        "-o cassettes/s.yaml",
        _import,
    )
    sub.add_argument("format", choices=FORMATS, help="the transcript's format")
    sub.add_argument("file", help="the transcript file")
    _registry_option(sub)
    sub.add_argument(
        "--workspace",
        required=True,
        help="the files before the session: copied, and the calls run in the copy (paths naming "
        "it or the session's root mapped there); if it changes anyway, no cassette is written",
    )
    sub.add_argument("-o", "--output", required=True, help="the cassette to write")
    add_command_option(sub)
    sub.add_argument(
        "--allow-risk",
        action="append",
        default=[],
        metavar="RISK",
        help="a risk the session may use (repeat; default read and write)",
    )
    sub.add_argument(
        "--write-root",
        action="append",
        default=[],
        metavar="PATH",
        help="a directory the session may write (repeat; default .)",
    )
    sub.add_argument(
        "--root",
        help="the workspace root the cassette names (default: the session's cwd, else /workspace)",
    )
    sub.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="report each re-executed call on stderr (default: when stderr is a terminal)",
    )

    sub = command(
        "tools",
        "print a registry's tool definitions for MCP, OpenAI or Anthropic",
        "toolguard tools --registry myagent.tools:registry --format openai",
        _tools,
    )
    _registry_option(sub)
    sub.add_argument(
        "--format", choices=("mcp", "openai", "openai-responses", "anthropic"), default="mcp"
    )

    replay_like = {  # name: (option, what it does); the example is "toolguard NAME cassettes cases"
        "replay": (options_names.REPLAY, "replay cassettes and cases through the real executor"),
        "amplify": (options_names.AMPLIFY, "record variants of their calls (boundary, text, size)"),
    }
    for name, (flag, what) in replay_like.items():
        sub = command(name, f"{what} (pytest {flag})", f"toolguard {name} cassettes cases", _replay)
        sub.set_defaults(flag=flag)
        sub.add_argument("paths", nargs="*", help="cassettes, cases or directories")
        _registry_option(sub, required=False)

    sub = command(
        "matrix",
        "run the fault matrix over cassettes and cases",
        "toolguard matrix cassettes --faults timeout,partial_write --report build/matrix.md",
        _matrix,
    )
    sub.add_argument("paths", nargs="*")
    sub.add_argument("--faults", default="all", help="fault names, comma-separated (default all)")
    sub.add_argument("--report", help="write the report (.md, .json or .html)")
    _registry_option(sub, required=False)

    sub = command(
        "fuzz",
        "fuzz every tool of a registry with arguments from its schema",
        "toolguard fuzz --registry myagent.tools:registry --examples 50",
        _fuzz,
    )
    _registry_option(sub)
    sub.add_argument("--examples", type=int, help="examples per tool")
    sub.add_argument("--seed", type=int, help="the fuzz seed")
    sub.add_argument("--network", action="store_true", help="let handlers reach the network")

    sub = command(
        "audit",
        "query and print an audit log",
        "toolguard audit audit.db --session s1 --tool write_file --json",
        _audit,
    )
    sub.add_argument(
        "database", help="the SQLite audit database, or a postgresql:// URL of a shared one"
    )
    sub.add_argument("--session", help="only this session")
    sub.add_argument("--tool", help="only this tool")
    sub.add_argument("--since", help="only calls started at or after this ISO 8601 time")
    shape = sub.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    shape.add_argument(
        "--openai-trace",
        action="store_true",
        help='the OpenAI Agents SDK\'s trace export, {"data": [trace, trace.span, ...]}',
    )

    sub = command(
        "cassette",
        "check or upgrade cassette and case files",
        "toolguard cassette check cassettes/*.yaml",
        _cassette,
    )
    sub.add_argument("action", choices=("check", "upgrade"))
    sub.add_argument("files", nargs="+")

    add_mcp_command(command)

    sub = command(
        "hook",
        "a Claude Code / Agent SDK hook command: reads the hook's JSON on stdin",
        'in .claude/settings.json: {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": '
        '[{"type": "command", "command": '
        '"toolguard hook pre-tool-use --config toolguard.yaml"}]}]}}',
        _hook,
    )
    sub.add_argument(
        "event",
        choices=("pre-tool-use", "post-tool-use", "stop"),
        help="pre-tool-use (PreToolUse), post-tool-use (PostToolUse, PostToolUseFailure), "
        "stop (Stop, SessionEnd: closes calls that never reported)",
    )
    sub.add_argument(
        "--config",
        help="YAML: registry, audit (database path), capabilities, unknown_tools "
        "(allow|ask|deny), cassette (a path; {session_id} is filled in)",
    )
    return parser


def _registry_option(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    default = None if not required else "pytest_toolguard.tools:builtin_registry"
    parser.add_argument(
        "--registry",
        default=default,
        metavar="MODULE:ATTR",
        help="a ToolRegistry, or a function returning one"
        + (" (default: the built-in tools)" if required else ""),
    )


def _load_registry(spec: str) -> Any:
    from .replay.registry_loading import SpecError, load_registry

    try:
        return load_registry(spec)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


# -- import and tools ---------------------------------------------------------


def _read(path: str) -> str:
    try:
        return read_text(path)
    except (DocumentRefused, OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}"
        ) from None


def reader(format: str) -> Callable[[str], Any]:
    """The transcript reader of a format name."""
    from .bridges.transcripts import anthropic, claude_code, mcp, openai

    readers: dict[str, Callable[[str], Any]] = {
        "claude-code": claude_code.read_session,
        "openai-chat": openai.read_chat,
        "openai-responses": openai.read_responses,
        "anthropic": anthropic.read_messages,
        "mcp": mcp.read_jsonrpc_log,
    }
    return readers[format]


def _import(options: argparse.Namespace, passthrough: list[str]) -> int:
    from .bridges import BridgeError
    from .bridges.transcripts.into_cassette import IMPORT_CAPABILITIES, transcript_to_cassette
    from .bridges.transcripts.transcript import undecodable
    from .capabilities import Capabilities

    transcript = reader(options.format)(_read(options.file))
    if (bad_text := undecodable(transcript)) is not None:
        raise UsageError(f"{options.file}: {bad_text}: it cannot be recorded as it is")
    registry = command_registry(options, passthrough, transcript)
    registry = _load_registry(options.registry) if registry is None else registry
    capabilities = IMPORT_CAPABILITIES
    if options.allow_risk or options.write_root:
        try:
            capabilities = Capabilities(
                allowed_risks=frozenset(options.allow_risk) or IMPORT_CAPABILITIES.allowed_risks,
                write_roots=tuple(options.write_root) or IMPORT_CAPABILITIES.write_roots,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not transcript.calls and transcript.problems:
        from .redaction import Redactor

        raise UsageError(
            f"{options.file}: no tool call could be read as {options.format} "
            f"({transcript.problems[0].shown(Redactor())})"
        )
    terminal = sys.stderr.isatty()
    show = terminal if options.progress is None else options.progress

    def progress(done: int, total: int) -> None:
        # A terminal's line is rewritten in place; a log gets one line a call.
        if show:
            line = f"toolguard: re-executing call {done}/{total}"
            if terminal:
                print(f"\r{line}", end="", file=sys.stderr, flush=True)
            else:
                print(line, file=sys.stderr, flush=True)

    try:
        report = transcript_to_cassette(
            transcript,
            registry,
            workspace=options.workspace,
            output=options.output,
            capabilities=capabilities,
            root=options.root,
            recorded_by=f"toolguard import {options.format} {options.file} {tools_from(options)} "
            f"--workspace {options.workspace} -o {options.output}",
            progress=progress,
        )
    except BridgeError as exc:
        raise UsageError(str(exc)) from None
    if show and terminal:
        print(file=sys.stderr)
    print("\n".join(report.lines()))
    return 1 if report.problems or report.mismatches or not report.written else 0


def _tools(options: argparse.Namespace, _: list[str]) -> int:
    registry = _load_registry(options.registry)
    shapes: dict[str, Callable[[Any], dict[str, Any]]] = {
        "mcp": lambda spec: spec.to_mcp(),
        "openai": lambda spec: spec.to_openai("chat"),
        "openai-responses": lambda spec: spec.to_openai("responses"),
        "anthropic": lambda spec: spec.to_anthropic(),
    }
    tools = [shapes[options.format](spec) for spec in registry]
    body: Any = {"tools": tools} if options.format == "mcp" else tools
    print(json.dumps(body, indent=2, ensure_ascii=False))
    return 0


# -- pytest runs --------------------------------------------------------------


def _pytest(arguments: list[str], registry: str | None, passthrough: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", *arguments]
    if registry:
        _load_registry(registry)  # a bad spec is one line here, not a pytest error
        command += ["-o", f"{options_names.REGISTRY_INI}={registry}"]
    environment = dict(os.environ)
    # Last: (`python -m pytest` puts it first anyway: tests run the project's code)
    paths = [environment.get("PYTHONPATH"), os.getcwd()]
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    status = subprocess.call(command + passthrough, env=environment)
    # pytest's usage error (a bad option, ini value or ini registry: one
    # "ERROR:" line) is this command's usage error.
    return USAGE_ERROR if status == PYTEST_USAGE_ERROR else status


def _existing(paths: list[str]) -> list[str]:
    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"no such file or directory: {path}")
    return paths


def _replay(options: argparse.Namespace, passthrough: list[str]) -> int:
    return _pytest([options.flag, *_existing(options.paths)], options.registry, passthrough)


def _matrix(options: argparse.Namespace, passthrough: list[str]) -> int:
    arguments = [options_names.REPLAY, f"{options_names.FAULTS}={options.faults}"]
    if options.report:
        arguments.append(f"{options_names.REPORT}={options.report}")
    return _pytest(arguments + _existing(options.paths), options.registry, passthrough)


def _fuzz(options: argparse.Namespace, passthrough: list[str]) -> int:
    arguments = [options_names.FUZZ, "-p", "no:cacheprovider"]
    arguments += [options_names.FUZZ_NETWORK] if options.network else []
    if options.examples is not None:
        arguments.append(f"{options_names.FUZZ_EXAMPLES}={options.examples}")
    if options.seed is not None:
        arguments.append(f"{options_names.FUZZ_SEED}={options.seed}")
    with tempfile.TemporaryDirectory(prefix="toolguard-fuzz-") as empty:  # collects no test
        return _pytest([*arguments, "--rootdir", empty, empty], options.registry, passthrough)


# -- audit and cassettes ------------------------------------------------------


def _audit(options: argparse.Namespace, _: list[str]) -> int:
    from .audit import AuditUnavailable, SQLiteAuditStore
    from .audit.stores import store_kind

    try:
        if store_kind(options.database) == "postgres":
            from .audit.postgres import PostgresAuditStore

            shown = "the PostgreSQL audit store"  # the URL may hold a password
            with PostgresAuditStore(options.database, migrate=False, max_connections=1) as pg:
                rows = pg.rows(options.session)
        else:
            shown = options.database
            if not os.path.isfile(options.database):
                raise UsageError(f"no audit database at {options.database}")
            with SQLiteAuditStore(
                f"file:{os.path.abspath(options.database)}?mode=ro", uri=True
            ) as store:
                rows = store.rows(options.session)
    except AuditUnavailable as exc:
        raise UsageError(f"{shown}: {exc}") from None
    except (ImportError, ValueError) as exc:  # no driver; not a URL
        raise UsageError(str(exc)) from None
    rows = [
        row
        for row in rows
        if (options.tool is None or row.tool_name == options.tool)
        and (options.since is None or row.started_at >= options.since)
    ]
    if options.openai_trace:
        from .bridges.exports.openai_trace import trace_items

        print(json.dumps({"data": trace_items(rows)}, ensure_ascii=False, indent=2))
        return 0
    if options.json:
        for row in rows:
            print(json.dumps(_row_dict(row), ensure_ascii=False, sort_keys=True))
        return 0
    columns = ("started_at", "session_id", "call_id", "tool_name", "state", "result_code", "rule")
    table = [columns] + [
        tuple("" if getattr(row, name) is None else str(getattr(row, name)) for name in columns)
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
    print(f"{len(rows)} row(s)")
    return 0


def _row_dict(row: Any) -> dict[str, Any]:
    return {key: getattr(value, "value", value) for key, value in dataclasses.asdict(row).items()}


def _cassette(options: argparse.Namespace, _: list[str]) -> int:
    from .replay.cassette import FORMAT_VERSION, CassetteError, dump, loads

    failed = False
    for file in options.files:
        try:
            text = _read(file)
            if options.action == "upgrade":
                text = _migrated(file, text)
            cassette = loads(text, source=file)
        except (CassetteError, UsageError) as exc:
            print(f"toolguard: {exc}", file=sys.stderr)
            failed = True
            continue
        if options.action == "upgrade":
            dump(cassette, file)
            print(f"{file}: format_version {FORMAT_VERSION}, written")
        else:
            print(f"{file}: ok ({cassette.kind}, {len(cassette.interactions)} interaction(s))")
    return USAGE_ERROR if failed else 0


def _migrated(file: str, text: str) -> str:
    import yaml

    from .replay.cassette import FORMAT_VERSION, MIGRATIONS

    try:
        raw = parse_yaml(text)
    except DocumentRefused as exc:
        raise UsageError(f"{file}: {exc}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise UsageError(f"{file}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("format_version"), int):
        return text  # loads() says what is wrong
    version = raw["format_version"]
    while version < FORMAT_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise UsageError(
                f"{file}: no migration from format_version {version}; re-record it"
                + (f": {raw['recorded_by']}" if raw.get("recorded_by") else "")
            )
        raw = step(raw)
        version = raw["format_version"]
    return str(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))


# -- the Claude Code hook -----------------------------------------------------


def _hook(options: argparse.Namespace, _: list[str]) -> int:
    from .bridges.guards.claude_code_command import HookCommandError, hook_command

    config = _hook_config(options.config)
    try:
        output = hook_command(options.event, sys.stdin, config, config_file=options.config)
    except HookCommandError as exc:
        raise UsageError(str(exc)) from None
    if output is not None:
        print(json.dumps(output))
    return 0


def _hook_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    import yaml

    from .bridges.guards.claude_code_hook import HookEventError, check_config

    try:
        return check_config(parse_yaml(_read(path)))
    except DocumentRefused as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise UsageError(f"{path}: not valid YAML: {exc}") from None
    except HookEventError as exc:
        raise UsageError(f"{path}: {exc}") from None


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
