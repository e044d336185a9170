"""``agentrun run``: real agent turns through ``run_turn``, rendered or as JSON lines."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from .._turns.session import Engine, run_turn
from .._vocabulary.errors import AgentrunError, ConfigurationError
from .._vocabulary.messages import Message
from .._vocabulary.options import SessionOptions
from ..engines._registry import engine_names, get_engine
from .render import Renderer

__all__ = ["DEFAULT_PROMPT", "run"]

DEFAULT_PROMPT = "Check that the shell works, then tell me what you found."


async def run(args: argparse.Namespace) -> int:
    if args.engine not in engine_names():
        raise ConfigurationError(f"unknown engine {args.engine!r}", option="engine")
    from ..offline._embedded import EMBEDDED_ENGINES

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
        from ..offline import ModelServer, Script

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
    from ..offline import embedded_engine

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
