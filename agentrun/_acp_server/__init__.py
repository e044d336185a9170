"""``agentrun acp``: any engine of the library as an Agent Client Protocol agent on stdio.

Editors and ACP clients (Zed, JetBrains, Neovim plug-ins, the ACP SDKs) start
``agentrun acp --engine E`` and talk ACP v1 to it; the server drives the engine through the
library's public turn model and streams its normalized messages back as ACP session updates,
``usage_update`` (context fill and cost) included, whatever the agent behind it reports.
See ``docs/acp-server.md``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import anyio

from .._vocabulary.errors import ConfigurationError
from ._server import AcpServer, ServerConfig
from ._sessions import HISTORY_BYTES
from ._stdio import FdReader, FdWriter

__all__ = ["AcpServer", "ServerConfig", "add_arguments", "main", "serve_stdio"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``agentrun acp``."""
    parser.add_argument("--engine", default="claude", help="the engine to serve (default: claude)")
    parser.add_argument(
        "--embedded", action="store_true", help="run the agent on the embedded model server"
    )
    parser.add_argument("--script", metavar="FILE", help="model server script (with --embedded)")
    parser.add_argument("--model", help="the model sessions start with")
    parser.add_argument("--binary", help="path of the agent program")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio",
                        help="the event loop to run on (default: asyncio)")  # fmt: skip
    parser.add_argument("--log-level", default="WARNING", help="stderr log level")
    parser.add_argument(
        "--history-bytes", type=_history_bytes, default=HISTORY_BYTES, metavar="N",
        help="bytes of updates each session keeps for session/load (default: 8 MiB)",
    )  # fmt: skip
    parser.add_argument(
        "--journal", action="store_true",
        help="keep a journal of each session (agentrun sessions; $AGENTRUN_SESSIONS_DIR): a "
        "later agentrun acp loads it by its id and goes on with its cost",
    )  # fmt: skip


def _history_bytes(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


async def serve_stdio(config: ServerConfig) -> None:
    """Serve ACP on this process's stdin and stdout until stdin ends (or SIGTERM / SIGINT)."""
    reader = FdReader(sys.stdin.fileno())
    writer = FdWriter(sys.stdout.fileno())
    server = AcpServer(config)
    try:
        async with anyio.create_task_group() as tg:

            async def on_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        server.stop()
                        return

            tg.start_soon(on_signals)
            await server.serve(reader, writer.send_line)
            tg.cancel_scope.cancel()
    finally:
        reader.restore()
        writer.restore()


def main(args: argparse.Namespace) -> int:
    """Run ``agentrun acp`` with parsed ``args`` (see :func:`add_arguments`)."""
    from ..engines._registry import engine_names

    logging.basicConfig(
        stream=sys.stderr, level=str(args.log_level).upper(), format="%(name)s: %(message)s"
    )
    if args.engine not in engine_names():
        raise ConfigurationError(f"unknown engine {args.engine!r}", option="engine")
    if args.script and not args.embedded:
        raise ConfigurationError("--script needs --embedded", option="script")
    if args.script:
        from .._cli.run import load_script

        load_script(args.script)  # a missing or bad script is one line and exit 2, at once
    if args.embedded:
        from ..offline import EMBEDDED_ENGINES

        if args.engine not in (*EMBEDDED_ENGINES, "acp"):
            raise ConfigurationError(
                f"engine {args.engine!r} has no embedded configuration "
                f"(supported: {', '.join(EMBEDDED_ENGINES)}, acp)",
                option="engine",
            )
    config = ServerConfig(
        engine=args.engine, embedded=args.embedded, script=args.script, model=args.model,
        binary=args.binary, history_bytes=args.history_bytes, journal=args.journal,
    )  # fmt: skip
    anyio.run(serve_stdio, config, backend=args.backend)
    return 0
