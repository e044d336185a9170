"""``agentrun serve`` (the scripted model server alone) and ``agentrun mcp``."""

from __future__ import annotations

import argparse

from .._vocabulary.errors import ConfigurationError

__all__ = ["mcp", "serve"]


def serve(args: argparse.Namespace) -> int:
    from ..offline.__main__ import main as offline_main

    extra = ["--port", str(args.port)]
    extra += ["--script", args.script] if args.script else []
    extra += ["--quiet"] if args.quiet else []
    return offline_main(["serve", *extra])


def mcp(args: argparse.Namespace) -> int:
    if args.script and not args.embedded:
        raise ConfigurationError("--script needs --embedded", option="script")
    try:
        from ..mcp_server import serve
    except ImportError as exc:
        raise ConfigurationError(str(exc), option="mcp") from None
    from .run import load_script

    script = load_script(args.script)  # a missing or bad script is one line and exit 2, at once
    serve(
        transport=args.transport,
        host=args.host,
        port=args.port,
        roots=args.root or None,
        max_sessions=args.max_sessions,
        embedded=args.embedded,
        script=script,
        sandbox=getattr(args, "sandbox", None),
    )
    return 0
