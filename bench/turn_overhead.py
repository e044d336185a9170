"""Turn overhead on a real agent: the pinned ``claude`` against the embedded model server, driven
by ``run_turn`` and by a minimal hand-written loop that spawns the same binary with the same argv
and environment, writes the same stream-json user line and reads to the ``result`` line.

Turns alternate between the two (first turn with the spawn, then text turns), so both see the
same machine. Reported per turn: wall time and the caller's own CPU time (``time.process_time``;
the agent's CPU is the same on both sides and not counted). Targets: wall <= 1.02x, caller CPU
<= 1.5x the raw loop's.

    python bench/turn_overhead.py [--turns 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from _common import Row, print_table

from agentrun import run_turn
from agentrun.engines.claude import ClaudeEngine, ClaudeSession
from agentrun.offline import ModelServer, Script, embedded_engine


class RawClaude:
    """The least a caller can do: one process, one user line per turn, read to the result."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd
        self.proc: anyio.abc.Process | None = None
        self._buffer = b""

    async def start(self) -> None:
        self.proc = await anyio.open_process(
            self.argv, env=self.env, cwd=self.cwd, start_new_session=True
        )

    async def turn(self, prompt: str) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        user = {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
            "parent_tool_use_id": None,
            "session_id": "",
        }
        await self.proc.stdin.send(json.dumps(user).encode() + b"\n")
        while True:
            while b"\n" not in self._buffer:
                self._buffer += await self.proc.stdout.receive()
            line, self._buffer = self._buffer.split(b"\n", 1)
            if json.loads(line).get("type") == "result":
                return

    async def close(self) -> None:
        if self.proc is not None:
            await self.proc.aclose()


async def _measure(turns: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {
        side: {"first_wall": [], "first_cpu": [], "wall": [], "cpu": []}
        for side in ("agentrun", "raw")
    }
    with tempfile.TemporaryDirectory() as tmp:
        async with ModelServer(Script(turns=[], exhausted_text="fine")) as server:
            engine, options = embedded_engine("claude", server.url, Path(tmp) / "agent")
            assert isinstance(engine, ClaudeEngine)
            options = options.model_copy(update={"partial_messages": False})
            probe = engine.start(options)
            assert isinstance(probe, ClaudeSession)
            argv = engine.command(options)
            raw = RawClaude(argv, dict(probe.env), options.cwd)
            session = engine.start(options)

            async def agentrun_turn(prompt: str) -> None:
                await run_turn(session, prompt, timeout=120)

            for index in range(turns):
                for side in ("agentrun", "raw"):
                    wall, cpu = time.perf_counter(), time.process_time()
                    if index == 0 and side == "agentrun":
                        await session.__aenter__()
                    if index == 0 and side == "raw":
                        await raw.start()
                    if side == "agentrun":
                        await agentrun_turn(f"turn {index}")
                    else:
                        await raw.turn(f"turn {index}")
                    key = "first_" if index == 0 else ""
                    out[side][key + "wall"].append(time.perf_counter() - wall)
                    out[side][key + "cpu"].append(time.process_time() - cpu)
            await session.__aexit__(None, None, None)
            await raw.close()
    return out


def measure(turns: int) -> list[Row]:
    data = anyio.run(_measure, turns)
    rows: list[Row] = []
    for label, key, target in (
        ("first turn wall", "first_wall", ""),
        ("first turn caller CPU", "first_cpu", ""),
        ("text turn wall", "wall", "<= 1.02x"),
        ("text turn caller CPU", "cpu", "<= 1.5x"),
    ):
        ours, theirs = data["agentrun"][key], data["raw"][key]
        median = statistics.median(ours)
        spread = (max(ours) - min(ours)) / median if median else 0.0
        rows.append(
            Row(
                f"turn overhead {label}",
                f"claude, run_turn, {len(ours)} turns",
                "raw loop",
                median / statistics.median(theirs),
                median,
                spread,
                target,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=15)
    print_table(measure(parser.parse_args().turns))


if __name__ == "__main__":
    main()
