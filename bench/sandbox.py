"""What a sandbox (``SessionOptions(sandbox=...)``, bubblewrap) adds to a start: a bare program
(``true``) started and closed through ``open_process`` with and without a sandbox, with the
relay of one port and without; and one session of the pinned ``claude`` on the embedded model
server, started, one text turn, closed, sandboxed against not. Ratios against no sandbox, from
interleaved runs. Run it inside the loopback-only namespace, as the agent tests run::

    python -m agentrun.offline netns -- python bench/sandbox.py [--runs 15] [--session-runs 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio
from _common import Row, interleaved, print_table

from agentrun import Sandbox, run_turn
from agentrun._wire.process import ProcessSpec, open_process
from agentrun._wire.sandbox import sandbox_unavailable


def _bare(home: str, sandbox: Sandbox | None) -> Callable[[], object]:
    spec = ProcessSpec(argv=("true",), cwd=home, env={"HOME": home}, sandbox=sandbox)

    async def once() -> None:
        async with open_process(spec) as proc:
            await proc.wait()

    return lambda: anyio.run(once)


def _session(root: Path, sandboxed: bool) -> Callable[[], object]:
    from agentrun.offline import ModelServer, Script, embedded_engine

    async def once() -> None:
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            workspace = Path(tmp) / "workspace"
            workspace.mkdir()
            async with ModelServer(Script(turns=[], exhausted_text="hello")) as server:
                engine, options = embedded_engine(
                    "claude",
                    server.url,
                    Path(tmp) / "agent",
                    cwd=str(workspace),
                    sandbox=sandboxed or None,
                )
                async with engine.start(options) as session:
                    turn = await run_turn(session, "say hello", timeout=120)
                    assert turn.ok, turn.errors

    return lambda: anyio.run(once)


def measure(runs: int, session_runs: int) -> list[Row]:
    why = sandbox_unavailable()
    if why is not None:
        sys.exit(f"bench/sandbox.py: no sandbox here: {why}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as home:
        bare = {
            "plain": _bare(home, None),
            "sandbox": _bare(home, Sandbox()),
            "sandbox+port": _bare(home, Sandbox(ports=(9,))),
        }
        for run in bare.values():
            run()
        result = interleaved(runs, bare)
        plain = result["plain"][0]
        rows += [
            Row("sandbox start, bare", "true, sandboxed", "true", result["sandbox"][0] / plain,
                result["sandbox"][0], result["sandbox"][1]),
            Row("  with one port", "true, sandboxed, relay", "true",
                result["sandbox+port"][0] / plain, result["sandbox+port"][0],
                result["sandbox+port"][1]),
        ]  # fmt: skip
        if session_runs:
            root = Path(home)
            sessions = {"plain": _session(root, False), "sandbox": _session(root, True)}
            for run in sessions.values():
                run()
            result = interleaved(session_runs, sessions)
            rows.append(
                Row("sandbox claude session", "start, 1 turn, close", "no sandbox",
                    result["sandbox"][0] / result["plain"][0], result["sandbox"][0],
                    result["sandbox"][1])
            )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--session-runs", type=int, default=5, help="0: no claude session")
    args = parser.parse_args()
    os.environ.setdefault("AGENTRUN_OFFLINE_HOMES", tempfile.mkdtemp(prefix="agentrun-bench-"))
    print_table(measure(args.runs, args.session_runs))


if __name__ == "__main__":
    main()
