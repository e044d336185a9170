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
``agentrun acp --engine E [--embedded [--script FILE]]``
    The engine as an Agent Client Protocol agent on stdio (editors, ACP clients).
``agentrun catalog MODEL ...``
    What the model catalog knows (context window, max output).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ._render import Renderer
from ._turns.session import Engine, run_turn
from ._vocabulary.context import default_catalog
from ._vocabulary.errors import AgentrunError, ConfigurationError, EngineUnavailableError
from ._vocabulary.messages import Message, MessageType
from ._vocabulary.options import SessionOptions
from ._vocabulary.summary import TurnSummary
from .engines._registry import engine_names, get_engine, translator_names

__all__ = ["main"]

DEFAULT_PROMPT = "Check that the shell works, then tell me what you found."


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

    from ._acp_server import add_arguments as acp_arguments

    acp_arguments(sub.add_parser("acp", help="serve an engine as an ACP agent on stdio"))

    catalog = sub.add_parser("catalog", help="look models up in the catalog")
    catalog.add_argument("models", nargs="+")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return anyio.run(_run, args)
        if args.command == "compare":
            return anyio.run(_compare, args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "record":
            return anyio.run(_record, args)
        if args.command == "serve":
            from .offline.__main__ import main as testing_main

            extra = ["--port", str(args.port)]
            extra += ["--script", args.script] if args.script else []
            extra += ["--quiet"] if args.quiet else []
            return testing_main(["serve", *extra])
        if args.command == "mcp":
            return _mcp(args)
        if args.command == "acp":
            from ._acp_server import main as acp_main

            return acp_main(args)
        return _catalog(args)
    except AgentrunError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigurationError, EngineUnavailableError)) else 1
    except KeyboardInterrupt:
        return 130


def _mcp(args: argparse.Namespace) -> int:
    try:
        from .mcp_server import serve
    except ImportError as exc:
        raise ConfigurationError(str(exc), option="mcp") from None
    serve(
        transport=args.transport,
        host=args.host,
        port=args.port,
        roots=args.root or None,
        max_sessions=args.max_sessions,
    )
    return 0


# -- run ---------------------------------------------------------------------------------------


async def _run(args: argparse.Namespace) -> int:
    if args.engine not in engine_names():
        raise ConfigurationError(f"unknown engine {args.engine!r}", option="engine")
    from .offline._embedded import EMBEDDED_ENGINES

    if not args.live and args.engine not in EMBEDDED_ENGINES:
        raise ConfigurationError(
            f"engine {args.engine!r} is not supported yet on the embedded model server "
            f"(supported: {', '.join(EMBEDDED_ENGINES)}); use --live to drive your own "
            "installation",
            option="engine",
        )
    prompts = [args.prompt, *args.then]
    with tempfile.TemporaryDirectory(prefix="agentrun-") as tmp:
        cwd = args.cwd or _workspace(tmp)
        if args.live:
            engine = _engine(args.engine, binary=args.binary)
            session = SessionOptions(model=args.model, cwd=cwd, resume_id=args.resume)
            return await _turns(engine, session, prompts, args)
        from .offline import ModelServer, Script

        script = Script.from_file(args.script) if args.script else None
        async with ModelServer(script) as server:
            engine, session = _embedded(args, server.url, tmp, cwd)
            return await _turns(engine, session, prompts, args)


def _workspace(tmp: str) -> str:
    path = Path(tmp) / "workspace"
    path.mkdir()
    return str(path)


def _engine(name: str, **options: Any) -> Engine:
    options = {k: v for k, v in options.items() if v is not None}
    engine = get_engine(name, **options)
    engine.check()
    return engine


def _embedded(
    args: argparse.Namespace, url: str, tmp: str, cwd: str
) -> tuple[Engine, SessionOptions]:
    from .offline import embedded_engine

    return embedded_engine(
        args.engine,
        url,
        Path(tmp) / "agent",
        cwd=cwd,
        model=args.model,
        binary=args.binary,
        resume_id=args.resume,
    )


async def _turns(
    engine: Engine, session: SessionOptions, prompts: list[str], args: argparse.Namespace
) -> int:
    renderer = None if args.json else Renderer()
    failed = False
    async with engine.start(session) as process:
        for prompt in prompts:
            if renderer is not None:
                renderer.out.write(renderer.style("bold", f"▶ {prompt}") + "\n")

            def show(message: Message) -> None:
                if renderer is None:
                    print(json.dumps(message.model_dump(mode="json")), flush=True)
                else:
                    renderer.message(message)

            try:
                summary = await run_turn(
                    process,
                    prompt,
                    on_message=show,
                    timeout=args.timeout,
                    idle_timeout=args.idle_timeout,
                    tool_timeout=args.tool_timeout,
                    stall_after=args.stall_after,
                )
            except AgentrunError as exc:
                if exc.summary is not None and renderer is not None:
                    renderer.summary(exc.summary)
                raise
            if renderer is not None:
                renderer.summary(summary)
            failed = failed or not summary.ok
    return 1 if failed else 0


