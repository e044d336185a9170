"""Command line of the offline test kit.

``python -m agentrun.offline serve [--script FILE] [--port N] [--quiet]``
    Run the scripted model server on 127.0.0.1 until interrupted; prints its URL first.

``python -m agentrun.offline netns -- CMD [ARG...]``
    Run CMD in a loopback-only network namespace (``unshare -n``) when possible.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from ._modelserver import ModelServer
from ._netns import run_isolated
from ._requests import RecordedRequest
from ._script import Script, default_script


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agentrun.offline", description="agentrun offline test kit"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the scripted model server on 127.0.0.1")
    serve.add_argument("--script", metavar="FILE", help="JSON script (default: built-in demo)")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    serve.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    netns = sub.add_parser("netns", help="run a command in a loopback-only network namespace")
    netns.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    return parser


def _log(rec: RecordedRequest) -> None:
    what = (
        "title"
        if rec.title_request
        else (
            "exhausted"
            if rec.exhausted
            else (f"turn {rec.turn_index}" if rec.turn_index is not None else "-")
        )
    )
    print(
        f"{rec.seq:4d} {rec.method} {rec.path} api={rec.api} {what} -> {rec.status}",
        file=sys.stderr,
        flush=True,
    )


async def _serve(script: Script, port: int, quiet: bool) -> None:
    server = ModelServer(script, port=port, on_request=None if quiet else _log)
    async with server:
        url = server.url
        print(url, flush=True)
        print(
            f"# Claude Code: ANTHROPIC_BASE_URL={url}   OpenCode/Codex base URL: {url}/v1",
            file=sys.stderr,
            flush=True,
        )
        await anyio.sleep_forever()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        script = Script.from_file(args.script) if args.script else default_script()
        try:
            anyio.run(_serve, script, args.port, args.quiet)
        except KeyboardInterrupt:
            return 0
        return 0
    cmd: list[str] = list(args.argv)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("usage: python -m agentrun.offline netns -- CMD [ARG...]", file=sys.stderr)
        return 2
    return run_isolated(cmd)


if __name__ == "__main__":
    sys.exit(main())
