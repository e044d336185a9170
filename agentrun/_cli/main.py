"""The ``agentrun`` command.

``agentrun run [--engine E] [--model M] [--cwd DIR] [--json] [--live] [PROMPT]``
    One real agent turn (and ``--then`` follow-ups) through ``run_turn``. By default the pinned
    agent talks to the embedded scripted model server on 127.0.0.1: no account, no tokens.
    ``--live`` uses your own agent configuration and credentials, untouched.
``agentrun compare --engines E1,E2[,...] [--models M1,M2] [--cwd DIR] [--json] [PROMPT]``
    The same prompt on several engines (or models), each in its own copy of the workspace,
    side by side: ok, tool calls, files changed, tokens, cost, wall time, context peak.
``agentrun replay --engine E FILE [--json | --summary]``
    A recorded transcript through the engine's translator (no subprocess).
``agentrun record --engine E --out PATH [--script FILE] [--prompt P ...]``
    Record a real agent's raw output against the model server (fixtures).
``agentrun serve [--script FILE] [--port N]``
    Only the scripted model server.
``agentrun mcp [--transport stdio|http] [--root DIR ...] [--max-sessions N] [--port N]``
    agentrun as a Model Context Protocol server: other agents start sessions and run turns.
``agentrun catalog MODEL ...``
    What the model catalog knows (context window, max output).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from .._vocabulary.errors import AgentrunError, ConfigurationError, EngineUnavailableError
from ..engines._registry import translator_names
from .catalog import catalog
from .compare import compare
from .record import record
from .replay import replay
from .run import DEFAULT_PROMPT, run
from .serve import mcp, serve

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrun", description="Drive coding agents through one typed message stream."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a real agent turn (embedded model server by default)")
    run.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    run.add_argument("--engine", default="claude", help="the engine (default: claude)")
    run.add_argument("--model")
    run.add_argument("--cwd", help="working directory (default: a fresh temporary one)")
    run.add_argument("--json", action="store_true", help="print normalized messages as JSONL")
    run.add_argument("--live", action="store_true", help="use your real agent configuration")
    run.add_argument("--resume", metavar="ID", help="continue an earlier session")
    run.add_argument("--then", action="append", default=[], metavar="PROMPT",
                     help="a follow-up turn in the same session (repeatable)")  # fmt: skip
    run.add_argument("--script", metavar="FILE", help="model server script (JSON)")
    run.add_argument("--timeout", type=float, help="seconds for each turn")
    run.add_argument("--idle-timeout", type=float, help="seconds of silence allowed")
    run.add_argument(
        "--tool-timeout", type=float, help="seconds of silence allowed while a tool runs"
    )
    run.add_argument(
        "--stall-after", type=float, help="report a stall after this many quiet seconds"
    )
    run.add_argument("--binary", help="path of the agent program")

    compare = sub.add_parser("compare", help="run one prompt on several engines side by side")
    compare.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    compare.add_argument("--engines", required=True, help="comma-separated engine names")
    compare.add_argument("--models", help="comma-separated models (each engine runs each)")
    compare.add_argument("--cwd", help="the workspace to copy for each run (default: empty)")
    compare.add_argument("--json", action="store_true", help="print the report as JSON")
    compare.add_argument("--live", action="store_true", help="use your real agent configuration")
    compare.add_argument("--timeout", type=float, help="seconds for each run")
    compare.add_argument("--keep", action="store_true", help="keep the workspace copies")
    compare.add_argument("--agent-permissions", action="store_true",
                         help="keep each agent's own permission policy (default: approve tool "
                              "uses, since each run works in a private copy)")  # fmt: skip
    compare.add_argument("--script", metavar="FILE", help="model server script (JSON)")

    replay = sub.add_parser("replay", help="translate a recorded transcript")
    replay.add_argument("--engine", required=True, help=f"one of {', '.join(translator_names())}")
    replay.add_argument("file")
    form = replay.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one normalized message per line")
    form.add_argument("--summary", action="store_true", help="one TurnSummary JSON per turn")

    record = sub.add_parser("record", help="record a real agent against the model server")
    record.add_argument("--engine", required=True)
    record.add_argument("--out", required=True, help="output path without extension")
    record.add_argument("--script", metavar="FILE", help="model server script (JSON)")
    record.add_argument("--prompt", action="append", default=[], help="a turn (repeatable)")

    serve = sub.add_parser("serve", help="run the scripted model server on 127.0.0.1")
    serve.add_argument("--script", metavar="FILE")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--quiet", action="store_true")

    mcp = sub.add_parser("mcp", help="serve agentrun to MCP clients (needs agentrun[mcp])")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP: a loopback address")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP: the port (default 8765)")
    mcp.add_argument("--root", action="append", default=[], metavar="DIR",
                     help="a directory sessions may work in (repeatable; default: the "
                          "current directory)")  # fmt: skip
    mcp.add_argument("--max-sessions", type=int, default=8, help="sessions open at once")

    catalog = sub.add_parser("catalog", help="look models up in the catalog")
    catalog.add_argument("models", nargs="+")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return anyio.run(run, args)
        if args.command == "compare":
            return anyio.run(compare, args)
        if args.command == "replay":
            return replay(args)
        if args.command == "record":
            return anyio.run(record, args)
        if args.command == "serve":
            return serve(args)
        if args.command == "mcp":
            return mcp(args)
        return catalog(args)
    except AgentrunError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigurationError, EngineUnavailableError)) else 1
    except KeyboardInterrupt:
        return 130
