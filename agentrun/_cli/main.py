"""The ``agentrun`` command: argument parsing and dispatch (see docs/cli.md).

``agentrun run [--engine E] [--model M] [--cwd DIR] [--json] [--live] [PROMPT | -]``
    One real agent turn (and ``--then`` follow-ups). By default the pinned agent talks to the
    embedded scripted model server on 127.0.0.1: no account, no tokens. ``--live`` uses your own
    agent configuration and credentials, untouched; ``--live --upstream URL`` (or ``--proxy``)
    keeps the key out of the agent, which reaches URL only through the metering proxy.
``agentrun compare --engines E1,E2[,...] [--models M1,M2] [--cwd DIR] [--json] [PROMPT]``
    The same prompt on several engines (or models), each in its own copy of the workspace.
``agentrun fleet TASKS.jsonl [-j N] [--per-engine E=N] [--pool N] [--out D | --resume R] [--view]``
    Many tasks (one JSON object a line), each in its own copy of its workspace, checked by a
    command afterwards; results as JSON lines, resumable after Ctrl-C.
``agentrun replay --engine E FILE [--json | --summary | --atif]``
    A recorded transcript through the engine's translator (no subprocess).
``agentrun record --engine E --out PATH [--script FILE] [--prompt P ...]``
    Record a real agent's raw output against the model server (fixtures).
``agentrun engines [--json] [--engine NAME ...]``
    Every engine: its program, version, pinned version, Node.js, offline configuration.
``agentrun acp --engine E [--embedded [--script FILE]]``
    The engine as an Agent Client Protocol agent on stdio (editors, ACP clients).
``agentrun engines install [--dir DIR]``
    The pinned agent programs, with ``npm ci``, into the per-user engines directory.
``agentrun sessions list | show ID | export ID [--atif] | resume ID PROMPT | fork ID PROMPT``
    Journaled sessions (``agentrun run --journal``), from any later process;
    ``agentrun sessions prune [--older-than AGE]``: the kept offline homes no run has used.
``agentrun view [PATH ...] [--export FILE]``
    One local page over journals, fleet results, compare reports and ATIF trajectories.
``agentrun serve``, ``agentrun mcp``, ``agentrun catalog MODEL ...``

Exit status: 0 success; 1 a turn or run failed (or a check found a problem); 2 bad input
(nothing was started); 130 interrupted (Ctrl-C); 141 standard output was closed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import anyio

from .._version import VERSION
from .._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    EngineUnavailableError,
    ForkNotSupportedError,
)
from ..engines._registry import translator_names
from . import engines as engines_command
from . import sessions as sessions_command
from . import view as view_command
from .catalog import catalog
from .compare import compare
from .fleet import fleet
from .record import record
from .replay import replay
from .run import DEFAULT_PROMPT, EXIT_INTERRUPTED, run
from .serve import mcp, serve
from .view import port_number as _port

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_PIPE_CLOSED", "UsageError", "main"]

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: Standard output was closed by its reader (``agentrun run --json | head -1``): 128 + SIGPIPE.
EXIT_PIPE_CLOSED = 141


class UsageError(Exception):
    """A command line that cannot be run as written (exit 2, one line on stderr)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line reported as one line (not usage plus error)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _dollars(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of US dollars") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive amount of US dollars, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _proxy_arguments(parser: argparse.ArgumentParser, who: str) -> None:
    """``--upstream``, ``--proxy`` and the proxy's budget (``docs/proxy.md``)."""
    parser.add_argument("--upstream", metavar="URL",
                        help=f"with --live: {who} reaches the model API at URL only through "
                             "the metering credential proxy, with a key minted for it")  # fmt: skip
    parser.add_argument("--proxy", action="store_true",
                        help="with --live: through the proxy to the provider's "
                             "real API")  # fmt: skip
    parser.add_argument("--proxy-max-tokens", type=_count, metavar="N",
                        help="the proxy refuses model calls once N tokens are spent")  # fmt: skip
    parser.add_argument("--proxy-max-cost", type=_dollars, metavar="USD",
                        help="the proxy refuses model calls once USD dollars are "
                             "spent")  # fmt: skip


def _prompt_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "prompt",
        nargs="?",
        help=f"the prompt; '-' reads it from standard input (default: {DEFAULT_PROMPT!r})",
    )
    parser.add_argument(
        "--prompt-file", metavar="PATH", help="read the prompt from this file ('-': stdin)"
    )


