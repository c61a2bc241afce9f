"""A shell reached through an argument is caught by ``shell_injection`` in
the directory world, where processes run for real: the payload's marker
file is made only when a shell parsed the metacharacters. Tools that pass
an argv list, or quote the value, pass every cell, and so does a correct
tool that runs ``git`` several times per call.

Catch table (tool: cell, problem):

===========================  ===============  =================================================
broken twin                  world            caught by
===========================  ===============  =================================================
count_with_shell_fstring     directory        shell_injection: string argument 1 with '; touch
(``shell=True``, f-string)                    {marker}' appended ran the payload in a shell
log_with_os_system           directory        shell_injection: ... ran the payload in a shell
(``os.system`` of a value)
===========================  ===============  =================================================
"""

from __future__ import annotations

import os
import shlex
import subprocess
from typing import Any

import pytest
from test_faults_catch_bugs import reported, run, run_all

from pytest_toolguard.capabilities import Risk
from pytest_toolguard.context import ToolContext
from pytest_toolguard.registry import ToolSpec, tool

TEXT = {"text": "hello world"}
SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def _spec(handler: Any) -> ToolSpec:
    made: ToolSpec = tool(
        name=handler.__name__, input_schema=SCHEMA, risk=Risk.READ, world="directory"
    )(handler)
    return made


def count_with_shell_fstring(ctx: ToolContext, text: str) -> dict[str, Any]:
    done = subprocess.run(
        f"printf %s {text} | wc -c", shell=True, capture_output=True, text=True, check=False
    )
    return {"count": done.stdout.strip()}


def log_with_os_system(ctx: ToolContext, text: str) -> dict[str, Any]:
    return {"status": os.system(f"echo {text} > /dev/null")}


def count_with_argv(ctx: ToolContext, text: str) -> dict[str, Any]:
    done = subprocess.run(["wc", "-c"], input=text, capture_output=True, text=True, check=True)
    return {"count": done.stdout.strip()}


def count_with_quoted_shell(ctx: ToolContext, text: str) -> dict[str, Any]:
    done = subprocess.run(
        f"printf %s {shlex.quote(text)} | wc -c",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
    )
    return {"count": done.stdout.strip()}


@pytest.mark.parametrize("handler", [count_with_shell_fstring, log_with_os_system])
def test_a_value_reaching_a_shell_fails_shell_injection(handler: Any) -> None:
    outcome = run("shell_injection", _spec(handler), TEXT, {})

    assert outcome.status == "fail", outcome
    assert reported(outcome, "string argument 1", "ran the payload in a shell"), outcome.problems


@pytest.mark.parametrize("handler", [count_with_argv, count_with_quoted_shell])
def test_a_value_passed_as_text_passes_every_cell(handler: Any) -> None:
    outcomes = run_all(_spec(handler), TEXT, {})

    assert {name: o.problems for name, o in outcomes.items() if o.status == "fail"} == {}
    assert outcomes["shell_injection"].status == "pass"


def test_a_tool_starting_no_process_is_not_applicable() -> None:
    def echo(ctx: ToolContext, text: str) -> dict[str, Any]:
        return {"text": text}

    outcome = run("shell_injection", _spec(echo), TEXT, {})

    assert outcome.status == "n/a", outcome
    assert reported(outcome, "started no process"), outcome.problems


def count_with_git_twice(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Two processes per call, each with an argv list."""
    versions = [
        subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    done = subprocess.run(["wc", "-c"], input=text, capture_output=True, text=True, check=True)
    return {"count": done.stdout.strip(), "same": versions[0] == versions[1]}


def test_a_tool_running_processes_several_times_passes_every_cell() -> None:
    outcomes = run_all(_spec(count_with_git_twice), TEXT, {})

    assert {name: o.problems for name, o in outcomes.items() if o.status == "fail"} == {}
    assert outcomes["shell_injection"].status == "pass"


def test_processes_under_the_fake_world_are_said_never_run_half() -> None:
    """Under pyfakefs a process does not run for real (only the first may
    start; later ones exit 255 or fail on their pipes): a handler's is
    refused before it starts, and every cell that ran the handler says so,
    naming the command and the directory world."""
    fake: ToolSpec = tool(name="count_with_git_twice", input_schema=SCHEMA, risk=Risk.READ)(
        count_with_git_twice
    )
    outcomes = run_all(fake, TEXT, {})

    failed = {name: o for name, o in outcomes.items() if o.status == "fail"}
    assert failed
    for outcome in failed.values():
        assert reported(outcome, "subprocess.Popen ran ['git', '--version']", 'world="directory"')
    assert outcomes["shell_injection"].status == "n/a"
