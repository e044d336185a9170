"""``agentrun compare``: one prompt on several engines (or models) side by side."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

from .._vocabulary.errors import ConfigurationError
from ..engines._registry import engine_names
from .proxied import check_proxy_arguments, open_proxy, wants_proxy
from .run import load_script, read_prompt, sandbox_option

__all__ = ["compare"]


async def compare(args: argparse.Namespace) -> int:
    from .._fleets.compare import compare, compare_table
    from .._fleets.fleet import FleetEvent

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    known = engine_names()
    for name in engines:
        if name not in known:
            raise ConfigurationError(
                f"unknown engine {name!r} (known: {', '.join(known)})", option="engines"
            )
    if not engines:
        raise ConfigurationError("--engines names no engine", option="engines")
    models: list[str | None] = (
        [m.strip() for m in args.models.split(",") if m.strip()] if args.models else [None]
    )
    if getattr(args, "allow_host", None) and not getattr(args, "sandbox", False):
        raise ConfigurationError("--allow-host needs --sandbox", option="allow_host")
    check_proxy_arguments(args, engines)
    prompt = read_prompt(args)
    script = load_script(args.script)

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

    async with AsyncExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="agentrun-compare-"))
        scratch = tmp
        if args.keep:
            scratch = tempfile.mkdtemp(prefix="agentrun-compare-")
        proxy = None
        if args.live and wants_proxy(args):
            # One proxy for every run, each run a client of its own; sandboxed, on a Unix
            # socket bound into each sandbox (the agents' only way out).
            socket_path = Path(tmp) / "proxy.sock" if args.sandbox else None
            proxy = await stack.enter_async_context(
                open_proxy(args, socket_path=socket_path, engines=engines)
            )
        runs = await compare(
            prompt,
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
            sandbox=sandbox_option(args),
            proxy=proxy,
        )
    if args.json:
        print(json.dumps([run.model_dump(mode="json") for run in runs], indent=2))
    else:
        sys.stdout.write(compare_table(runs))
    return 0 if all(run.ok for run in runs) else 1