def parser() -> argparse.ArgumentParser:
    """The ``agentrun`` argument parser (every argument has its help text)."""
    top = _Parser(
        prog="agentrun", description="Drive coding agents through one typed message stream."
    )
    top.add_argument("--version", action="version", version=f"agentrun {VERSION}",
                     help="print agentrun's version and exit")  # fmt: skip
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run_ = sub.add_parser("run", help="run a real agent turn (embedded model server by default)")
    _prompt_arguments(run_)
    run_.add_argument("--engine", default="claude", help="the engine (default: claude; "
                      "'agentrun engines' lists them)")  # fmt: skip
    run_.add_argument("--model", help="the model to ask for (default: the engine's own)")
    run_.add_argument("--cwd", help="working directory (default: a fresh temporary one)")
    run_.add_argument("--json", action="store_true",
                      help="print normalized messages as JSON lines (unknown fields "
                           "left out)")  # fmt: skip
    run_.add_argument("--live", action="store_true", help="use your real agent configuration")
    _proxy_arguments(run_, "the agent")
    run_.add_argument("--resume", metavar="ID", help="continue an earlier session")
    run_.add_argument("--then", action="append", default=[], metavar="PROMPT",
                      help="a follow-up turn in the same session (repeatable)")  # fmt: skip
    run_.add_argument("--script", metavar="FILE", help="model server script (JSON)")
    run_.add_argument("--output-schema", metavar="FILE",
                      help="a JSON Schema each turn's final answer must match")  # fmt: skip
    run_.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="an engine option, e.g. claude.permission_mode=plan "
                           "(repeatable)")  # fmt: skip
    run_.add_argument("--timeout", type=_seconds, help="seconds for each turn")
    run_.add_argument("--idle-timeout", type=_seconds, help="seconds of silence allowed")
    run_.add_argument("--tool-timeout", type=_seconds,
                      help="seconds of silence allowed while a tool runs")  # fmt: skip
    run_.add_argument("--stall-after", type=_seconds,
                      help="report a stall after this many quiet seconds")  # fmt: skip
    run_.add_argument("--wind-down", type=_seconds, metavar="S",
                      help="tell the agent to wrap up S seconds before --timeout")  # fmt: skip
    run_.add_argument("--wind-down-text", metavar="TEXT",
                      help="what --wind-down tells the agent")  # fmt: skip
    run_.add_argument("--binary", help="path of the agent program")
    run_.add_argument("--atif", metavar="PATH", help="write the session's ATIF trajectory here")
    run_.add_argument("--journal", action="store_true",
                      help="keep a journal of the session ('agentrun sessions')")  # fmt: skip
    run_.add_argument("--sandbox", action="store_true",
                      help="run the agent in a sandbox: only the workspace and its own home, "
                           "no network but the model server (with --live: the metering "
                           "proxy), a clean environment (bubblewrap; docs/sandbox.md)")  # fmt: skip
    run_.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                      help="with --sandbox: a host the agent may reach (any port), through "
                           "the sandbox's CONNECT proxy (repeatable)")  # fmt: skip
    run_.add_argument("--approve-all", action="store_true",
                      help="approve every tool call without asking (every engine); "
                           "best with --sandbox")  # fmt: skip
    run_.add_argument("--dump-requests", metavar="FILE",
                      help="append the model server's requests to FILE as JSON lines "
                           "(embedded default)")  # fmt: skip

    compare_ = sub.add_parser("compare", help="run one prompt on several engines side by side")
    _prompt_arguments(compare_)
    compare_.add_argument("--engines", required=True, help="comma-separated engine names")
    compare_.add_argument("--models", help="comma-separated models (each engine runs each)")
    compare_.add_argument("--cwd", help="the workspace to copy for each run (default: empty)")
    compare_.add_argument("--json", action="store_true", help="print the report as JSON")
    compare_.add_argument("--live", action="store_true", help="use your real agent configuration")
    _proxy_arguments(compare_, "every agent (one shared proxy)")
    compare_.add_argument("--timeout", type=_seconds, help="seconds for each run")
    compare_.add_argument("--keep", action="store_true", help="keep the workspace copies")
    compare_.add_argument("--agent-permissions", action="store_true",
                          help="keep each agent's own permission policy (default: approve tool "
                               "uses, since each run works in a private copy)")  # fmt: skip
    compare_.add_argument("--script", metavar="FILE", help="model server script (JSON)")
    compare_.add_argument("--sandbox", action="store_true",
                          help="run each agent in a sandbox (with --live: its only way out the "
                               "metering proxy; docs/sandbox.md)")  # fmt: skip
    compare_.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                          help="with --sandbox: a host the agents may reach "
                               "(repeatable)")  # fmt: skip

    fleet_ = sub.add_parser("fleet", help="run many tasks from a JSON lines file, resumably")
    fleet_.add_argument("tasks", metavar="TASKS.jsonl",
                        help="one task a line: a JSON object (see docs/fleets.md)")  # fmt: skip
    fleet_.add_argument("-j", "--jobs", type=_count, default=4, metavar="N",
                        help="tasks at once (default 4)")  # fmt: skip
    fleet_.add_argument("--per-engine", action="append", default=[], metavar="ENGINE=N",
                        help="at most N tasks of ENGINE at once (repeatable)")  # fmt: skip
    fleet_.add_argument("--pool", type=_count, metavar="N",
                        help="N tasks at most share one agent process, on the engines that "
                             "can (the ACP ones, codex-app-server; docs/fleets.md)")  # fmt: skip
    fleet_.add_argument("--max-cost", type=_dollars, metavar="USD",
                        help="stop the fleet once its turns cost USD dollars")  # fmt: skip
    fleet_.add_argument("--out", metavar="DIR",
                        help="where the results, journals and trajectories go "
                             "(default: fleet-results)")  # fmt: skip
    fleet_.add_argument("--resume", metavar="RESULTS",
                        help="continue a fleet: run only the tasks RESULTS does not "
                             "have")  # fmt: skip
    fleet_.add_argument("--json", action="store_true",
                        help="progress events as JSON lines on standard output")  # fmt: skip
    fleet_.add_argument("--live", action="store_true", help="use your real agent configuration")
    _proxy_arguments(fleet_, "every task's agent (one shared proxy and budget)")
    fleet_.add_argument("--keep", action="store_true",
                        help="keep each task's workspace copy (under DIR)")  # fmt: skip
    fleet_.add_argument("--view", action="store_true",
                        help="serve 'agentrun view' over the fleet's output while it runs "
                             "(the URL goes to standard error)")  # fmt: skip
    fleet_.add_argument("--view-port", type=_port, default=0, metavar="N",
                        help="the view's port (default: any free one)")  # fmt: skip
    fleet_.add_argument("--sandbox", action="store_true",
                        help="run each task's agent in a sandbox (with --live: its only way "
                             "out the metering proxy; docs/sandbox.md)")  # fmt: skip

    replay_ = sub.add_parser("replay", help="translate a recorded transcript")
    replay_.add_argument("--engine", required=True, help=f"one of {', '.join(translator_names())}")
    replay_.add_argument("file", help="the transcript (JSON lines, as 'agentrun record' writes)")
    form = replay_.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one normalized message per line")
    form.add_argument("--summary", action="store_true", help="one TurnSummary JSON per turn")
    form.add_argument("--atif", action="store_true", help="one ATIF trajectory (JSON)")

    record_ = sub.add_parser("record", help="record a real agent against the model server")
    record_.add_argument("--engine", required=True,
                         help="an engine with an offline configuration "
                              "('agentrun engines')")  # fmt: skip
    record_.add_argument("--out", required=True, help="output path without extension")
    record_.add_argument("--script", metavar="FILE", help="model server script (JSON)")
    record_.add_argument("--prompt", action="append", default=[], help="a turn (repeatable)")

    engines_command.add_parser(sub)
    sessions_command.add_parser(sub)
    view_command.add_parser(sub)

    from .._acp_server import add_arguments as acp_arguments

    acp_arguments(sub.add_parser("acp", help="serve an engine as an ACP agent on stdio"))

    serve_ = sub.add_parser("serve", help="run the scripted model server on 127.0.0.1")
    serve_.add_argument("--script", metavar="FILE", help="model server script (JSON)")
    serve_.add_argument("--port", type=_port, default=0, help="the port (default: any free one)")
    serve_.add_argument("--quiet", action="store_true", help="do not log requests")

    mcp_ = sub.add_parser("mcp", help="serve agentrun to MCP clients (needs agentrun-py[mcp])")
    mcp_.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                      help="stdio (default) or streamable HTTP")  # fmt: skip
    mcp_.add_argument("--host", default="127.0.0.1", help="HTTP: a loopback address")
    mcp_.add_argument("--port", type=_port, default=8765, help="HTTP: the port (default 8765)")
    mcp_.add_argument("--root", action="append", default=[], metavar="DIR",
                      help="a directory sessions may work in (repeatable; default: the "
                           "current directory)")  # fmt: skip
    mcp_.add_argument("--max-sessions", type=_count, default=8, help="sessions open at once")
    mcp_.add_argument("--embedded", action="store_true",
                      help="run the agents on the embedded model server, offline")  # fmt: skip
    mcp_.add_argument("--script", metavar="FILE", help="model server script (with --embedded)")
    mcp_.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=None,
                      help="with --embedded: sessions' agents in a sandbox (default: wherever "
                           "one can be had; docs/sandbox.md)")  # fmt: skip

    catalog_ = sub.add_parser("catalog", help="look models up in the catalog")
    catalog_.add_argument("models", nargs="+", metavar="MODEL", help="model names or aliases")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        return _dispatch(args)
    except UsageError as exc:
        _say(str(exc))
        return EXIT_BAD_INPUT
    except AgentrunError as exc:
        _say(f"agentrun: {exc}")
        bad_input = isinstance(
            exc, (ConfigurationError, EngineUnavailableError, ForkNotSupportedError)
        )
        return EXIT_BAD_INPUT if bad_input else EXIT_FAILED
    except KeyboardInterrupt:
        _say("agentrun: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of standard output went away (``| head``): end quietly, as ``cat`` does.
        _silence_stdout()
        return EXIT_PIPE_CLOSED


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return anyio.run(run, args)
    if args.command == "compare":
        return anyio.run(compare, args)
    if args.command == "fleet":
        return anyio.run(fleet, args)
    if args.command == "replay":
        return replay(args)
    if args.command == "record":
        return anyio.run(record, args)
    if args.command == "engines":
        return engines_command.engines(args)
    if args.command == "acp":
        from .._acp_server import main as acp_main

        return acp_main(args)
    if args.command == "sessions":
        return sessions_command.sessions(args)
    if args.command == "serve":
        return serve(args)
    if args.command == "view":
        return view_command.view(args)
    if args.command == "mcp":
        return mcp(args)
    return catalog(args)


def _say(line: str) -> None:
    """One line on standard error (its newlines folded, so it stays one line)."""
    text = " ".join(line.split("\n"))
    with contextlib.suppress(BrokenPipeError, ValueError):
        print(text, file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's final flush of what is still
    buffered cannot fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