# -- compare -------------------------------------------------------------------------------------


async def _compare(args: argparse.Namespace) -> int:
    from ._fleets.compare import compare, compare_table
    from ._fleets.fleet import FleetEvent

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    models: list[str | None] = (
        [m.strip() for m in args.models.split(",") if m.strip()] if args.models else [None]
    )
    script = None
    if args.script:
        from .offline import Script

        script = Script.from_file(args.script)

    def progress(event: FleetEvent) -> None:
        if event.kind == "session_started":
            print(f"… {event.task} started", file=sys.stderr, flush=True)
        elif event.kind == "turn_finished" and event.record is not None:
            record = event.record
            state = "ok" if record.ok else "failed"
            wall = f" in {record.duration_s:.1f}s" if record.duration_s is not None else ""
            print(f"✓ {event.task} {state}{wall}", file=sys.stderr, flush=True)
        elif event.kind == "session_failed" and event.error is not None:
            print(f"✗ {event.task}: {event.error.message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="agentrun-compare-") as tmp:
        scratch = tmp
        if args.keep:
            scratch = tempfile.mkdtemp(prefix="agentrun-compare-")
        runs = await compare(
            args.prompt,
            engines,
            models=models,
            workspace=args.cwd,
            live=args.live,
            timeout=args.timeout,
            scratch=scratch,
            keep_workspaces=args.keep,
            hitl=None if args.agent_permissions else False,
            script=script,
            on_event=None if args.json else progress,
        )
    if args.json:
        print(json.dumps([run.model_dump(mode="json") for run in runs], indent=2))
    else:
        sys.stdout.write(compare_table(runs))
    return 0 if all(run.ok for run in runs) else 1


# -- replay / record / catalog -------------------------------------------------------------------


#: The largest transcript ``agentrun replay`` reads (a bound, so a device or a runaway file
#: cannot be read forever).
REPLAY_MAX_BYTES = 4 * 1024**3


def _replay(args: argparse.Namespace) -> int:
    from .engines._replay import replay_turns

    path = Path(args.file)
    if not path.exists():
        raise ConfigurationError(f"no such transcript: {args.file}", option="file")
    if path.is_dir():
        raise ConfigurationError(f"{args.file} is a directory, not a transcript", option="file")
    if not path.is_file():
        raise ConfigurationError(
            f"{args.file} is not a regular file (a device or a pipe cannot be replayed)",
            option="file",
        )
    if path.stat().st_size > REPLAY_MAX_BYTES:
        raise ConfigurationError(
            f"{args.file} is larger than {REPLAY_MAX_BYTES // 1024**3} GiB", option="file"
        )
    try:
        turns = replay_turns(path, engine=args.engine)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {args.file}: {exc.strerror}", option="file"
        ) from None
    if not any(m.type is not MessageType.ERROR for turn in turns for m in turn):
        raise ConfigurationError(
            f"{args.file} holds no {args.engine} events (empty, or not a transcript of it)",
            option="file",
        )
    renderer = None if (args.json or args.summary) else Renderer()
    for messages in turns:
        summary = TurnSummary.from_messages(messages)
        if args.summary:
            print(json.dumps(summary.model_dump(mode="json")))
            continue
        for message in messages:
            if renderer is None:
                print(json.dumps(message.model_dump(mode="json")))
            else:
                renderer.message(message)
        if renderer is not None:
            renderer.summary(summary)
    return 0


async def _record(args: argparse.Namespace) -> int:
    from .offline import Script, default_script
    from .offline._recorder import record

    script = Script.from_file(args.script) if args.script else default_script()
    prompts = args.prompt or [DEFAULT_PROMPT]
    meta: Any = await record(args.engine, prompts=prompts, script=script, out=Path(args.out))
    print(json.dumps(meta, indent=2, default=str))
    return 0


def _catalog(args: argparse.Namespace) -> int:
    catalog = default_catalog()
    status = 0
    for model in args.models:
        info = catalog.lookup(model)
        if info is None:
            print(f"{model}: unknown")
            status = 1
            continue
        print(
            f"{model}: context window {info.context_window}, max output "
            f"{info.max_output_tokens} ({info.matched_by} match on {info.id}; {info.source})"
        )
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
